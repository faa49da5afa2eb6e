"""Fourier transforms: DFT STFT -> the extensions DFT, STFT (op_converters/spectral.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.spectral import DFT, STFT


def _int_input(ctx: NodeContext, i: int) -> Value:
    """Input ``i`` as an INT64 scalar constant (the transform's lengths are fixed at compile time); an
    empty one (the operation's absent operand) where the node gives none."""
    value = ctx.const(i, None)
    if value is None or np.size(value) == 0:
        return ctx.constant(np.zeros([0], "int64"))
    if np.size(value) != 1:
        ctx.fail(f"input {i} must hold one value, got {np.size(value)}")
    return ctx.i64(int(np.reshape(value, -1)[0]))


def _float_signal(ctx: NodeContext, x: Value) -> Value:
    if x.dtype != np.float32:
        ctx.unsupported(f"{x.describe()}: DFT and STFT compute in FLOAT32")
    return x


@onnx_op("DFT")
def dft(ctx: NodeContext) -> Value:
    """DFT (opset 17: axis attribute, default 1; opset 20: axis input, default -2) -> DFT."""
    x = _float_signal(ctx, ctx.input(0))
    axis = ctx.attr_or_input("axis", 2, since=20, default=1 if ctx.opset < 20 else -2)
    inputs = [
        x,
        _int_input(ctx, 1),
        ctx.i64(int(np.reshape(axis, -1)[0])),
        ctx.boolean(bool(ctx.attr("inverse", 0))),
        ctx.boolean(bool(ctx.attr("onesided", 0))),
    ]
    return ctx.emit(DFT, inputs)


@onnx_op("STFT")
def stft(ctx: NodeContext) -> Value:
    """STFT -> STFT (frame_step and frame_length known at import; onesided default 1)."""
    x = _float_signal(ctx, ctx.input(0))
    step = _int_input(ctx, 1)
    if not ctx.has(1):
        ctx.fail("input 1 (frame_step) is required")
    window = ctx.optional(2)
    window = ctx.constant(np.zeros([0], "float32")) if window is None else _float_signal(ctx, window)
    inputs = [x, step, window, _int_input(ctx, 3), ctx.boolean(bool(ctx.attr("onesided", 1)))]
    return ctx.emit(STFT, inputs)
