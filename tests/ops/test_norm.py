"""Normalizations (BATCH_, INSTANCE_, LAYER_, GROUP_, LP_NORMALIZATION and LRN) against float64
numpy references written from the spec, in float32 and QUANT_INT8_SYMM_PER_LAYER."""

import numpy as np
import pytest
from oputil import Const, In, Out, check_op, check_quantized, expect_error, f32, i32, q8_input, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
EMPTY_F32 = Const(np.zeros([0], "float32"))  # an operand given empty: its default applies
EMPTY_I32 = i32(np.zeros([0], "int32"))


def _bn_ref(x, scale, bias, mean, var, eps):
    """Per channel (axis 1): (x - mean) / sqrt(variance + epsilon) * scale + bias."""
    shape = [1, -1] + [1] * (x.ndim - 2)
    c = [p.astype("float64").reshape(shape) for p in (scale, bias, mean, var)]
    y = (x.astype("float64") - c[2]) / np.sqrt(c[3] + eps) * c[0] + c[1]
    return y.astype("float32")


def _params(channels, seed):
    scale, bias, mean = (rand(channels, seed=seed + i) for i in range(3))
    var = rand(channels, seed=seed + 3, low=0.0, high=2.0)
    var[0] = 0.0  # epsilon alone keeps the denominator away from zero
    return scale, bias, mean, var


