"""Activations (RELU, RELU6, SIGMOID, TANH, SOFTMAX, LOG_SOFTMAX, CLIP, GELU, HARD_SIGMOID,
HARD_SWISH, LEAKY_RELU, PRELU, SOFTPLUS, SWISH) against float64 numpy references written from
the spec, in float32 and QUANT_INT8_SYMM_PER_LAYER."""

import math

import numpy as np
import pytest
from oputil import (
    Const,
    In,
    Out,
    b8,
    build_model,
    check_op,
    check_quantized,
    expect_error,
    f32,
    i32,
    q8_const,
    q8_input,
    rand,
    run_model,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
P = nna.Precision
SHAPES = [(7,), (3, 4), (2, 3, 4), (2, 3, 2, 3), (1, 2, 3, 2, 2)]


def _sigmoid(x):
    return (1 / (1 + np.exp(-x.astype("float64")))).astype("float32")


REFS = {
    OP.RELU: lambda x: np.maximum(0, x),
    OP.RELU6: lambda x: np.minimum(6, np.maximum(0, x)),
    OP.SIGMOID: _sigmoid,
    OP.TANH: lambda x: np.tanh(x.astype("float64")).astype("float32"),
}


def _softmax(x, axis):
    e = np.exp(x.astype("float64"))
    return (e / e.sum(axis=axis, keepdims=True)).astype("float32")


@pytest.mark.parametrize("op", list(REFS), ids=lambda o: o.name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary(op, shape):
    # [-8, 8] covers both RELU6 clamps and the saturating tails of SIGMOID/TANH.
    x = rand(*shape, seed=len(shape), low=-8.0, high=8.0)
    # RELU/RELU6 are exact; SIGMOID/TANH are compared with a float64 reference and may differ
    # by a few float32 ulp (TVM's fast approximations), hence rtol 1e-5 and atol 1e-6.
    check_op(op, [In(x)], REFS[op](x), rtol=1e-5, atol=1e-6)


def test_tanh_near_zero_is_accurate():
    """TANH of small inputs to a few float32 ulps (relative): TVM's tanh, (exp(2x) - 1) / (exp(2x) + 1),
    cancels there (1.3% off at 1e-6, 0 below 3e-8, so that log(tanh(1e-40)) gave -inf: a fuzz finding).
    Against numpy's float64 tanh, on both sides of the series' switch at 2^-4; NaN and infinities kept."""
    magnitudes = np.array([1e-40, 1e-30, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.0624, 0.0626, 0.2, 5.0], "float32")
    x = np.concatenate([magnitudes, -magnitudes, np.array([0.0, np.nan, np.inf, -np.inf], "float32")])
    want = np.tanh(x.astype("float64")).astype("float32")
    check_op(OP.TANH, [In(x)], want, rtol=4 * float(np.finfo("float32").eps), atol=0)


def test_relu6_boundaries():
    x = np.array([-1.0, -0.0, 0.0, 3.0, 6.0, 6.5, 100.0], "float32")
    check_op(OP.RELU6, [In(x)], REFS[OP.RELU6](x), rtol=0, atol=0)


SOFTMAX_CASES = [(shape, axis) for shape in SHAPES for axis in range(-len(shape), len(shape))]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES, ids=str)
def test_softmax_axis(shape, axis):
    x = rand(*shape, seed=axis + 10, low=-5.0, high=5.0)
    # exp and the sum's order of additions differ from the float64 reference by a few ulp.
    check_op(OP.SOFTMAX, [In(x), i32([axis])], _softmax(x, axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
def test_softmax_default_axis(shape):
    """The axis operand omitted: the spec's default is 1."""
    x = rand(*shape, seed=5, low=-5.0, high=5.0)
    # As test_softmax_axis: float32 exp and summation order, a few ulp.
    check_op(OP.SOFTMAX, [In(x)], _softmax(x, 1), rtol=1e-5, atol=1e-6)


def test_softmax_large_values_are_stable():
    """Inputs whose exp overflows float32 still give the mathematically defined result."""
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], "float32")
    expected = _softmax(x - x.max(axis=1, keepdims=True), 1)
    # As test_softmax_axis: float32 exp and summation order, a few ulp.
    check_op(OP.SOFTMAX, [In(x), i32([1])], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [3, -4, 10])
def test_softmax_axis_out_of_range(axis):
    x = rand(2, 3, 4)
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.SOFTMAX, [In(x), i32([axis])], [Out()], [x.shape])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "SOFTMAX" in str(info.value) and "'axis'" in str(info.value)


