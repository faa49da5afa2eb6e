"""Gathering, slicing, splitting, stacking, tiling, padding and channel shuffles.

All of these only move (or replicate) elements, so a quantized input whose output has the same
scale comes back bit-exact: dequantize, move, requantize is the identity on the moved values.
"""

from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import relax, sym, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import unfused
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.runtime.runtime_check import VALUE, data_checks_enabled
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import PadMode, ResultCode


def _static(d) -> bool:
    return isinstance(d, int)


def _same_dim(a, b) -> bool:
    if _static(a) or _static(b):
        return a == b
    return a.same_as(b)


def _outputs(args: OpArgs, exprs: list[relax.Expr], what: str) -> list[relax.Expr]:
    """Fail naming the operation unless it declares exactly one output per expression."""
    if args.output_count != len(exprs):
        args.fail(f"has {args.output_count} output operands, {what} gives {len(exprs)}")
    return exprs


def _tuple_items(args: OpArgs, expr: relax.Expr, count: int) -> list[relax.Expr]:
    var = args.emit(expr)
    return [relax.TupleGetItem(var, i) for i in range(count)]


@converter(O.GATHER)
def gather(args: OpArgs) -> relax.Expr:
    """input, indices (INT32/INT64, any rank Q, negative counts from the end), axis -> output.

    ``output = numpy.take(input, indices, axis)``: rank Q + R - 1, the indexed axis replaced by
    the shape of ``indices``.  Indices must lie in [-dim, dim) (the spec: they must not exceed the
    axis; negative ones count from the end, as numpy and Paddle's gather take them).  Constant
    indices are checked at compile time; indices fed at run time are checked at execution by one
    reduction over them (their minimum and maximum, ``_worst_index``) before the gather runs, and
    an index out of range fails with INVALID_DIMENSIONS naming it and the range (never a wrapped or
    clamped read).  An axis of size 0 has nothing to gather from: refused unless ``indices`` is
    empty too (at execution where either size is unknown until then).  Rank-0 indices on a 1-D
    input give a rank-0 output, as Paddle-Lite's operation/gather.cc infers (see
    reduce.at_least_1d).

    Reference: the spec; numpy.take / Paddle's gather for negative indices; onnxruntime refuses an
    out-of-range index the same way ("indices element out of data bounds").
    """
    x = args.tensor("input")
    rank = len(args.shape(x))
    if rank == 0:
        args.fail("must have rank >= 1", "input")
    axis = args.axis("axis", rank, -1)  # the header's default; the table makes the operand required
    dim = args.shape(x)[axis]
    if not (args.operand("indices").is_constant and _static(dim)):
        indices = args.tensor("indices")
        count = 1
        for d in args.shape(indices):
            count = count * d
        if _static(dim) and dim == 0:
            if not (_static(count) and count == 0):
                args.fail(f"axis {axis} has size 0: there are no elements to gather indices from", "input")
            return relax.op.take(x, indices, axis)
        if not _static(dim):
            # mode="wrap" takes each index modulo the axis size: never let it run with a size of 0.
            no_indices = tirx.EQ(tirx.const(count, "int64") if _static(count) else count, tirx.const(0, "int64"))
            x = args.require(
                x,
                tirx.Or(dim > 0, no_indices),
                f"axis {axis} has size 0 at execution: there are no elements to gather {_count(count)} index(es) from",
                "input",
            )
        if data_checks_enabled() and not (_static(count) and count == 0):
            _check_indices(args, indices, dim, count, f"axis {axis}")
        # Checked indices lie in [-dim, dim): "wrap" turns the negative ones into dim + index, and
        # keeps every read inside the input should the take run before the check (see check_value).
        return relax.op.take(x, indices, axis, mode="wrap")
    values = args.value("indices")
    if values.size and (values.min() < -dim or values.max() >= dim):
        args.fail(
            f"indices must lie in [-{dim}, {dim}) for axis {axis} of size {dim}, got {values.tolist()}", "indices"
        )
    # Built here rather than through args.tensor: that turns a rank-0 constant into shape [1].
    return relax.op.take(x, relax.const(np.where(values < 0, values + dim, values).astype(values.dtype)), axis)


