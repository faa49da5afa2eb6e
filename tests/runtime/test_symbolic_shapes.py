"""Symbolic shapes through the ONNX importer: dim_params shared across inputs, shape arithmetic carried
as expressions (Shape, Gather, Slice, Concat, Unsqueeze, Cast, Add/Mul/Div, Size, ConstantOfShape, Range,
Expand, Tile, Reshape targets, Slice bounds), each model compiled once and run at several sizes against
onnxruntime; and the errors for sizes that break a shared dimension or a computed shape."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def const(name: str, value, dtype="int64") -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def run_both(model: onnx.ModelProto, feeds: list[dict], tmp_path) -> nna.Predictor:
    """One Predictor (one compilation) serves every feed; each result matches onnxruntime's."""
    predictor = nna.Predictor(model, devices=["llvm"], cache_dir=tmp_path)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in feeds:
        ours = predictor.run(feed)
        theirs = session.run(None, feed)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape, (a.shape, b.shape, {k: v.shape for k, v in feed.items()})
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(glob.glob(os.path.join(tmp_path, "*.nnc"))) == 1, "one compilation serves every size"
    return predictor


def out(name: str, rank: int, dtype=F) -> onnx.ValueInfoProto:
    """A graph output of known rank whose dimensions the model leaves open."""
    return helper.make_tensor_value_info(name, dtype, [f"{name}_{i}" for i in range(rank)])


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def test_reshape_to_a_shape_built_from_the_inputs_dims(tmp_path) -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: [N, C, H, W] -> [N, C * H * W / 4, 4]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("Softmax", ["y"], ["z"], axis=-1),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["N", 3, "H", "W"])],
        [out("z", 3)],
        [const("zero", 0), const("axes", [0]), const("tail", [-1, 4])],
    )
    feeds = [{"x": rand(*s, seed=k)} for k, s in enumerate([(1, 3, 4, 4), (2, 3, 8, 6), (3, 3, 2, 2)])]
    run_both(model, feeds, tmp_path)


def test_static_parts_of_a_shape_fold_at_import() -> None:
    """Shape(x)[1] of an [N, 96, H, W] tensor is the constant 96: nothing is left to run for it."""
    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
    from nnadapter_tvm.frontends.onnx.loader import load_model

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Mul", ["c", "two"], ["c2"]),
        helper.make_node("Unsqueeze", ["c2", "axes"], ["c3"]),
        helper.make_node("Concat", ["minus1", "c3"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["N", 96, "H", "W"])],
        [out("y", 2)],
        [const("one", 1), const("two", 2), const("axes", [0]), const("minus1", [-1])],
    )
    graph = ImportedGraph(load_model(model))
    target = graph.values["target"]
    assert target.is_const and target.const.tolist() == [-1, 192]
    assert [u.node.op_type for u in graph.units if not u.folded] == ["Reshape"]


def test_shared_dim_params_are_one_size_and_checked(tmp_path) -> None:
    """Two inputs of one ``batch``: one symbolic size (their sum needs no broadcasting check); fed
    different sizes, the run fails naming both inputs and the sizes."""
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("a", F, ["batch", 4]), helper.make_tensor_value_info("b", F, ["batch", 4])],
        [helper.make_tensor_value_info("y", F, ["batch", 4])],
    )
    feeds = [{"a": rand(n, 4, seed=n), "b": rand(n, 4, seed=n + 9)} for n in (1, 2, 5)]
    predictor = run_both(model, feeds, tmp_path)
    with pytest.raises(nna.NNAdapterError) as info:
        predictor.run({"a": rand(2, 4), "b": rand(3, 4)})
    assert info.value.code == nna.ResultCode.INVALID_DIMENSIONS
    message = str(info.value)
    for word in ("'a'", "'b'", "batch", "2", "3"):
        assert word in message, message


