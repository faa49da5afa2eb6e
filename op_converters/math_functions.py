"""Math extensions (codes 2010-2039): inverse trigonometric and hyperbolic functions, SINH, ERF, the float
remainder MOD and the cumulative product CUM_PROD.

The standard operations have none of these, and their compositions lose precision (asinh through LOG near
0, sinh as (e^x - e^-x) / 2, erf through GELU, a - b * trunc(a / b) for the remainder). Each is one of
nnadapter-tvm's built-in extensions (defined in nnadapter_tvm/operations/), one operation per function so that a
model says what it computes, computed by TVM's own intrinsics.
"""

from __future__ import annotations

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.reduce import cumulative
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.math_functions import MATH_FUNCTIONS
from nnadapter_tvm.types import OperationType as O

_FUNCTIONS = {
    "ACOS": relax.op.acos,
    "ACOSH": relax.op.acosh,
    "ASIN": relax.op.asin,
    "ASINH": relax.op.asinh,
    "ATAN": relax.op.atan,
    "ATANH": relax.op.atanh,
    "SINH": relax.op.sinh,
    "ERF": relax.op.erf,
}


@converter(*MATH_FUNCTIONS.values())
def math_function(args: OpArgs) -> relax.Expr:
    """input (FLOAT16, FLOAT32 or FLOAT64) -> output = f(input) element-wise, f one of acos, acosh, asin,
    asinh, atan, atanh, sinh, erf (the operation's name), as C's libm defines them: outside the domain
    (|x| > 1 for acos, asin and atanh, x < 1 for acosh) the result is NaN, atanh(+-1) is +-inf.

    Reference: ONNX Acos/Acosh/Asin/Asinh/Atan/Atanh/Sinh/Erf (numpy's functions of those names; math.erf).
    """
    x = args.raw_tensor("input")
    # LLVM lowers TVM's float16 acos, asin, atan, log1p, ... nowhere ("unknown intrinsic"): compute in float32
    # (exact for every float16 input) and round once to float16.
    half = str(x.ty.dtype) == "float16"
    if half:
        x = args.emit(relax.op.astype(x, "float32"))
    if args.type.name == "SINH":
        y = args.emit_te(_sinh, x)
    elif args.type.name == "ATANH":
        y = args.emit_te(_atanh, x)
    else:
        y = _FUNCTIONS[args.type.name](x)
    return relax.op.astype(y, "float16") if half else y


def _atanh(x: te.Tensor) -> te.Tensor:
    """atanh(|x|) = log1p(2|x| / (1 - |x|)) / 2, the sign put back (atanh is odd), as glibc does: TVM's
    tirx.atanh, log((1 + x) / (1 - x)) / 2, cancels near 0 (millions of ulps at |x| = 1e-8); log1p keeps
    every bit of a small argument, and on |x| its argument is never near -1 where log1p is ill-conditioned."""

    def element(*index):
        v = x(*index)
        one, two, half, zero = (tirx.const(c, x.dtype) for c in (1.0, 2.0, 0.5, 0.0))
        a = tirx.abs(v)
        magnitude = half * tirx.log1p(two * a / (one - a))
        return tirx.Select(v < zero, -magnitude, tirx.Select(v > zero, magnitude, v))  # keeps -0 and NaN

    return te.compute(x.shape, element, name="atanh")


def _sinh(x: te.Tensor) -> te.Tensor:
    """sinh without TVM's tirx.sinh, which LLVM lowers only for scalars (libm's sinh): a vectorized loop fails
    with "unknown intrinsic tirx.sinh". Below |x| = 1 its Taylor series to x^17 / 17! (the next term is under
    1e-17 of the sum, past float64's precision); above, (h * h / 2 - 1 / (2 h h)) with h = e^(|x| / 2), whose
    terms are at least e^2 apart (no cancellation) and whose first overflows only where sinh does."""

    def element(*index):
        v = x(*index)
        a = tirx.abs(v)
        a2 = a * a
        series = tirx.const(1.0, x.dtype)
        for n in range(17, 1, -2):  # Horner: 1 + a^2/(2*3) (1 + a^2/(4*5) (1 + ...))
            series = tirx.const(1.0, x.dtype) + a2 * series / tirx.const(float(n * (n - 1)), x.dtype)
        h = tirx.exp(a * tirx.const(0.5, x.dtype))
        half = tirx.const(0.5, x.dtype)
        large = (half * h) * h - half / (h * h)
        magnitude = tirx.Select(a < tirx.const(1.0, x.dtype), a * series, large)
        # sinh is odd: the sign comes back by a select, keeping sinh(-0) = -0 and NaN as it is.
        return tirx.Select(
            v < tirx.const(0.0, x.dtype), -magnitude, tirx.Select(v > tirx.const(0.0, x.dtype), magnitude, v)
        )

    return te.compute(x.shape, element, name="sinh")


