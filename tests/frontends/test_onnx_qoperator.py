"""onnxruntime's QOperator form (``quantize_static(quant_format=QOperator)``): QLinearConv, QLinearMatMul and
the com.microsoft QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax, QLinearAveragePool, QLinearGlobalAveragePool, QLinearReduceMean, QLinearWhere and the
8-bit tensors that MaxPool, Reshape, Pad, Resize... read directly.  Each op test quantizes a float input,
runs one operator and dequantizes, against onnxruntime's own contrib kernels: within one step of the
output's scale (the two runtimes round the requantization in different orders)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.op_converters import conv as conv_converter

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
MS = "com.microsoft"
X_SCALE, X_ZERO = 0.03, 120
Y_SCALE, Y_ZERO = 0.05, 110


def _scalars(prefix: str, scale: float, zero: int, dtype: str = "uint8") -> list[onnx.TensorProto]:
    return [
        numpy_helper.from_array(np.array(scale, "float32"), f"{prefix}_scale"),
        numpy_helper.from_array(np.array(zero, dtype), f"{prefix}_zero"),
    ]


def _model(nodes, dims: dict[str, list], inits, opset: int = 13) -> bytes:
    """Graph inputs in ``dims`` (float32) quantized by ``<name>_scale`` and ``<name>_zero`` (x's are given, a
    second input's come in ``inits``); ``nodes`` read ``<name>_q`` and write ``y_q``, dequantized to the
    float output ``y``."""
    quantize = [helper.make_node("QuantizeLinear", [n, f"{n}_scale", f"{n}_zero"], [f"{n}_q"]) for n in dims]
    dequantize = [helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"])]
    graph = helper.make_graph(
        quantize + list(nodes) + dequantize,
        "qoperator",
        [helper.make_tensor_value_info(n, F, d) for n, d in dims.items()],
        [helper.make_tensor_value_info("y", F, None)],
        _scalars("x", X_SCALE, X_ZERO) + _scalars("y", Y_SCALE, Y_ZERO) + list(inits),
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


def _check(model: bytes, shapes: list[dict[str, list]], steps: float = 1.0, apart_share: float = 0.05, reference=None):
    """Ours against onnxruntime (or ``reference(feeds)``): at most ``steps`` of y's scale apart, and apart at
    all in at most ``apart_share`` of the elements."""
    predictor = nna.Predictor(model)
    assert not predictor.graph.host_units
    if reference is None:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        reference = lambda feeds: session.run(None, feeds)[0]  # noqa: E731
    for k, feeds in enumerate(shapes):
        rng = np.random.default_rng(k)
        x = {n: rng.uniform(-3.5, 3.5, shape).astype("float32") for n, shape in feeds.items()}
        want = reference(x)
        (got,) = predictor.run(x)
        assert got.shape == want.shape
        apart = np.abs(got.astype("float64") - want) / Y_SCALE
        assert apart.max() <= steps + 1e-3, apart.max()
        assert np.mean(apart > 1e-3) <= apart_share, np.mean(apart > 1e-3)


def _quantized(x: np.ndarray, scale: float, zero: int) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear to uint8 (numpy: round half to even, saturate)."""
    return (np.clip(np.rint(x / np.float32(scale)) + zero, 0, 255) - zero).astype("float32") * np.float32(scale)


def _weights(oc: int, ic: int, k: int, per_channel: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (oc, ic, k, k) if k else (oc, ic)).astype("int8")
    scale = rng.uniform(0.002, 0.01, oc).astype("float32") if per_channel else np.array(0.005, "float32")
    bias = rng.integers(-3000, 3000, oc).astype("int32")
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(scale, "w_scale"),
        numpy_helper.from_array(np.zeros(scale.shape, "int8"), "w_zero"),
        numpy_helper.from_array(bias, "b"),
    ]
    return inits


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_qlinear_conv_sums_integers(per_channel: bool, symbolic: bool, monkeypatch) -> None:
    """A QLinearConv on a quantized activation becomes CONV_2D on quantized operands (the integer route)."""
    routes = []
    original = conv_converter.integer_conv_2d

    def spy(*args, **kw):
        result = original(*args, **kw)
        routes.append(result is not None)
        return result

    monkeypatch.setattr(conv_converter, "integer_conv_2d", spy)
    node = helper.make_node(
        "QLinearConv",
        ["x_q", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "b"],
        ["y_q"],
        pads=[1, 1, 1, 1],
        strides=[1, 2],
    )
    dims = ["N", 8, "H", "W"] if symbolic else [2, 8, 9, 10]
    model = _model([node], {"x": dims}, _weights(16, 8, 3, per_channel))
    _check(model, [{"x": [2, 8, 9, 10]}] + ([{"x": [1, 8, 5, 13]}] if symbolic else []))
    assert routes == [True]


