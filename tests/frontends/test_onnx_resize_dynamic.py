"""ONNX Resize whose sizes or scales are computed at run time, or whose constant scales meet symbolic H and
W, in every mode: one-node-per-configuration models (many Resize nodes sharing one computed ``sizes``, so
that each mode compiles once), compiled once and run at two input sizes against onnxruntime.

The sizes come from Shape arithmetic of another input (``F.interpolate(x, size=y.shape[2:])``, as
torchvision's segmentation heads write it) or of the input itself; the scales from a constant on symbolic
dimensions (YOLO's upsampling) or from a graph input (a value only execution knows).  Configurations
RESIZE_NEAREST / RESIZE_LINEAR cannot compute exactly for every size (half_pixel at a 1-pixel output,
cubic, antialias, tf_crop_and_resize) go to RESIZE_ONNX, which evaluates positions and weights from the
sizes found at execution."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import nnadapter_tvm as nna
from nnadapter_tvm.frontends.onnx import import_model

C = 3
TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# Each mode's configurations: one Resize node each, all in one model.
CONFIGS = {
    "nearest": [
        {"mode": "nearest", "coordinate_transformation_mode": t, "nearest_mode": m}
        for t in TRANSFORMS
        for m in NEAREST_MODES
    ],
    "linear": [{"mode": "linear", "coordinate_transformation_mode": t} for t in TRANSFORMS],
    "cubic": [{"mode": "cubic", "coordinate_transformation_mode": t} for t in TRANSFORMS]
    + [
        {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
        {"mode": "cubic", "coordinate_transformation_mode": "align_corners", "exclude_outside": 1},
    ],
}
# tf_crop_and_resize with a constant roi over H and W, its window reaching past the input (extrapolated).
CROP = {"coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 10.0}
CROP_ROI = [0.0, 0.0, 0.13, -0.2, 1.0, 1.0, 0.77, 1.1]


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ctm(attrs: dict) -> str:
    """The coordinate transformation of a node's attributes (bytes) or of a configuration (str)."""
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    return ctm.decode() if isinstance(ctm, bytes) else ctm


def _ort_one_pixel(attrs: dict) -> bool:
    """onnxruntime 1.32 maps a 1-pixel output to 0 under pytorch_half_pixel where ONNX's reference (which
    nnadapter-tvm follows, as its static RESIZE_ONNX does) takes -0.5: cubic weighs other pixels there."""
    return _ctm(attrs) == "pytorch_half_pixel" and attrs.get("mode") == b"cubic"


def _ort_whole_length(attrs: dict) -> bool:
    """Where a constant scale does not give a whole size (scale * n not an integer), onnxruntime takes the
    integer output size as the resized length where the reference takes scale * n: align_corners divides
    by another length, pytorch_half_pixel tests another for 1."""
    return _ctm(attrs) in ("align_corners", "pytorch_half_pixel")


def _compare(model: onnx.ModelProto, feeds_list: list[dict], atol: float = 1e-5, reference=None) -> None:
    """Import and compile once, run at each feed against onnxruntime (against onnx's reference evaluator
    for the Resize nodes ``reference(attrs)`` picks); nothing on the host, nothing compiled on the request
    path."""
    onnx.checker.check_model(model)
    predictor = nna.Predictor(model)
    assert predictor.host_node_count == 0
    compilations = len(predictor.compilations)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    evaluator = ReferenceEvaluator(model)
    names = [o.name for o in model.graph.output]
    nodes = {n.output[0]: n for n in model.graph.node}
    for feeds in feeds_list:
        got = predictor.run(feeds)
        want = session.run(None, feeds)
        spec = evaluator.run(None, feeds) if reference is not None else want
        sizes = {k: v.shape for k, v in feeds.items()}
        for name, g, w, r in zip(names, got, want, spec):
            attrs = _attrs(nodes[name])
            label = f"Resize({', '.join(f'{k}={v}' for k, v in attrs.items())}) at {sizes}"
            if reference is not None and reference(attrs):
                w, label = r, label + " (onnx's reference)"
            assert g.shape == w.shape, f"{label}: {g.shape} != {w.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol, err_msg=label)
    assert len(predictor.compilations) == compilations


def _resize_nodes(configs: list[dict], inputs: list[str]) -> tuple[list, list]:
    nodes, outputs = [], []
    for k, attrs in enumerate(configs):
        nodes.append(helper.make_node("Resize", inputs, [f"y{k}"], name=f"resize{k}", **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [None] * 4))
    return nodes, outputs


