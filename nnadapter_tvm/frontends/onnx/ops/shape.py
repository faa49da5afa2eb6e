"""Shapes and layouts: Reshape, Transpose, Squeeze, Unsqueeze, Concat, Split, Shape, Size, Expand, Tile,
ConstantOfShape, EyeLike, DepthToSpace, SpaceToDepth -> RESHAPE, TRANSPOSE, SQUEEZE, UNSQUEEZE, CONCAT,
SPLIT, SHAPE, SLICE, EXPAND, TILE, FILL (or a constant when the result follows from static shapes)."""

from __future__ import annotations

import math

import numpy as np

from nnadapter_tvm.frontends.onnx import shape_elements
from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast, fold_if_empty, norm_axis, rank_of, reshape
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision


def _static_out(ctx: NodeContext, i: int = 0) -> tuple[int, ...] | None:
    shape = ctx.out_shape(i)
    return tuple(shape) if shape is not None and all(d is not None for d in shape) else None


@onnx_op("Reshape")
def reshape_(ctx: NodeContext) -> Value | np.ndarray:
    """Reshape -> RESHAPE (0 copies the input dimension unless allowzero, -1 is inferred); the shape must be
    computed at run time (from the input's own dimensions, say) stays an operand of RESHAPE, whose
    converter knows its values as expressions over the symbolic dimensions (or reads them at run time)."""
    x = ctx.input(0)
    if not ctx.input(1).is_const:
        return _reshape_computed(ctx, x, ctx.input(1))
    target = [int(d) for d in np.reshape(ctx.const(1), -1)]
    if ctx.attr("allowzero", 0) and 0 in target:
        if -1 in target:
            ctx.fail(f"allowzero with both 0 and -1 in shape {target}")
        folded = fold_if_empty(ctx)
        if folded is None:
            ctx.unsupported(f"allowzero with a 0 in shape {target} on an input of unknown size")
        return folded[0]
    out = _static_out(ctx)
    if out is not None and (0 not in out or x.is_static):
        target = list(out)  # fully resolved (RESHAPE's 0 would copy, a literal 0 here is a real empty dim)
        if 0 in out:
            return np.zeros(out, x.dtype)
    return reshape(ctx, x, target, out_shape=ctx.out_shape())


def _reshape_computed(ctx: NodeContext, x: Value, target: Value) -> Value:
    length = _shape_length(ctx, target, "shape")
    tracked = shape_elements.of(target)
    known = tracked or (None,) * length
    # RESHAPE reads a literal 0 as "copy", so allowzero needs the shape's zeros known at import.  Elements
    # computed from dimensions (tracked: the dynamo exporter writes allowzero=1 on every Reshape to
    # Concat(Shape(x)[0:2], [12, 64])) reach the converter as expressions over the symbolic dimensions,
    # which it takes as sizes, never as "copy": a dimension that is 0 at execution gives a 0, as allowzero
    # says.  Elements read from data reach it as a tensor, whose 0s it copies: those must be constants.
    if ctx.attr("allowzero", 0) and (tracked is None or 0 in known):
        ctx.const(1)
    out = ctx.out_shape()
    if out is None or len(out) != length:
        out = tuple(d if d is not None and d > 0 else None for d in known)
    return ctx.emit(O.RESHAPE, [x, target], shape=out)


def _shape_length(ctx: NodeContext, v: Value, what: str) -> int:
    """The element count of a 1-D shape-like input computed at run time (its length must be static)."""
    if v.shape is None or len(v.shape) != 1 or v.shape[0] is None:
        ctx.unsupported(f"the {what} input {v.describe()} must be 1-D of known length")
    return int(v.shape[0])


