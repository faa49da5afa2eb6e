"""Dynamically quantized ONNX graphs (as onnxruntime's quantize_dynamic writes them) and the QLinear ops
through the Predictor, against onnxruntime and onnx's reference evaluator: DynamicQuantizeLinear,
ConvInteger and MatMulInteger with zero points computed at run time, each model compiled once and run
at several input sizes (symbolic dims); operators of other domains."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnadapter_tvm as nna

F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def make_model(nodes, inputs, outputs, initializers=(), opset=17, domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8  # onnxruntime's supported range
    return model


def const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def ints(shape, dtype: str, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, size=shape).astype(dtype)


def conv_block_model(c_in: int, c_out: int, w_dtype: str, per_channel: bool) -> onnx.ModelProto:
    """x [1, c_in, 8, W] -> DynamicQuantizeLinear -> ConvInteger (3x3, pads 1, stride 2) -> Cast -> * the
    two scales -> + bias: the block quantize_dynamic writes for a Conv (ddddocr's common_old.onnx)."""
    w = ints((c_out, c_in, 3, 3), w_dtype, 1)
    w_zp = ints((c_out,), w_dtype, 2) if per_channel else ints((), w_dtype, 2)
    w_scale = np.float32(0.013)
    bias = np.random.default_rng(3).normal(0, 1, (1, c_out, 1, 1)).astype("float32")
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zp"], name="dql"),
        helper.make_node(
            "ConvInteger", ["xq", "w", "x_zp", "w_zp"], ["acc"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]
        ),
        helper.make_node("Cast", ["acc"], ["accf"], to=F),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"]),
        helper.make_node("Mul", ["accf", "scale"], ["yf"]),
        helper.make_node("Add", ["yf", "bias"], ["y"]),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, c_in, 8, "W"])],
        [
            helper.make_tensor_value_info("xq", U8, [1, c_in, 8, "W"]),
            helper.make_tensor_value_info("x_scale", F, []),
            helper.make_tensor_value_info("x_zp", U8, []),
            helper.make_tensor_value_info("acc", I32, [None] * 4),
            helper.make_tensor_value_info("y", F, [None] * 4),
        ],
        [const("w", w), const("w_zp", w_zp), const("w_scale", w_scale), const("bias", bias)],
    )


@pytest.mark.parametrize(
    "c_in, c_out, w_dtype, per_channel",
    [(3, 4, "uint8", False), (64, 6, "uint8", False), (16, 5, "int8", True)],
    ids=["uint8_small", "uint8_576_products", "int8_per_channel"],
)
def test_dynamically_quantized_conv_matches_onnxruntime(c_in, c_out, w_dtype, per_channel):
    """The integer outputs are equal to onnxruntime's (exact int32 sums, the same quantization); the float
    output within float32 rounding. One compilation serves every width."""
    model = conv_block_model(c_in, c_out, w_dtype, per_channel)
    predictor = nna.Predictor(model)
    for width, seed in ((5, 0), (16, 1), (37, 2)):
        x = np.random.default_rng(seed).normal(0.3, 1.5, (1, c_in, 8, width)).astype("float32")
        got = predictor.run({"x": x})
        reference = ReferenceEvaluator(model).run(None, {"x": x})
        # onnxruntime refuses per-channel filter zero points ("Non per-tensor quantization is not
        # supported now"): those are checked against onnx's reference evaluator alone.
        want = reference if per_channel else ort_run(model, {"x": x})
        for k, name in enumerate(("xq", "x_scale", "x_zp", "acc")):
            np.testing.assert_array_equal(got[k], reference[k], err_msg=f"{name}, width {width} (reference)")
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}, width {width} (onnxruntime)")
        np.testing.assert_allclose(got[4], want[4], rtol=1e-5, atol=1e-5)
    assert len(predictor.subgraphs) == 1 and not predictor.graph.host_units


