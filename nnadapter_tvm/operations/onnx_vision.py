"""ONNX's Resize, GridSample and RoiAlign in the configurations NNAdapter's RESIZE_*, GRID_SAMPLE and
ROI_ALIGN do not compute (nnadapter-tvm's built-in extensions, codes 2200-2202; op_converters/resize_onnx.py,
grid_sample_onnx.py, roi_align_onnx.py). String attributes are INT32 operands: positions in the tuples
below, in ONNX's spelling."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.operations.schema import BOOL, FLOAT_SCALAR, INT32, INT32_64, Arg
from nnadapter_tvm.operations.table import OperationType, define, schema_of
from nnadapter_tvm.precision import Precision as P

RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_TRANSFORMATION_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
GRID_SAMPLE_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
ROI_ALIGN_MODES = ("avg", "max")


def _infer_resize(shapes: list, values: list) -> list:
    """Output shape: constant ``sizes``, where -1 takes floor(scale * size) of constant ``scales``."""
    sizes, scales = values[1], values[2]
    if sizes is None or shapes[0] is None:
        return [None]
    sizes = np.reshape(sizes, -1)
    scales = None if scales is None or np.size(scales) == 0 else np.reshape(scales, -1).astype(np.float64)
    out = []
    for k, (d, s) in enumerate(zip(shapes[0], sizes)):
        if s >= 0:
            out.append(int(s))
        elif scales is None:
            out.append(d)
        else:
            out.append(None if d is None else int(np.floor(scales[k] * d)))
    return [tuple(out)]


def _infer_grid_sample(shapes: list, values: list) -> list:
    """Output shape: [N, C] of the input, then the grid's spatial sizes."""
    x, grid = shapes[0], shapes[1]
    if x is None or grid is None:
        return [None]
    return [(x[0], x[1], *grid[1:-1])]


RESIZE_ONNX = define(
    "RESIZE_ONNX",
    2200,
    [
        Arg("input", (P.FLOAT32,)),
        Arg("sizes", INT32_64),
        Arg("scales", (P.FLOAT32, P.FLOAT64), optional=True),
        Arg("roi", (P.FLOAT32, P.FLOAT64), optional=True),
        Arg("mode", INT32, optional=True),
        Arg("coordinate_transformation_mode", INT32, optional=True),
        Arg("nearest_mode", INT32, optional=True),
        Arg("cubic_coeff_a", FLOAT_SCALAR, optional=True),
        Arg("exclude_outside", BOOL, optional=True),
        Arg("extrapolation_value", FLOAT_SCALAR, optional=True),
        Arg("antialias", BOOL, optional=True),
    ],
    [Arg("output", (P.FLOAT32,))],
    infer=_infer_resize,
).operation_type
GRID_SAMPLE_ONNX = define(
    "GRID_SAMPLE_ONNX",
    2201,
    [
        Arg("input", (P.FLOAT32,)),
        Arg("grid", (P.FLOAT32,)),
        Arg("align_corners", BOOL, optional=True),
        Arg("mode", INT32, optional=True),
        Arg("padding_mode", INT32, optional=True),
    ],
    [Arg("output", (P.FLOAT32,))],
    infer=_infer_grid_sample,
).operation_type
_ROI_ALIGN = schema_of(OperationType.ROI_ALIGN)
ROI_ALIGN_ONNX = define(
    "ROI_ALIGN_ONNX", 2202, [*_ROI_ALIGN.inputs, Arg("mode", INT32, optional=True)], _ROI_ALIGN.outputs
).operation_type
