"""Reductions, arg-reductions, cumulative sums and TOP_K."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.op_converters.helpers import at_least_1d, is_nan, nan_max, where_empty
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.runtime.lowering_rules import register_legalize
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision

# The index precisions an operation's `dtype`-like operand may ask for, by Precision code.
_INDEX_DTYPES = {int(Precision.INT32): "int32", int(Precision.INT64): "int64"}


def index_dtype(args: OpArgs, i: Key, default: Precision | None = None) -> str:
    """The dtype named by operand ``i`` (a Precision code, INT32 = 5 or INT64 = 7)."""
    code = args.int(i) if default is None else args.int(i, int(default))
    if code not in _INDEX_DTYPES:
        args.fail(f"precision code {code} is not INT32 (5) or INT64 (7)", i)
    return _INDEX_DTYPES[code]


@converter(O.ARG_MAX, O.ARG_MIN)
def arg_max_min(args: OpArgs) -> relax.Expr:
    """input, axis, keepdim, dtype (INT32 = 5 or INT64 = 7, default INT64) -> the index of the first
    largest (ARG_MAX) or smallest (ARG_MIN) element along ``axis``, as ``dtype``.

    Ties give the smallest index, as numpy.argmax/argmin and Paddle's arg_max/arg_min do.  Without
    ``keepdim`` a rank-1 input gives shape [1], not rank 0 (``at_least_1d``).  An empty ``axis`` has no
    largest or smallest element: INVALID_PARAMETER where its size 0 is known at compile time, an
    INVALID_DIMENSIONS execution error where it is known only then (numpy refuses it too).
    Reference: the spec; Paddle's arg_max/arg_min for ties.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    axis = args.axis("axis", rank)
    what = "largest" if args.type == O.ARG_MAX else "smallest"
    x = args.require(
        x,
        shape[axis] > 0,
        f"axis {axis} has size 0{'' if isinstance(shape[axis], int) else ' at execution'}: an empty axis has no "
        f"{what} element",
        "input",
    )
    keepdim = args.bool("keepdim")
    dtype = index_dtype(args, "dtype", Precision.INT64)
    largest = args.type == O.ARG_MAX
    if str(x.ty.dtype).startswith("float"):
        y = args.emit_te(lambda t: _float_arg_extreme(t, axis, keepdim, largest), x)
    else:
        y = (relax.op.argmax if largest else relax.op.argmin)(x, axis, keepdim)
    y = at_least_1d(y, rank if keepdim else rank - 1)
    return relax.op.astype(y, dtype) if dtype != "int64" else y


def _float_arg_extreme(x: te.Tensor, axis: int, keepdim: bool, largest: bool) -> te.Tensor:
    """numpy's argmax / argmin over ``axis``: the first NaN if any (NaN is the extreme), else the first
    largest / smallest value.  TOPI's started from the lowest finite value with index -1, so a row of
    -inf (+inf for the min) gave -1, and skipped NaN."""

    def combine(acc, new):
        (ia, va), (ib, vb) = acc, new
        nan_a, nan_b = is_nan(va), is_nan(vb)
        better = tirx.Or(vb > va if largest else vb < va, tirx.And(nan_b, tirx.Not(nan_a)))
        tie = tirx.Or(tirx.EQ(vb, va), tirx.And(nan_b, nan_a))
        take = tirx.Or(ia < 0, tirx.Or(better, tirx.And(tie, ib < ia)))
        return tirx.Select(take, ib, ia), tirx.Select(take, vb, va)

    def identity(index_dtype, value_dtype):
        return tirx.const(-1, index_dtype), tirx.const(0, value_dtype)

    reducer = te.comm_reducer(combine, identity, name="arg_extreme")
    k = te.reduce_axis((0, x.shape[axis]), name="k")
    rank = len(x.shape)
    out_shape = [1 if a == axis else x.shape[a] for a in range(rank) if keepdim or a != axis]

    def body(*index):
        outer = iter(index)
        full = []
        for a in range(rank):
            if a == axis:
                if keepdim:
                    next(outer)
                full.append(k)
            else:
                full.append(next(outer))
        return reducer((k.var.astype("int64"), x[tuple(full)]), axis=k)

    return te.compute(out_shape, body, name="arg_max" if largest else "arg_min")[0]