@pytest.mark.parametrize("trans_b, alpha, with_c, quantized_out", [(1, 1.0, True, True), (0, 0.5, True, False)])
def test_qgemm(trans_b: int, alpha: float, with_c: bool, quantized_out: bool) -> None:
    """com.microsoft.QGemm: C is int32 of scale alpha * a_scale * b_scale; without y_scale a float output."""
    rng = np.random.default_rng(3)
    b = rng.integers(-127, 128, (12, 20) if trans_b else (20, 12)).astype("int8")
    inits = [
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(rng.uniform(0.002, 0.01, 12).astype("float32"), "b_scale"),
        numpy_helper.from_array(np.zeros(12, "int8"), "b_zero"),
        numpy_helper.from_array(rng.integers(-3000, 3000, 12).astype("int32"), "c"),
    ]
    inputs = ["x_q", "x_scale", "x_zero", "b", "b_scale", "b_zero", "c" if with_c else ""]
    inputs += ["y_scale", "y_zero"] if quantized_out else []
    gemm = helper.make_node(
        "QGemm", inputs, ["y_q" if quantized_out else "y_f"], domain=MS, alpha=alpha, transB=trans_b
    )
    nodes = (
        [gemm] if quantized_out else [gemm, helper.make_node("QuantizeLinear", ["y_f", "y_scale", "y_zero"], ["y_q"])]
    )
    _check(_model(nodes, {"x": [3, 20]}, inits), [{"x": [3, 20]}])


def test_qlinear_matmul_per_column() -> None:
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.integers(-127, 128, (20, 6)).astype("int8"), "b"),
        numpy_helper.from_array(rng.uniform(0.002, 0.01, 6).astype("float32"), "b_scale"),
        numpy_helper.from_array(np.zeros(6, "int8"), "b_zero"),
    ]
    node = helper.make_node(
        "QLinearMatMul", ["x_q", "x_scale", "x_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"], ["y_q"]
    )
    _check(_model([node], {"x": [2, 5, 20]}, inits), [{"x": [2, 5, 20]}])


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op: str) -> None:
    """Two quantized inputs (the second broadcast, another scale and zero point)."""
    node = helper.make_node(
        op, ["x_q", "x_scale", "x_zero", "z_q", "z_scale", "z_zero", "y_scale", "y_zero"], ["y_q"], domain=MS
    )
    model = _model([node], {"x": [2, 4, 3, 5], "z": [4, 1, 5]}, _scalars("z", 0.02, 130))
    _check(model, [{"x": [2, 4, 3, 5], "z": [4, 1, 5]}])


def test_qlinear_concat() -> None:
    """Inputs of different scales and zero points, the output another."""
    node = helper.make_node(
        "QLinearConcat",
        ["y_scale", "y_zero", "x_q", "x_scale", "x_zero", "z_q", "z_scale", "z_zero"],
        ["y_q"],
        domain=MS,
        axis=1,
    )
    model = _model([node], {"x": [1, 3, 4, 4], "z": [1, 5, 4, 4]}, _scalars("z", 0.02, 100))
    _check(model, [{"x": [1, 3, 4, 4], "z": [1, 5, 4, 4]}])