def _rand(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype("float32")


def _to_size_of_model(configs: list[dict], roi: list[float] | None = None, opset: int = 17) -> onnx.ModelProto:
    """Resize(x, sizes=Concat(Shape(x)[:2], Shape(ref)[2:])) for each configuration."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "h", "w"])
    ref = helper.make_tensor_value_info("ref", TensorProto.FLOAT, ["N", C, "H", "W"])
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [len(roi or [])], roi or [])]
    nodes = [
        helper.make_node("Shape", ["x"], ["x_nc"], end=2),
        helper.make_node("Shape", ["ref"], ["ref_hw"], start=2),
        helper.make_node("Concat", ["x_nc", "ref_hw"], ["sizes"], axis=0),
    ]
    resizes, outputs = _resize_nodes(configs, ["x", "roi", "", "sizes"])
    graph = helper.make_graph(nodes + resizes, "g", [x, ref], outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


# (x, ref) sizes: up along H and down along W, then the other way round with a batch of 2 and a 1-pixel
# output row (where Paddle's ratio 0 and ONNX's half-pixel centre differ).
TO_SIZE_OF = [((1, C, 5, 7), (1, C, 9, 4)), ((2, C, 6, 3), (2, C, 1, 8))]


@pytest.mark.parametrize("mode", list(CONFIGS))
def test_resize_to_the_size_of_another_input(mode: str) -> None:
    model = _to_size_of_model(CONFIGS[mode])
    feeds = [{"x": _rand(xs, 1), "ref": _rand(rs, 2)} for xs, rs in TO_SIZE_OF]
    _compare(model, feeds, atol=1e-5 if mode == "nearest" else 2e-5, reference=_ort_one_pixel)


def test_resize_to_a_computed_size_at_sizes_no_probe_meets() -> None:
    """torchvision's F.interpolate(x, size=y.shape[2:]) nearest (asymmetric, floor) from 2 to 82 rows: Paddle's
    float32 ratio 2 / 82 times 41 falls a hair under 1, ONNX's 41 / (82 / 2) is 1 (a whole row off); bilinear
    half-pixel from 20 to 50 columns, where Paddle's position 0.4 * (dst + 0.5) - 0.5 drifts from ONNX's
    (dst + 0.5) / 2.5 - 0.5 by float32's step (Mask R-CNN's image resize).  The sizes are known only at
    execution, so no set of probe sizes can vouch for Paddle's arithmetic.  The bilinear node is held to
    onnx's reference (exact positions): onnxruntime computes them in float32, 3.6e-5 off it here, Paddle's
    arithmetic 5.4e-5."""
    model = _to_size_of_model(
        [
            {"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"},
            {"mode": "linear"},
        ]
    )
    feeds = [{"x": _rand((1, C, 2, 20), 8), "ref": _rand((1, C, 82, 50), 9)}]
    feeds.append({"x": _rand((1, C, 320, 3), 10), "ref": _rand((1, C, 800, 4), 11)})
    _compare(model, feeds, atol=2e-6, reference=lambda attrs: attrs["mode"] == b"linear")


def test_constant_scales_on_symbolic_sizes_far_from_the_probes() -> None:
    """Scale 3 on symbolic H and W at 400 rows: Paddle's ratio float32(1 / 3) times dst drifts from ONNX's
    dst / 3 by float32's step (2e-6 at the probes' sizes, 3e-5 at 1200 rows), so bilinear takes RESIZE_ONNX;
    nearest's floor agrees at every size below 2^14 and keeps RESIZE_NEAREST, as does a scale of 2 in
    both modes (exact in float32).  Held to onnx's reference (exact positions)."""
    configs = [
        {"mode": "linear"},
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    ]
    model = _scales_model(configs, [1.0, 1.0, 3.0, 3.0])
    assert [op.type.name for op in import_model(model).operations] == ["RESIZE_ONNX", "RESIZE_NEAREST"]
    _compare(
        model,
        [{"x": _rand((1, C, 400, 2), 12)}, {"x": _rand((2, C, 3, 5), 13)}],
        atol=2e-6,
        reference=lambda attrs: True,
    )
    doubling = _scales_model(configs, [1.0, 1.0, 2.0, 2.0])
    assert [op.type.name for op in import_model(doubling).operations] == ["RESIZE_LINEAR", "RESIZE_NEAREST"]


def test_resize_to_the_size_of_another_input_crop_and_resize() -> None:
    model = _to_size_of_model([{"mode": m, **CROP} for m in ("nearest", "linear", "cubic")], roi=CROP_ROI)
    feeds = [{"x": _rand(xs, 3), "ref": _rand(rs, 4)} for xs, rs in TO_SIZE_OF]
    _compare(model, feeds, atol=2e-5)