def _backward_slice(args: OpArgs, x: relax.Expr, axes: list, begin: list, end: list, stride: list) -> relax.Expr:
    """A slice with a negative step as a kernel of its own, which FuseOps fuses no producer into.

    Fused behind a RESHAPE, the reversed index c - v is composed with the reshape's floordiv/floormod
    indexing, and TVM 0.27's lowering miscompiles that composition: y[v] = x[(74 - v) // 15,
    (74 - v) % 15 // 3, (74 - v) % 3, 0] reads x[60 - v] (Reshape(-1) then Slice(::-1) of a [5, 5, 3, 1]
    input gave 60, 59, ... where 74, 73, ... is right; ArgMax with select_last_index, built on it, gave
    wrong indices: a fuzz finding).  Marked opaque (op pattern 8), the slice reads its input's own buffer.

    The sliced axes are static: SLICE's own compute with the spans worked out here (TOPI's strided_slice,
    with another axis known only at execution, takes a path that does not clamp the bounds: INT_MIN, "to
    the beginning", gave a dimension of -2147483647)."""
    shape = args.shape(x)
    spans = [[a, *_slice_span(b, e, st, shape[a])] for a, b, e, st in zip(axes, begin, end, stride)]
    return unfused(args.emit_te(_slice_te, x, spans, primfunc_name_hint="backward_slice"))


def _worst_index(indices: te.Tensor, dim) -> te.Tensor:
    """[the minimum of ``indices`` if it is below -dim, else their maximum] as int64: one index that is
    out of [-dim, dim) whenever any is (two reductions in one kernel over the indices)."""
    shape = list(indices.shape)

    def at(axes):
        return indices[tuple(axes)].astype("int64") if shape else indices().astype("int64")

    low_axes = [te.reduce_axis((0, d), f"l{a}") for a, d in enumerate(shape)]
    high_axes = [te.reduce_axis((0, d), f"h{a}") for a, d in enumerate(shape)]
    if shape:
        low = te.compute((1,), lambda _: te.min(at(low_axes), axis=low_axes), name="index_min")
        high = te.compute((1,), lambda _: te.max(at(high_axes), axis=high_axes), name="index_max")
    else:
        low = high = te.compute((1,), lambda _: at([]), name="index_value")
    bound = tirx.const(-dim, "int64") if _static(dim) else -dim
    return te.compute((1,), lambda i: tirx.Select(low[0] < bound, low[0], high[0]), name="worst_index")


def _check_indices(args: OpArgs, indices: relax.Expr, dim, count, what: str) -> None:
    """Assert at execution that every index lies in [-dim, dim) (``dim`` static or symbolic; ``count``
    the number of indices, which may be 0 only where it is symbolic): one kernel over the indices."""
    worst = args.emit_te(_worst_index, indices, dim)
    n = str(dim) if _static(dim) else "n"
    size = "" if _static(dim) else " (n: its size at execution)"
    message = f"index {VALUE} is out of range [-{n}, {n}) for {what}{size}"

    def in_range(v: tirx.Var) -> tirx.PrimExpr:
        ok = tirx.And(v >= -dim, v < dim)
        return ok if _static(count) else tirx.Or(ok, tirx.EQ(count, tirx.const(0, "int64")))

    args.check_value(worst, in_range, message, "indices")


def _count(count) -> str:
    return str(count) if _static(count) else "the"


def _slice_bounds(start: int, end: int, step: int, dim) -> tuple[int, int, int]:
    """numpy's slicing, a backward start clamped into [0, dim - 1] (``_spec_start``); an empty slice of a
    static dim becomes [0, 0) (TVM rejects empty backward ones)."""
    if not _static(dim):
        return start, end, step
    start = _spec_start(start, step, dim)
    if len(range(*slice(start, end, step).indices(dim))) == 0:
        return 0, 0, 1
    return start, end, step


def _spec_start(start: int, step: int, dim: int) -> int:
    """A backward slice's start below -dim clamped to 0, as the spec's clamping, ONNX and Paddle have it
    (x[-8::-2] of 5 elements is [x[0]]); numpy alone sends it to -1, an empty slice.  Elsewhere numpy
    and the spec agree."""
    return 0 if step < 0 and start < -dim else start