UNARY = {
    "sigmoid": ("QLinearSigmoid", {}, [2, 6, 5]),
    "leaky_relu": ("QLinearLeakyRelu", {"alpha": 0.2}, [2, 6, 5]),
    "softmax_13": ("QLinearSoftmax", {"axis": 1, "opset": 13}, [2, 6, 5]),
    "softmax_11": ("QLinearSoftmax", {"axis": 1, "opset": 11}, [2, 6, 5]),
    "average_pool": (
        "QLinearAveragePool",
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
        [1, 8, 7, 9],
    ),
    "average_pool_pads_counted": (
        "QLinearAveragePool",
        {"kernel_shape": [2, 2], "pads": [1, 0, 1, 0], "count_include_pad": 1},
        [1, 8, 7, 9],
    ),
    "average_pool_nhwc": ("QLinearAveragePool", {"kernel_shape": [2, 2], "channels_last": 1}, [1, 7, 9, 8]),
    "global_average_pool": ("QLinearGlobalAveragePool", {"channels_last": 0}, [2, 8, 5, 6]),
    "global_average_pool_nhwc": ("QLinearGlobalAveragePool", {"channels_last": 1}, [2, 5, 6, 8]),
    "reduce_mean": ("QLinearReduceMean", {"axes": [2, 3], "keepdims": 1}, [2, 8, 5, 6]),
}


@pytest.mark.parametrize("case", list(UNARY))
def test_qlinear_unary(case: str) -> None:
    op, attrs, shape = UNARY[case]
    node = helper.make_node(op, ["x_q", "x_scale", "x_zero", "y_scale", "y_zero"], ["y_q"], domain=MS, **attrs)
    reference = None
    if op == "QLinearReduceMean":  # onnxruntime has its schema but no CPU kernel

        def reference(feeds):
            mean = _quantized(feeds["x"], X_SCALE, X_ZERO).mean(axis=tuple(attrs["axes"]), keepdims=True)
            return _quantized(mean, Y_SCALE, Y_ZERO)

    _check(_model([node], {"x": shape}, []), [{"x": shape}], reference=reference)


def test_qlinear_where() -> None:
    node = helper.make_node(
        "QLinearWhere",
        ["c", "x_q", "x_scale", "x_zero", "z_q", "z_scale", "z_zero", "y_scale", "y_zero"],
        ["y_q"],
        domain=MS,
    )
    c = numpy_helper.from_array(np.random.default_rng(5).integers(0, 2, (3, 4)).astype(bool), "c")
    model = _model([node], {"x": [3, 4], "z": [3, 4]}, [*_scalars("z", 0.02, 100), c])
    _check(model, [{"x": [3, 4], "z": [3, 4]}])


