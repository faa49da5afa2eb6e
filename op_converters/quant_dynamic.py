"""Dynamic quantization (nnadapter-tvm extension operations 1010-1012): DYNAMIC_QUANTIZE_LINEAR,
CONV_2D_INTEGER and MAT_MUL_INTEGER.

NNAdapter's quantized precisions carry their scale and zero point in the operand type, fixed when the
model is built; dynamically quantized models (onnxruntime's ``quantize_dynamic``) compute them from each
input at run time and accumulate integer products in int32.  These operations take plain INT8/UINT8
tensors and their zero points as operands (run-time tensors allowed) and give exact INT32 results.

Exactness and speed: the sums are the int32 sums of ONNX's ConvInteger / MatMulInteger.  Where the
filter (the right matrix) and its zero point are constants, the converter bounds every partial sum at
compile time, ``max|x - x_zp| * max_o sum |w[o] - w_zp[o]|`` with ``max|x - x_zp| <= 255`` for 8-bit
operands; below 2^24 every partial sum is an integer that float32 holds exactly, whatever the order of
the additions, so the product runs as a float32 convolution / matrix product (the project's fast CPU
schedules) and is cast back to INT32 without loss.  Where 255 is too large a factor, ``x - x_zp`` is split
into ``16 * hi + lo`` (``lo`` in [0, 15], ``hi`` in [-16, 15]) and two float32 products of at most
16 * sum|w'| each give ``16 * hi_out + lo_out`` in int32.  Otherwise (larger windows, run-time filters)
the product is an int32 convolution / matrix product (``out_dtype`` int32 on int32 operands).

A MAT_MUL_INTEGER whose right matrix minus its zero point is a constant that int8 holds (onnxruntime's
``quantize_dynamic`` writes int8 weights with zero point 0) is instead the stored 8-bit ``x`` times that
int8 matrix, minus ``x_zero_point * colsum``: the product the CPU target runs on its integer multiply-add
(``targets/cpu/int8.py``; without one, the lowering takes the float routes above).
"""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.op_converters.helpers import conv_geometry, rank4, relax_padding
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O

# Largest |x - x_zero_point| of 8-bit operands of one type (uint8 - uint8 or int8 - int8).
_MAX_SHIFTED = 255
# float32 holds every integer of magnitude up to 2^24.
_EXACT_F32 = 1 << 24
# Split of x - x_zp into 16 * hi + lo: |hi| <= 16, lo <= 15.
_SPLIT_BITS = 4
_MAX_HALF = 16


def _const(value: float | int, dtype: str) -> relax.Expr:
    return relax.const(np.asarray(value, dtype), dtype)


def _saturate(v: relax.Expr, nan_to: float) -> relax.Expr:
    """clip(v, 0, 255) with NaN sent to ``nan_to`` explicitly (min/max alone keep or drop NaN as LLVM
    happens to order their operands); maximum/minimum, which ConvertLayout moves to NHWC (not clip)."""
    clipped = relax.op.minimum(relax.op.maximum(v, _const(0.0, "float32")), _const(255.0, "float32"))
    return relax.op.where(relax.op.isnan(v), _const(nan_to, "float32"), clipped)


# The two passes over the input are TE computes that send NaN to 0 through the operand order of max / min:
# TVM computes max(a, b) as select(a > b, a, b) and min(a, b) as select(a < b, a, b), ordered comparisons
# that are false for a NaN ``a``, so max(v, 0) and min(v, 0) give 0 for a NaN ``v``.  An isnan test
# instead (or relax's isnan / where, a bool tensor between fused stages) left the loops unvectorized: the
# quantizing pass took 93 us on [128, 768] against 23.


def _nan_as_zero(v: tirx.PrimExpr, largest: bool) -> tirx.PrimExpr:
    """max(v, 0) or min(v, 0), 0 for a NaN ``v`` (``v`` first, see above)."""
    return (tirx.max if largest else tirx.min)(v, tirx.const(0.0, "float32"))


def _extreme(x: te.Tensor, largest: bool) -> te.Tensor:
    """max(0, max(x)) (or min(0, min(x))) with NaN elements counted as 0, in one pass over x."""
    axes = [te.reduce_axis((0, d)) for d in x.shape]
    reduce = te.max if largest else te.min
    return te.compute((), lambda: reduce(_nan_as_zero(x(*axes), largest), axis=axes), name="max" if largest else "min")


def _quantize(x: te.Tensor, scale: te.Tensor, zero_point: te.Tensor) -> te.Tensor:
    """clip(rint(x / scale) + zero_point, 0, 255) as uint8, NaN to 0 (as _saturate)."""

    def body(*i):
        v = tirx.round(x(*i) / scale()) + zero_point()
        return tirx.min(_nan_as_zero(v, largest=True), tirx.const(255.0, "float32")).astype("uint8")

    return te.compute(x.shape, body, name="quantize")