SHAPES = [(4, 3), (2, 3, 5), (2, 3, 4, 4), (1, 2, 3, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("eps", [None, 1e-3, 0.5], ids=["default", "1e-3", "0.5"])
def test_batch_normalization(shape, eps):
    x = rand(*shape, seed=len(shape))
    params = _params(shape[1], seed=10)
    operands = [In(x), *(f32(p) for p in params)]
    if eps is not None:
        operands.append(f32([eps]))
    # With variance 0 and the default epsilon 1e-5, outputs reach ~1e3 (ulp ~1e-4); float32
    # rsqrt/multiply rounding gives relative errors ~3e-6: rtol 1e-5, atol 1e-4 for values near 0.
    expected = _bn_ref(x, *params, 1e-5 if eps is None else eps)
    check_op(OP.BATCH_NORMALIZATION, operands, expected, rtol=1e-5, atol=1e-4)


def test_batch_normalization_params_as_inputs():
    """scale/bias/mean/variance fed at execution time behave like constants."""
    x = rand(2, 3, 2, 2, seed=1)
    params = _params(3, seed=20)
    operands = [In(x), *(In(p) for p in params), f32([1e-3])]
    # float32 rsqrt/multiply rounding (as above); epsilon 1e-3 keeps outputs small, so atol 1e-5.
    check_op(OP.BATCH_NORMALIZATION, operands, _bn_ref(x, *params, 1e-3), rtol=1e-5, atol=1e-5)


def test_batch_normalization_wrong_channel_count():
    x = rand(2, 3, 4)
    scale, bias, mean, var = _params(4, seed=30)
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.BATCH_NORMALIZATION, [In(x), f32(scale), f32(bias), f32(mean), f32(var)], [Out()], [x.shape])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "BATCH_NORMALIZATION" in str(info.value) and "'scale'" in str(info.value)


def test_batch_normalization_unknown_batch():
    x = rand(2, 3, 2, 2, seed=2)
    params = _params(3, seed=40)
    ins = [In(x, dims=[nna.UNKNOWN, 3, 2, 2]), *(f32(p) for p in params), f32([1e-3])]
    out = [Out(dims=[nna.UNKNOWN, 3, 2, 2])]
    # float32 rsqrt/multiply rounding; epsilon 1e-3 keeps outputs small, so atol 1e-5.
    check_op(OP.BATCH_NORMALIZATION, ins, _bn_ref(x, *params, 1e-3), out, rtol=1e-5, atol=1e-5)


def test_batch_normalization_quantized():
    # int8 input of scale 0.02 covers [-2.54, 2.54]; the reference sees the dequantized values.
    x, x_real = q8_input(rand(2, 3, 4, 4, seed=3), 0.02)
    params = _params(3, seed=50)
    operands = [x, *(f32(p) for p in params), f32([1e-3])]
    # check_quantized allows 1 LSB: float32 evaluation may move a value across a rounding boundary.
    check_quantized(OP.BATCH_NORMALIZATION, operands, _bn_ref(x_real, *params, 1e-3), out_scale=0.5)


# -- references written from the spec (float64) ----------------------------------------------
def _standardize(x, axes, eps):
    """(x - mean) / sqrt(variance + eps) over ``axes``, biased variance."""
    x = x.astype("float64")
    mean = x.mean(axis=tuple(axes), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=tuple(axes), keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def _per_channel(p, ndim):
    return p.astype("float64").reshape([1, -1] + [1] * (ndim - 2))


def _instance_norm_ref(x, scale, bias, eps):
    """Mean and variance per (n, c) over the remaining axes."""
    y = _standardize(x, range(2, x.ndim), eps) if x.ndim > 2 else np.zeros(x.shape)
    if scale is not None:
        y = y * _per_channel(scale, x.ndim)
    if bias is not None:
        y = y + _per_channel(bias, x.ndim)
    return y.astype("float32")


def _layer_norm_ref(x, scale, bias, begin, eps):
    """Mean and variance over the dims from begin_norm_axis on; scale/bias shaped like those dims."""
    y = _standardize(x, range(begin % x.ndim, x.ndim), eps)
    if scale is not None:
        y = y * scale.astype("float64")
    if bias is not None:
        y = y + bias.astype("float64")
    return y.astype("float32")


def _group_norm_ref(x, scale, bias, eps, groups):
    """Channels split into ``groups`` consecutive groups; statistics per (n, group)."""
    n, c = x.shape[:2]
    grouped = x.reshape(n, groups, c // groups, *x.shape[2:])
    y = _standardize(grouped, range(2, grouped.ndim), eps).reshape(x.shape)
    return (y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype("float32")


def _lp_norm_ref(x, axes, p, eps):
    """p = 1: x / (sum(|x|) + eps); p = 2: x / (sqrt(sum(x^2)) + eps)."""
    x = x.astype("float64")
    axes = tuple(axes)
    norm = np.abs(x).sum(axis=axes, keepdims=True) if p == 1 else np.sqrt((x * x).sum(axis=axes, keepdims=True))
    return (x / (norm + eps)).astype("float32")


def _lrn_ref(x, size, bias, alpha, beta):
    """x / (bias + alpha * square_sum)^beta, square_sum over channels
    [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to [0, C) (alpha not divided by size)."""
    x = x.astype("float64")
    channels = x.shape[1]
    lo_pad, hi_pad = (size - 1) // 2, size - 1 - (size - 1) // 2
    out = np.empty_like(x)
    for c in range(channels):
        lo, hi = max(0, c - lo_pad), min(channels - 1, c + hi_pad)
        square_sum = (x[:, lo : hi + 1] ** 2).sum(axis=1)
        out[:, c] = x[:, c] / (bias + alpha * square_sum) ** beta
    return out.astype("float32")


# Statistics in float32 (sums of up to ~100 values, an rsqrt) against float64: relative errors
# of a few 1e-7 on standardized values of magnitude up to ~3, hence rtol 1e-5 and atol 1e-5.
NORM_TOL = {"rtol": 1e-5, "atol": 1e-5}


# -- INSTANCE_NORMALIZATION ----------------------------------------------------------------------
IN_SHAPES = [(3, 4), (2, 3, 5), (2, 3, 4, 4), (1, 2, 3, 2, 2)]


@pytest.mark.parametrize("shape", IN_SHAPES, ids=str)
@pytest.mark.parametrize("eps", [None, 1e-3], ids=["default", "1e-3"])
def test_instance_normalization(shape, eps):
    x = rand(*shape, seed=len(shape))
    scale, bias = rand(shape[1], seed=1), rand(shape[1], seed=2)
    operands = [In(x), f32(scale), f32(bias)] + ([] if eps is None else [f32([eps])])
    expected = _instance_norm_ref(x, scale, bias, 1e-5 if eps is None else eps)
    check_op(OP.INSTANCE_NORMALIZATION, operands, expected, **NORM_TOL)


def test_instance_normalization_params_as_inputs_unknown_batch():
    """scale/bias fed at execution time, and a batch unknown until then."""
    x = rand(2, 3, 2, 5, seed=4)
    scale, bias = rand(3, seed=5), rand(3, seed=6)
    ins = [In(x, dims=[nna.UNKNOWN, 3, 2, 5]), In(scale), In(bias), f32([1e-3])]
    out = [Out(dims=[nna.UNKNOWN, 3, 2, 5])]
    check_op(OP.INSTANCE_NORMALIZATION, ins, _instance_norm_ref(x, scale, bias, 1e-3), out, **NORM_TOL)


def test_instance_normalization_empty_scale_bias():
    """Empty scale/bias (Paddle's optional Scale/Bias) stand for 1 and 0."""
    x = rand(2, 3, 6, seed=7)
    expected = _instance_norm_ref(x, None, None, 1e-5)
    check_op(OP.INSTANCE_NORMALIZATION, [In(x), EMPTY_F32, EMPTY_F32], expected, **NORM_TOL)


def test_instance_normalization_large_mean_is_stable():
    """Inputs 100 +- 1: the variance of the centred values; E[x^2] - E[x]^2 in float32 would be
    off by up to ~1e-2 relative here."""
    x = (100 + rand(2, 2, 8, 8, seed=8, low=-1.0, high=1.0)).astype("float32")
    scale, bias = np.ones(2, "float32"), np.zeros(2, "float32")
    # the float32 mean carries ~ulp(100) = 8e-6 of error into every centred value (~0.6): 1e-4.
    check_op(
        OP.INSTANCE_NORMALIZATION,
        [In(x), f32(scale), f32(bias)],
        _instance_norm_ref(x, scale, bias, 1e-5),
        rtol=1e-4,
        atol=1e-4,
    )


def test_instance_normalization_wrong_channel_count():
    x = rand(2, 3, 4)
    run = lambda: run_op(OP.INSTANCE_NORMALIZATION, [In(x), f32(rand(4)), f32(rand(3))], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "INSTANCE_NORMALIZATION", "'scale'")


def test_instance_normalization_rank1():
    x = rand(5)
    run = lambda: run_op(OP.INSTANCE_NORMALIZATION, [In(x), f32(rand(5)), f32(rand(5))], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "INSTANCE_NORMALIZATION", "'input'", "rank >= 2")


# -- LAYER_NORMALIZATION -------------------------------------------------------------------------
LN_SHAPES = [(7,), (3, 4), (2, 3, 4), (2, 3, 2, 3), (1, 2, 3, 2, 2)]
LN_CASES = [(shape, begin) for shape in LN_SHAPES for begin in range(-len(shape), len(shape))]


@pytest.mark.parametrize("shape,begin", LN_CASES, ids=str)
def test_layer_normalization(shape, begin):
    x = rand(*shape, seed=begin + 10)
    dims = shape[begin % len(shape) :]
    scale, bias = rand(*dims, seed=1), rand(*dims, seed=2)
    operands = [In(x), f32(scale), f32(bias), i32([begin])]
    check_op(OP.LAYER_NORMALIZATION, operands, _layer_norm_ref(x, scale, bias, begin, 1e-5), **NORM_TOL)


@pytest.mark.parametrize("eps", [1e-3, 0.5], ids=str)
def test_layer_normalization_epsilon(eps):
    x = rand(2, 3, 4, seed=3)
    scale, bias = rand(4, seed=1), rand(4, seed=2)
    operands = [In(x), f32(scale), f32(bias), i32([2]), f32([eps])]
    check_op(OP.LAYER_NORMALIZATION, operands, _layer_norm_ref(x, scale, bias, 2, eps), **NORM_TOL)


def test_layer_normalization_empty_operands():
    """Empty begin_norm_axis means 1 (the header's default); empty scale/bias mean 1 and 0."""
    x = rand(2, 3, 4, seed=4)
    operands = [In(x), EMPTY_F32, EMPTY_F32, EMPTY_I32]
    check_op(OP.LAYER_NORMALIZATION, operands, _layer_norm_ref(x, None, None, 1, 1e-5), **NORM_TOL)


def test_layer_normalization_unknown_dims():
    """An unknown batch, and an unknown normalized dim that the constant scale fixes."""
    x = rand(2, 3, 4, seed=5)
    scale, bias = rand(3, 4, seed=1), rand(3, 4, seed=2)
    ins = [In(x, dims=[nna.UNKNOWN, nna.UNKNOWN, 4]), f32(scale), f32(bias), i32([1])]
    out = [Out(dims=[nna.UNKNOWN, 3, 4])]
    check_op(OP.LAYER_NORMALIZATION, ins, _layer_norm_ref(x, scale, bias, 1, 1e-5), out, **NORM_TOL)


def test_layer_normalization_large_mean_is_stable():
    """As for INSTANCE_NORMALIZATION: a one-pass float32 variance is off by up to 1.2e-2 here."""
    x = (100 + rand(4, 64, seed=6, low=-1.0, high=1.0)).astype("float32")
    ones, zeros = np.ones(64, "float32"), np.zeros(64, "float32")
    # the float32 mean carries ~ulp(100) = 8e-6 of error into every centred value (~0.6): 1e-4.
    check_op(
        OP.LAYER_NORMALIZATION,
        [In(x), f32(ones), f32(zeros), i32([1])],
        _layer_norm_ref(x, ones, zeros, 1, 1e-5),
        rtol=1e-4,
        atol=1e-4,
    )


def test_layer_normalization_wrong_scale_shape():
    x = rand(2, 3, 4)
    run = lambda: run_op(OP.LAYER_NORMALIZATION, [In(x), f32(rand(12)), f32(rand(3, 4)), i32([1])], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "LAYER_NORMALIZATION", "'scale'")


@pytest.mark.parametrize("begin", [3, -4])
def test_layer_normalization_axis_out_of_range(begin):
    x = rand(2, 3, 4)
    run = lambda: run_op(OP.LAYER_NORMALIZATION, [In(x), f32(rand(4)), f32(rand(4)), i32([begin])], [Out()], [x.shape])  # noqa: E731
    expect_error(run, "LAYER_NORMALIZATION", "'begin_norm_axis'")


# -- GROUP_NORMALIZATION -------------------------------------------------------------------------
# Every divisor of C = 6 on a 4-D input; groups 3 on the other ranks.
GN_CASES = [((2, 6, 3, 4), g) for g in (1, 2, 3, 6)] + [(s, 3) for s in [(2, 6), (2, 6, 5), (1, 6, 2, 2, 3)]]


@pytest.mark.parametrize("shape,groups", GN_CASES, ids=str)
def test_group_normalization(shape, groups):
    x = rand(*shape, seed=groups)
    scale, bias = rand(6, seed=1), rand(6, seed=2)
    operands = [In(x), f32(scale), f32(bias), f32([1e-3]), i32([groups])]
    check_op(OP.GROUP_NORMALIZATION, operands, _group_norm_ref(x, scale, bias, 1e-3, groups), **NORM_TOL)


def test_group_normalization_default_epsilon_unknown_batch():
    """epsilon given empty (it precedes groups, so it cannot be left out): 1e-5; batch unknown."""
    x = rand(2, 4, 3, 3, seed=3)
    scale, bias = rand(4, seed=1), rand(4, seed=2)
    ins = [In(x, dims=[nna.UNKNOWN, 4, 3, 3]), f32(scale), f32(bias), EMPTY_F32, i32([2])]
    out = [Out(dims=[nna.UNKNOWN, 4, 3, 3])]
    check_op(OP.GROUP_NORMALIZATION, ins, _group_norm_ref(x, scale, bias, 1e-5, 2), out, **NORM_TOL)


@pytest.mark.parametrize("groups", [4, 0, -2])
def test_group_normalization_bad_groups(groups):
    x = rand(2, 6, 3)
    operands = [In(x), f32(rand(6)), f32(rand(6)), f32([1e-5]), i32([groups])]
    expect_error(
        lambda: run_op(OP.GROUP_NORMALIZATION, operands, [Out()], [x.shape]), "GROUP_NORMALIZATION", "'groups'"
    )


def test_group_normalization_wrong_bias_shape():
    x = rand(2, 6, 3)
    operands = [In(x), f32(rand(6)), f32(rand(3)), f32([1e-5]), i32([3])]
    expect_error(lambda: run_op(OP.GROUP_NORMALIZATION, operands, [Out()], [x.shape]), "GROUP_NORMALIZATION", "'bias'")


# -- LP_NORMALIZATION ----------------------------------------------------------------------------
LP_SHAPES = [(7,), (3, 4), (2, 3, 4), (2, 3, 2, 3), (1, 2, 3, 2, 2)]
# Every axis of every rank, negative ones with p = 1 and the others with p = 2.
LP_CASES = [(shape, axis, 1 if axis < 0 else 2) for shape in LP_SHAPES for axis in range(-len(shape), len(shape))]


@pytest.mark.parametrize("shape,axis,p", LP_CASES, ids=str)
def test_lp_normalization(shape, axis, p):
    x = rand(*shape, seed=axis + 20)
    operands = [In(x), i32([axis]), i32([p]), f32([1e-3])]
    # a float32 sum (and sqrt) and a division: a few ulp.
    check_op(OP.LP_NORMALIZATION, operands, _lp_norm_ref(x, [axis], p, 1e-3), rtol=1e-5, atol=1e-6)


def test_lp_normalization_defaults():
    """axis, p and epsilon omitted: 1, 2 and 1e-5."""
    x = rand(2, 3, 4, seed=1)
    # a float32 sum (and sqrt) and a division: a few ulp.
    check_op(OP.LP_NORMALIZATION, [In(x)], _lp_norm_ref(x, [1], 2, 1e-5), rtol=1e-5, atol=1e-6)


def test_lp_normalization_several_axes():
    x = rand(2, 3, 4, seed=2)
    operands = [In(x), i32([1, -1]), i32([1])]
    # a float32 sum of 12 absolute values and a division: a few ulp.
    check_op(OP.LP_NORMALIZATION, operands, _lp_norm_ref(x, [1, 2], 1, 1e-5), rtol=1e-5, atol=1e-6)


def test_lp_normalization_zero_vector():
    """An all-zero slice stays 0: epsilon keeps the denominator positive."""
    x = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]], "float32")
    # zeros must stay exactly 0 (atol 0); 3/5 and 4/5 are one sqrt and division away: ~1 ulp.
    check_op(OP.LP_NORMALIZATION, [In(x), i32([1])], _lp_norm_ref(x, [1], 2, 1e-5), rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "operands,name",
    [([i32([1]), i32([3])], "'p'"), ([i32([3])], "'axis'"), ([i32([-4])], "'axis'"), ([i32([1, -2])], "'axis'")],
    ids=["p=3", "axis=3", "axis=-4", "axis twice"],
)
def test_lp_normalization_bad_operands(operands, name):
    x = rand(2, 3, 4)
    expect_error(lambda: run_op(OP.LP_NORMALIZATION, [In(x), *operands], [Out()], [x.shape]), "LP_NORMALIZATION", name)


# -- LRN -----------------------------------------------------------------------------------------
# Every window kind on a 4-D input (1, odd, even, wider than C = 7); sizes 2 and 5 on other ranks.
LRN_CASES = [((2, 7, 3, 3), n) for n in (1, 2, 3, 5, 6, 9)] + [
    (s, n) for s in [(1, 5, 4), (3, 4), (1, 6, 2, 2, 2)] for n in (2, 5)
]


@pytest.mark.parametrize("shape,size", LRN_CASES, ids=str)
def test_lrn(shape, size):
    """Odd and even windows (even ones reach one channel further up), and windows wider than C."""
    x = rand(*shape, seed=size)
    operands = [In(x), i32([size]), f32([2.0]), f32([0.1]), f32([0.6])]
    # a float32 window sum and pow: a few ulp.
    check_op(OP.LRN, operands, _lrn_ref(x, size, 2.0, 0.1, 0.6), rtol=1e-5, atol=1e-6)


def test_lrn_defaults():
    """All attributes omitted: size 5, bias 1, alpha 1e-4, beta 0.75; alpha large enough to matter."""
    x = rand(2, 6, 3, 3, seed=1, low=-20.0, high=20.0)
    # a float32 window sum and pow: a few ulp.
    check_op(OP.LRN, [In(x)], _lrn_ref(x, 5, 1.0, 1e-4, 0.75), rtol=1e-5, atol=1e-6)


def test_lrn_alpha_is_not_divided_by_size():
    """One channel of value 10, size 5: 10 / (1 + 1 * 100)^1 (Paddle) rather than 10 / (1 + 100 / 5)."""
    x = np.full((1, 1, 1, 1), 10.0, "float32")
    operands = [In(x), i32([5]), f32([1.0]), f32([1.0]), f32([1.0])]
    # one float32 pow and division: ~1 ulp; far from 10 / 21, the value with alpha divided by size.
    check_op(OP.LRN, operands, np.full((1, 1, 1, 1), 10 / 101, "float32"), rtol=1e-6, atol=0)


@pytest.mark.parametrize("size", [0, -3])
def test_lrn_bad_size(size):
    x = rand(1, 3, 2, 2)
    expect_error(lambda: run_op(OP.LRN, [In(x), i32([size])], [Out()], [x.shape]), "LRN", "'size'")


def test_lrn_unknown_dims():
    x = rand(2, 5, 3, seed=2)
    ins = [In(x, dims=[nna.UNKNOWN, 5, nna.UNKNOWN]), i32([3]), f32([1.0]), f32([0.5]), f32([0.75])]
    out = [Out(dims=[nna.UNKNOWN, 5, nna.UNKNOWN])]
    # as test_lrn: a float32 window sum and pow, a few ulp.
    check_op(OP.LRN, ins, _lrn_ref(x, 3, 1.0, 0.5, 0.75), out, rtol=1e-5, atol=1e-6)


# -- QUANT_INT8_SYMM_PER_LAYER -------------------------------------------------------------------
# int8 input of scale 0.02 covers [-2.54, 2.54]; each reference sees the dequantized values.
Q_X, Q_X_REAL = q8_input(rand(2, 6, 3, 4, seed=9), 0.02)
Q_SCALE, Q_BIAS = rand(6, seed=1), rand(6, seed=2)
Q_LN_SCALE, Q_LN_BIAS = rand(3, 4, seed=3), rand(3, 4, seed=4)
Q_CASES = {
    "INSTANCE_NORMALIZATION": (
        [f32(Q_SCALE), f32(Q_BIAS)],
        lambda x: _instance_norm_ref(x, Q_SCALE, Q_BIAS, 1e-5),
        0.05,
    ),
    "LAYER_NORMALIZATION": (
        [f32(Q_LN_SCALE), f32(Q_LN_BIAS), i32([2])],
        lambda x: _layer_norm_ref(x, Q_LN_SCALE, Q_LN_BIAS, 2, 1e-5),
        0.05,
    ),
    "GROUP_NORMALIZATION": (
        [f32(Q_SCALE), f32(Q_BIAS), f32([1e-5]), i32([3])],
        lambda x: _group_norm_ref(x, Q_SCALE, Q_BIAS, 1e-5, 3),
        0.05,
    ),
    "LP_NORMALIZATION": ([i32([1]), i32([2])], lambda x: _lp_norm_ref(x, [1], 2, 1e-5), 1 / 127),
}


@pytest.mark.parametrize("name", list(Q_CASES))
def test_quantized_normalization(name):
    """int8 in and out (LRN is FLOAT32 only)."""
    extra, ref, out_scale = Q_CASES[name]
    # check_quantized allows 1 LSB: float32 evaluation may move a value across a rounding boundary.
    check_quantized(OP[name], [Q_X, *extra], ref(Q_X_REAL), out_scale=out_scale)


def test_layer_normalization_omitted_trailing_operands():
    """begin_norm_axis and epsilon left off entirely: 1 and 1e-5."""
    x = rand(2, 3, 4, seed=5)
    scale, bias = rand(3, 4, seed=6), rand(3, 4, seed=7)
    check_op(
        OP.LAYER_NORMALIZATION, [In(x), f32(scale), f32(bias)], _layer_norm_ref(x, scale, bias, 1, 1e-5), **NORM_TOL
    )


# -- values near float32's largest ----------------------------------------------------------------
def _near_float_max(shape, seed):
    """Ordinary values, with every even row of the last axis set to one value near float32's largest."""
    x = rand(*shape, seed=seed)
    rows = x.reshape(-1, shape[-1])
    for i, value in zip(range(0, rows.shape[0], 2), [-3e38, 3.4028235e38, 3e38, -1.7e38] * 8):
        rows[i] = value
    return x


@pytest.mark.parametrize("unknown", [False, True], ids=["known", "unknown_dims"])
@pytest.mark.parametrize("n", [3, 4, 7])
def test_layer_normalization_near_float_max_does_not_overflow(n, unknown):
    """A row of -3e38 has mean -3e38 and variance 0 (onnxruntime: the bias); a float32 sum of it overflows
    to -inf, and x - mean was NaN.  The means scale before they sum; ordinary rows are unchanged."""
    x = _near_float_max((2, 3, n), seed=n)
    if unknown:  # the normalized dim unknown (no scale/bias to fix it): n is counted at run time
        ins = [In(x, dims=[nna.UNKNOWN, 3, nna.UNKNOWN]), EMPTY_F32, EMPTY_F32, i32([2])]
        want, out = _layer_norm_ref(x, None, None, 2, 1e-5), [Out(dims=[nna.UNKNOWN, 3, nna.UNKNOWN])]
    else:
        scale, bias = rand(n, seed=1), rand(n, seed=2)
        ins = [In(x), f32(scale), f32(bias), i32([2])]
        want, out = _layer_norm_ref(x, scale, bias, 2, 1e-5), None
    got = check_op(OP.LAYER_NORMALIZATION, ins, want, out, **NORM_TOL)[0]
    assert np.isfinite(got).all()


@pytest.mark.parametrize("op", ["LayerNormalization", "InstanceNormalization"])
def test_onnx_normalizations_near_float_max_follow_onnxruntime(op):
    """Rows whose float32 sum or sum of squares overflows, as onnxruntime gives them: LayerNormalization
    the bias where the variance overflows (its mean does not overflow); InstanceNormalization NaN where
    the mean's float32 sum overflows (onnx's reference evaluator too) and the bias where only the
    variance does.  Ordinary rows as numpy in float64."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = np.array([[-3e38, -3e38, 1, 2], [3e38, 1e30, 1, 2], [-3e38] * 4, [1, 2, 3, 4], [3.4e38] * 4], "float32")
    scale, bias = (
        rand(5 if op == "InstanceNormalization" else 4, seed=1),
        rand(5 if op == "InstanceNormalization" else 4, seed=2),
    )
    if op == "LayerNormalization":
        node, shape = helper.make_node(op, ["x", "s", "b"], ["y"], axis=-1), [5, 4]
    else:
        node, shape = helper.make_node(op, ["x", "s", "b"], ["y"]), [1, 5, 4]
    params = [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(bias, "b")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "xy"]
    model = helper.make_model(
        helper.make_graph([node], "g", io[:1], io[1:], params), opset_imports=[helper.make_opsetid("", 17)]
    )
    feeds = {"x": x.reshape(shape)}
    got = nna.Predictor(model).run(feeds)[0].reshape(5, 4)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0].reshape(5, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # NaN in the same places
    ordinary = _layer_norm_ref(x[3:4], None, None, 1, 1e-5)[0]
    per_row = (scale, bias) if op == "LayerNormalization" else (scale[3], bias[3])
    np.testing.assert_allclose(got[3], ordinary * per_row[0] + per_row[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("schedules", ["1", "0"], ids=["cpu_schedules", "no_schedules"])
def test_lrn_alpha_zero_keeps_nan_in_the_window(schedules):
    """alpha 0 still multiplies the window's sum: a NaN in a neighbouring channel gives NaN (0 * NaN), as
    the formula in float64 numpy; TVM's folding of 0.0 * sum gave x / bias^beta there."""
    from oputil import build_model, run_model

    x = rand(1, 5, 3, seed=12)
    x[0, 1, 0] = np.nan
    want = _lrn_ref(x, 3, 2.0, 0.0, 0.6)
    ops = [In(x), i32([3]), f32([2.0]), f32([0.0]), f32([0.6])]
    got = run_model(build_model(OP.LRN, ops, [Out()], [want.shape]), [x], properties=f"CPU_SCHEDULES={schedules};")[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isnan(got[0, :3, 0]).all() and not np.isnan(got[0, 3:, 0]).any()