def test_expand_tile_constant_of_shape_range_and_slice_by_computed_sizes(tmp_path) -> None:
    """Each consumer of a computed shape: ConstantOfShape(Shape(x)), Expand to [N, 1, W], Tile by
    [1, N], Range(0, W) as a position row, Slice x[:, :W - 1] and Size(x)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.array([1.5], "float32"))),
        helper.make_node("Add", ["x", "ones"], ["y0"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "one"], ["w"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Unsqueeze", ["w", "axes"], ["w1"]),
        helper.make_node("Concat", ["n1", "one1", "w1"], ["nw"], axis=0),
        helper.make_node("Expand", ["row", "nw"], ["y1"]),
        helper.make_node("Concat", ["one1", "n1"], ["reps"], axis=0),
        helper.make_node("Tile", ["x", "reps"], ["y2"]),
        helper.make_node("Range", ["zero", "w", "one"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=F),
        helper.make_node("Add", ["x", "posf"], ["y3"]),
        helper.make_node("Sub", ["w1", "one1"], ["end"]),
        helper.make_node("Slice", ["x", "zero1", "end", "one1"], ["y4"]),
        helper.make_node("Size", ["x"], ["size"]),
        helper.make_node("Cast", ["size"], ["sizef"], to=F),
        helper.make_node("Div", ["x", "sizef"], ["y5"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["N", "W"])],
        [out(n, 3 if n == "y1" else 2) for n in ("y0", "y1", "y2", "y3", "y4", "y5")],
        [
            const("zero", 0),
            const("one", 1),
            const("zero1", [0]),
            const("one1", [1]),
            const("axes", [0]),
            numpy_helper.from_array(np.array([[[2.0]]], "float32"), "row"),
        ],
    )
    feeds = [{"x": rand(n, w, seed=n * w)} for n, w in [(1, 3), (2, 5), (4, 2)]]
    run_both(model, feeds, tmp_path)


def test_reshape_whose_computed_shape_does_not_fit_fails_naming_the_node(tmp_path) -> None:
    """[N, 6] reshaped to [M, 4] where M is another input's batch: a count that does not match at run
    time is an NNAdapterError naming the operation, never a read past the input."""
    nodes = [
        helper.make_node("Shape", ["y"], ["s"]),
        helper.make_node("Slice", ["s", "zero1", "one1"], ["m"]),
        helper.make_node("Concat", ["m", "four"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["z"], name="the_reshape"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["N", 6]), helper.make_tensor_value_info("y", F, ["M", 1])],
        [out("z", 2)],
        [const("zero1", [0]), const("one1", [1]), const("four", [4])],
    )
    run_both(model, [{"x": rand(2, 6), "y": rand(3, 1)}, {"x": rand(4, 6), "y": rand(6, 1)}], tmp_path)
    predictor = nna.Predictor(model, devices=["llvm"], cache_dir=tmp_path)
    with pytest.raises(nna.NNAdapterError) as info:
        predictor.run({"x": rand(2, 6), "y": rand(2, 1)})
    assert info.value.code == nna.ResultCode.INVALID_DIMENSIONS
    assert "RESHAPE" in str(info.value) and "'the_reshape'" in str(info.value), str(info.value)


def test_reshape_to_a_shape_read_from_data(tmp_path) -> None:
    """A Reshape target that depends on data (here a graph input) is read at execution: 0 copies,
    -1 is inferred there, as ONNX says; one compilation."""
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_tensor_value_info("x", F, ["N", 6]), helper.make_tensor_value_info("shape", I64, [3])],
        [out("y", 3)],
    )
    feeds = [
        {"x": rand(2, 6), "shape": np.array([0, 3, -1], "int64")},
        {"x": rand(4, 6), "shape": np.array([-1, 2, 2], "int64")},
        {"x": rand(1, 6), "shape": np.array([6, 1, 1], "int64")},
    ]
    run_both(model, feeds, tmp_path)


@pytest.mark.parametrize("schedules", ["", "CPU_SCHEDULES=0;"], ids=["scheduled", "unscheduled"])
def test_only_the_width_unknown(tmp_path, schedules) -> None:
    """A text line's shape, [1, C, H, W] with only W unknown: Conv -> Relu -> Conv -> Sigmoid * x (SiLU).

    It failed to build ("The padding factor (w - 2) * 8 is not divisible by w - 2": TVM's reshape analysis
    of the output transpose, in RewriteDataflowReshape), and once built every convolution fell back to
    naive loops (a fused parallel loop TVM could not lower)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((40, 8, 3, 3)).astype("float32") * 0.1, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s"]),
        helper.make_node("Mul", ["c2", "s"], ["y"]),
    ]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [1, 4, 10, "W"])], [out("y", 4)], [w1, w2])
    feeds = [{"x": rand(1, 4, 10, w, seed=w)} for w in (12, 3, 37)]
    predictor = nna.Predictor(model, devices=["llvm"], cache_dir=tmp_path, context_properties=schedules)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in feeds:
        np.testing.assert_allclose(predictor.run(feed)[0], session.run(None, feed)[0], rtol=1e-5, atol=1e-5)