@converter(O.DYNAMIC_QUANTIZE_LINEAR)
def dynamic_quantize_linear(args: OpArgs) -> list[relax.Expr]:
    """input (FLOAT32) -> output (UINT8, the input's shape), scale (FLOAT32, [] or [1]),
    zero_point (UINT8, [] or [1]).

    max_x = max(0, max(input)), min_x = min(0, min(input)); scale = (max_x - min_x) / 255, or 1 / 255
    when max_x == min_x (an all-zero input); zero_point = rint(clip(0 - min_x / scale, 0, 255));
    output = clip(rint(input / scale) + zero_point, 0, 255).  Every step in float32, rint rounding half
    to even.  NaN and infinities as onnxruntime takes them (the spec is silent; onnx's reference gives NaN
    everywhere): NaN elements are left out of max(input) / min(input) (a NaN element counts as 0, which
    max(0, .) and min(0, .) absorb), a NaN zero point saturates to 255 and a NaN quantized element to 0
    (std::min/max's order in onnxruntime, Python's in onnx's reference; TVM's min/max would pick the
    other operand and its max reduction's result depends on where the NaN sits).  An infinite input
    gives an infinite scale, so finite elements quantize to the zero point and infinite ones (inf / inf)
    to 0, and DequantizeLinear of them gives NaN, as onnxruntime's does.

    Reference: ONNX's DynamicQuantizeLinear (onnx.reference's implementation, step by step); onnxruntime
    for NaN (its MLAS min/max skip NaN, its saturating casts send NaN to 0).
    """
    x = args.raw_tensor("input")
    if x.ty.dtype != "float32":
        args.fail(f"must be FLOAT32, got {x.ty.dtype}", "input")
    for k in (1, 2):
        dims = list(args.output_type(k).dimensions)
        if dims not in ([], [1]):
            args.fail(f"output {k} must have shape [] or [1], declared {dims}")
    zero = _const(0.0, "float32")
    max_x, min_x = (args.emit_te(_extreme, x, largest) for largest in (True, False))
    width = relax.op.where(relax.op.equal(max_x, min_x), _const(1.0, "float32"), relax.op.subtract(max_x, min_x))
    scale = args.emit(relax.op.divide(width, _const(255.0, "float32")))
    initial = relax.op.subtract(zero, relax.op.divide(min_x, scale))  # NaN where min_x = -inf (-inf / inf)
    zero_point = args.emit(_saturate(relax.op.round(initial), 255.0))
    y = args.emit_te(_quantize, x, scale, zero_point)
    outs = [y, scale, relax.op.astype(zero_point, "uint8")]
    for k in (1, 2):
        if list(args.output_type(k).dimensions) == [1]:
            outs[k] = relax.op.reshape(outs[k], [1])
    return outs


def _zero_point(args: OpArgs, i: Key, allowed: str, sizes: tuple[int, ...] = (1,)) -> relax.Expr | None:
    """Operand ``i`` (a zero point of ``sizes`` elements, or omitted / empty: zero) as an int32 expression."""
    if not args.has(i):
        return None
    zp = args.raw_tensor(i)
    shape = args.shape(zp)
    count = int(np.prod(shape)) if all(isinstance(d, int) for d in shape) else None
    if count not in sizes or len([d for d in shape if d != 1]) > 1:
        args.fail(f"must be {allowed}, got shape {shape}", i)
    return relax.op.astype(zp, "int32")


def _const_shifted(args: OpArgs, w_i: Key, zp_i: Key, zp_shape: list[int] | None = None) -> np.ndarray | None:
    """w - w_zero_point as int64 when both are constants (else None); a zero point of more than one
    value is reshaped to ``zp_shape`` (None: it broadcasts as it is)."""
    if not args.operand(w_i).is_constant or (args.has(zp_i) and not args.operand(zp_i).is_constant):
        return None
    w = np.asarray(args.value(w_i)).astype("int64")
    if not args.has(zp_i):
        return w
    zp = np.asarray(args.value(zp_i)).astype("int64")
    if zp.size == 1:
        return w - zp.reshape(-1)[0]
    return w - (zp if zp_shape is None else zp.reshape(zp_shape))