@converter(O.MOD)
def mod(args: OpArgs) -> relax.Expr:
    """input0, input1 (the same float precision, broadcast as numpy), fmod (default false) -> output, the
    remainder of input0 / input1.

    fmod true: C's fmod, input0 - input1 * trunc(input0 / input1) computed exactly, with the sign of
    input0. fmod false: the floored remainder with the sign of input1, numpy's ``mod``: fmod's result r,
    plus input1 where r is non-zero and its sign differs from input1's; a zero remainder takes input1's
    sign. Division by 0 or an infinite input0 gives NaN; an infinite input1 gives input0 (fmod) or, without
    fmod, input0 when the signs agree and input1 otherwise (numpy's rule).

    Reference: ONNX Mod (onnx.reference's Mod: np.fmod for fmod=1, np.mod for fmod=0).
    """
    a, b = args.raw_tensor("input0"), args.raw_tensor("input1")
    fmod = args.bool("fmod", False)
    # CUDA has no float16 remainder ("expected 32 or 64 bits"): FLOAT16 computes in float32, where fmod of
    # float16 values is the same exact value, and the floored sum rounds once to float16 (as numpy's float16
    # mod, computed in float32, does).
    half = str(a.ty.dtype) == "float16"
    if half:
        a, b = (args.emit(relax.op.astype(t, "float32")) for t in (a, b))

    def kernel(x: te.Tensor, y: te.Tensor) -> te.Tensor:
        shape = relax_broadcast(x.shape, y.shape)

        def at(t: te.Tensor, index: tuple) -> tirx.PrimExpr:
            offset = len(index) - len(t.shape)
            return t(*[0 if _is_one(d) else index[offset + k] for k, d in enumerate(t.shape)])

        def element(*index):
            u, v = at(x, index), at(y, index)
            # TIR's truncmod on floats is LLVM's frem: C's fmod, exact.
            r = tirx.truncmod(u, v)
            if fmod:
                return r
            zero = tirx.const(0, x.dtype)
            differs = tirx.any(tirx.all(r < zero, v > zero), tirx.all(r > zero, v < zero))
            # An infinite divisor leaves r = u; numpy then gives v (not u + v) where the signs differ.
            shifted = tirx.Select(tirx.isinf(v), v, r + v)
            # A zero remainder takes v's sign: |r| * -1, not a constant -0 (TIR folds 0 and -0 into one, and
            # LLVM has no copysign lowering in TVM).
            signed_zero = tirx.Select(v < zero, tirx.abs(r) * tirx.const(-1, x.dtype), tirx.abs(r))
            return tirx.Select(differs, shifted, tirx.Select(r == zero, signed_zero, r))

        return te.compute(shape, element, name="mod")

    result = args.emit_te(kernel, a, b)
    return relax.op.astype(result, "float16") if half else result


def _is_one(d) -> bool:
    return isinstance(d, int | tirx.IntImm) and int(d) == 1


def relax_broadcast(a: list, b: list) -> list:
    """numpy's broadcast of two TE shapes (a symbolic size meets 1 or itself)."""
    rank = max(len(a), len(b))
    a = [1] * (rank - len(a)) + list(a)
    b = [1] * (rank - len(b)) + list(b)
    return [y if _is_one(x) else x for x, y in zip(a, b)]


@converter(O.CUM_PROD)
def cum_prod(args: OpArgs) -> relax.Expr:
    """input, axis (default -1), exclusive (default false), reverse (default false) -> running products along
    ``axis``.

    With ``n`` the axis's size: output[i] = prod(x[0..i]); exclusive: prod(x[0..i-1]) (output[0] = 1);
    reverse: prod(x[i..n-1]); exclusive and reverse: prod(x[i+1..n-1]) (output[n-1] = 1). Integer
    products wrap around as in two's complement.

    Reference: ONNX CumProd (onnx.reference's CumProd); the operands are CUM_SUM's.
    """
    return cumulative(args, args.raw_tensor("input"), relax.op.cumprod)