@converter(O.SLICE)
def slice_(args: OpArgs) -> relax.Expr:
    """input, axes (empty: 0 .. len(starts) - 1), starts, ends, steps (default 1) -> output.

    Python/numpy slicing ``input[..., starts[i]:ends[i]:steps[i], ...]`` along each ``axes[i]``:
    negative starts/ends count from the end, out-of-range ones are clamped (INT_MAX / INT_MIN
    slice to the end / the beginning), negative steps walk backwards; steps must not be 0.  As ONNX
    Slice has it: a forward slice clamps both bounds into [0, dim]; a backward one its start into
    [0, dim - 1] (numpy alone makes a start below -dim an empty slice: x[-8::-2] of 5 elements is
    [x[0]] here) and its end into [-1, dim - 1].  The same on axes known only at execution, where
    the output's length, max(0, ceil((end - start) / step)), is computed when the kernel runs.

    Reference: the spec and header (numpy slicing, out-of-range bounds clamped); ONNX Slice's
    clamping rules, which Paddle's strided_slice shares for starts.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    starts, ends = _bounds(args, "starts"), _bounds(args, "ends")
    axes = args.ints("axes") if args.has("axes") else list(range(len(starts)))
    steps = args.ints("steps") if args.has("steps") else [1] * len(axes)
    for name, values in (("starts", starts), ("ends", ends), ("steps", steps)):
        if len(values) != len(axes):
            args.fail(f"holds {len(values)} values, expected one per sliced axis ({len(axes)}: {axes})", name)
    norm = args.axes("axes", rank) if args.has("axes") else axes
    if 0 in steps:
        args.fail(f"steps must not be 0, got {steps}", "steps")
    if not norm:
        return x
    bounds = [
        _slice_bounds(b, e, s, shape[a]) if _static(b) and _static(e) else (b, e, s)
        for a, b, e, s in zip(norm, starts, ends, steps)
    ]
    kept = [(a, *bd) for a, bd in zip(norm, bounds) if not _whole_axis(*bd, shape[a])]
    if not kept:
        return x
    axes, begin, end, stride = (list(v) for v in zip(*kept))
    # A slice to the end of an axis of unknown size ends at that size: [0, n) rather than min(INT_MAX, n)
    # keeps the output's dimension the input's own variable, which later kernels (and TVM's fusion, which
    # fails on some such expressions) handle best.
    end = [shape[a] if not _static(shape[a]) and _static(e) and e >= _INT32_MAX and st > 0 else e
           for a, e, st in zip(axes, end, stride)]  # fmt: skip
    if all(_static(shape[a]) and _static(b) and _static(e) for a, b, e in zip(axes, begin, end)):
        if any(st < 0 for st in stride):
            return _backward_slice(args, x, axes, begin, end, stride)
        return relax.op.strided_slice(x, axes, begin, end, stride)
    # An axis known only at execution (or bounds computed from such axes): Relax's strided_slice
    # clamps the bounds but not the length, which comes out negative for an empty slice (x[-1:3] of 5
    # elements: a tensor of -1 elements, std::bad_alloc at execution).  SLICE's own compute instead.
    # A list, not a closure: emit_te maps the symbolic dimensions in its arguments to the kernel's own.
    spans = [[a, *_slice_span(b, e, st, shape[a])] for a, b, e, st in zip(axes, begin, end, stride)]
    sliced = args.emit_te(_slice_te, x, spans, primfunc_name_hint="slice")
    # A reversed index: no producer fused in (``_backward_slice``).
    return unfused(sliced) if any(st < 0 for st in stride) else sliced


def _slice_span(start, end, step: int, dim) -> tuple:
    """``(first index, length, step)`` of ``[start:end:step]`` on an axis of ``dim`` elements (SLICE's
    rule), as TIR expressions where ``dim`` or a bound is one: a negative bound counts from the end,
    then a forward slice clamps both into [0, dim], a backward one its start into [0, dim - 1] and its
    end into [-1, dim - 1]; the length ``ceil((end - start) / step)`` is never below 0."""
    if _static(dim) and _static(start) and _static(end):
        first, stop, _ = slice(_spec_start(start, step, dim), end, step).indices(dim)
        return first, len(range(first, stop, step)), step
    d = _as_i64(dim)
    zero = tirx.const(0, "int64")
    hi = d if step > 0 else d - 1

    analyzer = sym.Analyzer()
    for var in _free_vars(d):  # dimensions are never negative: lets min/max with 0 simplify away
        analyzer.update(var, sym.ConstIntBound(0, sym.ConstIntBound.POS_INF))

    def clamp(v, lo):
        v = _as_i64(v)
        if v.same_as(d):  # a slice to the end (see slice_): the length stays d - first
            return d if step > 0 else d - 1
        # A constant's sign is known: no select left in the index arithmetic.
        known = isinstance(v, tirx.IntImm)
        v = (v + d if v.value < 0 else v) if known else tirx.Select(v < zero, v + d, v)
        return tirx.min(tirx.max(v, lo), hi)

    first = clamp(start, zero)
    stop = clamp(end, zero if step > 0 else tirx.const(-1, "int64"))
    span = analyzer.simplify(stop - first if step > 0 else first - stop)
    if not analyzer.can_prove(span >= zero):
        # Not where it provably holds (x[1:] of n elements: n - min(1, n)): the CPU schedules do not
        # partition loops over a clamped extent (targets/cpu/loops.partition_safe), so a max() left in
        # the output's shape would keep it, and every kernel after it, off the vectorized loops.
        span = tirx.max(span, zero)
    length = tirx.floordiv(span + (abs(step) - 1), abs(step)) if abs(step) > 1 else span
    return analyzer.simplify(first), analyzer.simplify(length), step


def _free_vars(expr: tirx.PrimExpr) -> list[tirx.Var]:
    found: list[tirx.Var] = []
    tvm_ffi.structural_walk(expr, [(tirx.Var, found.append)], order="pre")
    return found


def _as_i64(v) -> tirx.PrimExpr:
    if _static(v):
        return tirx.const(v, "int64")
    return v if str(v.ty) == "int64" else tirx.Cast("int64", v)


def _slice_te(x: te.Tensor, spans: list) -> te.Tensor:
    """``x`` sliced along the axis of each span ``[axis, first index, length, step]``: output index i of
    that axis reads input index first + i * step."""
    spans = {int(a): (first, length, int(step)) for a, first, length, step in spans}
    shape = [spans[a][1] if a in spans else d for a, d in enumerate(x.shape)]

    def index(*i):
        return x[tuple(spans[a][0] + v * spans[a][2] if a in spans else v for a, v in enumerate(i))]

    return te.compute(shape, index, name="slice")


_INT32_MAX = 2**31 - 1


def _whole_axis(start, end, step, dim) -> bool:
    """Whether a slice keeps the whole axis (ONNX exporters slice [0, INT_MAX) as a no-op)."""
    if not (_static(start) and _static(end) and step == 1 and start in (0, -(2**31))):
        return False
    return end >= _INT32_MAX or (_static(dim) and end >= dim)


def _bounds(args: OpArgs, name: str) -> list:
    """SLICE's starts or ends (and PAD's pads): constants, values computed from symbolic dimensions (shape_values), or
    values read from data at execution (a detector pastes each mask into the box its coordinates name),
    bound there to new symbolic sizes; each is normalized and clamped as the spec says (``_slice_span``)."""
    if args.operand(name).is_constant:
        return args.ints(name)
    values = args.shape_values(name)
    if values is not None:
        return values
    lengths = args.shape(args.raw_tensor(name))
    if len(lengths) != 1 or not isinstance(lengths[0], int):
        args.fail(f"must be 1-D with a known length, got shape {lengths}", name, ResultCode.FEATURE_NOT_SUPPORTED)
    return args.runtime_shape(name, lengths[0], f"{args.type.name.lower()}_{name}")


@converter(O.SPLIT)
def split(args: OpArgs) -> list[relax.Expr]:
    """input, axis, split (sizes; one -1 takes the rest) -> output0 .. output(n-1).

    Output ``i`` holds ``split[i]`` consecutive slices along ``axis``; the sizes must add up to
    the input's dimension.

    Reference: the spec; Paddle's split for a -1 size.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    axis = args.axis("axis", len(shape))
    sizes = args.ints("split")
    dim = shape[axis]
    if not sizes:
        args.fail("must hold at least one size", "split")
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        args.fail(f"sizes must be non-negative (one -1 may stand for the rest), got {sizes}", "split")
    if -1 in sizes:
        if not _static(dim):
            args.fail(f"a -1 size needs a known dimension {axis}", "split", ResultCode.FEATURE_NOT_SUPPORTED)
        rest = dim - sum(s for s in sizes if s != -1)
        if rest < 0:
            args.fail(f"sizes {sizes} exceed dimension {axis} ({dim})", "split")
        sizes = [rest if s == -1 else s for s in sizes]
    if _static(dim) and sum(sizes) != dim:
        args.fail(f"sizes {sizes} add up to {sum(sizes)}, dimension {axis} of the input is {dim}", "split")
    if not _static(dim):
        x = args.match_cast(x, [sum(sizes) if a == axis else d for a, d in enumerate(shape)])
    if args.output_count != len(sizes):
        args.fail(f"has {args.output_count} output operands, split gives {len(sizes)} sizes {sizes}", "split")
    if len(sizes) == 1:
        return [x]
    # One slice per piece rather than relax.op.split, which rejects zero-size pieces.
    pieces, start = [], 0
    for s in sizes:
        pieces.append(relax.op.strided_slice(x, [axis], [start], [start + s]))
        start += s
    return pieces


