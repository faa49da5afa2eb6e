"""exp, sigmoid, erf and tanh of float32 that vectorize on the CPU.

TVM lowers ``exp`` (and ``sigmoid``, through it) on an LLVM target to ``llvm.exp``, which LLVM turns into
one call of libm's ``expf`` per element inside a vectorized loop: a SiLU (x * sigmoid(x)) after a 1x1
convolution of 104x104x64 took 2.5x the convolution itself (0.86 against 0.35 ms), and YOLO-style
detectors put one after every convolution.  ``exp_f32`` is Cephes' ``expf`` written in TIR: a Cody-Waite
reduction x = n ln 2 + r (|r| <= ln 2 / 2), a degree-7 polynomial for e^r, and 2^n applied in two halves
so that results near the top of the range (x up to 88.72) and gradual underflow stay exact in their
exponent.  Cephes gives its error as at most about 1 ulp over the range; `tests/targets/test_cpu_vmath.py`
measures it against numpy's float64 exp.  Special values as IEEE has them: NaN stays NaN, +inf and
x > 88.72 give +inf, -inf and x < -103.97 give +0.

``erf`` (exact GELU, which every transformer export writes as ``0.5 x (1 + erf(x / sqrt 2))``) fared
worse: libm's ``erff`` per element, 16 ns each (ViT-base's GELUs: 2.4 ms of a 6.5 ms product). ``erf_f32``
is Norbert Juffa's faithfully rounded float32 erf, the one onnxruntime's MLAS uses: an odd polynomial
below |x| = 0.9277, 1 - e^p(|x|) above it (with ``exp_f32``); both are computed and one is selected, so
it vectorizes. ``tanh`` (GPT-2's GELU) likewise took libm's ``tanhf`` per element: ``tanh_f32`` is Cephes'
``tanhf``, an odd polynomial below |x| = 0.625 and 1 - 2 / (e^2|x| + 1) above it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx

_F32 = "float32"

# topi.round (Relax's round: ties to even) computes ``tirx.nearbyint``, which TVM registers without
# ``TVectorizable``: VectorizeLoop then scalarized every loop holding one (lane by lane, ``*_s`` loops),
# which was every requantization, so every 8-bit kernel's epilogue (efficientnet_b0 int8: 2.3 ms for a 1x1
# convolution whose float kernel takes 0.5).  LLVM's vector ``llvm.nearbyint`` is one vrndscaleps /
# frintx a vector, with the same rounding (the current mode: to nearest, ties to even).
tvm.ir.register_op_attr("tirx.nearbyint", "TVectorizable", True)
_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375  # ln 2 in two parts: the first exact in float32 with room for n (Cody-Waite)
_LN2_LO = -2.12194440e-4
_POLY = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]
_OVERFLOW = 88.72283935546875  # the largest x whose exp is finite in float32
_UNDERFLOW = -103.97208404541015625  # below it exp rounds to 0


def _f(value: float) -> tirx.PrimExpr:
    return tirx.const(value, _F32)


def _horner(z: tirx.PrimExpr, coefficients: list[float], acc: tirx.PrimExpr | None = None) -> tirx.PrimExpr:
    """The polynomial ``coefficients`` (highest degree first) at ``z`` by Horner's rule; with ``acc``, the
    coefficients continue a polynomial already summed to ``acc``."""
    if acc is None:
        acc, coefficients = _f(coefficients[0]), coefficients[1:]
    for c in coefficients:
        acc = acc * z + _f(c)
    return acc


def _let(value: tirx.PrimExpr, body, name: str, dtype: str = _F32) -> tirx.PrimExpr:
    """``body(v)`` with ``v`` bound to ``value`` once (a ``Let``): these functions read their argument and
    intermediates many times, and substituted as trees they grew exponentially (erf's argument appeared
    about 100 times, through ``exp_f32``'s), so that a GELU fused after a product took 0.5 s of TIR
    lowering; bound, each is computed once, and LLVM's code is the same as after TVM's own CSE."""
    if isinstance(value, (tirx.Var, tirx.IntImm, tirx.FloatImm)):
        return body(value)
    var = tirx.Var(name, dtype)
    return tirx.Let(var, value, body(var))


def _signed_as(x: tirx.PrimExpr, magnitude: tirx.PrimExpr) -> tirx.PrimExpr:
    """``magnitude`` with the sign of a nonzero ``x`` (odd functions' large branch)."""
    # Bound: an expression holding a Let may not appear twice (a variable is defined once in TIR).
    return _let(magnitude, lambda m: tirx.Select(x < _f(0.0), -m, m), "magnitude")


#: The bits of float32 infinity: ``magnitude_bits`` above them is NaN, equal to them infinite.
INF_BITS = 0x7F800000


def magnitude_bits(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """float32 ``x``'s bits without the sign, as int32: ordered as the magnitudes, infinity at
    ``INF_BITS`` and NaN above.  Tests of NaN and infinity made of it vectorize as integer compares (TVM's
    simplifier folds ``x != x`` to false)."""
    return tirx.reinterpret("int32", x) & tirx.const(0x7FFFFFFF, "int32")


def _is_nan(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """Whether float32 ``x`` is NaN (its magnitude's bits above infinity's)."""
    return magnitude_bits(x) > tirx.const(INF_BITS, "int32")


def _pow2(n: tirx.PrimExpr) -> tirx.PrimExpr:
    """2^n as float32 for an int32 n in [-126, 127]."""
    return tirx.reinterpret(_F32, (n + tirx.const(127, "int32")) << tirx.const(23, "int32"))


def exp_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """e^x for a float32 ``x`` (see the module docstring)."""
    return _let(x, _exp_f32, "exp_x")


def _exp_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    def scaled(n: tirx.PrimExpr) -> tirx.PrimExpr:
        def at(r: tirx.PrimExpr) -> tirx.PrimExpr:
            y = _horner(r, _POLY) * (r * r) + r + _f(1.0)

            def times_pow2(ni: tirx.PrimExpr) -> tirx.PrimExpr:  # ni in [-150, 128]
                half = ni >> tirx.const(1, "int32")
                return _let(half, lambda h: y * _pow2(h) * _pow2(ni - h), "half", "int32")

            return _let(n.astype("int32"), times_pow2, "exp_n", "int32")

        return _let(xc - n * _f(_LN2_HI) - n * _f(_LN2_LO), at, "exp_r")

    xc = tirx.max(tirx.min(x, _f(_OVERFLOW)), _f(_UNDERFLOW))
    y = _let(tirx.floor(xc * _f(_LOG2E) + _f(0.5)), scaled, "exp_nf")
    y = tirx.Select(x > _f(_OVERFLOW), _f(float("inf")), y)
    y = tirx.Select(x < _f(_UNDERFLOW), _f(0.0), y)
    return tirx.Select(_is_nan(x), x, y)


def sigmoid_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """1 / (1 + e^-x): 0 at -inf (e^inf = inf), 1 at +inf, NaN at NaN."""
    return _f(1.0) / (_f(1.0) + exp_f32(-x))


_ERF_SPLIT = 0.927734375  # 475 / 512
_ERF_SMALL = [-5.96761703e-4, 4.99119423e-3, -2.67681349e-2, 1.12819925e-1, -3.76125336e-1, 1.28379166e-1]
_ERF_BIG = [-1.06777877e-1, -6.34846687e-1, -1.28717512e-1]
#: Where float32's erf is 1 (erfc(4) = 1.5e-8 is below half an ulp of 1); the large branch is evaluated
#: at min(|x|, 4) so that an infinity gives 1, not inf - inf.
_ERF_ONE = 4.0


def erf_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """erf(x) for a float32 ``x`` (see the module docstring): within about 1 ulp of the exact value
    (``tests/targets/test_cpu_vmath.py``), erf(+-inf) = +-1, erf(NaN) = NaN, erf(-0) = -0."""
    return _let(x, _erf_f32, "erf_x")


def _erf_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    small = _let(x * x, lambda s: _horner(s, _ERF_SMALL) * x + x, "erf_s")

    def large(t: tirx.PrimExpr) -> tirx.PrimExpr:
        big = (_f(-1.72853470e-5) * t + _f(3.83197126e-4)) * (t * t) + (_f(-3.88396438e-3) * t + _f(2.42546219e-2))
        return _signed_as(x, _f(1.0) - exp_f32(_horner(t, _ERF_BIG, big) * t - t))

    big = _let(tirx.min(tirx.abs(x), _f(_ERF_ONE)), large, "erf_t")
    # NaN compares false: it takes the small branch, which keeps it.
    return tirx.Select(tirx.abs(x) > _f(_ERF_SPLIT), big, small)


_TANH_SPLIT = 0.625
_TANH_POLY = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1]


def tanh_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """tanh(x) for a float32 ``x`` (see the module docstring): within a few ulp (``tests/targets/test_cpu_vmath.py``),
    tanh(+-inf) = +-1, NaN kept, -0 kept."""
    return _let(x, _tanh_f32, "tanh_x")


def _tanh_f32(x: tirx.PrimExpr) -> tirx.PrimExpr:
    small = _let(x * x, lambda s: tirx.Select(x == _f(0.0), x, _horner(s, _TANH_POLY) * s * x + x), "tanh_s")
    # e^2|x| overflows to inf past |x| = 44.4, and 2 / inf is 0: the result is then exactly 1.
    big = _signed_as(x, _f(1.0) - _f(2.0) / (exp_f32(tirx.abs(x) * _f(2.0)) + _f(1.0)))
    # NaN compares false: it takes the small branch, which keeps it.
    return tirx.Select(tirx.abs(x) >= _f(_TANH_SPLIT), big, small)


def _elementwise(op: str, fn, name: str):
    """``op``'s lowering: ``fn`` element by element for float32, TVM's own for other dtypes."""
    default = tvm.ir.Op.get(op).get_attr("FLegalize")

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        (x,) = call.args
        if getattr(x.ty, "dtype", None) != _F32:
            return default(bb, call)

        def compute(t: te.Tensor) -> te.Tensor:
            return te.compute(t.shape, lambda *i: fn(t(*i)), name=name)

        return bb.call_te(compute, x, primfunc_name_hint=name)

    return legalize


def _fma(a: tirx.PrimExpr, b: tirx.PrimExpr, c: tirx.PrimExpr) -> tirx.PrimExpr:
    """a * b + c rounded once (LLVM's fma: vfmadd, fmla)."""
    return tirx.call_llvm_pure_intrin(_F32, "llvm.fma", a, b, c)


def quotient_f32(x: tirx.PrimExpr, c: tirx.PrimExpr, r: tirx.PrimExpr) -> tirx.PrimExpr:
    """x / c correctly rounded, from ``r`` = RN(1 / c), by multiplications (Markstein's theorem: with ``q``
    within an ulp of x / c, the residual ``x - q c`` is exact by one fma and ``RN(q + residual r)`` is the
    correctly rounded quotient; the Handbook of Floating-Point Arithmetic, section 4.7).  A vector division
    costs 5-16 cycles, these three FMA-unit operations 1.5; the requantizations of an 8-bit kernel's
    epilogue divide each element by a scale two or three times.  Where ``q`` is not finite (x infinite or
    NaN, or a quotient at the very top of the range) it is the result; the sign is ``q``'s (a zero keeps
    its sign).  A quotient below the normal range (|x / c| < 1.2e-38) may be an ulp off."""

    def correct(q: tirx.PrimExpr) -> tirx.PrimExpr:
        exact = _fma(_fma(-q, c, x), r, q)
        signed = tirx.call_llvm_pure_intrin(_F32, "llvm.copysign", exact, q)
        return tirx.Select(magnitude_bits(q) < tirx.const(INF_BITS, "int32"), signed, q)

    return _let(x * r, correct, "quotient")


def _broadcast_index(t: te.Tensor, index: tuple, shape: list) -> tuple:
    """``t``'s element for output ``index`` (of ``shape``) under numpy broadcasting: a static 1 against a
    larger output dimension reads index 0 (only there: TVM's pattern analysis calls a read at 0 of a
    dimension the output shares a broadcast, which no convolution's epilogue fuses)."""
    lead = len(shape) - len(t.shape)

    def unit(d) -> bool:
        return isinstance(d, tirx.IntImm) and int(d) == 1

    return tuple(
        tirx.const(0, "int64") if unit(d) and not unit(shape[lead + k]) else index[lead + k]
        for k, d in enumerate(t.shape)
    )


def _constant_value(bb: relax.BlockBuilder, expr: relax.Expr) -> np.ndarray | None:
    """``expr``'s value where it is a constant, or a variable bound to one transposed by the layout change
    (NCHW -> NHWC moves a per-channel [1, C, 1, 1] to [1, 1, 1, C]: with at most one dimension above 1, a
    transpose keeps the elements' order, a reshape); else None."""
    if isinstance(expr, tvm.ir.expr.Constant):
        return expr.value.numpy()
    bound = bb.lookup_binding(expr) if isinstance(expr, relax.Var) else None
    if not isinstance(bound, relax.Call) or not bound.op.same_as(tvm.ir.Op.get("relax.call_tir")):
        return None
    args = bound.args[1].fields if isinstance(bound.args[1], relax.Tuple) else []
    out = getattr(getattr(bound.ty, "shape", None), "values", None)
    if len(args) != 1 or not isinstance(args[0], tvm.ir.expr.Constant) or out is None:
        return None
    value = args[0].value.numpy()
    if not all(isinstance(d, tirx.IntImm) for d in out) or sum(d > 1 for d in value.shape) > 1:
        return None
    shape = [int(d) for d in out]
    if int(np.prod(shape)) != value.size or sum(d > 1 for d in shape) > 1:
        return None
    name = bound.args[0].name_hint if isinstance(bound.args[0], tvm.ir.GlobalVar) else ""
    return value.reshape(shape) if name.startswith("transpose") else None


def divide_legalization(default, fma: bool):
    """``relax.divide``'s lowering: float32 by a constant of normal, finite values as ``quotient_f32`` where
    the target has FMA (x86's FMA3, aarch64), ``default`` (the project's rule over TVM's) otherwise."""
    tiny = float(np.finfo(np.float32).tiny)

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        x, c = call.args
        divisor = _constant_value(bb, c) if fma and getattr(x.ty, "dtype", None) == _F32 else None
        x_shape = getattr(getattr(x.ty, "shape", None), "values", None)
        if divisor is None or divisor.dtype != np.float32 or x_shape is None or divisor.ndim > len(x_shape):
            return default(bb, call)
        with np.errstate(divide="ignore", over="ignore"):
            reciprocal = (np.float32(1.0) / divisor).astype(np.float32)
        normal = np.abs(divisor) >= tiny
        if not (np.all(np.isfinite(divisor)) and np.all(normal) and np.all(np.abs(reciprocal) >= tiny)):
            return default(bb, call)

        def compute(t: te.Tensor, ct: te.Tensor, rt: te.Tensor) -> te.Tensor:
            rank = len(t.shape)
            lead = rank - len(ct.shape)
            shape = [
                t.shape[k] if k < lead or int(ct.shape[k - lead]) == 1 else ct.shape[k - lead] for k in range(rank)
            ]

            def body(*i):
                at = _broadcast_index(ct, i, shape)
                return quotient_f32(t(*_broadcast_index(t, i, shape)), ct(*at), rt(*at))

            return te.compute(shape, body, name="divide")

        return bb.call_te(compute, x, relax.const(divisor), relax.const(reciprocal), primfunc_name_hint="divide")

    return legalize


def _is_inf(x: tirx.PrimExpr) -> tirx.PrimExpr:
    return magnitude_bits(x) == tirx.const(INF_BITS, "int32")


def _is_finite(x: tirx.PrimExpr) -> tirx.PrimExpr:
    return magnitude_bits(x) < tirx.const(INF_BITS, "int32")


def legalize_map(divide, fma: bool = False) -> dict:
    """``LegalizeOps`` rules: float32 exp, sigmoid, erf and tanh as ``exp_f32`` / ``sigmoid_f32`` /
    ``erf_f32`` / ``tanh_f32``; float32 isnan, isinf and isfinite as integer compares of the bits
    (``magnitude_bits``): TVM's ``isnan`` comes out of LLVM as a compare and a branch per element, 6x the
    time of the vector compare (where(isnan(x), 0, x) of 98k elements: 73 us, 12 us); with ``fma``, a
    float32 division by a constant as ``quotient_f32`` (else ``divide``); other dtypes TVM's."""
    return {
        "relax.divide": divide_legalization(divide, fma),
        "relax.exp": _elementwise("relax.exp", exp_f32, "exp"),
        "relax.sigmoid": _elementwise("relax.sigmoid", sigmoid_f32, "sigmoid"),
        "relax.erf": _elementwise("relax.erf", erf_f32, "erf"),
        "relax.tanh": _elementwise("relax.tanh", tanh_f32, "tanh"),
        "relax.isnan": _elementwise("relax.isnan", _is_nan, "isnan"),
        "relax.isinf": _elementwise("relax.isinf", _is_inf, "isinf"),
        "relax.isfinite": _elementwise("relax.isfinite", _is_finite, "isfinite"),
    }
