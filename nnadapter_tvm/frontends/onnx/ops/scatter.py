"""Scatters: ScatterElements, Scatter (opset 9-10), ScatterND, TensorScatter -> the built-in extensions
SCATTER_ELEMENTS, SCATTER_ND and TENSOR_SCATTER (op_converters/scatter.py); MaxUnpool -> FILL of zeros,
SCATTER_ELEMENTS on the flattened output, RESHAPE (and PAD to output_shape)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import reshape
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.scatter import (
    REDUCTIONS,
    SCATTER_ELEMENTS,
    SCATTER_ND,
    TENSOR_SCATTER,
    TENSOR_SCATTER_MODES,
)
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import PadMode


def _reduction(ctx: NodeContext) -> Value:
    name = ctx.attr("reduction", "none")
    if name not in REDUCTIONS:
        ctx.unsupported(f"reduction '{name}' (ONNX defines {', '.join(REDUCTIONS)})")
    return ctx.i32(REDUCTIONS.index(name))


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(ctx: NodeContext) -> Value:
    """ScatterElements(axis=0, reduction) and Scatter-9 (no reduction) -> SCATTER_ELEMENTS."""
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    return ctx.emit(SCATTER_ELEMENTS, [data, indices, updates, ctx.i32(ctx.attr("axis", 0)), _reduction(ctx)])


@onnx_op("ScatterND")
def scatter_nd(ctx: NodeContext) -> Value:
    """ScatterND(reduction) -> SCATTER_ND."""
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    return ctx.emit(SCATTER_ND, [data, indices, updates, _reduction(ctx)])


@onnx_op("TensorScatter")
def tensor_scatter(ctx: NodeContext) -> Value:
    """TensorScatter(axis=-2, mode) -> TENSOR_SCATTER (an omitted write_indices is an empty operand)."""
    mode = ctx.attr("mode", "linear")
    if mode not in TENSOR_SCATTER_MODES:
        ctx.fail(f"mode '{mode}': ONNX defines {' and '.join(TENSOR_SCATTER_MODES)}")
    writes = ctx.input(2) if ctx.has(2) else ctx.constant(np.zeros([0], "int64"))
    axis, mode_code = ctx.i32(ctx.attr("axis", -2)), ctx.i32(TENSOR_SCATTER_MODES.index(mode))
    return ctx.emit(TENSOR_SCATTER, [ctx.input(0), ctx.input(1), writes, axis, mode_code])


@onnx_op("MaxUnpool")
def max_unpool(ctx: NodeContext) -> Value:
    """MaxUnpool(kernel_shape, pads, strides; output_shape) -> FILL zeros of the unpooled size, SCATTER_ELEMENTS
    of X's values at I's flat indices (checked at execution: an index past the unpooled tensor fails naming
    'indices'), RESHAPE to [N, C, (in - 1) * stride - pads + kernel ...], then PAD with zeros at the end of each
    axis up to output_shape (known at import) where given: onnx.reference's MaxUnpool, whose indices address
    the unpooled shape the attributes give, not output_shape."""
    x, indices = ctx.input(0), ctx.input(1)
    if x.shape is None or any(d is None for d in x.shape) or len(x.shape) < 3:
        ctx.unsupported(f"X {x.describe()} must have a static shape [N, C, spatial...]")
    kernel = list(ctx.attr("kernel_shape"))
    nd = len(kernel)
    if len(x.shape) != nd + 2:
        ctx.fail(f"kernel_shape {kernel} must have one size per spatial axis of X {x.describe()}")
    strides = list(ctx.attr("strides", [1] * nd))
    pads = list(ctx.attr("pads", [0] * 2 * nd))
    unpooled = [
        *x.shape[:2],
        *((x.shape[2 + d] - 1) * strides[d] - pads[d] - pads[nd + d] + kernel[d] for d in range(nd)),
    ]
    total = int(np.prod(unpooled))
    zeros = ctx.emit(O.FILL, [ctx.i64([total]), ctx.constant(np.zeros((), x.dtype))], dtype=x.dtype, shape=(total,))
    flat_x = reshape(ctx, x, [-1], (int(np.prod(x.shape)),))
    flat_i = reshape(ctx, indices, [-1], (int(np.prod(x.shape)),))
    spread = ctx.emit(SCATTER_ELEMENTS, [zeros, flat_i, flat_x, ctx.i32(0), ctx.i32(0)], shape=(total,))
    y = reshape(ctx, spread, unpooled, tuple(unpooled))
    if not ctx.has(2):
        return y
    wanted = [int(v) for v in np.asarray(ctx.const(2)).reshape(-1)]
    if len(wanted) != len(unpooled) or any(w < u for w, u in zip(wanted, unpooled)):
        ctx.fail(f"output_shape {wanted} must hold at least the unpooled shape {unpooled} on every axis")
    if wanted == unpooled:
        return y
    pad_list = [v for w, u in zip(wanted, unpooled) for v in (0, w - u)]
    fill = ctx.constant(np.zeros((), x.dtype))
    return ctx.emit(O.PAD, [y, ctx.i32(pad_list), ctx.i32(int(PadMode.CONSTANT)), fill], shape=tuple(wanted))
