"""Parameters ONNX moved from an attribute to an input (NodeContext.attr_or_input): the same node at the
opset before the move (attribute) and after it (constant input) converts to the same result, checked
against onnx's reference evaluator at each opset."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnadapter_tvm as nna
from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph

F = TensorProto.FLOAT


def _model(op: str, opset: int, attrs: dict, inputs: dict, out_count: int = 1, shape=(2, 3, 4)) -> onnx.ModelProto:
    """One ``op`` node on graph input x (float32 of ``shape``) with ``inputs`` (name -> array) as
    initializers in the order given (None: an omitted optional input)."""
    names = ["x", *(name if value is not None else "" for name, value in inputs.items())]
    outputs = [f"y{k}" for k in range(out_count)]
    node = helper.make_node(op, names, outputs, **attrs)
    initializers = [numpy_helper.from_array(v, n) for n, v in inputs.items() if v is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, list(shape))],
        # Element types only: each output's shape is the node's to infer.
        [
            helper.make_tensor_value_info(o, TensorProto.INT64 if (op, k) == ("TopK", 1) else F, None)
            for k, o in enumerate(outputs)
        ],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    return model


def _i64(values) -> np.ndarray:
    return np.array(values, "int64")


def _f32(value) -> np.ndarray:
    return np.array(value, "float32")


# (op, (opset, attrs) before the move, (opset, inputs) after it, outputs)
CASES = {
    "ReduceSum axes": ("ReduceSum", (11, {"axes": [1], "keepdims": 0}), (13, {"axes": _i64([1])}, {"keepdims": 0}), 1),
    "ReduceMax axes": ("ReduceMax", (13, {"axes": [0, 2]}), (18, {"axes": _i64([0, 2])}, {}), 1),
    "Squeeze axes": ("Squeeze", (11, {"axes": [0]}), (13, {"axes": _i64([0])}, {}), 1),
    "Unsqueeze axes": ("Unsqueeze", (11, {"axes": [1, 4]}), (13, {"axes": _i64([1, 4])}, {}), 1),
    "Split sizes": ("Split", (11, {"axis": 2, "split": [1, 3]}), (13, {"split": _i64([1, 3])}, {"axis": 2}), 2),
    "Slice bounds": (
        "Slice",
        (9, {"starts": [0, 1], "ends": [1, 4], "axes": [0, 2]}),
        (10, {"starts": _i64([0, 1]), "ends": _i64([1, 4]), "axes": _i64([0, 2])}, {}),
        1,
    ),
    "TopK k": ("TopK", (9, {"k": 2, "axis": 2}), (11, {"k": _i64([2])}, {"axis": 2}), 2),
    "Pad pads and value": (
        "Pad",
        (2, {"pads": [0, 1, 0, 0, 0, 2], "value": 1.5}),
        (11, {"pads": _i64([0, 1, 0, 0, 0, 2]), "constant_value": _f32(1.5)}, {}),
        1,
    ),
    "Clip bounds": ("Clip", (6, {"min": -0.5, "max": 0.75}), (11, {"min": _f32(-0.5), "max": _f32(0.75)}, {}), 1),
}


def _run_and_check(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    got = nna.Predictor(model).run({"x": x})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    return got


@pytest.mark.parametrize("case", list(CASES))
def test_attribute_before_the_move_and_input_after_agree(case: str) -> None:
    op, (old_opset, old_attrs), (new_opset, new_inputs, new_attrs), outputs = CASES[case]
    shape = (1, 3, 4) if op == "Squeeze" else (2, 3, 4)  # Squeeze's axis 0 is of size 1
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    old = _model(op, old_opset, old_attrs, {}, outputs, shape)
    new = _model(op, new_opset, new_attrs, new_inputs, outputs, shape)
    before = _run_and_check(old, x)
    after = _run_and_check(new, x)
    for b, a in zip(before, after):
        np.testing.assert_array_equal(b, a)


def test_clip_bound_computed_at_run_time_is_an_operand() -> None:
    """From opset 11 a bound may be computed at run time: it stays an operand (attr_or_input's runtime)."""
    node = helper.make_node("Clip", ["x", "lo", ""], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3, 4]), helper.make_tensor_value_info("lo", F, [])],
        [helper.make_tensor_value_info("y", F, [2, 3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    x = np.random.default_rng(1).standard_normal([2, 3, 4]).astype("float32")
    predictor = nna.Predictor(model)
    for lo in (-0.25, 0.5):
        feeds = {"x": x, "lo": np.array(lo, "float32")}
        (got,) = predictor.run(feeds)
        (expected,) = ReferenceEvaluator(model).run(None, feeds)
        np.testing.assert_array_equal(got, expected)


def test_missing_parameter_names_attribute_or_input() -> None:
    """Before the move a missing parameter is a missing attribute, after it a missing input (imported
    without onnx.checker, which refuses both models first)."""
    with pytest.raises(nna.NNAdapterError, match=r"node 0 TopK .*: attribute 'k' is required"):
        ImportedGraph(_model("TopK", 9, {"axis": 2}, {}, 2))
    with pytest.raises(nna.NNAdapterError, match=r"node 0 TopK .*: input 1 is required"):
        ImportedGraph(_model("TopK", 11, {"axis": 2}, {}, 2))