def test_softmax_unknown_batch():
    x = rand(2, 3, 4, seed=6)
    out = [Out(dims=[nna.UNKNOWN, 3, 4])]
    # As test_softmax_axis: float32 exp and summation order against a float64 reference, a few ulp.
    check_op(OP.SOFTMAX, [In(x, dims=[nna.UNKNOWN, 3, 4]), i32([-1])], _softmax(x, -1), out, rtol=1e-5, atol=1e-6)


# Rows longer than a vector, of lengths that are and are not a multiple of its width: on the CPU the
# whole vectors are reduced per lane, then the lanes and the tail (targets/cpu/softmax.py).
LONG_ROWS = [(37,), (1000,), (3, 64), (2, 37), (1, 5, 161), (4, 1000)]


def _softmax_stable(x, axis):
    x = x.astype("float64")
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype("float32")


@pytest.mark.parametrize("op", [OP.SOFTMAX, OP.LOG_SOFTMAX], ids=lambda o: o.name)
@pytest.mark.parametrize("shape", LONG_ROWS, ids=str)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_long_rows(op, shape, axis):
    x = rand(*shape, seed=shape[-1], low=-20.0, high=20.0)
    want = _softmax_stable(x, axis) if op == OP.SOFTMAX else _log_softmax(x, axis)
    check_op(op, [In(x), i32([axis])], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [OP.SOFTMAX, OP.LOG_SOFTMAX], ids=lambda o: o.name)
@pytest.mark.parametrize("length", [1, 5, 16, 37, 200, 1500])
def test_softmax_rows_of_unknown_length(op, length):
    x = rand(3, length, seed=length, low=-20.0, high=20.0)
    want = _softmax_stable(x, -1) if op == OP.SOFTMAX else _log_softmax(x, -1)
    out = [Out(dims=[3, nna.UNKNOWN])]
    check_op(op, [In(x, dims=[3, nna.UNKNOWN]), i32([-1])], want, out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [OP.SOFTMAX, OP.LOG_SOFTMAX], ids=lambda o: o.name)
@pytest.mark.parametrize("length_known", [True, False], ids=["static", "unknown_length"])
def test_softmax_special_values(op, length_known):
    """NaN, +inf and -inf in rows of 37 (whole vectors and a tail), as the stable float64 formula gives
    them: a NaN or a +inf makes the row NaN, a -inf element is exp 0 (log: -inf), a row of -inf is NaN,
    and values near float32's limits do not overflow."""
    rows = np.tile(rand(1, 37, seed=3, low=-5.0, high=5.0), (7, 1))
    rows[0, 3] = np.nan
    rows[1, 36] = np.nan  # in the tail
    rows[2, 20] = np.inf
    rows[3, 5] = -np.inf
    rows[3, 35] = -np.inf
    rows[4, :] = -np.inf
    rows[5, :] = np.float32(3e38) * np.sign(rows[5, :])
    rows[6, :10] = 88.0
    x = rows.astype("float32")
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        want = _softmax_stable(x, -1) if op == OP.SOFTMAX else _log_softmax(x, -1)
    if length_known:
        check_op(op, [In(x), i32([-1])], want, rtol=1e-5, atol=1e-5)
    else:
        dims = [7, nna.UNKNOWN]
        check_op(op, [In(x, dims=dims), i32([-1])], want, [Out(dims=dims)], rtol=1e-5, atol=1e-5)


# -- references written from the spec (float64) ----------------------------------------------
def _f64(x):
    """float32 values (operands are float32, so attributes are rounded to float32 first) as float64."""
    return np.asarray(x, "float32").astype("float64")


