"""Graphs as today's exporters write them, on symbolic sizes: torch.onnx's dynamo exporter writes every
Reshape with ``allowzero=1`` to a target concatenated from Shape slices and constants, and gathers from
an attention mask of [batch, sequence] with GatherND.  Each model is compiled once and run at two sizes
against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.types import NNAdapterError


def _model(nodes, inputs, outputs, initializers=(), opset: int = 20) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: onnx.ModelProto, feeds_per_size: list[dict]) -> None:
    predictor = nna.Predictor(model)
    assert predictor.host_node_count == 0
    compilations = len(predictor.compilations)
    session = ort.InferenceSession(model.SerializeToString())
    for feeds in feeds_per_size:
        got = predictor.run(feeds)
        want = session.run(None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape, f"{ {k: v.shape for k, v in feeds.items()} }: {g.shape} != {w.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert len(predictor.compilations) == compilations  # one compilation serves every size


def _heads_model(allowzero: int) -> onnx.ModelProto:
    """x [N, L, 8] -> Reshape to Concat(Shape(x)[0:1], Shape(x)[1:2], [2, 4]) -> Transpose -> Reshape
    back to Concat(Shape(x)[0:2], [-1]): the dynamo exporter's multi-head split and merge."""
    nodes = [
        helper.make_node("Shape", ["x"], ["n"], start=0, end=1),
        helper.make_node("Shape", ["x"], ["l"], start=1, end=2),
        helper.make_node("Concat", ["n", "l", "heads"], ["split_shape"], axis=0),
        helper.make_node("Reshape", ["x", "split_shape"], ["split"], allowzero=allowzero),
        helper.make_node("Transpose", ["split"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Mul", ["t", "two"], ["scaled"]),
        helper.make_node("Transpose", ["scaled"], ["back"], perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["x"], ["nl"], start=0, end=2),
        helper.make_node("Concat", ["nl", "minus_one"], ["merge_shape"], axis=0),
        helper.make_node("Reshape", ["back", "merge_shape"], ["y"], allowzero=allowzero),
    ]
    inits = [
        numpy_helper.from_array(np.array([2, 4], "int64"), "heads"),
        numpy_helper.from_array(np.array([-1], "int64"), "minus_one"),
        numpy_helper.from_array(np.array(2.0, "float32"), "two"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model(nodes, [x], [y], inits)


@pytest.mark.parametrize("allowzero", [1, 0])
def test_reshape_to_a_target_computed_from_dimensions(allowzero: int) -> None:
    rng = np.random.default_rng(0)
    sizes = [(1, 5), (3, 2)]
    _check(
        _heads_model(allowzero), [{"x": rng.standard_normal((n, length, 8)).astype("float32")} for n, length in sizes]
    )


def test_allowzero_reshape_to_a_target_read_from_data_is_refused() -> None:
    """A target read from data reaches RESHAPE as a tensor whose 0s it copies: allowzero cannot be kept,
    so the node is refused (naming it) rather than run with the other meaning."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["y"], name="the_reshape", allowzero=1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    target = helper.make_tensor_value_info("target", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    with pytest.raises(NNAdapterError, match=r"the_reshape.*must be a constant"):
        nna.Predictor(_model(nodes, [x, target], [y]))


def _gather_nd_model(data_shape, data_type, indices_shape, batch_dims: int) -> onnx.ModelProto:
    nodes = [helper.make_node("GatherND", ["data", "indices"], ["y"], batch_dims=batch_dims)]
    data = helper.make_tensor_value_info("data", data_type, data_shape)
    indices = helper.make_tensor_value_info("indices", TensorProto.INT64, indices_shape)
    y = helper.make_tensor_value_info("y", data_type, None)
    return _model(nodes, [data, indices], [y])


# (data dims, indices dims, batch_dims, sizes: ({dim name: size}, ...)); dims name their symbols.
GATHER_ND = {
    "mask_pairs": (["N", "L"], ["M", 2], 0, ({"N": 2, "L": 5, "M": 3}, {"N": 3, "L": 7, "M": 6})),
    "rows": (["N", "L", 3], ["M", 1], 0, ({"N": 4, "L": 2, "M": 3}, {"N": 2, "L": 5, "M": 1})),
    "one_tuple": (["N", "L", "C"], [2], 0, ({"N": 2, "L": 3, "C": 4}, {"N": 3, "L": 5, "C": 2})),
    "batched": (["N", "L", 3], ["N", "M", 1], 1, ({"N": 2, "L": 4, "M": 3}, {"N": 3, "L": 2, "M": 5})),
    "batched_pairs": (["N", "L", "C"], ["N", 2], 1, ({"N": 2, "L": 4, "C": 3}, {"N": 3, "L": 2, "C": 5})),
}


@pytest.mark.parametrize("case", list(GATHER_ND.values()), ids=list(GATHER_ND))
@pytest.mark.parametrize("dtype", ["float32", "bool"])
def test_gather_nd_on_symbolic_sizes(case, dtype: str) -> None:
    data_dims, indices_dims, batch_dims, sizes = case
    data_type = TensorProto.FLOAT if dtype == "float32" else TensorProto.BOOL
    model = _gather_nd_model(data_dims, data_type, indices_dims, batch_dims)
    rng = np.random.default_rng(1)
    feeds = []
    for size in sizes:
        data_shape = [size.get(d, d) for d in data_dims]
        indices_shape = [size.get(d, d) for d in indices_dims]
        k = indices_shape[-1]
        bounds = data_shape[batch_dims : batch_dims + k]
        # Negative coordinates too: they count from the end of their axis.
        indices = np.stack([rng.integers(-b, b, indices_shape[:-1]) for b in bounds], -1).astype("int64")
        data = rng.standard_normal(data_shape)
        feeds.append({"data": (data > 0 if dtype == "bool" else data).astype(dtype), "indices": indices})
    _check(model, feeds)


def test_gather_nd_refuses_a_coordinate_past_its_axis_at_execution() -> None:
    """A coordinate past its own axis whose flat row still lies in the input ([0, 5] of a [2, 5] input
    is row 5 of 10) is an error, as in onnxruntime, not another row's element."""
    predictor = nna.Predictor(_gather_nd_model(["N", "L"], TensorProto.FLOAT, ["M", 2], 0))
    data = np.arange(10, dtype="float32").reshape(2, 5)
    np.testing.assert_array_equal(predictor.run([data, np.array([[1, 4]], "int64")])[0], [9.0])
    with pytest.raises(NNAdapterError):
        predictor.run([data, np.array([[0, 5]], "int64")])


@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_of_a_count_computed_from_dimensions(largest: int) -> None:
    """Detectors keep ``min(k, anchors)`` boxes per level (torchvision's SSD and RetinaNet: ReduceMin of a
    Concat): k follows from the input's size.  Ties (the rounded scores) come by smaller index first, as
    in onnxruntime."""
    nodes = [
        helper.make_node("Shape", ["x"], ["length"], start=1, end=2),
        helper.make_node("Concat", ["cap", "length"], ["both"], axis=0),
        helper.make_node("ReduceMin", ["both"], ["smaller"], keepdims=0),
        helper.make_node("Reshape", ["smaller", "one"], ["k"]),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, largest=largest),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])
    outputs = [
        helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("indices", TensorProto.INT64, None),
    ]
    inits = [
        numpy_helper.from_array(np.array([6], "int64"), "cap"),
        numpy_helper.from_array(np.array([1], "int64"), "one"),
    ]
    rng = np.random.default_rng(2)
    # k = 4 (the whole axis) at the first size, 6 (the cap) at the second.
    sizes = [(2, 4), (3, 40)]
    _check(
        _model(nodes, [x], outputs, inits, opset=17),
        [{"x": np.round(rng.standard_normal(s), 1).astype("float32")} for s in sizes],
    )


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_top_k_of_a_computed_count_with_extremes(largest: int, dtype: str) -> None:
    """The computed k of a detector (min(cap, L)) takes the top ``cap`` of the axis padded with elements
    that rank below every real one, then the first k: NaN, infinities and the type's extremes among the
    values must still come out as a sort of the real elements would give them (ties by smaller index)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["length"], start=1, end=2),
        helper.make_node("Concat", ["cap", "length"], ["both"], axis=0),
        helper.make_node("ReduceMin", ["both"], ["k"], keepdims=1),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, largest=largest),
    ]
    elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.INT32
    x = helper.make_tensor_value_info("x", elem, ["N", "L"])
    outputs = [
        helper.make_tensor_value_info("values", elem, None),
        helper.make_tensor_value_info("indices", TensorProto.INT64, None),
    ]
    inits = [numpy_helper.from_array(np.array([7], "int64"), "cap")]
    rng = np.random.default_rng(4)
    feeds = []
    for shape in [(2, 5), (3, 30)]:
        v = rng.integers(-3, 4, shape).astype(dtype)
        if dtype == "float32":
            v[0, :3] = [np.nan, -np.inf, np.inf]
            v[1, -2:] = [-np.inf, -np.inf]
        else:
            info = np.iinfo(np.int32)
            v[0, :3] = [info.min, info.max, info.min]
        feeds.append({"x": v})
    _check(_model(nodes, [x], outputs, inits, opset=17), feeds)


def test_top_k_of_the_scores_above_a_threshold() -> None:
    """SSD's post-processing: the scores above a threshold (NonZero, GatherND: a count known only from the
    data), then the best min(cap, count) of them."""
    nodes = [
        helper.make_node("Greater", ["scores", "threshold"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["where"]),
        helper.make_node("Transpose", ["where"], ["coordinates"], perm=[1, 0]),
        helper.make_node("GatherND", ["scores", "coordinates"], ["kept"]),
        helper.make_node("Shape", ["kept"], ["count"]),
        helper.make_node("Concat", ["cap", "count"], ["both"], axis=0),
        helper.make_node("ReduceMin", ["both"], ["k"], keepdims=1),
        helper.make_node("TopK", ["kept", "k"], ["values", "indices"]),
    ]
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["L"])
    outputs = [
        helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("indices", TensorProto.INT64, None),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.0, "float32"), "threshold"),
        numpy_helper.from_array(np.array([5], "int64"), "cap"),
    ]
    rng = np.random.default_rng(3)
    # 3 of 6 scores above 0 (k = 3), then many (k = 5, the cap).
    first = np.array([0.5, -1.0, 0.2, -0.1, 0.9, -2.0], "float32")
    _check(
        _model(nodes, [scores], outputs, inits, opset=17),
        [{"scores": first}, {"scores": rng.standard_normal(50).astype("float32")}],
    )


def test_float_range_over_a_dimension() -> None:
    """YOLO's anchor grid: ``arange(float(w)) + 0.5`` from the feature map's width, a float Range whose
    limit is a cast dimension (computed as the integer RANGE, cast: exact)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["w"], start=3, end=4),
        helper.make_node("Squeeze", ["w"], ["w0"]),
        helper.make_node("Cast", ["w0"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero", "wf", "step"], ["grid"]),
        helper.make_node("Add", ["grid", "half"], ["centres"]),
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=0),
        helper.make_node("Unsqueeze", ["mean", "one"], ["column"]),
        helper.make_node("Mul", ["column", "centres"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.array(v, "float32"), n) for n, v in [("zero", 0.0), ("step", 1.0), ("half", 0.5)]
    ]
    inits += [numpy_helper.from_array(np.array(v, "int64"), n) for n, v in [("one", [1]), ("axes", [1, 2, 3])]]
    rng = np.random.default_rng(4)
    sizes = [(1, 3, 4, 5), (2, 3, 6, 9)]
    _check(_model(nodes, [x], [y], inits, opset=18), [{"x": rng.standard_normal(s).astype("float32")} for s in sizes])


def test_nonzero_of_a_data_dependent_empty_tensor() -> None:
    """Faster R-CNN's box filter: NonZero over scores that were themselves selected by a NonZero, none of
    them left.  The count is a sum over an axis of size 0 at execution, whose initial value TIR writes on
    the first iteration; unwritten, it was garbage and the output's allocation threw std::bad_alloc."""
    nodes = [
        helper.make_node("Greater", ["s", "zero"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Squeeze", ["nz", "axis0"], ["idx"]),
        helper.make_node("Gather", ["v", "idx"], ["kept"]),
        helper.make_node("Less", ["kept", "threshold"], ["small"]),
        helper.make_node("Not", ["small"], ["large"]),
        helper.make_node("NonZero", ["large"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["L"]) for n in ("s", "v")]
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    inits = [numpy_helper.from_array(np.array(v, "float32"), n) for n, v in [("zero", 0.0), ("threshold", 0.5)]]
    inits.append(numpy_helper.from_array(np.array([0], "int64"), "axis0"))
    rng = np.random.default_rng(5)
    feeds = []
    for length, sign in [(6, 1.0), (6, -1.0), (5, -1.0), (9, 1.0)]:  # sign -1: nothing selected
        s = (sign * (np.abs(rng.standard_normal(length)) + 0.1)).astype("float32")
        feeds.append({"s": s, "v": rng.random(length).astype("float32")})
    _check(_model(nodes, inputs, [y], inits, opset=17), feeds)


def test_scatter_into_rois_with_an_index_shape_read_at_execution() -> None:
    """torchvision's RoI pooler: ScatterElements of [rois, C, 2] pooled features into zeros, at indices
    expanded to a shape that passes through Where (so it is read at execution): the update's static C
    is checked against the index's run-time dimension (an int beside an int64 size)."""
    nodes = [
        helper.make_node("Shape", ["u"], ["shp"]),
        helper.make_node("ConstantOfShape", ["shp"], ["zeros"], value=numpy_helper.from_array(np.zeros(1, "float32"))),
        helper.make_node("Equal", ["shp", "minus_one"], ["unset"]),
        helper.make_node("Where", ["unset", "ones", "shp"], ["target"]),
        helper.make_node("Reshape", ["order", "column"], ["order3"]),
        helper.make_node("Expand", ["order3", "target"], ["where"]),
        helper.make_node("ScatterElements", ["zeros", "where", "u"], ["y"], axis=0),
    ]
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, ["M", 4, 2])
    order = helper.make_tensor_value_info("order", TensorProto.INT64, ["M"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.array([-1, 1, 1], "int64"), "column"),
        numpy_helper.from_array(np.array(-1, "int64"), "minus_one"),
        numpy_helper.from_array(np.ones(3, "int64"), "ones"),
    ]
    rng = np.random.default_rng(6)
    feeds = [
        {"u": rng.standard_normal((m, 4, 2)).astype("float32"), "order": rng.permutation(m).astype("int64")}
        for m in (3, 7)
    ]
    _check(_model(nodes, [u, order], [y], inits, opset=17), feeds)


def test_slice_bounds_read_from_data() -> None:
    """Mask R-CNN pastes each mask into the box its coordinates name: Slice bounds that are data, read at
    execution (negative, past the end, empty and reversed ranges clamped as ONNX says)."""
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["H", "W"]),
        helper.make_tensor_value_info("starts", TensorProto.INT64, [2]),
        helper.make_tensor_value_info("ends", TensorProto.INT64, [2]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model(nodes, inputs, [y], [numpy_helper.from_array(np.array([0, 1], "int64"), "axes")], opset=17)
    x = np.arange(30, dtype="float32").reshape(5, 6)
    bounds = [([1, 2], [4, 5]), ([-3, 0], [5, -1]), ([3, 4], [1, 2]), ([0, -100], [100, 100]), ([2, 2], [2, 3])]
    _check(model, [{"x": x, "starts": np.array(s, "int64"), "ends": np.array(e, "int64")} for s, e in bounds])


@pytest.mark.parametrize("steps", [(1, 1), (-1, -2), (-2, 1)])
def test_slice_bounds_beyond_int32_read_from_data(steps: tuple[int, int]) -> None:
    """Bounds read from data that int32 does not hold (INT64_MAX / INT64_MIN, the exporters' "to the
    end", and 2^62) clamp as ONNX defines: a wrapping cast made 2^62 an end of 0, so a backward slice
    from the last element gave two elements where ONNX gives none.  The reference is onnx's evaluator:
    onnxruntime takes an end of exactly INT64_MAX with a negative step as -1 (one element more)."""
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 6]),
        helper.make_tensor_value_info("starts", TensorProto.INT64, [2]),
        helper.make_tensor_value_info("ends", TensorProto.INT64, [2]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.array([0, 1], "int64"), "axes"),
        numpy_helper.from_array(np.array(steps, "int64"), "steps"),
    ]
    model = _model(nodes, inputs, [y], inits, opset=17)
    predictor, reference = nna.Predictor(model), ReferenceEvaluator(model)
    x = np.arange(30, dtype="float32").reshape(5, 6)
    big, top, bottom = 2**62, np.iinfo("int64").max, np.iinfo("int64").min
    bounds = [([-1, 0], [big, top]), ([top, -big], [bottom, big]), ([-big, 2], [big, bottom]), ([big, 1], [-big, 5])]
    for starts, ends in bounds:
        feeds = {"x": x, "starts": np.array(starts, "int64"), "ends": np.array(ends, "int64")}
        (got,), (want,) = predictor.run(feeds), reference.run(None, feeds)
        assert got.shape == want.shape, (starts, ends, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)


