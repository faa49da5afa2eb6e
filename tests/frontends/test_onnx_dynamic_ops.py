"""ONNX pooling, resizing and (transposed) convolution nodes whose batch, height and width are symbolic
(dim_param): each model is imported and compiled once, then run at several input sizes against
onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnadapter_tvm as nna

# (batch, height, width) fed to one compiled model: odd and even sizes, so floor and ceil differ.
SIZES = [(1, 7, 8), (2, 10, 5), (1, 13, 12)]
C = 3


def _model(node: onnx.NodeProto, initializers=(), opset: int = 17, c: int = C) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)
    graph = helper.make_graph([node], "g", [x], [y], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: onnx.ModelProto, sizes=SIZES, c: int = C, rtol: float = 1e-5, atol: float = 1e-5, nan=False):
    predictor = nna.Predictor(model)
    assert predictor.host_node_count == 0
    compilations = len(predictor.compilations)
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    for n, h, w in sizes:
        x = rng.uniform(-2, 2, (n, c, h, w)).astype("float32")
        if nan:
            x.reshape(-1)[rng.choice(x.size, x.size // 8, replace=False)] = np.nan
        (got,) = predictor.run([x])
        (want,) = session.run(None, {"x": x})
        assert got.shape == want.shape, f"input {x.shape}: {got.shape} != onnxruntime's {want.shape}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"input {x.shape}")
    assert len(predictor.compilations) == compilations  # nothing compiled on the request path


POOLS = {
    "k3s2_pads": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1]},
    "k2s2": {"kernel_shape": [2, 2], "strides": [2, 2]},
    "k3s2_ceil": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    "k2s2_ceil": {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    "k3s1_same_upper": {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
    "k2s1_same_lower": {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
}


@pytest.mark.parametrize("attrs", list(POOLS.values()), ids=list(POOLS))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_symbolic_sizes(op: str, attrs: dict) -> None:
    attrs = dict(attrs)
    if op == "AveragePool" and "pads" in attrs:
        attrs["count_include_pad"] = 1
    _check(_model(helper.make_node(op, ["x"], ["y"], **attrs)))


def test_max_pool_1d_symbolic_length() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "L"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 3)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 1])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    predictor = nna.Predictor(model)
    session = ort.InferenceSession(model.SerializeToString())
    for n, length in [(1, 9), (3, 4)]:
        x = np.random.default_rng(length).uniform(-2, 2, (n, C, length)).astype("float32")
        np.testing.assert_array_equal(predictor.run([x])[0], session.run(None, {"x": x})[0])


def test_max_pool_keeps_nan_like_the_reference() -> None:
    """A NaN anywhere in a window gives NaN (onnx's reference; onnxruntime drops some: compared with numpy)."""
    model = _model(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    predictor = nna.Predictor(model)
    rng = np.random.default_rng(1)
    for n, h, w in SIZES:
        x = rng.uniform(-2, 2, (n, C, h, w)).astype("float32")
        x.reshape(-1)[rng.choice(x.size, x.size // 8, replace=False)] = np.nan
        ho, wo = h // 2, w // 2
        windows = x[:, :, : 2 * ho, : 2 * wo].reshape(n, C, ho, 2, wo, 2)
        want = windows.max(axis=(3, 5))  # numpy's max keeps NaN
        assert np.isnan(want).any()
        np.testing.assert_array_equal(predictor.run([x])[0], want)


def test_global_average_pool_symbolic_sizes() -> None:
    _check(_model(helper.make_node("GlobalAveragePool", ["x"], ["y"])))


def test_ceil_mode_whose_last_window_may_start_past_the_input_is_refused() -> None:
    # k1 s2: with an even size ONNX drops a last window that starts past the input, which depends on H.
    model = _model(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1))
    with pytest.raises(nna.NNAdapterError, match="ceil_mode on an axis of unknown size"):
        nna.Predictor(model)


RESIZES = {
    # paddle2onnx's upsampling (PP-OCR's det head): nearest, asymmetric, floor, scales 2.
    "nearest_asymmetric_x2": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                               "nearest_mode": "floor"}, [1, 1, 2, 2], None),
    "nearest_asymmetric_x4": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                               "nearest_mode": "floor"}, [1, 1, 4, 4], None),
    "linear_half_pixel_x2": ({"mode": "linear"}, [1, 1, 2, 2], None),
    "linear_align_corners_x2": ({"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                                [1, 1, 2, 2], None),
    "nearest_sizes": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                       "nearest_mode": "floor"}, None, [1, C, 6, 9]),
    # A fractional scale: the output size floor(n * 0.5) is computed at execution.  Linear half-pixel goes
    # to RESIZE_ONNX there (at a 1-pixel output Paddle's ratio is 0 where ONNX averages two pixels).
    "nearest_asymmetric_x0_5": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                 "nearest_mode": "floor"}, [1, 1, 0.5, 0.5], None),
    "linear_half_pixel_x0_5": ({"mode": "linear"}, [1, 1, 0.5, 0.5], None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(RESIZES.values()), ids=list(RESIZES))
def test_resize_symbolic_sizes(case) -> None:
    attrs, scales, sizes = case
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
    inputs = ["x", "roi"]
    if scales is not None:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [4], scales))
        inputs.append("scales")
    else:
        inits += [helper.make_tensor("scales", TensorProto.FLOAT, [0], [])]
        inits.append(helper.make_tensor("sizes", TensorProto.INT64, [4], sizes))
        inputs += ["scales", "sizes"]
    model = _model(helper.make_node("Resize", inputs, ["y"], **attrs), inits)
    sizes_fed = [(1, 6, 8), (2, 5, 7), (1, 9, 4)] if sizes is not None else SIZES
    if sizes is not None:
        sizes_fed = [(1, *hw) for _, *hw in sizes_fed]  # the sizes input fixes N = 1
    _check(model, sizes_fed)