def _common_shape(args: OpArgs, tensors: list[relax.Expr]) -> list[relax.Expr]:
    """All inputs must have one shape: static mismatches fail, symbolic ones are checked at run time."""
    shapes = [args.shape(t) for t in tensors]
    rank = len(shapes[0])
    for i, s in enumerate(shapes):
        if len(s) != rank:
            args.fail(f"rank {len(s)} differs from input 0's rank {rank}", i)
    common = [next((s[a] for s in shapes if _static(s[a])), shapes[0][a]) for a in range(rank)]
    for i, s in enumerate(shapes):
        if any(_static(d) and _static(c) and d != c for d, c in zip(s, common)):
            args.fail(f"shape {s} differs from another input's {common} (all inputs must have one shape)", i)
        if any(not _same_dim(d, c) for d, c in zip(s, common)):
            tensors[i] = args.match_cast(tensors[i], common)
    return tensors


@converter(O.STACK)
def stack(args: OpArgs) -> relax.Expr:
    """input0 .. input(n-1) (one shape, rank R), axis in [-(R + 1), R] -> output of rank R + 1.

    ``output = numpy.stack(inputs, axis)``; a negative axis counts from the end of the output.

    Reference: the spec; Paddle's stack for the axis range (negative axis + R + 1).
    """
    tensors = _common_shape(args, args.tensors(0, args.index("axis")))
    rank = len(args.shape(tensors[0])) + 1
    axis = args.int("axis")
    if not -rank <= axis < rank:
        args.fail(f"axis {axis} is out of range [-{rank}, {rank}) for rank-{rank - 1} inputs", "axis")
    return relax.op.stack(tensors, axis % rank)