def _fpn_resize_model(sizes_nodes: list, mode: str = "nearest") -> onnx.ModelProto:
    """Resize(x, roi=[], scales=[], sizes) as torchvision's FPN and detection transforms write it: roi and
    scales given as empty constants, the sizes computed in the graph."""
    # F.interpolate(mode="nearest") as torch.onnx writes it.
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    nodes = [*sizes_nodes, helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], **attrs)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.zeros(0, "float32"), "roi"),
        numpy_helper.from_array(np.zeros(0, "float32"), "scales"),
        numpy_helper.from_array(np.array([1.5, 1.5], "float32"), "factor"),
    ]
    return _model(nodes, [x], [y], inits, opset=11)


def test_resize_to_sizes_computed_from_dimensions_with_empty_roi_and_scales() -> None:
    """The FPN's top-down path: nearest Resize to twice the input's H and W (Shape arithmetic)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Add", ["shape", "shape"], ["double"]),
        helper.make_node("Slice", ["double", "two", "four"], ["hw"]),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
    ]
    model = _fpn_resize_model(nodes)
    model.graph.initializer.extend(
        numpy_helper.from_array(np.array([v], "int64"), n) for n, v in [("zero", 0), ("two", 2), ("four", 4)]
    )
    rng = np.random.default_rng(7)
    _check(model, [{"x": rng.standard_normal(s).astype("float32")} for s in [(1, 2, 3, 5), (2, 2, 4, 4)]])


def test_resize_to_sizes_computed_in_float_from_the_image_size() -> None:
    """GeneralizedRCNNTransform scales the image by a factor computed in float from its size: sizes that
    no shape arithmetic tracks, read at execution."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "two", "four"], ["hw"]),
        helper.make_node("Cast", ["hw"], ["hw_float"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["hw_float", "factor"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["floored"]),
        helper.make_node("Cast", ["floored"], ["new_hw"], to=TensorProto.INT64),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "new_hw"], ["sizes"], axis=0),
    ]
    model = _fpn_resize_model(nodes)
    model.graph.initializer.extend(
        numpy_helper.from_array(np.array([v], "int64"), n) for n, v in [("zero", 0), ("two", 2), ("four", 4)]
    )
    rng = np.random.default_rng(8)
    _check(model, [{"x": rng.standard_normal(s).astype("float32")} for s in [(1, 2, 3, 5), (2, 2, 6, 4)]])