CONV_TRANSPOSES = {
    # PP-OCR det's upsampling: k2 s2, no pads.
    "k2s2": ({"kernel_shape": [2, 2], "strides": [2, 2]}, 4),
    "k3s2_pads_output_padding": ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1],
                                  "output_padding": [1, 0]}, 4),
    "k4s2_same_upper": ({"kernel_shape": [4, 4], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, 2),
    "k3s1_grouped": ({"kernel_shape": [3, 3], "group": 3, "pads": [1, 1, 1, 1]}, 1),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CONV_TRANSPOSES.values()), ids=list(CONV_TRANSPOSES))
def test_conv_transpose_symbolic_sizes(case) -> None:
    attrs, out_per_group = case
    group = attrs.get("group", 1)
    kernel = attrs["kernel_shape"]
    w = np.random.default_rng(3).uniform(-1, 1, (C, out_per_group, *kernel)).astype("float32")
    b = np.random.default_rng(4).uniform(-1, 1, out_per_group * group).astype("float32")
    inits = [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")]
    _check(_model(helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs), inits), rtol=1e-4, atol=1e-4)


def test_conv_same_upper_stride1_symbolic_sizes() -> None:
    w = np.random.default_rng(5).uniform(-1, 1, (4, C, 3, 2)).astype("float32")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 2], auto_pad="SAME_UPPER")
    _check(_model(node, [onnx.numpy_helper.from_array(w, "w")]), rtol=1e-4, atol=1e-4)


def _run_against_onnxruntime(node: onnx.NodeProto, dims: list, feeds_shapes: list, opset: int) -> None:
    """A one-node model on x of ``dims`` (names for symbolic dims), compiled once, run at each shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [None] * (len(dims) - 1 if "Reduce" in node.op_type else len(dims))
    )
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    predictor = nna.Predictor(model)
    session = ort.InferenceSession(model.SerializeToString())
    for k, shape in enumerate(feeds_shapes):
        x = np.random.default_rng(k).uniform(0.5, 1.5, shape).astype("float32")
        (got,) = predictor.run([x])
        (want,) = session.run(None, {"x": x})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_opset11_softmax_coerced_to_2d_with_unknown_leading_dims(op: str) -> None:
    """Opset < 13 coerces the input to 2-D at ``axis``: unknown dims before it stay unknown (RESHAPE's 0)."""
    node = helper.make_node(op, ["x"], ["y"], axis=2)
    _run_against_onnxruntime(node, ["N", "T", 3, 4], [(1, 2, 3, 4), (3, 5, 3, 4)], opset=11)


@pytest.mark.parametrize("op", ["ReduceProd", "ReduceLogSumExp", "ReduceL2"])
def test_reduce_without_keepdims_on_an_unknown_batch(op: str) -> None:
    """The kept-axes result squeezed to the output shape (it used to be reshaped to a target holding None)."""
    node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)
    _run_against_onnxruntime(node, ["N", 3, "W"] if op != "ReduceProd" else ["N", 3, 5], [(2, 3, 5), (4, 3, 5)], 13)


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    ],
    ids=["nearest_asymmetric", "linear_align_corners"],
)
def test_resize_to_the_size_of_another_input(attrs: dict) -> None:
    """F.interpolate(x, size=skip.shape[2:]): sizes = Concat(Shape(x)[:2], Shape(skip)[2:]), known only as
    expressions of the inputs' dims; RESIZE_* reads them through OpArgs.shape_values."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "h", "w"])
    skip = helper.make_tensor_value_info("skip", TensorProto.FLOAT, ["N", C, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"], end=2),
        helper.make_node("Shape", ["skip"], ["ss"], start=2),
        helper.make_node("Concat", ["xs", "ss"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], **attrs),
        helper.make_node("Add", ["r", "skip"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x, skip], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    predictor = nna.Predictor(model)
    assert predictor.host_node_count == 0
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(7)
    for n, (h, w), (hh, ww) in [(1, (3, 4), (6, 8)), (2, (5, 5), (9, 11))]:
        feeds = {
            "x": rng.uniform(-1, 1, (n, C, h, w)).astype("float32"),
            "skip": rng.uniform(-1, 1, (n, C, hh, ww)).astype("float32"),
        }
        (got,) = predictor.run(feeds)
        (want,) = session.run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unet_block_conv_transpose_concat_conv() -> None:
    """A U-Net decoder step on symbolic sizes: a strided Conv down, ConvTranspose up, Concat with the skip
    input, Conv (the CPU pipeline's FuseTIR failed on the transposed convolution's expression dims)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)
    rng = np.random.default_rng(0)
    shapes = [("w1", (8, 4, 3, 3)), ("wt", (8, 4, 2, 2)), ("w2", (5, 8, 3, 3))]
    inits = [onnx.numpy_helper.from_array(rng.uniform(-1, 1, s).astype("float32"), n) for n, s in shapes]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["d"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("ConvTranspose", ["d", "wt"], ["u"], strides=[2, 2], kernel_shape=[2, 2]),
        helper.make_node("Concat", ["u", "x"], ["c"], axis=1),
        helper.make_node("Conv", ["c", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    predictor = nna.Predictor(model)
    session = ort.InferenceSession(model.SerializeToString())
    for n, h, w in [(1, 8, 8), (2, 6, 10)]:
        feed = rng.uniform(-1, 1, (n, 4, h, w)).astype("float32")
        np.testing.assert_allclose(predictor.run([feed])[0], session.run(None, {"x": feed})[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(nna.NNAdapterError):  # odd sizes: the upsampled map no longer matches the skip input
        predictor.run([rng.uniform(-1, 1, (1, 4, 7, 8)).astype("float32")])
