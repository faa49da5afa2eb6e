"""Float16 reductions accumulate in float32 and round to float16 once (MAT_MUL, SOFTMAX, ONNX Conv), as
numpy's float16 matmul and sum (the references of onnx's node cases) and float16 inference engines do.

The references are independent: the exact (float64) product or convolution of the float16 operands rounded
to float16 once, and the onnx reference's float16 softmax (float16 exp, numpy's float16 sum, float16
division).  Each case also shows that summing in float16 would miss that reference, so it discriminates.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from oputil import In, Out, check_op, i32, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
P = nna.Precision


def _ulps(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|got - expected| in units of the float16 spacing at the reference."""
    diff = np.abs(got.astype("float64") - expected.astype("float64"))
    return diff / np.spacing(np.abs(expected)).astype("float64")


def _float16_sequential_matmul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x @ y summed term by term in float16 (a rounding after every term): what accumulating in float16 gives."""
    acc = np.zeros(x.shape[:-1] + y.shape[-1:], "float16")
    for k in range(x.shape[-1]):
        acc = (acc + x[..., k : k + 1] * y[..., k : k + 1, :]).astype("float16")
    return acc


@pytest.mark.parametrize("x_shape,y_shape", [((4, 512), (512, 3)), ((2, 3, 256), (256, 4))], ids=str)
def test_mat_mul_float16_rounds_once(x_shape, y_shape):
    rng = np.random.default_rng(len(x_shape))
    x = rng.uniform(0.0, 1.0, x_shape).astype("float16")  # positive terms: float16 sums drift the most
    y = rng.uniform(0.0, 1.0, y_shape).astype("float16")
    exact = np.matmul(x.astype("float64"), y.astype("float64")).astype("float16")
    (got,) = run_op(OP.MAT_MUL, [In(x, P.FLOAT16), In(y, P.FLOAT16)], [Out(P.FLOAT16)], [exact.shape])
    assert got.dtype == np.float16
    # float32 partial sums err by ~K * 2^-24 relative: far below half a float16 ulp, so the one rounding
    # gives the exactly rounded product except where it lies within that of a rounding boundary.
    assert _ulps(got, exact).max() <= 1
    assert (got == exact).mean() >= 0.95
    assert _ulps(_float16_sequential_matmul(x, y), exact).max() > 1  # float16 accumulation would miss it


def _onnx_reference_softmax_float16(x: np.ndarray, axis: int) -> np.ndarray:
    """onnx.reference's softmax on float16: exp rounded to float16, numpy's float16 sum, float16 division."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((3, 700), 1), ((2, 5, 4), 1), ((2, 3, 300), -1)], ids=str)
def test_softmax_float16_sums_in_float32(shape, axis):
    rng = np.random.default_rng(shape[-1])
    x = rng.uniform(-1.0, 1.0, shape).astype("float16")
    expected = _onnx_reference_softmax_float16(x, axis)
    got = check_op(OP.SOFTMAX, [In(x, P.FLOAT16), i32([axis])], expected, [Out(P.FLOAT16)], rtol=1e-3, atol=0)[0]
    assert _ulps(got, expected).max() <= 1  # the exp may round the other way (a float32 exp rounded)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    total = np.zeros_like(np.take(e, [0], axis=axis))
    for k in range(e.shape[axis]):
        total = (total + np.take(e, [k], axis=axis)).astype("float16")
    if e.shape[axis] > 100:  # float16 accumulation over a long axis would miss it
        assert _ulps(e / total, expected).max() > 1


def test_softmax_float32_unchanged_nan_rows():
    """The float32 path is relax's softmax as before: a row of -inf gives NaN (ONNX Softmax's arithmetic)."""
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]], "float32")
    (got,) = run_op(OP.SOFTMAX, [In(x), i32([1])], [Out()], [x.shape])
    assert np.isnan(got[0]).all()
    np.testing.assert_allclose(got[1], np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum(), rtol=1e-6)


def _conv_model(x_shape: list[int], w: np.ndarray, b: np.ndarray, y_shape: list[int], **attrs):
    f16 = TensorProto.FLOAT16
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", f16, x_shape)],
        [helper.make_tensor_value_info("y", f16, y_shape)],
        initializer=[
            helper.make_tensor("w", f16, w.shape, w.ravel()),
            helper.make_tensor("b", f16, b.shape, b.ravel()),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _conv2d_exact(x: np.ndarray, w: np.ndarray, b: np.ndarray, pads: list[int], group: int) -> np.ndarray:
    """The float64 convolution (ONNX pads [top, left, bottom, right], stride 1) of float16 operands."""
    x = np.pad(x.astype("float64"), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    out = np.zeros((n, m, h - kh + 1, wd - kw + 1))
    for o in range(m):
        g = o // (m // group)
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                patch = x[:, g * cg : (g + 1) * cg, i : i + kh, j : j + kw]
                out[:, o, i, j] = (patch * w[o].astype("float64")).sum(axis=(1, 2, 3))
    return out + b.astype("float64")[None, :, None, None]


@pytest.mark.parametrize("group", [1, 2])
def test_onnx_conv_float16_rounds_once(group):
    """A float16 Conv (refused before: CONV_2D takes FLOAT32) computes in float32 between CASTs."""
    rng = np.random.default_rng(group)
    x = rng.uniform(0.0, 1.0, (2, 4, 6, 7)).astype("float16")
    w = rng.uniform(0.0, 1.0, (4, 4 // group, 3, 3)).astype("float16")
    b = rng.uniform(-1.0, 1.0, (4,)).astype("float16")
    exact = _conv2d_exact(x, w, b, [1, 1, 1, 1], group).astype("float16")
    model = _conv_model(list(x.shape), w, b, list(exact.shape), pads=[1, 1, 1, 1], group=group)
    (got,) = nna.Predictor(model).run({"x": x})
    assert got.dtype == np.float16 and got.shape == exact.shape
    assert _ulps(got, exact).max() <= 1
    assert (got == exact).mean() >= 0.95