def test_conv_integer_1d_with_run_time_zero_point():
    """A 1-D ConvInteger (as 2-D) on a symbolic batch, the input's zero point a graph input.  (A symbolic
    length fails to build today for float Conv alike: the CPU schedule's crop stage fused with the
    SQUEEZE back to 1-D trips TVM's RewriteDataflowReshape.)"""
    w = ints((4, 3, 3), "uint8", 1)
    nodes = [helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], pads=[2, 0], dilations=[2])]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", U8, ["N", 3, 11]), helper.make_tensor_value_info("x_zp", U8, [])],
        [helper.make_tensor_value_info("y", I32, [None] * 3)],
        [const("w", w), const("w_zp", np.uint8(100))],
    )
    predictor = nna.Predictor(model)
    for n in (1, 2, 5):
        feeds = {"x": ints((n, 3, 11), "uint8", n), "x_zp": np.asarray(n * 77 % 256, "uint8")}
        np.testing.assert_array_equal(predictor.run(feeds)[0], ort_run(model, feeds)[0])


def test_dynamically_quantized_matmul_matches_onnxruntime():
    """x [T, 40] -> DynamicQuantizeLinear -> MatMulInteger with a uint8 weight and per-column zero points
    -> Cast * scales: T symbolic; integer results equal to onnxruntime's."""
    b = ints((40, 7), "uint8", 1)
    b_zp = ints((7,), "uint8", 2)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zp"]),
        helper.make_node("MatMulInteger", ["xq", "b", "x_zp", "b_zp"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=F),
        helper.make_node("Mul", ["x_scale", "b_scale"], ["scale"]),
        helper.make_node("Mul", ["accf", "scale"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["T", 40])],
        [helper.make_tensor_value_info("acc", I32, [None] * 2), helper.make_tensor_value_info("y", F, [None] * 2)],
        [const("b", b), const("b_zp", b_zp), const("b_scale", np.float32(0.02))],
    )
    predictor = nna.Predictor(model)
    for t in (1, 6, 25):
        x = np.random.default_rng(t).normal(0, 1, (t, 40)).astype("float32")
        got, want = predictor.run({"x": x}), ort_run(model, {"x": x})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_matmul_integer_per_row_zero_point_follows_the_operator_text():
    """a's 1-D zero point [M] is per row ("an M element vector" in ONNX's MatMulInteger): numpy reference
    written from that text (onnx.reference's broadcasts it along K instead; onnxruntime takes scalars)."""
    a_zp = ints((3,), "uint8", 3)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "a_zp"], ["y"])]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("a", U8, [3, 5]), helper.make_tensor_value_info("b", I8, [5, 2])],
        [helper.make_tensor_value_info("y", I32, [3, 2])],
        [const("a_zp", a_zp)],
    )
    a, b = ints((3, 5), "uint8", 1), ints((5, 2), "int8", 2)
    want = (a.astype("int64") - a_zp.astype("int64")[:, None]) @ b.astype("int64")
    np.testing.assert_array_equal(nna.Predictor(model).run({"a": a, "b": b})[0], want.astype("int32"))


def qlinear_conv_model(per_channel: bool) -> onnx.ModelProto:
    w = ints((6, 4, 3, 3), "int8", 1)
    w_scale = np.asarray([0.01, 0.02, 0.015, 0.03, 0.005, 0.011], "float32") if per_channel else np.float32(0.02)
    w_zp = np.zeros(6, "int8") if per_channel else np.int8(0)
    nodes = [
        helper.make_node(
            "QLinearConv",
            ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias"],
            ["y"],
            pads=[1, 1, 1, 1],
        )
    ]
    inits = [
        const("x_scale", np.float32(0.05)),
        const("x_zp", np.uint8(120)),
        const("w", w),
        const("w_scale", w_scale),
        const("w_zp", w_zp),
        const("y_scale", np.float32(0.7)),
        const("y_zp", np.uint8(128)),
        const("bias", np.random.default_rng(4).integers(-5000, 5000, 6).astype("int32")),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", U8, ["N", 4, "H", "W"])],
        [helper.make_tensor_value_info("y", U8, [None] * 4)],
        inits,
        opset=13,
    )


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_qlinear_conv_symbolic_dims(per_channel):
    """Equal to onnx's reference evaluator (the same float64 requantization); onnxruntime requantizes in
    float32, so it may differ by one step where a value lies within float32 rounding of a tie."""
    model = qlinear_conv_model(per_channel)
    predictor = nna.Predictor(model)
    reference = ReferenceEvaluator(model)
    for n, h, w in ((1, 5, 5), (2, 9, 4), (1, 3, 17)):
        x = ints((n, 4, h, w), "uint8", n * h * w)
        got = predictor.run({"x": x})[0]
        np.testing.assert_array_equal(got, reference.run(None, {"x": x})[0])
        diff = np.abs(got.astype("int32") - ort_run(model, {"x": x})[0].astype("int32"))
        assert diff.max() <= 1