@converter(O.UNSTACK)
def unstack(args: OpArgs) -> list[relax.Expr]:
    """input, axis, num (= the size of ``axis``) -> output0 .. output(num-1), each of rank R - 1.

    Output ``i`` is ``input`` indexed with ``i`` along ``axis`` (Paddle's unstack); a 1-D input gives
    rank-0 outputs, as Paddle-Lite's operation/unstack.cc infers (see reduce.at_least_1d).

    Reference: the header (not in the spec); Paddle's unstack.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    axis = args.axis("axis", len(shape))
    num = args.int("num")
    dim = shape[axis]
    if num <= 0 or (_static(dim) and num != dim):
        args.fail(f"num {num} must equal the size of axis {axis} ({dim})", "num")
    if not _static(dim):
        x = args.match_cast(x, [num if a == axis else d for a, d in enumerate(shape)])
    items = [relax.op.squeeze(relax.op.strided_slice(x, [axis], [i], [i + 1]), [axis]) for i in range(num)]
    return _outputs(args, items, f"num {num}")


@converter(O.MESHGRID)
def meshgrid(args: OpArgs) -> list[relax.Expr]:
    """input0 .. input(n-1) (1-D, sizes d0 .. d(n-1)) -> output0 .. output(n-1), each [d0, .., d(n-1)].

    ``output_i[j0, .., j(n-1)] = input_i[j_i]`` ('ij' indexing, numpy.meshgrid(..., indexing='ij')).

    Reference: the spec; Paddle's meshgrid.
    """
    tensors = args.tensors(0)
    for i, t in enumerate(tensors):
        if len(args.shape(t)) != 1:
            args.fail(f"must be 1-D, got shape {args.shape(t)}", i)
    if args.output_count != len(tensors):
        args.fail(f"has {args.output_count} output operands, expected one per input ({len(tensors)})")
    if len(tensors) == 1:
        return [tensors[0]]
    return _tuple_items(args, relax.op.meshgrid(tensors, "ij"), len(tensors))


def _roll_te(x: te.Tensor, shifts: dict[int, int]) -> te.Tensor:
    def index(*i):
        return x[tuple(tirx.floormod(v - shifts[a], x.shape[a]) if a in shifts else v for a, v in enumerate(i))]

    return te.compute(x.shape, index, name="roll")


@converter(O.ROLL)
def roll(args: OpArgs) -> relax.Expr:
    """input, shifts, axes (optional; absent or empty: roll the flattened input) -> output.

    ``output = numpy.roll(input, shifts, axes)``: elements shifted past the end come back at the
    start; shifts and axes broadcast against each other, shifts of a repeated axis add up.

    Reference: the spec; numpy.roll (Paddle's roll, which numpy's broadcasting extends).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    shifts = args.ints("shifts")
    if not shifts:
        args.fail("must hold at least one shift", "shifts")
    if not args.has("axes"):
        flat = args.emit(relax.op.reshape(x, [-1]))
        rolled = args.emit_te(lambda t: _roll_te(t, {0: sum(shifts)}), flat)
        return relax.op.reshape(rolled, shape)
    axes = args.ints("axes")
    if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
        args.fail(f"{len(shifts)} shifts do not match {len(axes)} axes (nor broadcast)", "shifts")
    total: dict[int, int] = {}
    for s, a in zip(shifts * (len(axes) if len(shifts) == 1 else 1), axes * (len(shifts) if len(axes) == 1 else 1)):
        if not -rank <= a < rank:
            args.fail(f"axis {a} is out of range [-{rank}, {rank})", "axes")
        total[a % rank] = total.get(a % rank, 0) + s
    return args.emit_te(lambda t: _roll_te(t, total), x)


