"""QDQ convolutions and matrix products as onnxruntime's ``quantize_static`` writes them (QuantizeLinear /
DequantizeLinear around a Conv, Gemm or MatMul: uint8 activations with a zero point, int8 weights per tensor
or per output channel, an int32 bias) import as CONV_2D / FULLY_CONNECTED on quantized operands and sum
integer products (op_converters/quant_integer.py); results within one quantization step of onnxruntime's
int8 kernels."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.op_converters import conv as conv_converter
from nnadapter_tvm.op_converters import matmul as matmul_converter

X_SCALE, X_ZERO = 0.02, 128
Y_SCALE, Y_ZERO = 0.05, 3
# Activations: (type, x's zero point, y's). onnxruntime's quantize_static writes int8 ones by default (S8S8),
# with zero points (stored shifted to uint8, Value.shifted), or symmetric with ActivationSymmetric.
ACTIVATIONS = {"uint8": ("uint8", X_ZERO, Y_ZERO), "int8": ("int8", -7, -20), "int8-symmetric": ("int8", 0, 0)}


def _qdq_conv_model(
    c: int, oc: int, group: int, per_channel: bool, residual: bool, dims: list, act: str = "uint8"
) -> bytes:
    dtype, x_zero, y_zero = ACTIVATIONS[act]
    rng = np.random.default_rng(c * oc + group)
    w = rng.integers(-127, 128, (oc, c // group, 3, 3)).astype("int8")
    w_scale = rng.uniform(0.002, 0.01, oc).astype("float32") if per_channel else np.array(0.005, "float32")
    b_scale = (np.float32(X_SCALE) * np.broadcast_to(w_scale, [oc])).astype("float32")
    bias = rng.integers(-3000, 3000, oc).astype("int32")

    def scalar(value, dtype):
        return np.array(value, dtype)

    inits = [
        numpy_helper.from_array(scalar(X_SCALE, "float32"), "x_scale"),
        numpy_helper.from_array(scalar(x_zero, dtype), "x_zero"),
        numpy_helper.from_array(scalar(Y_SCALE, "float32"), "y_scale"),
        numpy_helper.from_array(scalar(y_zero, dtype), "y_zero"),
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.zeros(w_scale.shape, "int8"), "w_zero"),
        numpy_helper.from_array(bias, "b_q"),
        numpy_helper.from_array(b_scale if per_channel else b_scale[:1].reshape(()), "b_scale"),
        numpy_helper.from_array(np.zeros(oc if per_channel else (), "int32"), "b_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero"], ["b_dq"], axis=0),
        helper.make_node("Conv", ["x_dq", "w_dq", "b_dq"], ["conv"], pads=[1, 1, 1, 1], group=group),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("QuantizeLinear", ["relu", "y_scale", "y_zero"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y" if not residual else "y_dq"]),
    ]
    if residual:  # a skip connection, requantized after the addition (ResNet's blocks)
        nodes += [
            helper.make_node("Add", ["y_dq", "x_dq"], ["sum"]),
            helper.make_node("QuantizeLinear", ["sum", "y_scale", "y_zero"], ["sum_q"]),
            helper.make_node("DequantizeLinear", ["sum_q", "y_scale", "y_zero"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


CASES = {
    "per-channel": dict(c=16, oc=32, group=1, per_channel=True, residual=False),
    "per-tensor": dict(c=8, oc=24, group=1, per_channel=False, residual=False),
    "depthwise": dict(c=16, oc=16, group=16, per_channel=True, residual=False),
    "residual": dict(c=16, oc=16, group=1, per_channel=True, residual=True),
}


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("case", list(CASES))
def test_qdq_conv_sums_integers_like_onnxruntime(case: str, symbolic: bool, act: str, monkeypatch) -> None:
    kwargs = CASES[case]
    c = kwargs["c"]
    dims = ["N", c, "H", "W"] if symbolic else [2, c, 9, 10]
    model = _qdq_conv_model(dims=dims, act=act, **kwargs)
    routes = []

    def spy(*args, **kw):
        result = original(*args, **kw)
        routes.append(result is not None)
        return result

    original = conv_converter.integer_conv_2d
    monkeypatch.setattr(conv_converter, "integer_conv_2d", spy)
    predictor = nna.Predictor(model)
    assert routes == [True], "the Conv did not become a CONV_2D on quantized operands"
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for shape in ([2, c, 9, 10], [1, c, 5, 13]) if symbolic else ([2, c, 9, 10],):
        x = np.random.default_rng(sum(shape)).uniform(-2.5, 2.5, shape).astype("float32")
        (want,) = session.run(None, {"x": x})
        (got,) = predictor.run([x])
        steps = np.abs(got - want) / Y_SCALE
        # One step apart where a value lies within float32 rounding of a tie (onnxruntime requantizes in
        # float32 with its own order of operations); two with the residual's second requantization.
        assert steps.max() <= (2 if kwargs["residual"] else 1) + 1e-3, steps.max()
        assert np.mean(steps > 0.5) < 0.02


def _qdq_product_model(op: str, k: int, n: int, per_channel: bool, dims: list, act: str = "uint8") -> bytes:
    """x -> Q/DQ -> Gemm (transB=1, weight [N, K], int32 bias) or MatMul (weight [K, N]) -> Relu -> Q/DQ."""
    dtype, x_zero, y_zero = ACTIVATIONS[act]
    rng = np.random.default_rng(k * n)
    shape = (n, k) if op == "Gemm" else (k, n)
    axis = 0 if op == "Gemm" else 1
    w = rng.integers(-127, 128, shape).astype("int8")
    w_scale = rng.uniform(0.002, 0.01, n).astype("float32") if per_channel else np.array(0.005, "float32")
    inits = [
        numpy_helper.from_array(np.array(X_SCALE, "float32"), "x_scale"),
        numpy_helper.from_array(np.array(x_zero, dtype), "x_zero"),
        numpy_helper.from_array(np.array(Y_SCALE, "float32"), "y_scale"),
        numpy_helper.from_array(np.array(y_zero, dtype), "y_zero"),
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.zeros(w_scale.shape, "int8"), "w_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=axis),
    ]
    if op == "Gemm":
        b_scale = (np.float32(X_SCALE) * np.broadcast_to(w_scale, [n])).astype("float32")
        inits += [
            numpy_helper.from_array(rng.integers(-3000, 3000, n).astype("int32"), "b_q"),
            numpy_helper.from_array(b_scale if per_channel else b_scale[:1].reshape(()), "b_scale"),
            numpy_helper.from_array(np.zeros(n if per_channel else (), "int32"), "b_zero"),
        ]
        nodes += [
            helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero"], ["b_dq"], axis=0),
            helper.make_node("Gemm", ["x_dq", "w_dq", "b_dq"], ["prod"], transB=1),
        ]
    else:
        nodes.append(helper.make_node("MatMul", ["x_dq", "w_dq"], ["prod"]))
    nodes += [
        helper.make_node("Relu", ["prod"], ["relu"]),
        helper.make_node("QuantizeLinear", ["relu", "y_scale", "y_zero"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_product",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


PRODUCT_CASES = {
    "gemm-per-channel": ("Gemm", [3, 40], 24, True),
    "gemm-per-tensor": ("Gemm", [2, 100], 17, False),
    "matmul-rank3": ("MatMul", [2, 5, 32], 48, True),
    "matmul-rank2-per-tensor": ("MatMul", [4, 20], 8, False),
}


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("case", list(PRODUCT_CASES))
def test_qdq_products_sum_integers_like_onnxruntime(case: str, act: str, monkeypatch) -> None:
    op, dims, n, per_channel = PRODUCT_CASES[case]
    model = _qdq_product_model(op, dims[-1], n, per_channel, dims, act)
    routes = []

    def spy(*args, **kw):
        result = original(*args, **kw)
        routes.append(result is not None)
        return result

    original = matmul_converter.integer_fully_connected
    monkeypatch.setattr(matmul_converter, "integer_fully_connected", spy)
    predictor = nna.Predictor(model)
    assert routes == [True], "the product did not become a FULLY_CONNECTED on quantized operands"
    x = np.random.default_rng(len(case)).uniform(-2.5, 2.5, dims).astype("float32")
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = predictor.run([x])
    assert got.shape == want.shape
    steps = np.abs(got - want) / Y_SCALE
    assert steps.max() <= 1 + 1e-3, steps.max()
