"""Gathering, slicing, splitting, stacking, tiling, padding and channel shuffles."""

from __future__ import annotations
