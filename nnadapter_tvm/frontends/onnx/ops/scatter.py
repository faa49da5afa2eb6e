"""Scatters: ScatterElements, Scatter (opset 9-10), ScatterND, TensorScatter -> the built-in extensions
SCATTER_ELEMENTS, SCATTER_ND and TENSOR_SCATTER (op_converters/scatter.py); MaxUnpool -> FILL of zeros
and SCATTER_ELEMENTS on the flattened output."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.op_converters.scatter import (
    REDUCTIONS,
    SCATTER_ELEMENTS,
    SCATTER_ND,
    TENSOR_SCATTER,
    TENSOR_SCATTER_MODES,
)


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