def integer_route(weight_sum: int | None, terms: int | None) -> str:
    """How an integer product with ``terms`` products per output element is computed exactly, from the
    largest sum of |w - w_zp| over one output element (None: the weights are known only at run time,
    bounded by 255 each):

    - ``"float"``: one float32 product of x - x_zp (255 * weight_sum < 2^24);
    - ``"split_x"``: x - x_zp as 16 * hi + lo, two float32 products (16 * weight_sum < 2^24);
    - ``"split_both"``: x - x_zp and w - w_zp both split, four float32 products (16 * 16 * terms < 2^24);
    - ``"int32"``: an int32 product (larger, or ``terms`` unknown at compile time).
    """
    bound = weight_sum if weight_sum is not None else None if terms is None else _MAX_SHIFTED * terms
    if bound is not None and _MAX_SHIFTED * bound < _EXACT_F32:
        return "float"
    if bound is not None and _MAX_HALF * bound < _EXACT_F32:
        return "split_x"
    if terms is not None and _MAX_HALF * _MAX_HALF * terms < _EXACT_F32:
        return "split_both"
    return "int32"


def _shifted_int32(x: relax.Expr, zp: relax.Expr | None) -> relax.Expr:
    x32 = relax.op.astype(x, "int32")
    return x32 if zp is None else relax.op.subtract(x32, zp)


def _halves(v: relax.Expr) -> list[tuple[relax.Expr, int]]:
    """An int32 ``v`` in [-255, 255] as [(hi, 16), (lo, 1)]: v = 16 * hi + lo, lo in [0, 15], hi in [-16, 15]."""
    lo = relax.op.bitwise_and(v, _const(_MAX_HALF - 1, "int32"))
    hi = relax.op.right_shift(v, _const(_SPLIT_BITS, "int32"))  # arithmetic: floor(v / 16)
    return [(hi, _MAX_HALF), (lo, 1)]


def _exact_products(route: str, xs: relax.Expr, ws: relax.Expr | np.ndarray, product) -> relax.Expr:
    """sum of ``product(x_part, w_part)`` (float32 operands) over the route's parts, each cast to int32 (exact:
    the route's bound keeps every partial sum below 2^24) and scaled by its parts' weights, in int32.

    ``xs`` is the int32 x - x_zp; ``ws`` the constant w - w_zp (numpy) or its int32 expression."""
    if isinstance(ws, np.ndarray):
        if route == "split_both":
            w_parts = [(relax.const((ws >> _SPLIT_BITS).astype("float32")), _MAX_HALF)]
            w_parts.append((relax.const((ws & (_MAX_HALF - 1)).astype("float32")), 1))
        else:
            w_parts = [(relax.const(ws.astype("float32")), 1)]
    elif route == "split_both":
        w_parts = [(relax.op.astype(part, "float32"), k) for part, k in _halves(ws)]
    else:
        w_parts = [(relax.op.astype(ws, "float32"), 1)]
    x_parts = [(xs, 1)] if route == "float" else _halves(xs)
    total = None
    for x_part, kx in x_parts:
        xf = relax.op.astype(x_part, "float32")
        for w_part, kw in w_parts:
            term = relax.op.astype(product(xf, w_part), "int32")
            if kx * kw != 1:
                term = relax.op.multiply(term, _const(kx * kw, "int32"))
            total = term if total is None else relax.op.add(total, term)
    return total


@converter(O.CONV_2D_INTEGER)
def conv_2d_integer(args: OpArgs) -> relax.Expr:
    """input (INT8/UINT8) [N, C_in, H, W], filter (INT8/UINT8) [C_out, C_in / group, kh, kw],
    input_zero_point (the input's type, [] or [1]), filter_zero_point (the filter's type, [], [1] or
    [C_out]), auto_pad, pads, strides, group, dilations -> output (INT32) [N, C_out, H_out, W_out].

    output = CONV_2D(input - input_zero_point, filter - filter_zero_point) summed exactly in int32 (no bias,
    no fuse_code); padding adds zeros of ``input - input_zero_point`` (the input padded with its zero point).
    The zero points may be run-time tensors (DYNAMIC_QUANTIZE_LINEAR's output) and may be given empty (0);
    the filter zero point is per tensor or per output channel.  Geometry (pads, auto_pad, strides, groups,
    dilations) as CONV_2D.

    Reference: ONNX's ConvInteger (onnx.reference's implementation).
    """
    x, w = args.raw_tensor("input"), args.raw_tensor("filter")
    _, c_in, h, wd = rank4(args, x, "input")
    c_out, c_per_group, kh, kw = rank4(args, w, "filter")
    if not all(isinstance(d, int) for d in (c_out, c_per_group, kh, kw)):
        args.fail(f"needs static dims, got {args.shape(w)}", "filter")
    x_zp = _zero_point(args, "input_zero_point", "one value (per tensor)")
    w_zp = _zero_point(args, "filter_zero_point", f"one value or [C_out] = [{c_out}] values", (1, c_out))
    if w_zp is not None and args.shape(args.raw_tensor("filter_zero_point")) not in ([], [1]):
        w_zp = relax.op.reshape(w_zp, [c_out, 1, 1, 1])
    strides, group, dilations, pads = conv_geometry(args, [None, c_in, h, wd], [c_out, c_per_group, kh, kw])
    geometry = {"strides": strides, "padding": relax_padding(pads), "dilation": dilations, "groups": group}
    xs = _shifted_int32(x, x_zp)
    shifted_w = _const_shifted(args, "filter", "filter_zero_point", [c_out, 1, 1, 1])
    weight_sum = None
    if shifted_w is not None:
        weight_sum = int(np.abs(shifted_w).reshape(c_out, -1).sum(axis=1).max(initial=0))
    route = integer_route(weight_sum, c_per_group * kh * kw)
    ws = shifted_w if shifted_w is not None else _shifted_int32(w, w_zp)
    if route == "int32":
        ws = ws if not isinstance(ws, np.ndarray) else relax.const(ws.astype("int32"))
        return relax.op.nn.conv2d(xs, ws, out_dtype="int32", **geometry)
    return _exact_products(route, xs, ws, lambda a, b: relax.op.nn.conv2d(a, b, **geometry))