def test_resize_to_a_size_computed_from_its_own_dimensions() -> None:
    """sizes = Concat(Shape(x)[:2], Shape(x)[2:] * 3 / 2): integer arithmetic on the input's own dims."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])
    inits = [
        helper.make_tensor("three", TensorProto.INT64, [1], [3]),
        helper.make_tensor("two", TensorProto.INT64, [1], [2]),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["nc"], end=2),
        helper.make_node("Shape", ["x"], ["hw"], start=2),
        helper.make_node("Mul", ["hw", "three"], ["hw3"]),
        helper.make_node("Div", ["hw3", "two"], ["hw_out"]),
        helper.make_node("Concat", ["nc", "hw_out"], ["sizes"], axis=0),
    ]
    configs = [
        {"mode": "linear"},
        {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
        {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"},
    ]
    resizes, outputs = _resize_nodes(configs, ["x", "", "", "sizes"])
    graph = helper.make_graph(nodes + resizes, "g", [x], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _compare(model, [{"x": _rand((1, C, 5, 4), 5)}, {"x": _rand((2, C, 8, 3), 6)}], atol=2e-5)


def _scales_model(configs: list[dict], scales: list[float] | None, opset: int = 17) -> onnx.ModelProto:
    """Resize(x, scales) with x [N, C, H, W]: constant scales, or (None) a graph input ``scales``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])
    inputs = [x]
    inits = []
    if scales is None:
        inputs.append(helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]))
    else:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [4], scales))
    resizes, outputs = _resize_nodes(configs, ["x", "", "scales"])
    graph = helper.make_graph(resizes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


# Input sizes for the scales tests: odd and even, one of them giving a 1-pixel output at scale 0.5.
SCALED = [(1, C, 6, 7), (2, C, 5, 3)]


@pytest.mark.parametrize("mode", list(CONFIGS))
def test_constant_scales_on_symbolic_sizes(mode: str) -> None:
    """YOLO's upsampling and its kin: constant scales, H and W known only at execution; 1.5 along H (a
    fractional size), 0.5 along W (floor of an odd size).  (half_pixel_symmetric puts the positions of an
    odd size halved on whole numbers, which float rounding moves a hair either way: nearest's floor and
    ceil then differ between onnxruntime's float32, the reference's float64 and its padded window, so
    they are left out here.)"""
    configs = [
        c
        for c in CONFIGS[mode]
        if not (_ctm(c) == "half_pixel_symmetric" and c.get("nearest_mode") in ("floor", "ceil"))
    ]
    model = _scales_model(configs, [1.0, 1.0, 1.5, 0.5])
    feeds = [{"x": _rand(s, 7)} for s in SCALED]
    _compare(model, feeds, atol=1e-5 if mode == "nearest" else 2e-5, reference=_ort_whole_length)


def test_constant_scales_on_symbolic_sizes_antialias() -> None:
    """antialias with constant scales: the number of taps follows from the scale, known at import."""
    configs = [{"mode": m, "antialias": 1} for m in ("linear", "cubic")]
    model = _scales_model(configs, [1.0, 1.0, 0.5, 0.3], opset=18)
    _compare(model, [{"x": _rand((1, C, 9, 20), 8)}, {"x": _rand((2, C, 6, 11), 9)}], atol=2e-5)


def test_scales_fed_at_run_time() -> None:
    """scales a graph input: the output size floor(scale * n) is read at execution."""
    configs = [
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        {"mode": "linear"},
        {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
    ]
    model = _scales_model(configs, None)
    feeds = [
        {"x": _rand((1, C, 5, 6), 10), "scales": np.array([1, 1, 2.0, 0.5], "float32")},
        {"x": _rand((2, C, 4, 3), 11), "scales": np.array([1, 1, 1.5, 3.0], "float32")},
    ]
    _compare(model, feeds, atol=2e-5)


def test_opset18_axes_with_computed_sizes() -> None:
    """axes=[3, 2] with sizes Shape(ref)[2:] reversed: RESIZE_ONNX gets sizes over the whole rank."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "h", "w"])
    ref = helper.make_tensor_value_info("ref", TensorProto.FLOAT, ["N", C, "H", "W"])
    nodes = [
        helper.make_node("Shape", ["ref"], ["H"], start=2, end=3),
        helper.make_node("Shape", ["ref"], ["W"], start=3),
        helper.make_node("Concat", ["W", "H"], ["sizes"], axis=0),
    ]
    configs = [{"mode": "linear", "axes": [3, 2]}, {"mode": "nearest", "axes": [-1, -2]}]
    resizes, outputs = _resize_nodes(configs, ["x", "", "", "sizes"])
    graph = helper.make_graph(nodes + resizes, "g", [x, ref], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    _compare(model, [{"x": _rand(xs, 12), "ref": _rand(rs, 13)} for xs, rs in TO_SIZE_OF], atol=2e-5)


REFUSED = {
    "antialias": ({"mode": "linear", "antialias": 1}, "antialias with sizes computed at run time"),
    "keep_aspect_ratio": (
        {"mode": "linear", "keep_aspect_ratio_policy": "not_larger"},
        "keep_aspect_ratio_policy 'not_larger' with sizes computed at run time",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_with_computed_sizes(case) -> None:
    """What depends on the scale at import is refused clearly when the sizes are known only at execution."""
    attrs, message = case
    with pytest.raises(nna.NNAdapterError, match=message) as err:
        nna.Predictor(_to_size_of_model([attrs], opset=18))
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
