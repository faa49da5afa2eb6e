"""Operations whose output size depends on the data (nnadapter-tvm's built-in extensions, codes 2300-2399):
NONZERO, COMPRESS, UNIQUE and ONNX's all-class NonMaxSuppression (op_converters/selection.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.operations.schema import ANY, BOOL, F32, INT32_64, Arg
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

INT64 = (P.INT64,)


def _axis_value(values: list, i: int, rank: int) -> int | None:
    value = values[i] if i < len(values) else None
    return None if value is None or np.size(value) == 0 else int(np.reshape(value, -1)[0]) % rank


def _infer_nonzero(shapes: list, values: list) -> list:
    return [(len(shapes[0]), None)]


def _infer_compress(shapes: list, values: list) -> list:
    axis = _axis_value(values, 2, max(len(shapes[0]), 1))
    if axis is None:
        return [(None,)]
    return [tuple(None if d == axis else s for d, s in enumerate(shapes[0]))]


def _infer_unique(shapes: list, values: list) -> list:
    shape = shapes[0]
    axis = _axis_value(values, 2, max(len(shape), 1))
    if axis is None:
        count = None if any(s is None for s in shape) else int(np.prod(shape, dtype=np.int64))
        return [(None,), (None,), (count,), (None,)]
    y = tuple(None if d == axis else s for d, s in enumerate(shape))
    return [y, (None,), (shape[axis],), (None,)]


NONZERO = define("NONZERO", 2300, [Arg("input", ANY)], [Arg("output", INT64)], infer=_infer_nonzero).operation_type
COMPRESS = define(
    "COMPRESS",
    2301,
    [Arg("input", ANY), Arg("condition", BOOL), Arg("axis", INT32_64, optional=True)],
    [Arg("output", ANY)],
    infer=_infer_compress,
).operation_type
UNIQUE = define(
    "UNIQUE",
    2302,
    [Arg("input", ANY), Arg("sorted", BOOL + INT32_64, optional=True), Arg("axis", INT32_64, optional=True)],
    [
        Arg("output", ANY),
        Arg("indices", INT64, optional=True),
        Arg("inverse_indices", INT64, optional=True),
        Arg("counts", INT64, optional=True),
    ],
    infer=_infer_unique,
).operation_type
ALL_CLASS_NON_MAX_SUPPRESSION = define(
    "ALL_CLASS_NON_MAX_SUPPRESSION",
    2303,
    [
        Arg("boxes", F32),
        Arg("scores", F32),
        Arg("max_output_boxes_per_class", INT32_64, optional=True),
        Arg("iou_threshold", F32, optional=True),
        Arg("score_threshold", F32, optional=True),
        Arg("center_point_box", INT32_64, optional=True),
    ],
    [Arg("selected_indices", INT64)],
    infer=lambda shapes, values: [(None, 3)],
).operation_type
