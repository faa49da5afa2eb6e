"""Vision operations: resizing, grid sampling, ROI align, prior boxes, YOLO boxes, NMS."""

from __future__ import annotations
