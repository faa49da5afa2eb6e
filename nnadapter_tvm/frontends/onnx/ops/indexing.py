"""Indexing: Slice, Gather, GatherElements, GatherND, Pad, OneHot, Trilu, Range -> SLICE, GATHER (the
element-wise gathers on the flattened input with computed flat indices), PAD (wrap: SLICE + CONCAT),
EQUAL + WHERE, WHERE with a constant mask."""

from __future__ import annotations

import math

import numpy as np

from nnadapter_tvm.frontends.onnx import shape_elements
from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import binary, cast, fold_if_empty, norm_axis, rank_of, reshape
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import PadMode, Precision

_I32 = np.iinfo(np.int32)


def _empty_result(ctx: NodeContext, x: Value) -> np.ndarray | None:
    shape = ctx.out_shape()
    if shape is not None and all(d is not None for d in shape) and 0 in shape:
        return np.zeros(shape, ctx.out_dtype() or x.dtype)
    return None


def _slice(ctx: NodeContext, x: Value, axes, starts, ends, steps, shape="node") -> Value:
    clamp = [int(np.clip(v, _I32.min, _I32.max)) for v in (*starts, *ends)]
    n = len(starts)
    inputs = [x, ctx.i32(axes), ctx.i32(clamp[:n]), ctx.i32(clamp[n:]), ctx.i32(steps)]
    return ctx.emit(O.SLICE, inputs, shape=shape)


@onnx_op("Slice")
def slice_(ctx: NodeContext) -> Value | np.ndarray:
    """Slice -> SLICE (attributes before opset 10, constant inputs after; INT64 bounds clamped to INT32,
    which slices the same for dims below 2^31)."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    if ctx.opset >= 10 and not all(ctx.input(i).is_const for i in (1, 2)):
        return _slice_computed(ctx, x, rank)  # computed from dimensions, or read from data at execution
    starts = ctx.ints_attr_or_input("starts", 1, 10, None)
    ends = ctx.ints_attr_or_input("ends", 2, 10, None)
    if starts is None or ends is None or len(starts) != len(ends):
        ctx.fail(f"starts {starts} and ends {ends} must be given, one per sliced axis")
    axes = ctx.ints_attr_or_input("axes", 3, 10, list(range(len(starts))))
    steps = ctx.ints_attr_or_input("steps", 4, 10, [1] * len(starts))
    if len(axes) != len(starts) or len(steps) != len(starts):
        ctx.fail(f"axes {axes} and steps {steps} must hold one value per start {starts}")
    if 0 in steps:
        ctx.fail(f"steps {steps} must not be 0")
    empty = _empty_result(ctx, x)
    if empty is not None:
        return empty
    axes = [norm_axis(ctx, a, rank) for a in axes]
    return _slice(ctx, x, axes, starts, ends, steps)


def _from_shapes(ctx: NodeContext, *indices: int) -> bool:
    """Whether inputs ``indices`` are constants or computed from dimensions alone (their elements are
    tracked at import, shape_elements), which the NNAdapter converters then know symbolically.  Values
    read from data are not: those inputs must be constants (the backend then specialises on them)."""
    return all(shape_elements.of(ctx.input(i)) is not None for i in indices)


def _slice_computed(ctx: NodeContext, x: Value, rank: int) -> Value:
    """Slice whose starts or ends are computed at run time: SLICE with those tensors (cast to INT32) as
    operands, whose values the converter knows as expressions over the symbolic dimensions where they
    are computed from dimensions, else reads at execution; axes and steps must be constants."""
    count = None
    bounds = []
    for i, what in ((1, "starts"), (2, "ends")):
        v = ctx.input(i)
        if v.shape is None or len(v.shape) != 1 or v.shape[0] is None:
            ctx.unsupported(f"the {what} input {v.describe()} must be 1-D of known length")
        count = v.shape[0] if count is None else count
        if v.shape[0] != count:
            ctx.fail(f"starts and ends hold {count} and {v.shape[0]} values, one per sliced axis")
        if v.is_const:  # INT64 bounds clamped to INT32, as in the constant case
            v = ctx.constant(np.clip(np.reshape(v.const, -1), _I32.min, _I32.max), v.dtype)
        elif np.dtype(v.dtype).itemsize > 4 or np.dtype(v.dtype) == np.uint32:
            v = _saturate_int32(ctx, v)  # a wrapping CAST makes INT64_MAX (to the end) -1
        bounds.append(cast(ctx, v, "int32"))
    axes = ctx.ints_attr_or_input("axes", 3, 10, list(range(count)))
    steps = ctx.ints_attr_or_input("steps", 4, 10, [1] * count)
    if len(axes) != count or len(steps) != count:
        ctx.fail(f"axes {axes} and steps {steps} must hold one value per start ({count})")
    if 0 in steps:
        ctx.fail(f"steps {steps} must not be 0")
    axes = [norm_axis(ctx, a, rank) for a in axes]
    out = ctx.out_shape()
    if out is None:
        out = tuple(None if a in axes else d for a, d in enumerate(x.shape))
    return ctx.emit(O.SLICE, [x, ctx.i32(axes), *bounds, ctx.i32(steps)], shape=out)


def _saturate_int32(ctx: NodeContext, v: Value) -> Value:
    """``v`` (a wider integer type) clamped to INT32's range by MAX and MIN in its own type, so
    that the CAST after it saturates as ONNX's clamping of bounds expects rather than wrapping."""
    info = np.iinfo(np.int32)
    lo, hi = (ctx.constant(np.asarray([b], v.dtype), v.dtype) for b in (max(info.min, np.iinfo(v.dtype).min), info.max))
    return binary(ctx, O.MIN, binary(ctx, O.MAX, v, lo, shape=v.shape), hi, shape=v.shape)


