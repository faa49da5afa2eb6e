"""Element-wise unary math, ASSIGN and CAST."""

from __future__ import annotations