@onnx_op("Transpose")
def transpose(ctx: NodeContext) -> Value:
    """Transpose -> TRANSPOSE (perm defaults to the axes reversed)."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    perm = [int(p) for p in ctx.attr("perm", list(reversed(range(rank))))]
    if sorted(p % max(rank, 1) for p in perm) != list(range(rank)):
        ctx.fail(f"perm {perm} is not a permutation of {rank} axes")
    if rank == 0:
        return ctx.emit(O.ASSIGN, [x])
    return ctx.emit(O.TRANSPOSE, [x, ctx.i32(perm)])


@onnx_op("Squeeze")
def squeeze(ctx: NodeContext) -> Value:
    """Squeeze -> SQUEEZE with explicit axes (axes: attribute before opset 13, input after); a rank-0 result
    is a RESHAPE to [] (NNAdapter's SQUEEZE keeps [1])."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    axes = ctx.ints_attr_or_input("axes", 1, 13, None)
    if axes is None:
        if any(d is None for d in x.shape):
            ctx.unsupported(f"Squeeze without axes on {x.describe()}: which dims are 1 is known only at run time")
        axes = [a for a, d in enumerate(x.shape) if d == 1]
    axes = sorted({norm_axis(ctx, a, rank) for a in axes})
    for a in axes:
        if x.shape[a] not in (1, None):
            ctx.fail(f"axis {a} has size {x.shape[a]}, only size-1 axes can be squeezed")
    if len(axes) == rank:
        return reshape(ctx, x, [], out_shape=())
    if not axes:
        return ctx.emit(O.ASSIGN, [x])
    return ctx.emit(O.SQUEEZE, [x, ctx.i32(axes)])


@onnx_op("Unsqueeze")
def unsqueeze(ctx: NodeContext) -> Value:
    """Unsqueeze -> UNSQUEEZE (axes index the output: attribute before opset 13, input after)."""
    x = ctx.input(0)
    axes = ctx.ints_attr_or_input("axes", 1, 13, None)
    if not axes:
        ctx.fail("axes are required")
    out_rank = rank_of(ctx, x) + len(axes)
    norm = sorted(norm_axis(ctx, a, out_rank) for a in axes)
    if len(set(norm)) != len(norm):
        ctx.fail(f"axes {axes} name an axis twice")
    return ctx.emit(O.UNSQUEEZE, [x, ctx.i32(norm)])


@onnx_op("Concat")
def concat(ctx: NodeContext) -> Value | np.ndarray:
    """Concat -> CONCAT (inputs known to be empty along the axis are left out)."""
    inputs = [v for v in ctx.inputs() if v is not None]
    rank = rank_of(ctx, inputs[0])
    axis = norm_axis(ctx, int(ctx.attr("axis")), rank)
    kept = [v for v in inputs if not (v.shape is not None and v.shape[axis] == 0)]
    if not kept:
        folded = fold_if_empty(ctx)
        if folded is None:
            ctx.unsupported("every input is empty along the axis, but the output size is unknown")
        return folded[0]
    if len(kept) == 1:
        return ctx.emit(O.ASSIGN, [kept[0]])
    return ctx.emit(O.CONCAT, [*kept, ctx.i32(axis)])


@onnx_op("Split")
def split(ctx: NodeContext) -> list[Value]:
    """Split -> SPLIT (sizes: attribute before opset 13, input after; else equal parts, or num_outputs in
    opset 18 with a smaller last part)."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank)
    count = len(ctx.node.output)
    sizes = ctx.ints_attr_or_input("split", 1, 13, None)
    dim = x.shape[axis]
    if sizes is None:
        if dim is None:
            ctx.unsupported(f"Split into equal parts of axis {axis} of unknown size")
        num = int(ctx.attr("num_outputs", count))
        if ctx.opset >= 18 and "num_outputs" in ctx.attrs:
            part = -(-dim // num)
            sizes = [min(part, dim - k * part) for k in range(num)]
        else:
            if dim % num:
                ctx.fail(f"axis {axis} of size {dim} does not split into {num} equal parts")
            sizes = [dim // num] * num
    sizes = [int(s) for s in sizes]
    if len(sizes) != count:
        ctx.fail(f"{len(sizes)} split sizes {sizes} for {count} outputs")
    outputs = ctx.emit(O.SPLIT, [x, ctx.i32(axis), ctx.i32(sizes)], outputs=count)
    return outputs if isinstance(outputs, list) else [outputs]


def _shape_range(ctx: NodeContext, rank: int) -> tuple[int, int]:
    start, end = int(ctx.attr("start", 0)), ctx.attr("end", None)
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


@onnx_op("Shape")
def shape(ctx: NodeContext) -> Value | np.ndarray:
    """Shape -> a constant when the dims are static, else SHAPE (INT64) and SLICE for start/end."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    start, end = _shape_range(ctx, rank)
    dims = x.shape[start:end]
    if all(d is not None for d in dims):
        return np.array(dims, "int64")
    y = ctx.emit(O.SHAPE, [x, ctx.i32(int(Precision.INT64))], dtype="int64", shape=(rank,))
    if (start, end) == (0, rank):
        return y
    return ctx.emit(O.SLICE, [y, ctx.i32([0]), ctx.i32([start]), ctx.i32([end]), ctx.i32([1])])


@onnx_op("Size")
def size(ctx: NodeContext) -> np.ndarray | Value:
    """Size -> a constant where the dims are static, else the product of SHAPE's elements (GATHER, MUL)."""
    x = ctx.input(0)
    if x.is_static:
        return np.array(math.prod(x.shape), "int64")
    rank = rank_of(ctx, x)
    dims = ctx.emit(O.SHAPE, [x, ctx.i32(int(Precision.INT64))], dtype="int64", shape=(rank,))
    count = None
    for axis, d in enumerate(x.shape):
        factor = ctx.i64(d) if d is not None else ctx.emit(O.GATHER, [dims, ctx.i64(axis), ctx.i32(0)], shape=())
        count = factor if count is None else ctx.emit(O.MUL, [count, factor, ctx.i32(0)], shape=())
    return count


@onnx_op("Expand")
def expand(ctx: NodeContext) -> Value | np.ndarray:
    """Expand -> EXPAND (bidirectional broadcasting: a target 1 keeps the input's dim, i.e. -1)."""
    x = ctx.input(0)
    if not ctx.input(1).is_const:
        return _expand_computed(ctx, x, ctx.input(1))
    target = [int(d) for d in np.reshape(ctx.const(1), -1)]
    rank = rank_of(ctx, x)
    n = max(rank, len(target))
    target = [1] * (n - len(target)) + target
    dims = [-1 if i >= n - rank and t == 1 else t for i, t in enumerate(target)]
    out = _static_out(ctx)
    if out is not None and 0 in out:
        return np.zeros(out, x.dtype)
    if all(d == -1 for d in dims) and n == rank:
        return ctx.emit(O.ASSIGN, [x])
    return ctx.emit(O.EXPAND, [x, ctx.i64(dims)])


def _expand_computed(ctx: NodeContext, x: Value, target: Value) -> Value:
    """Expand to a shape computed at run time: EXPAND with it as an operand (a computed 1 keeps the
    input's dimension, as ONNX's broadcasting does), left-padded with 1s to the input's rank."""
    rank = rank_of(ctx, x)
    length = _shape_length(ctx, target, "shape")
    if length < rank:
        ones = ctx.constant(np.ones([rank - length], target.dtype))
        target = ctx.emit(O.CONCAT, [ones, target, ctx.i32(0)], shape=(rank,))
    n = max(rank, length)
    out = ctx.out_shape()
    if out is None or len(out) != n:
        out = (None,) * n
    return ctx.emit(O.EXPAND, [x, target], shape=out)


@onnx_op("Tile")
def tile(ctx: NodeContext) -> Value | np.ndarray:
    """Tile -> TILE (repeats known at import; a 0 repeat gives an empty constant)."""
    x = ctx.input(0)
    if not ctx.input(1).is_const:
        if _shape_length(ctx, ctx.input(1), "repeats") != rank_of(ctx, x):
            ctx.fail(f"{ctx.input(1).shape[0]} repeats for rank {x.rank}")
        out = ctx.out_shape() or (None,) * x.rank
        return ctx.emit(O.TILE, [x, cast(ctx, ctx.input(1), "int32")], shape=out)
    repeats = [int(r) for r in np.reshape(ctx.const(1), -1)]
    if len(repeats) != rank_of(ctx, x):
        ctx.fail(f"{len(repeats)} repeats for rank {x.rank}")
    if not repeats:
        return x  # a rank-0 input's empty repeats: the identity (onnxruntime runs it)
    if 0 in repeats:
        out = _static_out(ctx)
        if out is None:
            ctx.unsupported("a 0 repeat on an input of unknown shape")
        return np.zeros(out, x.dtype)
    return ctx.emit(O.TILE, [x, ctx.i32(repeats)])


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx: NodeContext) -> Value:
    """ConstantOfShape -> FILL (a shape computed at run time; a constant one is folded at import)."""
    value = ctx.attr("value", None)
    array = np.zeros([1], "float32") if value is None else onnx_to_array(value)
    shape_in = ctx.input(0)
    if shape_in.shape is None or len(shape_in.shape) != 1 or shape_in.shape[0] is None:
        ctx.unsupported(f"the shape input {shape_in.describe()} must be 1-D of known length")
    return ctx.emit(O.FILL, [shape_in, ctx.constant(array.reshape(()), array.dtype)], dtype=array.dtype)


