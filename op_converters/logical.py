"""Comparisons, logical operations and WHERE (BOOL8 results)."""

from __future__ import annotations