@onnx_op("Gather")
def gather(ctx: NodeContext) -> Value | np.ndarray:
    """Gather -> GATHER (negative indices count from the end, as GATHER's do)."""
    x, indices = ctx.input(0), ctx.input(1)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank_of(ctx, x))
    empty = _empty_result(ctx, x)
    if empty is not None:
        return empty
    return ctx.emit(O.GATHER, [x, indices, ctx.i32(axis)])


def _positive(ctx: NodeContext, idx: Value, dims: object) -> Value:
    """``idx`` with negative entries + ``dims`` (broadcast), unchecked (OneHot defines out-of-range
    indices): at import for constants, else LESS + ADD + WHERE."""
    dims_array = np.asarray(dims, idx.dtype)
    if idx.is_const:
        return ctx.constant(np.where(idx.const < 0, idx.const + dims_array, idx.const), idx.dtype)
    negative = ctx.emit(O.LESS, [idx, ctx.constant(np.zeros((), idx.dtype))], dtype="bool", shape=idx.shape)
    shifted = binary(ctx, O.ADD, idx, ctx.constant(dims_array), shape=idx.shape)
    return ctx.emit(O.WHERE, [negative, shifted, idx], dtype=idx.dtype, shape=idx.shape)


def _checked(ctx: NodeContext, idx: Value, dim: int | Value, shape: tuple | None = None) -> Value:
    """``idx`` (coordinates along an axis of size ``dim``) with negative entries + ``dim``, each checked
    to lie in [-dim, dim) as ONNX requires: at import for constants, else a GATHER from the table
    0 .. dim - 1 (a constant, or a RANGE where ``dim`` is a scalar Value known at execution), whose
    run-time check refuses an out-of-range coordinate by value.  (The element-wise gathers index the
    flattened input: an unchecked coordinate past its axis would read another row's element.)"""
    out_shape = idx.shape if shape is None else shape
    if not isinstance(dim, int):
        table = _int_range(ctx, [ctx.i32(0), dim, ctx.i32(1)], idx.dtype)
        return ctx.emit(O.GATHER, [table, idx, ctx.i32(0)], dtype=idx.dtype, shape=out_shape)
    if idx.is_const:
        values = np.asarray(idx.const)
        if values.size and (values.min() < -dim or values.max() >= dim):
            ctx.fail(f"indices must lie in [-{dim}, {dim}), got {values.tolist()}")
        return ctx.constant(np.where(values < 0, values + dim, values), idx.dtype)
    table = ctx.constant(np.arange(dim, dtype=idx.dtype))
    return ctx.emit(O.GATHER, [table, idx, ctx.i32(0)], dtype=idx.dtype, shape=out_shape)


def _static(ctx: NodeContext, *values: Value) -> None:
    for v in values:
        if not v.is_static:
            ctx.unsupported(f"{v.describe()} must have a static shape (flat indices are computed from it)")


def _strides(shape: tuple[int, ...]) -> np.ndarray:
    return np.array([math.prod(shape[a + 1 :]) for a in range(len(shape))], "int64")