def onnx_to_array(tensor: object) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


@onnx_op("EyeLike")
def eye_like(ctx: NodeContext) -> np.ndarray:
    """EyeLike -> a constant (its values follow from the input's static shape)."""
    x = ctx.input(0)
    if not x.is_static or x.rank != 2:
        ctx.unsupported(f"EyeLike of {x.describe()}: needs a 2-D input of static shape")
    dtype = ctx.out_dtype() or x.dtype
    return np.eye(*x.shape, k=int(ctx.attr("k", 0)), dtype=dtype)


def _static_nchw(ctx: NodeContext, x: Value) -> tuple[int, int, int, int]:
    if x.rank != 4 or not all(d is not None for d in x.shape[1:]):
        ctx.unsupported(f"{x.describe()} must be 4-D [N, C, H, W] with static C, H, W")
    return x.shape


@onnx_op("DepthToSpace")
def depth_to_space(ctx: NodeContext) -> Value:
    """DepthToSpace -> RESHAPE + TRANSPOSE + RESHAPE (modes DCR and CRD)."""
    x = ctx.input(0)
    _, c, h, w = _static_nchw(ctx, x)
    b = int(ctx.attr("blocksize"))
    if c % (b * b):
        ctx.fail(f"{c} channels do not divide by blocksize^2 = {b * b}")
    mode = ctx.attr("mode", "DCR")
    if mode == "DCR":
        dims, perm = [0, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    elif mode == "CRD":
        dims, perm = [0, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    else:
        ctx.fail(f"mode '{mode}' is not DCR or CRD")
    return _block_shuffle(ctx, x, dims, perm, [0, c // (b * b), h * b, w * b])


@onnx_op("SpaceToDepth")
def space_to_depth(ctx: NodeContext) -> Value:
    """SpaceToDepth -> RESHAPE + TRANSPOSE + RESHAPE (modes DCR and CRD)."""
    x = ctx.input(0)
    _, c, h, w = _static_nchw(ctx, x)
    b = int(ctx.attr("blocksize"))
    if h % b or w % b:
        ctx.fail(f"height {h} and width {w} must divide by blocksize {b}")
    mode = ctx.attr("mode", "DCR")  # opset 25 added CRD
    if mode not in ("DCR", "CRD"):
        ctx.fail(f"mode '{mode}' is not DCR or CRD")
    dims = [0, c, h // b, b, w // b, b]
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    return _block_shuffle(ctx, x, dims, perm, [0, c * b * b, h // b, w // b])


def _block_shuffle(ctx: NodeContext, x: Value, dims: list[int], perm: list[int], final: list[int]) -> Value:
    n = x.shape[0]
    mid = reshape(ctx, x, dims, out_shape=(n, *dims[1:]))
    moved = ctx.emit(O.TRANSPOSE, [mid, ctx.i32(perm)], shape=tuple(mid.shape[p] for p in perm))
    return reshape(ctx, moved, final, out_shape=ctx.out_shape())
