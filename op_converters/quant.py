"""QUANTIZE and DEQUANTIZE (the runtime's dequantize/requantize made explicit)."""

from __future__ import annotations