@onnx_op("GatherElements")
def gather_elements(ctx: NodeContext) -> Value | np.ndarray:
    """GatherElements -> GATHER on the flattened input with flat indices base + index * stride(axis)
    (base: the constant flat offset of every other coordinate); each index is first checked against
    its axis (``_checked``): out of [-dim, dim) is an error, as in ONNX and onnxruntime."""
    x, indices = ctx.input(0), ctx.input(1)
    _static(ctx, x, indices)
    rank = rank_of(ctx, x)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank)
    if indices.rank != rank:
        ctx.fail(f"indices {indices.describe()} must have the input's rank {rank}")
    empty = _empty_result(ctx, x)
    if empty is not None:
        return empty
    strides = _strides(x.shape)
    grid = np.indices(indices.shape, "int64")
    base = sum(grid[a] * strides[a] for a in range(rank) if a != axis)
    dtype = "int64" if x.rank and math.prod(x.shape) > _I32.max else indices.dtype
    idx = indices if indices.dtype == dtype else cast(ctx, indices, "int64")
    idx = _checked(ctx, idx, x.shape[axis])
    scaled = binary(ctx, O.MUL, idx, ctx.constant(np.array(strides[axis], dtype)), shape=idx.shape)
    flat_idx = binary(ctx, O.ADD, scaled, ctx.constant(np.asarray(base, dtype)), shape=idx.shape)
    flat = reshape(ctx, x, [-1], out_shape=(math.prod(x.shape),))
    return ctx.emit(O.GATHER, [flat, flat_idx, ctx.i32(0)])


@onnx_op("GatherND")
def gather_nd(ctx: NodeContext) -> Value | np.ndarray:
    """GatherND -> GATHER of rows of the input reshaped to [batch * indexed dims, rest...]; the row is
    the sum of index * stride over the index tuple plus the offset of its batch, each index first
    checked against its own axis (``_checked``: out of [-dim, dim) is an error, as in ONNX).  Dimensions
    unknown until execution enter as SHAPE elements, which the converters know as expressions over the
    symbolic dimensions: the dynamo exporter gathers from an attention mask of [batch, sequence]."""
    x, indices = ctx.input(0), ctx.input(1)
    rank = rank_of(ctx, x)
    if indices.shape is None or not indices.shape or indices.shape[-1] is None:
        ctx.unsupported(f"{indices.describe()}: the length of the index tuples (last dim) must be static")
    b = int(ctx.attr("batch_dims", 0))
    k = indices.shape[-1]
    if not 1 <= k <= rank - b:
        ctx.fail(f"index tuples of length {k} do not fit input {x.describe()} with batch_dims {b}")
    empty = _empty_result(ctx, x)
    if empty is not None:
        return empty
    dims = _Dims(ctx, x)
    batch, indexed, rest = dims[:b], dims[b : b + k], dims[b + k :]
    rows = dims.product(batch + indexed)
    table = dims.reshape(x, [rows, *rest])
    idx = cast(ctx, indices, "int64")
    lead = indices.shape[:-1]
    row = None
    for j, dim in enumerate(indexed):
        # Each coordinate checked against its own axis (a flat row alone would hide one past its axis).
        column = _slice(ctx, idx, [len(lead)], [j], [j + 1], [1], shape=(*lead, 1)) if k > 1 else idx
        if lead:
            column = ctx.emit(O.SQUEEZE, [column, ctx.i32([len(lead)])], shape=lead)
        else:
            column = reshape(ctx, column, [1], out_shape=(1,))
        term = _checked(ctx, column, dim)
        stride = dims.product(indexed[j + 1 :])
        if not (isinstance(stride, int) and stride == 1):
            term = binary(ctx, O.MUL, term, dims.value(stride), shape=term.shape)
        row = term if row is None else binary(ctx, O.ADD, row, term, shape=term.shape)
    if b:
        row = binary(ctx, O.ADD, row, _batch_offsets(ctx, dims, batch, indexed, len(lead)), shape=row.shape)
    y = ctx.emit(O.GATHER, [table, row, ctx.i32(0)], shape=(*row.shape, *x.shape[b + k :]))
    if lead:
        return y
    if len(y.shape) == 1:  # one tuple indexing every axis: a scalar
        return reshape(ctx, y, [], out_shape=())
    return ctx.emit(O.SQUEEZE, [y, ctx.i32([0])], shape=tuple(x.shape[b + k :]))