@converter(O.TILE)
def tile(args: OpArgs) -> relax.Expr:
    """input, repeats (positive) -> output with output_dims[i] = input_dims[i] * repeats[i].

    ``output = numpy.tile(input, repeats)``: fewer repeats than dimensions repeat the trailing
    ones; more add leading dimensions; no repeats at all is the identity (numpy.tile(x, ()), and
    ONNX's Tile of a rank-0 input, whose repeats are empty; onnxruntime runs it).

    Reference: the spec; numpy.tile / Paddle's tile (repeats must be positive).
    """
    x = args.tensor("input")
    if not args.operand("repeats").is_constant:
        return _tile_computed(args, x)
    repeats = args.ints("repeats")
    if not repeats:
        return x
    if any(r <= 0 for r in repeats):
        args.fail(f"must hold positive repeat counts, got {repeats}", "repeats")
    return relax.op.tile(x, repeats)


def _tile_computed(args: OpArgs, x: relax.Expr) -> relax.Expr:
    """TILE by repeat counts computed from symbolic dimensions (or read at execution): the same
    numpy.tile, each count checked positive at execution."""
    repeats = _computed_values(args, "repeats", "tile_r")
    if not repeats:
        return x  # numpy.tile(x, ()): the identity
    if any(_static(r) and r <= 0 for r in repeats):
        args.fail(f"must hold positive repeat counts, got {repeats}", "repeats")
    symbolic = [r for r in repeats if not _static(r)]
    x = (
        args.require(
            x,
            tirx.all(*[r > 0 for r in symbolic]) if len(symbolic) > 1 else symbolic[0] > 0,
            "repeat counts must be positive at execution",
            "repeats",
        )
        if symbolic
        else x
    )
    rank = len(args.shape(x))
    n = max(rank, len(repeats))
    repeats = [1] * (n - len(repeats)) + list(repeats)
    return args.emit_te(lambda t: _tile_te(t, repeats), x)


def _computed_values(args: OpArgs, name: str, dim_name: str) -> list:
    """Operand ``name`` (TILE's repeats, EXPAND's shape), not a constant: its values computed from
    symbolic dimensions (shape_values) or, where they depend on data, read at execution as new
    symbolic dimensions ``dim_name0``, ``dim_name1``, ... (it must then be 1-D of a known length)."""
    values = args.shape_values(name)
    if values is None:
        lengths = args.shape(args.raw_tensor(name))
        if len(lengths) != 1 or not _static(lengths[0]):
            args.fail(f"must be 1-D with a known length, got shape {lengths}", name)
        values = args.runtime_shape(name, lengths[0], dim_name)
    return values


def _tile_te(x: te.Tensor, repeats: list) -> te.Tensor:
    diff = len(repeats) - len(x.shape)
    dims = [1] * diff + list(x.shape)
    out = [d * r for d, r in zip(dims, repeats)]

    def index(*i):
        return x[tuple(tirx.floormod(i[a + diff], d) for a, d in enumerate(x.shape))]

    return te.compute(out, index, name="tile")


@converter(O.EXPAND)
def expand(args: OpArgs) -> relax.Expr:
    """input, shape (INT32/INT64; -1 keeps the input's dimension) -> output of shape ``shape``.

    numpy broadcasting of ``input`` to ``shape`` (aligned at the trailing dimensions): a
    dimension of 1 expands to any size, others must equal the target; leading new dimensions
    must be positive.

    Reference: the spec; Paddle's expand_v2 for -1.
    """
    x = args.tensor("input")
    in_shape = args.shape(x)
    if not args.operand("shape").is_constant:
        return _expand_computed(args, x)
    target = args.ints("shape")
    diff = len(target) - len(in_shape)
    if diff < 0:
        args.fail(f"{target} has fewer dimensions than the input {in_shape}", "shape")
    dims = []
    for i, t in enumerate(target):
        d = in_shape[i - diff] if i >= diff else None
        if t == -1 and d is not None:
            dims.append(d)
        elif t <= 0:
            where = "a new leading dimension" if d is None else f"dimension {i}"
            args.fail(f"{where} must be positive{'' if d is None else ' or -1'}, got {t} in {target}", "shape")
        elif d is not None and _static(d) and d not in (1, t):
            args.fail(f"input dimension {i - diff} of size {d} cannot expand to {t} (target {target})", "shape")
        else:
            dims.append(t)
    symbolic = [i for i, d in enumerate(in_shape) if not _static(d) and _static(dims[i + diff])]
    if not symbolic:
        return relax.op.broadcast_to(x, dims)
    # An UNKNOWN input dim expanded to a known size may be 1 or that size: relax.op.broadcast_to
    # would assume the latter, so index it at run time (0 where it is 1), once execution has checked
    # that it is one of the two (anything else would read past the input).
    for i in symbolic:
        d, t = in_shape[i], dims[i + diff]
        condition = tirx.Or(tirx.EQ(d, tirx.const(1, "int64")), tirx.EQ(d, tirx.const(t, "int64")))
        message = f"input dimension {i} (unknown until execution) must be 1 or {t} to expand to {target}"
        x = args.require(x, condition, message, "input")
    return args.emit_te(lambda t: _expand_te(t, dims, set(symbolic)), x)


