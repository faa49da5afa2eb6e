"""Reductions, arg-reductions, cumulative sums and TOP_K."""

from __future__ import annotations
