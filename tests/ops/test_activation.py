"""RELU, RELU6, SIGMOID, TANH and SOFTMAX against numpy references written from the spec."""

import numpy as np
import pytest
from oputil import In, Out, check_op, i32, rand, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
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
    check_op(OP.SOFTMAX, [In(x)], _softmax(x, 1), rtol=1e-5, atol=1e-6)


def test_softmax_large_values_are_stable():
    """Inputs whose exp overflows float32 still give the mathematically defined result."""
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], "float32")
    expected = _softmax(x - x.max(axis=1, keepdims=True), 1)
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
    check_op(OP.SOFTMAX, [In(x, dims=[nna.UNKNOWN, 3, 4]), i32([-1])], _softmax(x, -1), out, rtol=1e-5, atol=1e-6)