def _expand_computed(args: OpArgs, x: relax.Expr) -> relax.Expr:
    """EXPAND to a shape computed from symbolic dimensions (or read at execution).  A computed size of
    -1 or 1 keeps the input's dimension (ONNX's bidirectional broadcasting, which is what such shapes
    come from); any other size must match the input's dimension unless that is 1, checked at execution.
    """
    in_shape = args.shape(x)
    target = _computed_values(args, "shape", "expand_d")
    diff = len(target) - len(in_shape)
    if diff < 0:
        args.fail(f"has {len(target)} dimensions, fewer than the input's {len(in_shape)}", "shape")
    dims, conditions = [], []
    for i, t in enumerate(target):
        d = in_shape[i - diff] if i >= diff else None
        if d is None:
            if _static(t) and t < 0:
                args.fail(f"a new leading dimension must be non-negative, got {t}", "shape")
            dims.append(t)
            if not _static(t):
                conditions.append(t >= 0)
        elif _static(t) and t in (-1, 1):
            dims.append(d)
        elif _static(d) and d == 1:
            dims.append(t)
            if not _static(t):
                conditions.append(t >= -1)
        elif _static(t) or _static(d) or not _same_dim(d, t):
            one, minus_one = tirx.const(1, "int64"), tirx.const(-1, "int64")
            tt = tirx.const(t, "int64") if _static(t) else t
            dd = tirx.const(d, "int64") if _static(d) else d
            keep = tirx.Or(tirx.EQ(tt, minus_one), tirx.EQ(tt, one))
            conditions.append(tirx.Or(tirx.Or(keep, tirx.EQ(dd, tt)), tirx.EQ(dd, one)))
            if _static(d):
                dims.append(d)  # d > 1: the size must be d (or keep it)
            elif _static(t):
                dims.append(t)  # the input's dimension must be t or 1
            else:
                dims.append(tirx.Select(keep, dd, tt))
        else:
            dims.append(d)
    # The guards hold x (a tensor guard orders the kernel after the sizes it reads are bound; a guard on the
    # sizes alone let FuseOps place the kernel first: "expand_d0 ... has not been computed"), through a
    # no-copy view: where x is one item of a multi-output kernel (GRU's Y) that an element-wise op also
    # reads, a match_cast of x itself made FuseOps return that item from the op's fused function as its own
    # parameter, and FuseTIR failed ("There must be an in-place index specified for each output").
    if conditions:
        x = args.emit(relax.op.memory.view(x, relax.ShapeExpr(in_shape)))
    for condition in conditions:
        message = "the input's dimensions cannot expand to the shape computed at execution"
        x = args.require(x, condition, message, "shape")
    symbolic = {a for a, d in enumerate(in_shape) if not _static(d)}
    return args.emit_te(lambda t: _expand_te(t, dims, symbolic), x)


def _expand_te(x: te.Tensor, dims: list, symbolic: set[int]) -> te.Tensor:
    diff = len(dims) - len(x.shape)

    def index(*i):
        at = []
        for a, d in enumerate(x.shape):
            v = i[a + diff]
            if a in symbolic:
                # min: reads stay inside x should the size guard (require_dims) run after this kernel
                v = tirx.if_then_else(d == 1, tirx.const(0, v.ty), tirx.min(v, d - 1))
            elif _static_one(d):
                v = tirx.const(0, v.ty)
            at.append(v)
        return x[tuple(at)]

    return te.compute(dims, index, name="expand")


def _static_one(d) -> bool:
    return isinstance(d, tirx.IntImm) and d.value == 1


# Relax's names: its 'replicate' is numpy's 'edge'.
_RELAX_PAD = {
    PadMode.CONSTANT: "constant",
    PadMode.REFLECT: "reflect",
    PadMode.REPLICATE: "replicate",
    PadMode.EDGE: "replicate",
}