def _batch_offsets(ctx: NodeContext, dims: _Dims, batch: list, indexed: list, lead_rank: int) -> Value:
    """The first row of each batch element in the table, shaped to broadcast over the index tuples:
    arange(prod(batch)) * prod(indexed), reshaped to batch + [1] * (lead rank - batch rank)."""
    count, step = dims.product(batch), dims.product(indexed)
    ones = [1] * (lead_rank - len(batch))
    if all(isinstance(d, int) for d in (*batch, step)):
        offsets = np.arange(count, dtype="int64").reshape(batch) * step
        return ctx.i64(offsets.reshape((*batch, *ones)))
    flat = _int_range(ctx, [ctx.i32(0), dims.value(count), ctx.i32(1)], "int64")
    flat = binary(ctx, O.MUL, flat, dims.value(step), shape=(None,))
    return dims.reshape(flat, [*batch, *ones])


class _Dims:
    """``x``'s dimensions, each an int where static, else a scalar INT64 Value read from SHAPE(x) (emitted
    once); products of them, and a RESHAPE to a list of them (a constant target where all are ints)."""

    def __init__(self, ctx: NodeContext, x: Value):
        self.ctx, self._shape = ctx, None
        self.dims = [d if d is not None else self._element(x, axis) for axis, d in enumerate(x.shape)]

    def __getitem__(self, index: slice) -> list:
        return self.dims[index]

    def _element(self, x: Value, axis: int) -> Value:
        ctx = self.ctx
        if self._shape is None:
            self._shape = ctx.emit(O.SHAPE, [x, ctx.i32(int(Precision.INT64))], dtype="int64", shape=(x.rank,))
        return ctx.emit(O.GATHER, [self._shape, ctx.i64(axis), ctx.i32(0)], dtype="int64", shape=())

    def value(self, d: int | Value) -> Value:
        return self.ctx.i64(np.array(d)) if isinstance(d, int) else d

    def product(self, factors: list) -> int | Value:
        static = math.prod(d for d in factors if isinstance(d, int))
        result: int | Value = static
        for d in factors:
            if not isinstance(d, int):
                result = d if result == 1 else binary(self.ctx, O.MUL, self.value(result), d, shape=())
        return result

    def reshape(self, x: Value, target: list) -> Value:
        ctx = self.ctx
        if all(isinstance(d, int) for d in target):
            return reshape(ctx, x, target, out_shape=tuple(target))
        parts = [ctx.emit(O.UNSQUEEZE, [self.value(d), ctx.i32([0])], shape=(1,)) for d in target]
        shape = ctx.emit(O.CONCAT, [*parts, ctx.i32(0)], dtype="int64", shape=(len(target),))
        out = tuple(d if isinstance(d, int) else None for d in target)
        return ctx.emit(O.RESHAPE, [x, shape], shape=out)


def _as_integers(ctx: NodeContext, v: Value) -> Value | None:
    """A float scalar as the integer tensor of the same value: a whole constant, or a cast of integers
    computed from dimensions; None otherwise."""
    if v.is_const:
        value = np.asarray(v.const, "float64")
        return ctx.i64(value.astype("int64")) if value.size == 1 and float(value.reshape(-1)[0]).is_integer() else None
    return v.from_integer if v.from_integer is not None and shape_elements.of(v.from_integer) is not None else None


_PAD_MODES = {"constant": PadMode.CONSTANT, "reflect": PadMode.REFLECT, "edge": PadMode.EDGE}


def _pad_value(ctx: NodeContext, x: Value) -> Value:
    empty = ctx.opset >= 11 and ctx.has(2) and ctx.input(2).shape == (0,)  # an empty input: none given
    value = np.reshape(ctx.attr_or_input("value", 2, 11, 0.0) if not empty else np.zeros(1), -1)
    value = value[0] if value.size else np.zeros(())
    if x.dtype.kind == "f":
        v32 = np.float32(value)
        if not (np.isnan(v32) and np.isnan(value)) and float(v32) != float(value):
            ctx.unsupported(f"constant_value {value} is not exact in FLOAT32, PAD's value precision")
        return ctx.f32(v32)
    return ctx.i64(int(value))


