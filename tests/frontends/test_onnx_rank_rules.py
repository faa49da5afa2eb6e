"""Host nodes whose sizes are read from tensors at execution (Split with fed sizes, Reshape to a fed shape,
Tile with fed repeats, ...) feeding compiled operations: ONNX's shape inference leaves their outputs'
shapes open, the importer derives their rank from the operator's definition (frontends/onnx/rank_rules.py),
and the compiled part takes their sizes as symbolic dimensions.  Each graph runs at two sets of fed sizes
against onnxruntime (one compilation), with host fallback on, as applications run them.  (Tile, Reshape,
Expand, ConstantOfShape and OneHot of fed sizes compile on the device themselves; they are here so
that the rules stay consistent with what the converters produce.)"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.frontends.onnx import rank_rules

F, INT64 = TensorProto.FLOAT, TensorProto.INT64
X = np.random.default_rng(0).uniform(-2, 2, (2, 3, 4, 6)).astype("float32")


def _case(node: tuple, fed: str, values: list, device: str = "Relu", inits: dict | None = None):
    """Graph x -> node(x, fed ...) -> device op -> y; ``values``: the fed tensor's value per run."""
    op, inputs, attrs = node
    first = np.asarray(values[0])
    nodes = [
        helper.make_node(op, inputs, ["h"], **attrs),
        helper.make_node(device, ["h"], ["y"]) if device != "Cast" else helper.make_node("Cast", ["h"], ["y"], to=F),
    ]
    graph_inputs = [
        helper.make_tensor_value_info("x", F, list(X.shape)),
        helper.make_tensor_value_info(fed, INT64, list(first.shape)),
    ]
    initializers = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(
        nodes, "g", graph_inputs, [helper.make_tensor_value_info("y", F, None)], initializer=initializers
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model, fed, values


CASES = {
    "Split": _case(("Split", ["x", "s"], {"axis": 3}), "s", [[2, 4], [5, 1]]),
    "Slice": _case(("Slice", ["x", "s", "e", "a"], {}), "s", [[1], [-3]], inits={"e": [100], "a": [2]}),
    "Tile": _case(("Tile", ["x", "s"], {}), "s", [[1, 2, 1, 1], [2, 1, 1, 3]]),
    "Pad": _case(("Pad", ["x", "s"], {}), "s", [[0, 0, 1, 0, 0, 0, 0, 2], [1, 0, 0, 1, 0, 1, 0, 0]]),
    "Reshape": _case(("Reshape", ["x", "s"], {}), "s", [[6, 24], [12, -1]]),
    "Expand": _case(("Expand", ["x", "s"], {}), "s", [[3, 1, 1, 1, 1], [2, 2, 3, 1, 6]]),
    "Unsqueeze": _case(("Unsqueeze", ["x", "s"], {}), "s", [[0], [4]]),
    "Squeeze": _case(("Squeeze", ["h0", "s"], {}), "s", [[2], [0]], inits={}),
    "ReduceSum_keepdims": _case(("ReduceSum", ["x", "s"], {}), "s", [[1], [3]]),
    "ReduceMax_dropped": _case(("ReduceMax", ["x", "s"], {"keepdims": 0}), "s", [[1, 2], [0, 3]]),
    "TopK": _case(("TopK", ["x", "s"], {"axis": 2}), "s", [[2], [4]]),
    "ConstantOfShape": _case(("ConstantOfShape", ["s"], {}), "s", [[2, 3], [4, 1]], device="Sigmoid"),
    "OneHot": _case(("OneHot", ["s", "d", "v"], {}), "s", [[0, 2], [1, 1]], device="Sigmoid", inits={}),
}


def _fix_special(name: str, model, fed: str, values: list):
    # Squeeze needs a unit axis; OneHot needs depth and values initializers (float values).
    if name == "Squeeze":
        model.graph.node.insert(0, helper.make_node("Unsqueeze", ["x", "u"], ["h0"]))
        model.graph.initializer.append(numpy_helper.from_array(np.array([0, 3]), "u"))
        # axes 0 and 3 of the [1, 2, 3, 1, 4, 6] tensor are units: squeeze one of them per run
        values[:] = [[3], [0]]
    if name == "OneHot":
        model.graph.initializer.extend(
            [numpy_helper.from_array(np.array(4), "d"), numpy_helper.from_array(np.array([0.0, 1.0], "f"), "v")]
        )
    if name in ("TopK", "Split"):
        model.graph.node[0].output.append("second")  # indices; the second piece
    return model


@pytest.mark.parametrize("name", list(CASES))
def test_host_output_of_definition_rank_feeds_compiled_code(name: str) -> None:
    model, fed, values = CASES[name]
    values = list(values)
    model = _fix_special(name, model, fed, values)
    predictor = nna.Predictor(model, host_fallback=True)
    session = ort.InferenceSession(model.SerializeToString())
    for value in values:
        feeds = {"x": X, fed: np.asarray(value, "int64")}
        (want,) = session.run(None, feeds)
        (got,) = predictor.run(feeds)
        assert got.shape == want.shape, (value, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=str(value))


def test_rules_keep_what_the_definition_fixes() -> None:
    from nnadapter_tvm.frontends.onnx.values import Value

    x = Value("x", np.dtype("float32"), (2, 3, 4, 6))
    sizes = Value("s", np.dtype("int64"), (2,))
    split = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=-1)
    assert rank_rules.shapes(split, [x, sizes]) == [(2, 3, 4, None), (2, 3, 4, None)]
    reshape = helper.make_node("Reshape", ["x", "s"], ["r"])
    assert rank_rules.shapes(reshape, [x, sizes]) == [(None, None)]
    reduce = helper.make_node("ReduceSum", ["x", "s"], ["r"], keepdims=0)
    assert rank_rules.shapes(reduce, [x, sizes]) == [(None, None)]
    unknown_length = Value("s", np.dtype("int64"), (None,))
    assert rank_rules.shapes(reshape, [x, unknown_length]) == [None]
    assert rank_rules.shapes(helper.make_node("Relu", ["x"], ["r"]), [x]) == [None]