@converter(O.PAD)
def pad(args: OpArgs) -> relax.Expr:
    """input, pads [x0_begin, x0_end, x1_begin, ...] (2 * rank, >= 0), mode, value -> output.

    ``mode``: CONSTANT fills with ``value`` (default 0), REFLECT mirrors without repeating the
    edge (numpy 'reflect'; pads must be smaller than the dimension), REPLICATE and EDGE repeat
    the edge (numpy 'edge'); NONE is rejected.

    Reference: the spec; numpy.pad, Paddle's pad2d/pad3d for the modes.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if not args.operand("pads").is_constant:
        return _pad_computed(args, x, shape)
    pads = args.ints("pads")
    if len(pads) != 2 * len(shape) or any(p < 0 for p in pads):
        args.fail(f"must hold 2 * rank = {2 * len(shape)} non-negative values, got {pads}", "pads")
    mode = args.int("mode")
    if mode not in _RELAX_PAD:
        names = ", ".join(f"{m.name}={m.value}" for m in _RELAX_PAD)
        args.fail(f"mode {mode} is not a supported padding mode (one of {names})", "mode")
    if mode == PadMode.REFLECT:
        for axis, d in enumerate(shape):
            widest = max(pads[2 * axis : 2 * axis + 2])
            message = f"REFLECT pads {pads[2 * axis : 2 * axis + 2]} of axis {axis} must be below its size"
            if _static(d) and widest >= d:
                args.fail(f"{message} {d}", "pads")
            if not _static(d) and widest:
                x = args.require(x, d > widest, f"{message} (unknown until execution)", "pads")
    value = 0
    if mode == PadMode.CONSTANT and args.has("value"):
        value = args.value("value").reshape(-1)
        if value.size != 1:
            args.fail(f"must hold one value, got {value.size}", "value")
        value = value[0].item()
    if not any(pads):
        return x
    return relax.op.nn.pad(x, pads, _RELAX_PAD[mode], value)


def _pad_computed(args: OpArgs, x: relax.Expr, shape: list) -> relax.Expr:
    """PAD whose pads are computed at run time: their values as expressions over the symbolic sizes, or
    read at execution (``_bounds``); CONSTANT mode only.  A negative pad crops, as ONNX's Pad (and
    onnxruntime) do; an axis cropped below 0 fails the execution."""
    if args.int("mode") != PadMode.CONSTANT:
        args.fail("pads computed at run time take CONSTANT mode only", "mode", ResultCode.FEATURE_NOT_SUPPORTED)
    pads = _bounds(args, "pads")
    if len(pads) != 2 * len(shape):
        args.fail(f"must hold 2 * rank = {2 * len(shape)} values, got {len(pads)}", "pads")
    before, after = [_as_i64(p) for p in pads[0::2]], [_as_i64(p) for p in pads[1::2]]
    for axis, (d, b, a) in enumerate(zip(shape, before, after)):
        size = _as_i64(d) + b + a
        if not isinstance(size, tirx.IntImm):
            args.require_dims(size >= 0, size, f"pads crop axis {axis} below 0 elements at execution", "pads")
        elif size.value < 0:
            args.fail(f"pads crop axis {axis} of size {d} below 0 elements", "pads")
    value = args.value("value").reshape(-1)[0].item() if args.has("value") else 0
    spans = [[b, a] for b, a in zip(before, after)]
    return args.emit_te(_pad_te, x, spans, value, primfunc_name_hint="pad")


def _pad_te(x: te.Tensor, spans: list, value: object) -> te.Tensor:
    """``x`` with ``spans[axis] = [before, after]`` elements of ``value`` around each axis (negative:
    cropped); reads stay inside ``x``."""
    dims = [_as_i64(d) for d in x.shape]
    fill = tirx.const(value, str(x.dtype))

    def element(*index):
        sources = [i - b for i, (b, _) in zip(index, spans)]
        inside = tirx.all(*[tirx.And(s >= 0, s < d) for s, d in zip(sources, dims)]) if dims else True
        clamped = [tirx.max(tirx.min(s, d - 1), tirx.const(0, "int64")) for s, d in zip(sources, dims)]
        return tirx.Select(inside, x(*clamped), fill)

    out_shape = [d + b + a for d, (b, a) in zip(dims, spans)]
    return te.compute(out_shape, element, name="pad")


@converter(O.CHANNEL_SHUFFLE)
def channel_shuffle(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], group (INT32, or FLOAT32 holding an integer; positive, divides C) -> output
    of the same shape.

    ``output[:, k * group + g] = input[:, g * (C / group) + k]``: reshape to
    [N, group, C / group, H, W], swap the two channel axes, reshape back.  The spec types ``group``
    FLOAT32 and the header INT32; both are accepted.

    Reference: the spec; Paddle's channel_shuffle (NCHW).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    if len(shape) != 4:
        args.fail(f"must be 4-D [N, C, H, W], got shape {shape}", "input")
    n, c, h, w = shape
    group = args.float("group")
    if not group.is_integer():
        args.fail(f"group {group} must be an integer", "group")
    group = int(group)
    if not _static(c):
        args.fail("needs a known channel dimension", "input", ResultCode.FEATURE_NOT_SUPPORTED)
    if group <= 0 or c % group:
        args.fail(f"group {group} must be positive and divide the {c} channels", "group")
    y = relax.op.reshape(x, [n, group, c // group, h, w])
    y = relax.op.permute_dims(y, [0, 2, 1, 3, 4])
    return relax.op.reshape(y, shape)