@onnx_op("Pad")
def pad(ctx: NodeContext) -> Value | np.ndarray:
    """Pad -> PAD (modes constant, reflect, edge; pads attribute before opset 11, input after; axes
    input from opset 18); wrap: SLICE + CONCAT; negative pads crop first with SLICE."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    mode = ctx.attr("mode", "constant")
    computed = ctx.opset >= 11 and ctx.has(1) and not ctx.input(1).is_const
    if computed and mode == "constant" and not (ctx.opset >= 18 and ctx.has(3)):
        return _pad_computed(ctx, x, rank)
    pads = ctx.attr("paddings", None) if ctx.opset < 2 else ctx.ints_attr_or_input("pads", 1, 11, None)
    if pads is None:
        ctx.fail("pads are required")
    # An input from opset 18 on, never an attribute.
    axes = [int(a) for a in np.reshape(ctx.const(3), -1)] if ctx.opset >= 18 and ctx.has(3) else list(range(rank))
    axes = [norm_axis(ctx, a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        ctx.fail(f"{len(pads)} pads for {len(axes)} axes")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = int(pads[i]), int(pads[i + len(axes)])
    empty = _empty_result(ctx, x)
    if empty is not None and mode == "constant":
        return empty
    if mode not in (*_PAD_MODES, "wrap"):
        ctx.unsupported(f"mode '{mode}'")
    if any(p < 0 for p in begin + end):  # crop first
        if any(x.shape[a] is None for a in range(rank)):
            ctx.unsupported("negative pads on an input of unknown shape")
        crop = [a for a in range(rank) if begin[a] < 0 or end[a] < 0]
        starts = [max(-begin[a], 0) for a in crop]
        ends = [x.shape[a] - max(-end[a], 0) for a in crop]
        shape = tuple(e - s if a in crop else d for a, d, s, e in _per_axis(x.shape, crop, starts, ends))
        x = _slice(ctx, x, crop, starts, ends, [1] * len(crop), shape=shape)
        begin, end = [max(p, 0) for p in begin], [max(p, 0) for p in end]
    if not any(begin + end):
        return ctx.emit(O.ASSIGN, [x])
    if mode == "wrap":
        return _wrap(ctx, x, begin, end)
    for a in range(rank):
        # An axis of unknown size is checked at execution (PAD's converter).
        if (
            mode == "reflect"
            and x.shape[a] is not None
            and max(begin[a], end[a]) >= x.shape[a]
            and (begin[a] or end[a])
        ):
            ctx.unsupported(f"reflect pads {begin[a]}, {end[a]} not below the size {x.shape[a]} of axis {a}")
    flat = [p for a in range(rank) for p in (begin[a], end[a])]
    value = _pad_value(ctx, x) if mode == "constant" else ctx.f32(0.0)
    return ctx.emit(O.PAD, [x, ctx.i32(flat), ctx.i32(int(_PAD_MODES[mode])), value])


def _pad_computed(ctx: NodeContext, x: Value, rank: int) -> Value:
    """Constant Pad of every axis whose pads are computed at run time (a detector's transform pads the
    image to a multiple of 32): ONNX's [begins..., ends...] reordered to PAD's [begin, end] per axis
    (RESHAPE [2, rank], TRANSPOSE, RESHAPE), whose values PAD's converter knows as expressions or reads
    at execution (a negative one crops, as in ONNX).  Other modes need their pads at import (the ONNX
    backend specialises on them)."""
    pads = ctx.input(1)
    if pads.shape != (2 * rank,):
        ctx.fail(f"pads {pads.describe()} must hold 2 * rank = {2 * rank} values")
    pairs = reshape(ctx, cast(ctx, pads, "int32"), [2, rank], out_shape=(2, rank))
    pairs = ctx.emit(O.TRANSPOSE, [pairs, ctx.i32([1, 0])], shape=(rank, 2))
    flat = reshape(ctx, pairs, [2 * rank], out_shape=(2 * rank,))
    return ctx.emit(O.PAD, [x, flat, ctx.i32(int(_PAD_MODES["constant"])), _pad_value(ctx, x)])


def _per_axis(shape, crop, starts, ends):
    bounds = dict(zip(crop, zip(starts, ends)))
    for a, d in enumerate(shape):
        s, e = bounds.get(a, (0, d))
        yield a, d, s, e


def _wrap(ctx: NodeContext, x: Value, begin: list[int], end: list[int]) -> Value:
    """Wrap padding: per axis, CONCAT of the last ``begin`` slices, the input and the first ``end``."""
    for a, (b, e) in enumerate(zip(begin, end)):
        if not (b or e):
            continue
        d = x.shape[a]
        if d is None or max(b, e) > d:
            ctx.unsupported(f"wrap pads {b}, {e} beyond the size {d} of axis {a}")
        parts = []
        if b:
            parts.append(_slice(ctx, x, [a], [d - b], [d], [1], shape=_with(x.shape, a, b)))
        parts.append(x)
        if e:
            parts.append(_slice(ctx, x, [a], [0], [e], [1], shape=_with(x.shape, a, e)))
        x = ctx.emit(O.CONCAT, [*parts, ctx.i32(a)], shape=_with(x.shape, a, d + b + e))
    return x


def _with(shape: tuple, axis: int, size: int) -> tuple:
    return tuple(size if a == axis else d for a, d in enumerate(shape))


@onnx_op("OneHot")
def one_hot(ctx: NodeContext) -> Value:
    """OneHot -> EQUAL(UNSQUEEZE(indices), the constant range of depth) + WHERE(on, off); negative
    indices + depth, out-of-range ones give an all-off row."""
    indices, values = ctx.input(0), ctx.input(2)
    depth = int(np.reshape(ctx.const(1), -1)[0])
    off, on = np.reshape(ctx.const(2), -1)
    rank = rank_of(ctx, indices)
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank + 1)
    idx = indices
    if idx.dtype.kind == "f":
        idx = cast(ctx, idx, "int64")  # ONNX truncates
    idx = _positive(ctx, idx, depth)
    column = ctx.emit(O.UNSQUEEZE, [idx, ctx.i32([axis])], shape=_insert(idx.shape, axis, 1))
    positions = np.arange(depth, dtype=idx.dtype).reshape(_insert((1,) * rank, axis, depth))
    out_shape = _insert(idx.shape, axis, depth)
    hot = ctx.emit(O.EQUAL, [column, ctx.constant(positions)], dtype="bool", shape=out_shape)
    on_v, off_v = ctx.constant(np.array(on, values.dtype)), ctx.constant(np.array(off, values.dtype))
    return ctx.emit(O.WHERE, [hot, on_v, off_v], dtype=values.dtype)


def _insert(shape: tuple, axis: int, size: int) -> tuple:
    return (*shape[:axis], size, *shape[axis:])


@onnx_op("Trilu")
def trilu(ctx: NodeContext) -> Value | np.ndarray:
    """Trilu -> WHERE(constant triangle mask, input, 0) (k a constant input)."""
    x = ctx.input(0)
    folded = fold_if_empty(ctx)
    if folded is not None:
        return folded[0]
    if rank_of(ctx, x) < 2 or x.shape[-2] is None or x.shape[-1] is None:
        ctx.unsupported(f"{x.describe()}: the last two dims must be static")
    k = int(np.reshape(ctx.const(1), -1)[0]) if ctx.has(1) else 0
    ones = np.ones(x.shape[-2:], bool)
    mask = np.triu(ones, k) if ctx.attr("upper", 1) else np.tril(ones, k)
    zero = ctx.constant(np.zeros((), x.dtype))
    return ctx.emit(O.WHERE, [ctx.constant(mask), x, zero], dtype=x.dtype)


@onnx_op("Range")
def range_(ctx: NodeContext) -> Value:
    """Range -> folded at import when start, limit and delta are constants; else RANGE over integers
    computed from dimensions (a sequence length, say), whose length the converter derives from them.  A
    float Range whose operands are integers (whole constants, casts of dimensions: YOLO's anchor grid
    ``arange(float(w))``) is that integer RANGE cast to the float type, which is exact."""
    start, limit, delta = (ctx.input(i) for i in range(3))
    if start.dtype.kind == "f" and delta.is_const and not (start.is_const and limit.is_const):
        integers = [_as_integers(ctx, v) for v in (start, limit, delta)]
        if all(v is not None for v in integers):
            return _int_range(ctx, integers, start.dtype)
    if start.dtype.kind not in "iu" or not _from_shapes(ctx, 0, 1, 2):
        for i in range(3):
            ctx.const(i)
    if start.dtype.kind not in "iu":
        ctx.unsupported(f"a {start.dtype} Range of values computed at run time (only integer ones)")
    if not delta.is_const:
        ctx.unsupported(f"Range with a delta {delta.describe()} computed at run time")
    return _int_range(ctx, [start, limit, delta], start.dtype)


def _int_range(ctx: NodeContext, bounds: list[Value], dtype: object) -> Value:
    """RANGE over integer ``bounds`` (start, limit, delta), computed in INT32 (RANGE takes INT32 or
    FLOAT32) and cast to ``dtype``."""
    parts = [cast(ctx, v, "int32") for v in bounds]
    return cast(ctx, ctx.emit(O.RANGE, parts, dtype="int32", shape=(None,)), dtype)