def _int8_matrix(w: np.ndarray | None) -> bool:
    """Whether ``w`` (a constant y - y_zero_point) is a matrix of values int8 holds."""
    return w is not None and w.ndim == 2 and w.min(initial=0) >= -128 and w.max(initial=0) <= 127


@converter(O.MAT_MUL_INTEGER)
def mat_mul_integer(args: OpArgs) -> relax.Expr:
    """x (INT8/UINT8), y (INT8/UINT8), x_zero_point (x's type, optional), y_zero_point (y's type,
    optional) -> output (INT32) = numpy.matmul(x - x_zero_point, y - y_zero_point), summed exactly in int32.

    Each zero point broadcasts (numpy rules) against its matrix: a scalar or [1] is per tensor, x's
    [..., M, 1] per row, y's [N] or [..., 1, N] per column; they may be run-time tensors.

    Reference: ONNX's MatMulInteger (its operator text for per-row / per-column zero points).
    """
    x, y = args.raw_tensor("x"), args.raw_tensor("y")
    xs_shape, ys_shape = args.shape(x), args.shape(y)
    if not xs_shape or not ys_shape:
        args.fail("x and y must have rank 1 or more", "x" if not xs_shape else "y")
    k_x, k_y = xs_shape[-1], ys_shape[-2] if len(ys_shape) >= 2 else ys_shape[-1]
    if isinstance(k_x, int) and isinstance(k_y, int) and k_x != k_y:
        args.fail(f"x {xs_shape} and y {ys_shape} have reduction lengths {k_x} != {k_y}", "y")
    x_zp = args.raw_tensor("x_zero_point") if args.has("x_zero_point") else None
    y_zp = args.raw_tensor("y_zero_point") if args.has("y_zero_point") else None
    for i, zp, shape in (("x_zero_point", x_zp, xs_shape), ("y_zero_point", y_zp, ys_shape)):
        if zp is not None:
            zs = args.shape(zp)
            if len(zs) > len(shape) or any(
                isinstance(a, int) and isinstance(b, int) and a not in (1, b)
                for a, b in zip(reversed(zs), reversed(shape))
            ):
                args.fail(f"shape {zs} does not broadcast against its matrix {shape}", i)
    shifted_y = _const_shifted(args, "y", "y_zero_point") if len(ys_shape) >= 2 else None
    if _int8_matrix(shifted_y) and x.ty.dtype in ("uint8", "int8"):
        # x @ (y - y_zp) - x_zp * colsum(y - y_zp): the stored 8-bit x times an int8 constant, which the CPU
        # target computes with its integer multiply-add (targets/cpu/int8.py).
        acc = relax.op.matmul(x, relax.const(shifted_y.astype("int8"), "int8"), out_dtype="int32")
        if x_zp is None:
            return acc
        sums = relax.const(shifted_y.sum(axis=0).astype("int32"), "int32")
        return relax.op.subtract(acc, relax.op.multiply(relax.op.astype(x_zp, "int32"), sums))
    xs = _shifted_int32(x, None if x_zp is None else relax.op.astype(x_zp, "int32"))
    weight_sum = None if shifted_y is None else int(np.abs(shifted_y).sum(axis=-2).max(initial=0))
    route = integer_route(weight_sum, k_y if isinstance(k_y, int) else None)
    ys = (
        shifted_y
        if shifted_y is not None
        else _shifted_int32(y, None if y_zp is None else relax.op.astype(y_zp, "int32"))
    )
    if route == "int32":
        ys = ys if not isinstance(ys, np.ndarray) else relax.const(ys.astype("int32"))
        return relax.op.matmul(xs, ys, out_dtype="int32")
    return _exact_products(route, xs, ys, relax.op.matmul)