_REDUCERS = {O.REDUCE_MAX: relax.op.max, O.REDUCE_MEAN: relax.op.mean, O.REDUCE_SUM: relax.op.sum}


def _identity(op: O, dtype: str) -> float | int:
    """What a reduction over no elements gives: numpy's sum (0), the mean's NaN (0/0), and for the
    max the identity of max, -inf (the lowest value of an integer type)."""
    floating = dtype.startswith(("float", "bfloat"))
    if op == O.REDUCE_SUM:
        return 0
    if op == O.REDUCE_MEAN:
        return float("nan") if floating else 0
    return float("-inf") if floating else int(np.iinfo(dtype).min)


def _float_max(x: te.Tensor, axes: list[int], keepdim: bool) -> te.Tensor:
    """The max over ``axes`` starting from -inf (TVM's max starts from the lowest finite value, which would
    turn a row of -inf, a fully masked attention row, into -3.4e38), NaN where a NaN is reduced."""
    reducer = nan_max(lambda t: tirx.const(float("-inf"), t), name="max_inf")
    return _reduce_over(x, axes, keepdim, lambda value, raxes: reducer(value, axis=raxes), "reduce_max")


def _reduce_over(x: te.Tensor, axes, keepdim: bool, reduce: Callable, name: str) -> te.Tensor:
    """``reduce(x[index], reduce_axes)`` over ``axes`` of ``x`` (kept as 1s with ``keepdim``)."""
    rank = len(x.shape)
    raxes = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes}
    out_shape = [1 if a in raxes else x.shape[a] for a in range(rank) if keepdim or a not in raxes]

    def body(*index):
        outer = iter(index)
        full = []
        for a in range(rank):
            if a in raxes:
                if keepdim:
                    next(outer)
                full.append(raxes[a])
            else:
                full.append(next(outer))
        return reduce(x[tuple(full)], list(raxes.values()))

    return te.compute(out_shape, body, name=name)