def test_pad_to_a_multiple_computed_from_the_image_size() -> None:
    """GeneralizedRCNNTransform pads each image to a multiple of 32: Pad's pads computed in float
    (ceil) from the image's size, read at execution."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "one", "three"], ["hw"]),
        helper.make_node("Cast", ["hw"], ["hw_float"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["hw_float", "stride"], ["blocks"]),
        helper.make_node("Ceil", ["blocks"], ["whole"]),
        helper.make_node("Mul", ["whole", "stride"], ["padded"]),
        helper.make_node("Cast", ["padded"], ["padded_int"], to=TensorProto.INT64),
        helper.make_node("Sub", ["padded_int", "hw"], ["extra"]),
        helper.make_node("Concat", ["zeros3", "zero", "extra"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads", "fill"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.array(v, "int64"), n)
        for n, v in [("one", [1]), ("three", [3]), ("zeros3", [0, 0, 0]), ("zero", [0])]
    ]
    inits += [
        numpy_helper.from_array(np.array(8.0, "float32"), "stride"),
        numpy_helper.from_array(np.array(0.5, "float32"), "fill"),
    ]
    rng = np.random.default_rng(9)
    _check(
        _model(nodes, [x], [y], inits, opset=17),
        [{"x": rng.standard_normal(s).astype("float32")} for s in [(3, 5, 9), (3, 16, 12)]],
    )
