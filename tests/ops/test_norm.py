"""BATCH_NORMALIZATION against a numpy reference written from the spec."""

import numpy as np
import pytest
from oputil import In, Out, check_op, f32, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType


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
    check_op(OP.BATCH_NORMALIZATION, ins, _bn_ref(x, *params, 1e-3), out, rtol=1e-5, atol=1e-5)