def test_qlinear_matmul_symbolic_rows():
    nodes = [
        helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"], ["y"])
    ]
    inits = [
        const("a_scale", np.float32(0.03)),
        const("a_zp", np.int8(-3)),
        const("b", ints((24, 5), "int8", 1)),
        const("b_scale", np.float32(0.01)),
        const("b_zp", np.int8(2)),
        const("y_scale", np.float32(0.2)),
        const("y_zp", np.int8(-10)),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("a", I8, ["M", 24])],
        [helper.make_tensor_value_info("y", I8, [None] * 2)],
        inits,
    )
    predictor = nna.Predictor(model)
    reference = ReferenceEvaluator(model)
    for m in (1, 4, 33):
        a = ints((m, 24), "int8", m)
        np.testing.assert_array_equal(predictor.run({"a": a})[0], reference.run(None, {"a": a})[0])


def foreign_model() -> onnx.ModelProto:
    """A com.microsoft op (no implementation in onnx's reference evaluator) and an ai.onnx.ml FeatureVectorizer
    (no converter, implemented by the reference evaluator)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("FusedGemm", ["r", "r"], ["g"], name="fused", domain="com.microsoft"),
        helper.make_node("FeatureVectorizer", ["x"], ["d"], name="scale", domain="ai.onnx.ml", inputdimensions=[3]),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("g", F, [None] * 2), helper.make_tensor_value_info("d", F, [2, 3])],
        domains=["com.microsoft", "ai.onnx.ml"],
    )


@pytest.mark.parametrize("host_fallback", [False, True])
def test_other_domains_are_named_with_why_they_cannot_run(host_fallback):
    """Every node that cannot run is named in one error; one that onnx's reference evaluator lacks stays an
    error under host fallback, which says so (FeatureVectorizer then runs on the host)."""
    with pytest.raises(nna.NNAdapterError) as err:
        nna.Predictor(foreign_model(), host_fallback=host_fallback)
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
    text = str(err.value)
    assert "'fused'" in text and "com.microsoft" in text
    assert "reference evaluator does not implement com.microsoft.FusedGemm" in text
    assert ("'scale'" in text) == (not host_fallback)


def test_other_domains_run_on_the_host_where_the_reference_evaluator_has_them():
    """ai.onnx.ml's FeatureVectorizer under host fallback: the host runs it, the rest compiles."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("FeatureVectorizer", ["r"], ["b"], domain="ai.onnx.ml", inputdimensions=[4]),
        helper.make_node("Sigmoid", ["b"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 4])],
        domains=["ai.onnx.ml"],
    )
    model.graph.value_info.append(helper.make_tensor_value_info("b", F, [2, 4]))  # declared, as exporters do
    with pytest.raises(nna.NNAdapterError, match=r"domain 'ai\.onnx\.ml'"):
        nna.Predictor(model)
    predictor = nna.Predictor(model, host_fallback=True)
    x = np.random.default_rng(0).normal(0, 1, (2, 4)).astype("float32")
    np.testing.assert_allclose(predictor.run({"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-6)
    assert [u.node.op_type for u in predictor.graph.host_units] == ["FeatureVectorizer"]
