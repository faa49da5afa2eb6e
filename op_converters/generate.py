"""Tensors made from values and shapes: FILL, FILL_LIKE, RANGE, SHAPE."""

from __future__ import annotations
