"""Gathering and slicing: GATHER and SLICE, and what other converter files import from here: the dimension
tests ``_static`` and ``_same_dim``, ``_as_i64``, GATHER's index check (``_worst_index``, ``_check_indices``)
and SLICE's bounds, known at compile time or read at execution (``_bounds``, PAD's pads too).

Splitting and stacking (SPLIT, STACK, UNSTACK, MESHGRID, CHANNEL_SHUFFLE) are in ``stacking.py``; rolling,
tiling, expanding and padding (ROLL, TILE, EXPAND, PAD) in ``tiling.py``.

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
from nnadapter_tvm.types import ResultCode


def _static(d) -> bool:
    return isinstance(d, int)


def _same_dim(a, b) -> bool:
    if _static(a) or _static(b):
        return a == b
    return a.same_as(b)


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
            return relax.op.take(x, indices, axis, mode="clip")
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
    # clip, not TVM's default "fast": the indices are in range either way, and "fast" has TVM log a warning
    # for every take it legalizes.
    indices = relax.const(np.where(values < 0, values + dim, values).astype(values.dtype))
    return relax.op.take(x, indices, axis, mode="clip")


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
