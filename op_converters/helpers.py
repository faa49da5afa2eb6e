"""Small pieces shared by converters."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.types import AutoPad, FuseCode, ResultCode


def fuse(args: OpArgs, expr: relax.Expr, i: Key = "fuse_code") -> relax.Expr:
    """Apply the fused activation read from operand ``i`` (the spec's ``fuse_code``).

    RELU1 clips to [0, 1], as Paddle-Lite's own drivers (XNNPACK, Imagination NNA) and
    NNAdapter math do; Android NNAPI's FUSED_RELU1 clips to [-1, 1] instead.
    """
    code = args.int(i, FuseCode.NONE)
    if code == FuseCode.NONE:
        return expr
    if code == FuseCode.RELU:
        return clamp(expr, 0)
    if code == FuseCode.RELU1:
        return clamp(expr, 0, 1)
    if code == FuseCode.RELU6:
        return clamp(expr, 0, 6)
    args.fail(f"fuse_code {code} is not one of {[f'{c.name}={c.value}' for c in FuseCode]}", i)


def clamp(expr: relax.Expr, low: float, high: float | None = None) -> relax.Expr:
    """min(high, max(low, x)), with a NaN in x kept as numpy and the spec's formulas keep it.

    TVM computes max(a, b) as ``a > b ? a : b`` and min(a, b) as ``a < b ? a : b``: with the bound
    first, a NaN x fails the comparison and passes through, where ``relax.op.nn.relu`` (max(x, 0))
    and ``relax.op.clip`` would turn it into a bound. The operand order is the whole fix and costs
    nothing (one vmaxps/vminps each); tests/ops/test_activation.py checks it stays so.
    """
    expr = relax.BlockBuilder.current().normalize(expr)  # an op's result has its dtype once normalized
    dtype = str(expr.ty.dtype)
    out = relax.op.maximum(relax.const(low, dtype), expr)
    return out if high is None else relax.op.minimum(relax.const(high, dtype), out)


def is_nan(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """Whether ``x`` is NaN, from its bits: the exponent all ones and a non-zero fraction (|bits| above
    the bits of infinity).  False for integer types.

    Neither obvious spelling serves inside a vectorized reduction: TVM's simplifier folds ``x != x`` to
    false, and ``tirx.isnan`` there came out as scalar compares and branches (a 112x112x64 NHWC max pool
    took 4x TOPI's time); the integer compare vectorizes (one AND and one compare per vector).
    """
    dtype = str(x.ty) if hasattr(x, "ty") else str(x.dtype)
    bits = {"float16": (16, 0x7C00), "float32": (32, 0x7F800000), "float64": (64, 0x7FF0000000000000)}.get(dtype)
    if bits is None:
        if "float" in dtype:  # bfloat16 and other rare floats: TVM's own test
            return tirx.isnan(x)
        return tirx.const(False, "bool")
    width, infinity = bits
    int_type = f"int{width}"
    magnitude = tirx.reinterpret(int_type, x) & tirx.const((1 << (width - 1)) - 1, int_type)
    return magnitude > tirx.const(infinity, int_type)


def nan_max(identity: Callable[[str], tirx.PrimExpr], name: str = "nan_max") -> Callable:
    """A TE max reducer that gives NaN when any element is NaN, as numpy's max does, starting from
    ``identity(dtype)``. TVM's max(acc, x) is ``acc > x ? acc : x``, so with te.max a later element
    replaced a NaN accumulator and only a NaN in the last place survived."""

    def combine(acc: tirx.PrimExpr, x: tirx.PrimExpr) -> tirx.PrimExpr:
        # max(x, acc) keeps a NaN acc (the comparison fails); the test keeps a NaN x.
        return tirx.Select(is_nan(x), x, tirx.max(x, acc))

    return te.comm_reducer(combine, identity, name=name)


def pair(args: OpArgs, i: Key, default: list[int] | None = None) -> list[int]:
    values = args.ints(i, default)
    if len(values) != 2:
        args.fail(f"must hold 2 values (height, width), got {values}", i)
    if any(v <= 0 for v in values):
        args.fail(f"values must be positive, got {values}", i)
    return values


def spatial_pads(args: OpArgs, in_hw: list, kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """Padding as the spec orders it, [top, bottom, left, right], from the operands ``auto_pad`` and
    ``pads`` (CONV_2D's and the poolings' names).

    SAME follows Paddle: total = max((ceil(in / stride) - 1) * stride + effective_kernel - in, 0),
    the smaller half before, the larger after.
    """
    mode = args.int("auto_pad", AutoPad.NONE)
    if mode == AutoPad.NONE:
        pads = args.ints("pads", [0, 0, 0, 0])
        if len(pads) != 4 or any(p < 0 for p in pads):
            args.fail(f"must hold 4 non-negative values (top, bottom, left, right), got {pads}", "pads")
        return pads
    if mode == AutoPad.VALID:
        return [0, 0, 0, 0]
    if mode == AutoPad.SAME:
        result = []
        for size, k, s, d in zip(in_hw, kernel, strides, dilations):
            effective = (k - 1) * d + 1
            if not isinstance(size, int):
                # With stride 1 the total is effective - 1 whatever the size; with a larger stride it
                # depends on size % stride, and the operations take static pads.
                if s != 1:
                    args.fail(
                        f"auto_pad SAME with stride {s} needs static spatial dimensions (its pads depend on the "
                        "size modulo the stride)",
                        "auto_pad",
                        ResultCode.FEATURE_NOT_SUPPORTED,
                    )
                total = effective - 1
                result += [total // 2, total - total // 2]
                continue
            total = max((math.ceil(size / s) - 1) * s + effective - size, 0)
            result += [total // 2, total - total // 2]
        return result
    args.fail(f"auto_pad {mode} is not one of {[f'{c.name}={c.value}' for c in AutoPad]}", "auto_pad")


def check_window(args: OpArgs, in_hw: list, pads: list[int], window: list[int], i: Key) -> None:
    """Fail naming operand ``i`` where a static padded input is smaller than the (dilated) window; where the
    size is known only at execution, the execution fails instead (``OpArgs.require_dims``), rather than giving an
    empty output."""
    for axis, size, before, after, k in zip(("height", "width"), in_hw, pads[0::2], pads[1::2], window):
        if isinstance(size, int) and size + before + after < k:
            args.fail(f"the window's {axis} {k} exceeds the padded input's ({size} + {before} + {after})", i)
        elif not isinstance(size, int):
            message = f"the window's {axis} {k} exceeds the padded input's ({{size}} + {before} + {after})"
            args.require_dims(size + before + after >= k, size, message.replace("{size}", str(size)), i)


def conv_geometry(args: OpArgs, x_dims: list, w_dims: list) -> tuple[list[int], int, list[int], list[int]]:
    """A convolution's operands ``auto_pad``, ``pads``, ``strides``, ``group`` and ``dilations`` (CONV_2D's
    and CONV_2D_INTEGER's names), checked against the [N, C_in, H, W] input and [C_out, C_in / group, kh,
    kw] ``filter`` dims: (strides, group, dilations, pads as [top, bottom, left, right])."""
    _, c_in, h, wd = x_dims
    c_out, c_per_group, kh, kw = w_dims
    strides = pair(args, "strides", [1, 1])
    group = args.int("group", 1)
    dilations = pair(args, "dilations", [1, 1])
    if group <= 0 or (isinstance(c_in, int) and c_in % group) or c_out % group:
        args.fail(f"group {group} must be positive and divide C_in={c_in} and C_out={c_out}", "group")
    if isinstance(c_in, int) and c_per_group * group != c_in:
        args.fail(
            f"filter has {c_per_group} input channels per group, expected C_in / group = {c_in // group}", "filter"
        )
    pads = spatial_pads(args, [h, wd], [kh, kw], strides, dilations)
    check_window(args, [h, wd], pads, [(kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1], "filter")
    return strides, group, dilations, pads


def relax_padding(pads: list[int]) -> list[int]:
    """[top, bottom, left, right] (spec) -> [top, left, bottom, right] (Relax)."""
    top, bottom, left, right = pads
    return [top, left, bottom, right]


def rank4(args: OpArgs, expr: relax.Expr, i: Key) -> list:
    """The four dims of an NCHW operand; anything else fails naming the operand."""
    shape = args.shape(expr)
    if len(shape) != 4:
        args.fail(f"must be 4-D, got shape {shape}", i)
    return shape


def check_broadcast(args: OpArgs, indices: list[Key]) -> None:
    """Fail naming the first operand of ``indices`` whose static dimensions do not broadcast
    (numpy rules) with those of the operands before it; symbolic dimensions are left to run time."""
    result: list = []
    for i in indices:
        shape = args.shape(args.raw_tensor(i))
        rank = max(len(result), len(shape))
        merged = []
        for r, d in zip([1] * (rank - len(result)) + result, [1] * (rank - len(shape)) + shape):
            if isinstance(r, int) and isinstance(d, int) and r != d and 1 not in (r, d):
                args.fail(f"shape {shape} does not broadcast with {result} (numpy broadcasting)", i)
            merged.append(d if isinstance(r, int) and r == 1 else r)
        result = merged


def broadcast_unknown(args: OpArgs, indices: list[Key]) -> list[relax.Expr]:
    """The operands ``indices``, each broadcast (numpy rules) along every axis where its dimension is
    unknown until execution and another operand's is a static size c > 1.

    Such a dimension must be 1 or c at execution and the result has c there, but Relax cannot tell
    which and gives up the shape of ``x + y`` ("its shape cannot be derived").  So the converter
    decides at execution: a small kernel (fused into its consumer) reads index 0 where the dimension is
    1, and a dimension that is neither fails the execution with INVALID_DIMENSIONS naming the operand.
    The kernel reads after the guard (it reads the guarded tensor); its index is clamped into the axis
    all the same.  Call after ``check_broadcast``.
    """
    exprs = [args.tensor(i) for i in indices]
    shapes = [args.shape(e) for e in exprs]
    rank = max(len(s) for s in shapes)
    aligned = [[1] * (rank - len(s)) + s for s in shapes]
    static = [max((s[axis] for s in aligned if isinstance(s[axis], int)), default=1) for axis in range(rank)]
    return [
        _broadcast_to_static(args, e, s, static[rank - len(s) :], i, [_dims(o) for o in shapes if o is not s])
        for i, e, s in zip(indices, exprs, shapes)
    ]


def _dims(shape: list) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _broadcast_to_static(args: OpArgs, x: relax.Expr, xs: list, static: list, i: Key, all_shapes: list) -> relax.Expr:
    targets = {axis: c for axis, (d, c) in enumerate(zip(xs, static)) if not isinstance(d, int) and c > 1}
    if not targets:
        return x
    condition = functools.reduce(tirx.And, [tirx.Or(xs[axis] == c, xs[axis] == 1) for axis, c in targets.items()])
    message = f"dimensions {_dims(xs)} must each be 1 or match {' and '.join(all_shapes)} (numpy broadcasting)"
    x = args.require(x, condition, message, i)
    shape = [targets.get(axis, d) for axis, d in enumerate(xs)]
    zero = tirx.const(0, "int64")

    def compute(t: te.Tensor) -> te.Tensor:
        def read(*index):
            return t(
                *(
                    tirx.Select(t.shape[a] == 1, zero, tirx.max(tirx.min(v, t.shape[a] - 1), zero))
                    if a in targets
                    else v
                    for a, v in enumerate(index)
                )
            )

        return te.compute(shape, read, name="broadcast_unknown")

    return args.emit_te(compute, x)


def same_float_operand(args: OpArgs) -> bool:
    """Whether ``input0`` and ``input1`` are one float operand (Sub(d, d), Equal(d, d)).

    TVM's arithmetic simplifier folds ``e - e`` to 0, ``e / e`` to 1 and ``e == e`` to true for floats too
    (not IEEE: NaN and infinities give NaN, and NaN == NaN is false), and once a producer is fused into
    its consumer both operands are the same expression.  Converters of such operations compute the IEEE
    result from the operand instead (a fuzz finding: Sub(Div(x, Relu(x)), itself) gave 0 where x <= 0)."""
    a, b = args.operand("input0"), args.operand("input1")
    return a is b and args.input_type("input0").dtype.startswith(("float", "bfloat"))


def at_least_1d(expr: relax.Expr, rank: int) -> relax.Expr:
    """``expr`` (of rank ``rank``) reshaped to [1] where it has rank 0.

    The convention of SQUEEZE, MAT_MUL, REDUCE_* and ARG_MAX/ARG_MIN: where numpy would give a rank-0
    result (every axis squeezed or reduced away, a 1-D . 1-D product, the arg-reduction of a 1-D input
    without keepdim) the output has shape [1], as Paddle-Lite's NNAdapter shape inference does
    (operation/squeeze.cc, mat_mul.cc, reduce.cc, arg_min_max.cc).  GATHER (rank-0 indices) and UNSTACK
    (a 1-D input) keep numpy's rank 0, as the same code does for them (gather.cc, unstack.cc).
    """
    return relax.op.reshape(expr, [1]) if rank == 0 else expr


def where_empty(args: OpArgs, y: relax.Expr, count, identity: float | int) -> relax.Expr:
    """``y``, a reduction over ``count`` elements (a TIR expression known only at execution), with
    ``identity`` wherever ``count`` is 0 at execution.

    TIR initializes a reduction inside its first iteration, so over 0 iterations the output keeps
    whatever its memory held; this selects the identity instead (an elementwise pass that fuses with
    the reduction).  Counts known at compile time are not for this helper: REDUCE_* emits the identity
    itself when its count is 0, and TVM zero-fills a static matmul over K = 0.
    """

    def select(t: te.Tensor, n) -> te.Tensor:
        value = tirx.const(identity, t.dtype)
        return te.compute(t.shape, lambda *i: tirx.if_then_else(n == 0, value, t(*i)), name="empty_reduction")

    return args.emit_te(select, args.emit(y), count)


def unfused(kernel: relax.Var) -> relax.Var:
    """``kernel`` (an emitted call_tir) marked opaque (op pattern 8): FuseOps fuses nothing into it."""
    bb = relax.BlockBuilder.current()
    func = bb.lookup_binding(kernel).args[0]
    bb.update_func(func, bb.get()[func].with_attr("op_pattern", 8))
    return kernel


def with_plain_dims(args: OpArgs, expr: relax.Expr, name: str) -> relax.Expr:
    """``expr`` with every dimension that is a symbolic expression (not a single variable) bound to a fresh
    variable, through a match_cast that checks nothing (the variable takes the value found).

    A TE compute on a tensor whose dims are expressions of the model's input sizes, say (H - 1) // 32 + 1,
    becomes a PrimFunc that also takes H as a scalar argument (TVM cannot solve the dims for it); FuseTIR
    then failed to fuse such functions with their neighbours ("Parameter expression 8 expected ... 1").
    On plain variables the PrimFunc reads its sizes from its buffers.
    """
    dims = args.shape(expr)
    if all(isinstance(d, (int, tirx.Var)) for d in dims):
        return expr
    fresh = [
        d if isinstance(d, (int, tirx.Var)) else tirx.Var(f"{name}_d{axis}", "int64") for axis, d in enumerate(dims)
    ]
    return args.match_cast(expr, fresh)