@converter(O.REDUCE_MAX, O.REDUCE_MEAN, O.REDUCE_SUM)
def reduce(args: OpArgs) -> relax.Expr:
    """input, axes (empty: every axis), keepdim (default true) -> the max / mean / sum over ``axes``.

    Without ``keepdim``, reducing every axis gives shape [1], not rank 0 (``at_least_1d``).
    An axis named twice is invalid.  Over no elements (an axis of size 0, known at compile time or only
    at execution) the result is the reduction's identity, as numpy's: sum 0, mean NaN, max -inf (the
    lowest value for integers; numpy refuses it, max's identity is the one answer that keeps
    max(a, max(b)) == max(a + b)).
    Float32 sums and means accumulate in float64 and are rounded once (OpenCL: float32), so a row whose
    exact sum is finite never overflows on the way, whatever the order of its terms (``_wide_sum``).
    Reference: the spec; the header for keepdim's default (true); numpy for empty reductions.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    axes = []
    for a in args.ints("axes", []):
        if not -rank <= a < rank:
            args.fail(f"axis {a} is out of range [-{rank}, {rank}) for a rank-{rank} input", "axes")
        if a % rank in axes:
            args.fail(f"axis {a} is named twice in {args.ints('axes')}", "axes")
        axes.append(a % rank)
    if not axes:
        axes = list(range(rank))
    keepdim = args.bool("keepdim", True)
    out_rank = rank if keepdim else rank - len(axes)
    dtype = str(x.ty.dtype)
    identity = _identity(args.type, dtype)
    count = 1
    for a in axes:
        count = count * shape[a]
    if isinstance(count, int) and count == 0:
        out_shape = [1 if a in axes else d for a, d in enumerate(shape) if keepdim or a not in axes]
        value = relax.const(np.array(identity, dtype), dtype)  # without the dtype, int64 narrows to int32
        return at_least_1d(relax.op.broadcast_to(value, out_shape), out_rank)
    if args.type == O.REDUCE_MAX and dtype.startswith("float"):
        y = args.emit_te(_float_max, x, sorted(axes), keepdim)
    else:
        if dtype == "float32" and args.type != O.REDUCE_MAX:  # float64 accumulation: see _wide_sum_legalize
            x = relax.BlockBuilder.current().emit(relax.op.astype(x, "float32"), _WIDE_SUM_INPUT)
        y = _REDUCERS[args.type](x, sorted(axes), keepdim)
    if not isinstance(count, int):
        y = where_empty(args, y, count, identity)
    return at_least_1d(y, out_rank)


# -- float32 sums that do not overflow before their exact value does -------------------------------
# A float32 running sum passes 3.4e38 (inf) on the way to a finite total when large terms of both signs
# come in an unlucky order (a row of +-2.5e38 and 9e37 values whose exact sum is -5.9e37 gave +inf in the
# fused kernel's order, and log of it inf instead of NaN: the fuzz corpus case
# fixed-Conv-Transpose-ReduceLogSum-fused-drops-nan).  REDUCE_SUM and REDUCE_MEAN of float32 therefore
# accumulate in float64, cast inside the kernel (one read of the input, one float32 write): a row whose
# exact sum is finite sums to it (rounded once), wherever its large terms are.
#
# Where: converters do not know the target (conversion runs before a driver is chosen to build), so the
# accumulator is chosen at legalization: a rule of our pipelines' legalization (``register_legalize``,
# runtime/lowering_rules.py; TVM's own FLegalize is left alone), which every pipeline (the CPU schedules,
# CPU_SCHEDULES=0's default pipeline, the GPU pipeline, tuning's lowering) runs under ``with target``.
# OpenCL keeps float32 accumulation: float64 is an optional OpenCL extension (cl_khr_fp64) that Mali and
# Adreno GPUs, the boards this target is for, do not have, so a double in a kernel would fail to build
# there.
# The REDUCE's sum or mean stays Relax's own op (ConvertLayout moves it to NHWC with the convolution
# before it; a TE kernel would have pinned it to NCHW behind a transpose) and is marked by what it reads:
# a float32 -> float32 astype of its input bound to a variable of its own name (``_WIDE_SUM_INPUT``; the
# passes before LegalizeOps keep a variable's name when they rebind it).  The rule below recognizes the
# REDUCE's sums by it and leaves every other sum (softmax's, the normalizations', whose float32 overflow
# matches onnxruntime's by design) to TVM's lowering.  The no-op copy fuses into the reduction and the
# schedules inline it.
_WIDE_SUM_INPUT = "nna_wide_sum_input"
_WIDE = "float64"


def _has_float64(target: tvm.target.Target | None) -> bool:
    """Whether kernels for ``target`` may use float64 (all but OpenCL; no target: the host's LLVM)."""
    return target is None or target.kind.name != "opencl"


def _marked(call: relax.Call) -> bool:
    """Whether ``call`` (a sum or mean) reads the marker REDUCE_SUM/MEAN put before it."""
    x = call.args[0]
    return isinstance(x, relax.Var) and x.name == _WIDE_SUM_INPUT and str(x.ty.dtype) == "float32"


def _wide_sum(x: te.Tensor, axis, keepdims: bool, mean: bool) -> te.Tensor:
    """sum (``mean``: mean) of float32 ``x`` over ``axis`` (None: all), accumulated in float64 and
    rounded to float32 once, in one kernel (a reduction stage and its cast)."""
    rank = len(x.shape)
    axes = sorted({int(a) % rank for a in axis}) if axis is not None else list(range(rank))
    total = _reduce_over(x, axes, keepdims, lambda value, raxes: te.sum(value.astype(_WIDE), axis=raxes), "sum_wide")
    out_shape = list(total.shape)
    count = 1
    for a in axes:
        count = count * x.shape[a]

    def narrow(*index):
        value = total(*index)
        if mean:  # 0 / 0 is NaN, as numpy's mean of nothing
            value = value / tirx.Cast(_WIDE, count)
        return value.astype(x.dtype)

    return te.compute(out_shape, narrow, name="mean_wide" if mean else "sum_wide_narrow")


def _wide_sum_legalize(default: Callable, mean: bool) -> Callable:
    """A ``LegalizeOps`` rule for relax.sum / relax.mean: the float64-accumulating kernel for the
    REDUCE's marked sums on targets with float64, TVM's own lowering (``default``) otherwise."""

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if not (_marked(call) and _has_float64(tvm.target.Target.current(allow_none=True))):
            return default(bb, call)
        name = "mean_wide" if mean else "sum_wide"
        lowered = bb.call_te(_wide_sum, call.args[0], call.attrs.axis, bool(call.attrs.keepdims), mean,
                             primfunc_name_hint=name)  # fmt: skip
        # A reduction and its cast: AnnotateTIROpPattern would call it kOutEWiseFusable (a reduction
        # followed by an element-wise stage), into which FuseOps fuses no producer (the marker's copy, a
        # transpose, a ReduceL1's abs would each become a kernel and a tensor of their own).  Marked a
        # reduction (kCommReduce, 3) as TVM's own sum is, it fuses as before; the pass keeps a set pattern.
        func = lowered.args[0]
        bb.update_func(func, bb.get()[func].with_attr("op_pattern", 3))
        return lowered

    return legalize


def _wide_sum_rule(default: Callable) -> Callable:
    return _wide_sum_legalize(default, False)


def _wide_mean_rule(default: Callable) -> Callable:
    return _wide_sum_legalize(default, True)


# Our pipelines' legalization only (runtime/lowering_rules.py): TVM's own FLegalize stays as TVM ships it.
register_legalize("relax.sum", _wide_sum_rule)
register_legalize("relax.mean", _wide_mean_rule)


@converter(O.CUM_SUM)
def cum_sum(args: OpArgs) -> relax.Expr:
    """input, axis (default -1), exclusive (default false), reverse (default false) -> running sums along
    ``axis``.

    With ``n`` the axis's size: output[i] = sum(x[0..i]); exclusive: sum(x[0..i-1]) (output[0] = 0);
    reverse: sum(x[i..n-1]); exclusive and reverse: sum(x[i+1..n-1]) (output[n-1] = 0).
    (Paddle's ``flatten`` attribute has no operand: NNAdapter always names an axis.)
    Reference: Paddle's cumsum; NNAdapter's reference kernel (math/cum_sum.h) for exclusive with reverse.
    """
    return cumulative(args, args.tensor("input"), relax.op.cumsum)


def cumulative(args: OpArgs, x: relax.Expr, scan: Callable[..., relax.Expr]) -> relax.Expr:
    """CUM_SUM's operands ``axis``, ``exclusive`` and ``reverse`` applied to ``scan`` (relax.op.cumsum,
    relax.op.cumprod) over ``x``: a reverse scan is the forward one between two flips of the axis."""
    axis = args.axis("axis", len(args.shape(x)), -1)
    exclusive = args.bool("exclusive", False)
    reverse = args.bool("reverse", False)
    if reverse:
        x = relax.op.flip(x, axis)
    y = scan(x, axis, exclusive=exclusive)
    if reverse:
        y = relax.op.flip(y, axis)
    return y


@converter(O.TOP_K)
def top_k(args: OpArgs) -> list[relax.Expr]:
    """input, k, axis, largest, sorted, return_indices_dtype (INT32 = 5 or INT64 = 7) -> output (the ``k``
    largest or smallest values along ``axis``), indices (their positions, as return_indices_dtype).

    Values come largest first (``largest``) or smallest first; equal values come by smaller index
    first, and the same rule picks among equal values at the k-th place (Paddle's partial_sort leaves
    ties unordered; this makes them deterministic, like a stable sort).  Floats are ordered totally:
    NaN ranks above +inf (first when ``largest``, last otherwise, as numpy's sort and onnxruntime's
    TopK), -0 and +0 are equal.  ``sorted`` false lets
    Paddle return the same k elements in any order; this implementation returns them sorted too.
    ``k`` must lie in [1, dim(axis)] (checked at execution where dim(axis) is known only then): a constant,
    or computed from the symbolic dimensions (a detector's ``min(1000, anchors)``; its values known as
    expressions, op_converters.shape_values), whose k elements are then the first k of a stable sort.
    Reference: Paddle's top_k_v2 (paddle.topk).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    k = _top_k_count(args)
    axis = args.axis("axis", rank)
    largest = args.bool("largest")
    args.bool("sorted")  # the order is always sorted (allowed either way)
    dtype = index_dtype(args, "return_indices_dtype")
    if isinstance(k, int) and (k < 1 or (isinstance(shape[axis], int) and k > shape[axis])):
        args.fail(f"k {k} is out of range [1, {shape[axis]}] (the size of axis {axis})", "k")
    bound = None
    if not isinstance(k, int):
        in_range = tirx.And(k >= 1, shape[axis] >= k)
        x = args.require(x, in_range, f"k {k} is out of range [1, {shape[axis]}] at execution", "k")
        bound = _k_bound(k)  # of the expression: the variable of its own below has no bound
        k = _size_of_its_own(args, k, "top_k")
    elif not isinstance(shape[axis], int):
        x = args.require(x, shape[axis] >= k, f"k {k} exceeds the size of axis {axis} at execution", "k")
    key = _top_k_key(x, str(x.ty.dtype))
    if key is None and str(x.ty.dtype) in _FLOAT_KEY_BITS:
        key = args.emit_te(_float_order_key, x, primfunc_name_hint="top_k_key")
    if not isinstance(k, int):
        ranked = x if key is None else key
        if bound is not None and np.dtype(str(ranked.ty.dtype)).kind in "iu":
            # TVM's topk takes k as an attribute: take the top ``bound`` of the axis padded with ``bound``
            # elements that rank below every real one (ties among equals go by index, and the pads come
            # last), then the first k; k <= the axis size, so all k are real elements.
            pads = list(args.shape(ranked))
            pads[axis] = bound
            info = np.iinfo(str(ranked.ty.dtype))
            sentinel = relax.op.full(pads, relax.const(info.min if largest else info.max, str(ranked.ty.dtype)))
            padded = relax.op.concat([ranked, sentinel], axis)
            order = args.emit(relax.op.topk(padded, bound, axis, "indices", largest, "int64"))
        else:
            # Sort the whole axis (stably: ties by smaller index) instead.
            order = args.emit(relax.op.argsort(ranked, axis, descending=largest, dtype="int64"))
        indices = args.emit(relax.op.strided_slice(order, axes=[axis], begin=[0], end=[k], assume_inbound=True))
        values = relax.op.gather_elements(x, indices, axis)
        return [values, relax.op.astype(indices, dtype) if dtype != "int64" else indices]
    if key is None:
        both = args.emit(relax.op.topk(x, k, axis, "both", largest, dtype))
        return [relax.TupleGetItem(both, 0), relax.TupleGetItem(both, 1)]
    indices = args.emit(relax.op.topk(key, k, axis, "indices", largest, "int64"))
    values = relax.op.gather_elements(x, indices, axis)
    return [values, relax.op.astype(indices, dtype) if dtype != "int64" else indices]


# The largest constant bound on a k known only at execution that TOP_K pads the axis by (a detector's
# min(1000, anchors): 1000); beyond it, or with no bound, it sorts the whole axis.
_K_BOUND_LIMIT = 1 << 16


def _k_bound(k: tirx.PrimExpr) -> int | None:
    """A constant upper bound of ``k`` (an expression over the symbolic dimensions) up to _K_BOUND_LIMIT."""
    bound = tvm.sym.Analyzer().const_int_bound(k).max_value
    return int(bound) if 1 <= bound <= _K_BOUND_LIMIT else None


def _size_of_its_own(args: OpArgs, value: tirx.PrimExpr, name: str) -> tirx.PrimExpr:
    """``value``, an expression over the symbolic dimensions, as a variable of its own read back at
    execution (through a tensor, so that no pass substitutes the expression again). A detector's k is
    ``min(cap, anchors)`` over every pyramid level's size: carried into every later shape it grew to
    9,000 characters in Faster R-CNN, and TIR lowering and LLVM took minutes over such kernels."""
    if isinstance(value, tirx.Var):
        return value
    n = tirx.Var(name, "int64")
    shape = args.emit(relax.op.tensor_to_shape(relax.op.shape_to_tensor(relax.ShapeExpr([value]))))
    args.match_cast(shape, [n])
    return n


def _top_k_count(args: OpArgs) -> int | tirx.PrimExpr:
    """TOP_K's k: an int where constant, else its value as an expression over the symbolic dimensions."""
    if args.operand("k").is_constant:
        return args.int("k")
    values = args.shape_values("k")
    if values is None or len(values) != 1:
        args.fail("must be a constant or computed from the input dimensions (its value depends on data)", "k")
    return int(values[0]) if isinstance(values[0], int) else values[0]


# A float's bits as a signed integer of its width (float16 widened to int32, which TVM's topk takes).
_FLOAT_KEY_BITS = {"float16": ("int16", "int32"), "float32": ("int32", "int32"), "float64": ("int64", "int64")}


def _float_order_key(x: te.Tensor) -> te.Tensor:
    """An integer tensor whose order is a total order of ``x``: -inf < ... < -0 = +0 < ... < +inf < NaN.

    TVM's topk compares floats with ``<``, which is no order with NaN (a NaN landed in the middle of the
    output).  The key is the float's bits read as a signed integer (monotonic for non-negative floats),
    with the magnitude bits of negative ones flipped (so a larger magnitude is a smaller key); every NaN
    becomes the one canonical quiet NaN (above +inf) and -0 becomes +0 (equal floats, equal keys: ties
    then go by index, as onnxruntime's comparison does)."""
    bits, wide = _FLOAT_KEY_BITS[str(x.dtype)]
    width = int(bits[3:])
    magnitude = tirx.const((1 << (width - 1)) - 1, bits)
    quiet_nan = {16: 0x7E00, 32: 0x7FC00000, 64: 0x7FF8000000000000}[width]

    def key(*index):
        v = x[index]
        raw = tirx.reinterpret(bits, v)
        flipped = tirx.Select(raw < tirx.const(0, bits), raw ^ magnitude, raw)
        zero = tirx.EQ(raw & magnitude, tirx.const(0, bits))
        out = tirx.Select(is_nan(v), tirx.const(quiet_nan, bits), tirx.Select(zero, tirx.const(0, bits), flipped))
        return out.astype(wide)

    return te.compute(x.shape, key, name="top_k_key")


def _top_k_key(x: relax.Expr, dtype: str) -> relax.Expr | None:
    """An int64 tensor ordered as ``x`` for the dtypes TVM's topk kernel rejects (int16, uint16, uint32: a
    widening cast; uint64: the top bit flipped, then reinterpreted), else None."""
    if dtype in ("int16", "uint16", "uint32"):
        return relax.op.astype(x, "int64")
    if dtype == "uint64":
        return relax.op.astype(relax.op.bitwise_xor(x, relax.const(1 << 63, "uint64")), "int64")
    return None
