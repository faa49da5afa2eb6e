"""Helpers the ONNX op converters share."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.values import Value, precision_of
from nnadapter_tvm.types import FuseCode
from nnadapter_tvm.types import OperationType as O


def cast(ctx: NodeContext, x: Value, dtype: object) -> Value:
    """CAST ``x`` to ``dtype``: nothing when it already is, numpy's cast when it is known at import."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.is_const:
        return ctx.constant(x.const.astype(dtype), dtype)
    return ctx.emit(O.CAST, [x, ctx.i32(int(precision_of(dtype, ctx.label)))], dtype=dtype, shape=x.shape)


def in_float32(ctx: NodeContext, x: Value, exact: Collection[str], refusal: str) -> tuple[Value, np.dtype | None]:
    """``x`` for an operation that computes in float32: a CAST when its type is one of ``exact`` (whose
    every value float32 holds), unsupported with ``refusal`` for other types; and the type to cast the
    results back to with ``cast_back`` (None: ``x`` is float32 already)."""
    if x.dtype == np.float32:
        return x, None
    if x.dtype.name not in exact:
        ctx.unsupported(refusal)
    return cast(ctx, x, "float32"), x.dtype


def cast_back(ctx: NodeContext, y: Value, dtype: np.dtype | None) -> Value:
    """``y`` in the type ``in_float32`` gave (nothing to do where it gave None)."""
    return y if dtype is None else cast(ctx, y, dtype)


def fuse_none(ctx: NodeContext) -> Value:
    return ctx.i32(int(FuseCode.NONE))


def norm_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        ctx.fail(f"{what} {axis} is outside [-{rank}, {rank}) for rank {rank}")
    return axis % max(rank, 1)


def rank_of(ctx: NodeContext, v: Value) -> int:
    if v.rank is None:
        ctx.unsupported(f"the rank of {v.describe()} is unknown")
    return v.rank


def broadcast_shape(a: Sequence[int | None], b: Sequence[int | None]) -> tuple[int | None, ...]:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        else:
            out.append(None if x is None or y is None else max(x, y))
    return tuple(out)


def binary(ctx: NodeContext, op: O, a: Value, b: Value, shape: object = "node", with_fuse: bool = True) -> Value:
    """An elementwise NNAdapter binary operation (numpy broadcasting, like ONNX's multidirectional)."""
    if shape == "node" and ctx.out_shape() is None and a.shape is not None and b.shape is not None:
        shape = broadcast_shape(a.shape, b.shape)
    inputs = [a, b, fuse_none(ctx)] if with_fuse else [a, b]
    return ctx.emit(op, inputs, shape=shape)


def reshape(ctx: NodeContext, x: Value, shape: Sequence[int], out_shape: object = None) -> Value:
    """RESHAPE to ``shape`` (0 copies the input dimension, -1 is inferred, as the spec says)."""
    if out_shape is None:
        out_shape = tuple(None if d in (-1, 0) else d for d in shape)
    return ctx.emit(O.RESHAPE, [x, ctx.i32(np.asarray(shape, "int32"))], shape=out_shape)


def to_rank0(ctx: NodeContext, x: Value) -> Value:
    """NNAdapter gives [1] where ONNX gives a scalar: reshape to rank 0."""
    return ctx.emit(O.RESHAPE, [x, ctx.i32(np.zeros([0], "int32"))], shape=())


def fold_if_empty(ctx: NodeContext) -> list[np.ndarray] | None:
    """The node's outputs when every input not known at import is empty (static shape, no elements):
    they then follow from shapes and constants alone, so the host computes them at import; else None."""
    from nnadapter_tvm.frontends.onnx import host

    arrays, empty = [], False
    for v in ctx.inputs():
        if v is None or v.is_const:
            arrays.append(None if v is None else v.const)
        elif v.is_static and 0 in v.shape:
            arrays.append(np.zeros(v.shape, v.dtype))
            empty = True
        else:
            return None
    return host.evaluate(ctx.node, arrays, ctx.opset) if empty else None
