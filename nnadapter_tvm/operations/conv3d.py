"""3-D convolution extensions (codes 2400-2409): CONV_3D_TRANSPOSE, ONNX's ConvTranspose over 3 spatial
dims (NNAdapter's convolutions are 2-D; op_converters/conv3d.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.operations.schema import F32, INT32, Arg
from nnadapter_tvm.operations.table import define


def out_sizes(sizes: list, kernel: list, pads: list[int], strides: list[int], dilations: list[int], extra: list[int]):
    """(n - 1) * stride - pad_begin - pad_end + (k - 1) * dilation + 1 + output_padding per spatial axis
    (None where n is known only at execution)."""
    return [
        None if not isinstance(n, int) else (n - 1) * s - b - e + (k - 1) * d + 1 + p
        for n, k, b, e, s, d, p in zip(sizes, kernel, pads[:3], pads[3:], strides, dilations, extra)
    ]


def _infer(shapes: list, values: list) -> list:
    x, w = shapes[0], shapes[1]
    if x is None or w is None or len(x) != 5 or len(w) != 5:
        return [None]
    pads, strides, dilations, extra, group = ([int(v) for v in np.ravel([] if v is None else v)] for v in values[3:8])
    if not (len(pads) == 6 and len(strides) == len(dilations) == len(extra) == 3 and len(group) == 1):
        return [None]
    sizes = [d if isinstance(d, int) and d >= 0 else None for d in x[2:]]
    return [(x[0], w[1] * group[0], *out_sizes(sizes, list(w[2:]), pads, strides, dilations, extra))]


CONV_3D_TRANSPOSE = define(
    "CONV_3D_TRANSPOSE",
    2400,
    [
        Arg("input", F32),
        Arg("filter", F32),
        Arg("bias", F32, optional=True),
        Arg("pads", INT32),
        Arg("strides", INT32),
        Arg("dilations", INT32),
        Arg("output_padding", INT32),
        Arg("group", INT32),
    ],
    [Arg("output", F32)],
    infer=_infer,
).operation_type