DIRECT = {
    "max_pool": ("MaxPool", [], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "transpose": ("Transpose", [], {"perm": [0, 2, 3, 1]}),
    "reshape": ("Reshape", ["shape"], {}),
    "pad_zero_point": ("Pad", ["pads", "pad_value"], {}),
    "resize_linear": ("Resize", ["", "scales"], {"mode": "linear"}),
}


@pytest.mark.parametrize("case", list(DIRECT))
def test_direct_ops_on_quantized_tensors(case: str) -> None:
    """Operators that onnxruntime applies to the 8-bit values themselves: the output keeps the input's
    scale and zero point (a Pad's constant is an 8-bit value: the input's zero point is a real zero)."""
    op, extra, attrs = DIRECT[case]
    inits = [
        numpy_helper.from_array(np.array([1, -1], "int64"), "shape"),
        numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], "int64"), "pads"),
        numpy_helper.from_array(np.array(X_ZERO + 7, "uint8"), "pad_value"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], "float32"), "scales"),
    ]
    node = helper.make_node(op, ["x_q", *extra], ["y_q"], **attrs)
    model = onnx.load_from_string(_model([node], {"x": [1, 4, 6, 5]}, inits))
    for t in model.graph.initializer:  # y is the input's own quantization
        if t.name == "y_scale":
            t.CopyFrom(numpy_helper.from_array(np.array(X_SCALE, "float32"), "y_scale"))
        if t.name == "y_zero":
            t.CopyFrom(numpy_helper.from_array(np.array(X_ZERO, "uint8"), "y_zero"))
    # onnxruntime truncates an interpolation of 8-bit values; the QDQ form (and we) round it to nearest.
    share = 0.6 if op == "Resize" else 0.0
    _check(model.SerializeToString(), [{"x": [1, 4, 6, 5]}], steps=X_SCALE / Y_SCALE, apart_share=share)


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_quantize_static_qoperator_model_matches_its_qdq_twin(tmp_path, activations: str) -> None:
    """A small CNN quantized by onnxruntime's quantize_static in both formats (uint8 activations, and int8
    ones with zero points, its default): the QOperator file answers as onnxruntime does, within a step of
    the QDQ file's answer by us."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r2", "p1"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["g"]),
        helper.make_node("Mul", ["s", "g"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", F, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", F, [1, 10])],
        [
            init("w1", 16, 3, 3, 3),
            init("b1", 16),
            init("w2", 16, 16, 3, 3),
            init("b2", 16),
            init("wf", 10, 16),
            init("bf", 10),
        ],
    )
    f32 = tmp_path / "f32.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), f32)
    samples = [{"x": rng.standard_normal((1, 3, 16, 16)).astype("float32")} for _ in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(samples)

        def get_next(self) -> dict | None:
            return next(self.items, None)

    files = {}
    for fmt in (QuantFormat.QOperator, QuantFormat.QDQ):
        files[fmt] = str(tmp_path / f"{fmt.name}.onnx")
        quantize_static(
            str(f32),
            files[fmt],
            Reader(),
            quant_format=fmt,
            per_channel=True,
            weight_type=QuantType.QInt8,
            activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
        )
    ops = {n.op_type for n in onnx.load(files[QuantFormat.QOperator]).graph.node}
    assert {"QLinearConv", "QLinearAdd", "QGemm"} <= ops, ops
    x = {"x": samples[0]["x"]}
    (want,) = ort.InferenceSession(files[QuantFormat.QOperator], providers=["CPUExecutionProvider"]).run(None, x)
    (got,) = nna.Predictor(files[QuantFormat.QOperator]).run(x)
    (twin,) = nna.Predictor(files[QuantFormat.QDQ]).run(x)
    scale = np.abs(want).max() / 127
    assert np.abs(got - want).max() <= 2 * scale, (np.abs(got - want).max(), scale)
    assert np.abs(got - twin).max() <= 2 * scale


def test_only_the_quantized_input_of_a_reader_lets_int8_be_stored_shifted() -> None:
    """An int8 tensor with a zero point is stored as uint8 q + 128 only where every reader dequantizes it:
    a DequantizeLinear or a direct 8-bit operator through input 0 (which ``_direct`` rewrites), or a
    QOperator operator; read anywhere else (a Pad's constant, a DequantizeLinear's zero point) it keeps its
    int8 values."""
    from nnadapter_tvm.frontends.onnx import qoperator

    def node(op, inputs, domain=""):
        return helper.make_node(op, inputs, ["out"], domain=domain)

    assert qoperator.reads_quantized(node("DequantizeLinear", ["t", "s", "z"]), "t")
    assert not qoperator.reads_quantized(node("DequantizeLinear", ["x", "s", "t"]), "t")
    assert qoperator.reads_quantized(node("Reshape", ["t", "shape"]), "t")
    assert not qoperator.reads_quantized(node("Pad", ["x", "pads", "t"]), "t")
    assert qoperator.reads_quantized(node("QLinearAdd", ["x", "s", "z", "t", "s", "z", "s", "z"], MS), "t")
    assert not qoperator.reads_quantized(node("Cast", ["t"]), "t")