def _log_softmax(x, axis):
    x = _f64(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype("float32")


def _clip(x, low, high):
    return np.minimum(np.maximum(_f64(x), low), high).astype("float32")


_erf = np.vectorize(math.erf)


def _gelu(x, approximate):
    x = _f64(x)
    if approximate:
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    else:
        y = 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    return y.astype("float32")


def _hard_sigmoid(x, alpha, beta):
    return np.maximum(0, np.minimum(1, _f64(alpha) * _f64(x) + _f64(beta))).astype("float32")


def _hard_swish(x, alpha, beta):
    x = _f64(x)
    return (x * np.maximum(0, np.minimum(1, _f64(alpha) * x + _f64(beta)))).astype("float32")


def _leaky_relu(x, alpha):
    x = _f64(x)
    return np.where(x >= 0, x, _f64(alpha) * x).astype("float32")


def _prelu(x, slope):
    x = _f64(x)
    slope = _f64(slope)
    if slope.size > 1:
        slope = slope.reshape([1, -1] + [1] * (x.ndim - 2))
    return np.where(x >= 0, x, slope * x).astype("float32")


def _softplus(x, beta, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, linear (x) where beta * x > threshold (Paddle's 20)."""
    x, beta = _f64(x), _f64(beta)
    z = beta * x
    soft = (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / beta
    return np.where(z > threshold, x, soft).astype("float32")


def _swish(x):
    x = _f64(x)
    return (x / (1 + np.exp(-x))).astype("float32")


# -- LOG_SOFTMAX ---------------------------------------------------------------------------------
# The result is x - max - log(sum): values up to ~10 in magnitude whose float32 ulp is ~1e-6, after
# a cancellation; rtol 1e-5 plus atol 1e-5 for results near 0.
LOG_SOFTMAX_TOL = {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES, ids=str)
def test_log_softmax_axis(shape, axis):
    x = rand(*shape, seed=axis + 20, low=-5.0, high=5.0)
    check_op(OP.LOG_SOFTMAX, [In(x), i32([axis])], _log_softmax(x, axis), **LOG_SOFTMAX_TOL)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
def test_log_softmax_default_axis(shape):
    """The axis operand omitted: the spec's default is 1."""
    x = rand(*shape, seed=7, low=-5.0, high=5.0)
    check_op(OP.LOG_SOFTMAX, [In(x)], _log_softmax(x, 1), **LOG_SOFTMAX_TOL)


def test_log_softmax_large_values_are_stable():
    """exp overflows float32 here; the result is still x - max - log(sum(exp(x - max)))."""
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], "float32")
    check_op(OP.LOG_SOFTMAX, [In(x), i32([1])], _log_softmax(x, 1), **LOG_SOFTMAX_TOL)


@pytest.mark.parametrize("axis", [3, -4])
def test_log_softmax_axis_out_of_range(axis):
    x = rand(2, 3, 4)
    expect_error(lambda: run_op(OP.LOG_SOFTMAX, [In(x), i32([axis])], [Out()], [x.shape]), "LOG_SOFTMAX", "'axis'")


def test_log_softmax_unknown_batch():
    x = rand(2, 3, 4, seed=8)
    out = [Out(dims=[nna.UNKNOWN, 3, 4])]
    ins = [In(x, dims=[nna.UNKNOWN, 3, 4]), i32([-1])]
    check_op(OP.LOG_SOFTMAX, ins, _log_softmax(x, -1), out, **LOG_SOFTMAX_TOL)


# -- CLIP ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_clip_shapes(shape):
    x = rand(*shape, seed=len(shape), low=-3.0, high=3.0)
    # min/max select an input or a bound: exact.
    check_op(OP.CLIP, [In(x), f32([-1.0]), f32([1.5])], _clip(x, -1.0, 1.5), rtol=0, atol=0)


@pytest.mark.parametrize("low,high", [(0.0, 6.0), (0.5, 0.5), (-10.0, 10.0), (2.0, -2.0)], ids=str)
def test_clip_bounds(low, high):
    """Including an empty range and min > max, where the formula gives `max` everywhere."""
    x = rand(2, 3, 4, seed=3, low=-8.0, high=8.0)
    check_op(OP.CLIP, [In(x), f32([low]), f32([high])], _clip(x, low, high), rtol=0, atol=0)


def test_clip_bounds_as_inputs():
    """min and max fed at execution time (shape [1] tensors) behave like constants."""
    x = rand(3, 5, seed=4, low=-3.0, high=3.0)
    low, high = np.array([-0.5], "float32"), np.array([2.0], "float32")
    check_op(OP.CLIP, [In(x), In(low), In(high)], _clip(x, -0.5, 2.0), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_clip_keeps_nan(dtype):
    """NaN passes through (Paddle's clip compares); infinities are clipped."""
    p = {"float32": P.FLOAT32, "float16": P.FLOAT16, "float64": P.FLOAT64}[dtype]
    x = np.array([np.nan, -np.inf, np.inf, -2.0, 0.5, 3.0], dtype)
    expected = np.array([np.nan, -1.0, 2.0, -1.0, 0.5, 2.0], dtype)
    low, high = Const(np.array([-1.0], dtype), p), Const(np.array([2.0], dtype), p)
    check_op(OP.CLIP, [In(x, p), low, high], expected, [Out(p)], rtol=0, atol=0)


def test_clip_bound_with_two_values():
    x = rand(2, 3)
    run = lambda: run_op(OP.CLIP, [In(x), f32([-1.0, 0.0]), f32([1.0])], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "CLIP", "'min'", "one value")


# -- GELU ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gelu(shape, approximate):
    x = rand(*shape, seed=len(shape), low=-6.0, high=6.0)
    # erf/tanh are evaluated by TVM's float32 approximations (a few ulp from the float64
    # reference); near x = 0 and in the negative tail the result is tiny: atol 1e-6.
    check_op(OP.GELU, [In(x), b8([approximate])], _gelu(x, approximate), rtol=1e-5, atol=1e-6)


def test_gelu_forms_differ():
    """The approximate flag is honoured: erf and tanh forms differ by ~1e-4 around |x| = 2."""
    x = np.array([-2.0, -1.5, 1.5, 2.0], "float32")
    assert np.abs(_gelu(x, True) - _gelu(x, False)).min() > 1e-5
    # ulp-level (1e-6) tolerances: far below the 1e-5 gap between the two forms asserted above.
    check_op(OP.GELU, [In(x), b8([True])], _gelu(x, True), rtol=1e-6, atol=1e-6)
    check_op(OP.GELU, [In(x), b8([False])], _gelu(x, False), rtol=1e-6, atol=1e-6)


# -- HARD_SIGMOID / HARD_SWISH -----------------------------------------------------------------
HARD = {OP.HARD_SIGMOID: _hard_sigmoid, OP.HARD_SWISH: _hard_swish}


@pytest.mark.parametrize("op", list(HARD), ids=lambda o: o.name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_hard_activation_shapes(op, shape):
    """Paddle's hard_sigmoid defaults (slope 0.2, offset 0.5)."""
    x = rand(*shape, seed=len(shape), low=-5.0, high=5.0)
    # one float32 multiply-add (and a multiply): within 1e-6 relative, atol for values near 0.
    check_op(op, [In(x), f32([0.2]), f32([0.5])], HARD[op](x, 0.2, 0.5), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(HARD), ids=lambda o: o.name)
@pytest.mark.parametrize("alpha,beta", [(1 / 6, 0.5), (-0.5, 0.25), (2.0, -1.0)], ids=str)
def test_hard_activation_params(op, alpha, beta):
    """(1/6, 1/2) is hard_swish's usual form (threshold 6, offset 3); a negative slope too."""
    x = rand(4, 6, seed=9, low=-6.0, high=6.0)
    # As test_hard_activation_shapes: a float32 multiply-add, atol for values near 0.
    check_op(op, [In(x), f32([alpha]), f32([beta])], HARD[op](x, alpha, beta), rtol=1e-6, atol=1e-6)


# -- LEAKY_RELU ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_leaky_relu_shapes(shape):
    x = rand(*shape, seed=len(shape))
    # one float32 multiply, correctly rounded: within 1 ulp (2e-7 relative).
    check_op(OP.LEAKY_RELU, [In(x), f32([0.1])], _leaky_relu(x, 0.1), rtol=2e-7, atol=0)


@pytest.mark.parametrize("alpha", [0.0, 0.01, 1.5, -0.3], ids=str)
def test_leaky_relu_alpha(alpha):
    x = np.concatenate([rand(10, seed=2), np.array([0.0, -0.0], "float32")])
    # one float32 multiply, correctly rounded: within 1 ulp (2e-7 relative); zeros stay exact.
    check_op(OP.LEAKY_RELU, [In(x), f32([alpha])], _leaky_relu(x, alpha), rtol=2e-7, atol=0)


@pytest.mark.parametrize("schedules", ["1", "0"], ids=["cpu_schedules", "no_schedules"])
@pytest.mark.parametrize("op", [OP.LEAKY_RELU, OP.PRELU], ids=lambda o: o.name)
def test_zero_slope_keeps_nan_and_infinity(op, schedules):
    """A slope of 0 multiplies, it does not drop the negative side: NaN stays NaN and -inf gives NaN
    (0 * -inf), as numpy's where(x >= 0, x, 0 * x) and onnxruntime give; TVM's constant folding made
    x * 0 a 0 in the kernel (both the CPU schedules and CPU_SCHEDULES=0 are checked)."""
    x = np.array([[np.nan, -np.inf, np.inf, -3.0], [0.0, -0.0, 2.5, -1e-40]], "float32")
    with np.errstate(invalid="ignore"):
        want = _leaky_relu(x, 0.0)
    model = build_model(op, [In(x), f32([0.0])], [Out()], [want.shape])
    got = run_model(model, [x], properties=f"CPU_SCHEDULES={schedules};")[0]
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, :2]).all()


# -- PRELU ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_channel", [True, False], ids=["slope[C]", "slope[1]"])
@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
def test_prelu(shape, per_channel):
    x = rand(*shape, seed=len(shape))
    slope = rand(shape[1] if per_channel else 1, seed=11, low=-1.0, high=1.0)
    # one float32 multiply per element, correctly rounded: within 1 ulp (2e-7 relative).
    check_op(OP.PRELU, [In(x), f32(slope)], _prelu(x, slope), rtol=2e-7, atol=0)


def test_prelu_rank1_single_slope():
    x = rand(7, seed=1)
    # one float32 multiply per element, correctly rounded: within 1 ulp (2e-7 relative).
    check_op(OP.PRELU, [In(x), f32([0.25])], _prelu(x, [0.25]), rtol=2e-7, atol=0)


def test_prelu_slope_as_input():
    """A slope fed at execution time behaves like a constant one."""
    x = rand(2, 3, 4, seed=2)
    slope = np.array([0.1, -0.2, 0.3], "float32")
    # one float32 multiply per element, correctly rounded: within 1 ulp (2e-7 relative).
    check_op(OP.PRELU, [In(x), In(slope)], _prelu(x, slope), rtol=2e-7, atol=0)


@pytest.mark.parametrize("slope_shape", [(2,), (4,), (1, 3)], ids=str)
def test_prelu_wrong_slope_shape(slope_shape):
    x = rand(2, 3, 4)
    run = lambda: run_op(OP.PRELU, [In(x), f32(rand(*slope_shape))], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "PRELU", "'alpha'")


# -- SOFTPLUS ------------------------------------------------------------------------------------
# log/exp in float32 and the log1p evaluation: a few ulp; atol 1e-7 only matters for the tiny
# values of the far negative tail (exp(-30) ~ 1e-13), which are still checked relatively.
SOFTPLUS_TOL = {"rtol": 1e-5, "atol": 1e-7}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softplus_shapes(shape):
    x = rand(*shape, seed=len(shape), low=-10.0, high=10.0)
    check_op(OP.SOFTPLUS, [In(x), f32([1.0])], _softplus(x, 1.0), **SOFTPLUS_TOL)


@pytest.mark.parametrize("beta", [1.0, 2.0, 0.5, -1.0], ids=str)
def test_softplus_beta(beta):
    """Over [-30, 30] both sides of the threshold (beta * x > 20 -> x) and the far tails."""
    x = np.linspace(-30, 30, 61, dtype="float32")
    check_op(OP.SOFTPLUS, [In(x), f32([beta])], _softplus(x, beta), **SOFTPLUS_TOL)


def test_softplus_tiny_values_keep_relative_accuracy():
    """log(1 + e) for e below float32's epsilon is e, not 0: relative accuracy in the tail."""
    x = np.array([-90.0, -60.0, -40.0, -17.0], "float32")
    # a few ulp relative (as SOFTPLUS_TOL) and no absolute slack: a result of 0 would fail.
    check_op(OP.SOFTPLUS, [In(x), f32([1.0])], _softplus(x, 1.0), rtol=1e-5, atol=0)


def test_softplus_zero_beta():
    x = rand(3)
    run = lambda: run_op(OP.SOFTPLUS, [In(x), f32([0.0])], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "SOFTPLUS", "'alpha'", "nonzero")


# -- SWISH ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_swish(shape):
    x = rand(*shape, seed=len(shape), low=-20.0, high=20.0)
    # exp and a multiply in float32: a few ulp; atol for the tiny negative tail.
    check_op(OP.SWISH, [In(x)], _swish(x), rtol=1e-5, atol=1e-6)


# -- QUANT_INT8_SYMM_PER_LAYER: int8 in, dequantize -> float32 -> requantize, int8 out ------------
def _q8_cases():
    """(id, op, extra operands, reference of the real input, output scale)."""
    c, low, high = 0.04, q8_const(np.array([-1.0], "float32"), 0.04), q8_const(np.array([2.5], "float32"), 0.04)
    slope = rand(3, seed=5, low=-1.0, high=1.0)
    return [
        ("RELU", OP.RELU, [], lambda x: np.maximum(x, 0), 0.04),
        ("RELU6", OP.RELU6, [], lambda x: np.clip(_f64(x), 0, 6), 0.05),
        ("SIGMOID", OP.SIGMOID, [], _sigmoid, 1 / 127),
        ("TANH", OP.TANH, [], lambda x: np.tanh(_f64(x)), 1 / 127),
        ("SOFTMAX", OP.SOFTMAX, [i32([-1])], lambda x: _softmax(x, -1), 1 / 127),
        ("LOG_SOFTMAX", OP.LOG_SOFTMAX, [i32([1])], lambda x: _log_softmax(x, 1), 0.08),
        ("CLIP", OP.CLIP, [low[0], high[0]], lambda x: _clip(x, low[1][0], high[1][0]), c),
        ("GELU", OP.GELU, [b8([False])], lambda x: _gelu(x, False), c),
        ("GELU_tanh", OP.GELU, [b8([True])], lambda x: _gelu(x, True), c),
        ("HARD_SIGMOID", OP.HARD_SIGMOID, [f32([0.2]), f32([0.5])], lambda x: _hard_sigmoid(x, 0.2, 0.5), 1 / 127),
        ("HARD_SWISH", OP.HARD_SWISH, [f32([1 / 6]), f32([0.5])], lambda x: _hard_swish(x, 1 / 6, 0.5), c),
        ("LEAKY_RELU", OP.LEAKY_RELU, [f32([0.1])], lambda x: _leaky_relu(x, 0.1), c),
        ("PRELU", OP.PRELU, [f32(slope)], lambda x: _prelu(x, slope), c),
        ("SOFTPLUS", OP.SOFTPLUS, [f32([2.0])], lambda x: _softplus(x, 2.0), c),
        ("SWISH", OP.SWISH, [], _swish, c),
    ]


Q8_CASES = _q8_cases()


@pytest.mark.parametrize("op,extra,ref,out_scale", [c[1:] for c in Q8_CASES], ids=[c[0] for c in Q8_CASES])
def test_quantized(op, extra, ref, out_scale):
    # int8 input of scale 0.04 covers [-5.08, 5.08]; the reference sees the dequantized values.
    x, x_real = q8_input(rand(2, 3, 4, seed=12, low=-5.0, high=5.0), 0.04)
    # check_quantized allows 1 LSB: float32 evaluation may move a value across a rounding boundary.
    check_quantized(op, [x, *extra], ref(x_real), out_scale=out_scale)


def test_quantized_clip_bounds_keep_their_own_scale():
    """min/max are dequantized with their own scale, which may differ from the input's."""
    x, x_real = q8_input(rand(4, 5, seed=13, low=-5.0, high=5.0), 0.04)
    low = Const(np.array([-100], "int8"), P.QUANT_INT8_SYMM_PER_LAYER, scale=0.01)  # -1.0
    high = Const(np.array([30], "int8"), P.QUANT_INT8_SYMM_PER_LAYER, scale=0.1)  # 3.0
    check_quantized(OP.CLIP, [x, low, high], _clip(x_real, -1.0, 3.0), out_scale=0.04)


def test_softplus_threshold_operand():
    # The header's optional third operand moves the switch to the linear branch.
    x = np.linspace(-4, 4, 33, dtype="float32")
    check_op(OP.SOFTPLUS, [In(x), f32([2.0]), f32([3.0])], _softplus(x, 2.0, threshold=3.0), **SOFTPLUS_TOL)


# -- FLOAT16 / FLOAT64 inputs (op_schema.py widens these activations beyond the spec) -------------
WIDE = {"float16": P.FLOAT16, "float64": P.FLOAT64}
# float64 computes in float64 (the references are float64); float16 computes in float16: a few of
# its ulp (2^-10 relative), and atol for results near 0.
WIDE_TOL = {"float16": {"rtol": 4e-3, "atol": 2e-3}, "float64": {"rtol": 1e-12, "atol": 1e-12}}
WIDE_CASES = {
    "leaky_relu": (OP.LEAKY_RELU, lambda x: [f32([0.1])], lambda x: _leaky_relu(x, 0.1)),
    "hard_sigmoid": (OP.HARD_SIGMOID, lambda x: [f32([0.2]), f32([0.5])], lambda x: _hard_sigmoid(x, 0.2, 0.5)),
    "prelu_one": (OP.PRELU, lambda x: [f32([0.25])], lambda x: _prelu(x, [0.25])),
    "prelu_channels": (OP.PRELU, lambda x: [f32([0.1, -0.2, 0.3])], lambda x: _prelu(x, [0.1, -0.2, 0.3])),
    "softplus": (OP.SOFTPLUS, lambda x: [f32([1.0])], lambda x: _softplus(x, 1.0)),
    "softplus_no_threshold": (OP.SOFTPLUS, lambda x: [f32([2.0]), f32([np.inf])], lambda x: _softplus(x, 2.0, np.inf)),
    "gelu": (OP.GELU, lambda x: [b8([False])], lambda x: _gelu(x, False)),
    "gelu_tanh": (OP.GELU, lambda x: [b8([True])], lambda x: _gelu(x, True)),
}


@pytest.mark.parametrize("dtype", list(WIDE))
@pytest.mark.parametrize("case", list(WIDE_CASES))
def test_widened_float_types(case, dtype):
    """Attributes (alpha, beta, slope) stay FLOAT32 operands; the math runs in the input's type."""
    op, extra, ref = WIDE_CASES[case]
    x = rand(2, 3, 4, seed=5, low=-6.0, high=6.0).astype(dtype)
    # The references compute in float64 from float32-rounded inputs: exact for float16 inputs too.
    expected = np.asarray(ref(x.astype("float32")), "float64")
    if dtype == "float64":
        expected = np.asarray(_ref64(case, x), "float64")
    check_op(op, [In(x, WIDE[dtype]), *extra(x)], expected.astype(dtype), [Out(WIDE[dtype])], **WIDE_TOL[dtype])


def _ref64(case, x):
    """The float64 references of WIDE_CASES without the float32 rounding of the input."""
    x = x.astype("float64")
    alpha = float(np.float32(0.1))
    slope = np.float32([0.1, -0.2, 0.3]).astype("float64").reshape(1, 3, 1)
    refs = {
        "leaky_relu": lambda: np.where(x >= 0, x, alpha * x),
        "hard_sigmoid": lambda: np.clip(float(np.float32(0.2)) * x + 0.5, 0, 1),
        "prelu_one": lambda: np.where(x >= 0, x, 0.25 * x),
        "prelu_channels": lambda: np.where(x >= 0, x, slope * x),
        "softplus": lambda: np.where(x > 20, x, np.logaddexp(0, x)),
        "softplus_no_threshold": lambda: np.logaddexp(0, 2 * x) / 2,
        "gelu": lambda: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
        "gelu_tanh": lambda: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    }
    return refs[case]()


# -- NaN and infinities pass through the bounds --------------------------------------------------
def with_specials(*shape: int, seed: int) -> np.ndarray:
    """Random values with NaN, +inf and -inf sprinkled in; large enough that the kernels are vectorized
    and parallel (the schedules' code paths, not only the scalar tail)."""
    x = rand(*shape, seed=seed, low=-8.0, high=8.0)
    flat = x.reshape(-1)
    rng = np.random.default_rng(seed)
    for value in (np.nan, np.inf, -np.inf):
        flat[rng.choice(flat.size, flat.size // 50, replace=False)] = value
    return x


@pytest.mark.parametrize("op", [OP.RELU, OP.RELU6], ids=lambda o: o.name)
def test_relu_keeps_nan(op):
    """max(0, NaN) is NaN in the spec's formula and numpy (TVM's own relu and clip gave 0 or the bound)."""
    x = with_specials(3, 4099, seed=11)
    got = check_op(op, [In(x)], REFS[op](x), rtol=0, atol=0)[0]
    assert np.isnan(got).sum() == np.isnan(x).sum()


@pytest.mark.parametrize("op", list(HARD), ids=lambda o: o.name)
def test_hard_activations_keep_nan(op):
    x = with_specials(2, 4099, seed=12)
    with np.errstate(invalid="ignore"):  # HARD_SWISH: inf * 0 is NaN, in the reference as in the kernel
        want = HARD[op](x, 0.2, 0.5)
    got = check_op(op, [In(x), f32([0.2]), f32([0.5])], want, rtol=1e-6, atol=1e-6)[0]
    assert np.isnan(got[np.isnan(x)]).all()
