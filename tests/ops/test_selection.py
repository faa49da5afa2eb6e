"""NONZERO, COMPRESS, UNIQUE and ALL_CLASS_NON_MAX_SUPPRESSION (extensions 2300-2303, outputs whose size
depends on the data) against numpy (numpy.nonzero, numpy.compress, numpy.unique) and, for NMS, ONNX's
reference evaluator on a one-node NonMaxSuppression model.  The outputs are declared with UNKNOWN sizes
where they depend on the data: the execution reports them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from oputil import UNKNOWN, In, Out, P, b8, check_op, expect_error, f32, i32, i64, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.selection import ALL_CLASS_NON_MAX_SUPPRESSION, COMPRESS, NONZERO, UNIQUE

PRECISION = {"float32": P.FLOAT32, "int32": P.INT32, "int64": P.INT64, "bool": P.BOOL8}


def test_codes_are_in_the_builtin_range() -> None:
    for op in (NONZERO, COMPRESS, UNIQUE, ALL_CLASS_NON_MAX_SUPPRESSION):
        assert 2300 <= int(op) < 2400 and nna.OperationType(int(op)) is op


# -- NONZERO ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        np.array([[1.0, 0.0, 2.0], [0.0, np.nan, 0.0]], "float32"),  # NaN is nonzero, as numpy says
        np.array([0, 3, 0, -1, 0], "int32"),
        np.random.default_rng(1).integers(0, 2, (2, 3, 4)).astype("bool"),
        np.zeros((2, 3), "float32"),  # no element: a [2, 0] result
    ],
    ids=["f32-nan", "int32-1d", "bool-3d", "all-zero"],
)
def test_nonzero(x: np.ndarray) -> None:
    expected = np.array(np.nonzero(x), "int64").reshape(x.ndim, -1)
    check_op(NONZERO, [In(x, PRECISION[str(x.dtype)])], [expected], outputs=[Out(P.INT64, dims=[x.ndim, UNKNOWN])])


def test_nonzero_symbolic_input_dims() -> None:
    x = np.array([[0, 1], [2, 0], [3, 4]], "float32")
    model_in = In(x, dims=[UNKNOWN, UNKNOWN])
    check_op(NONZERO, [model_in], [np.array(np.nonzero(x), "int64")], outputs=[Out(P.INT64, dims=[2, UNKNOWN])])


def test_nonzero_of_a_scalar_fails() -> None:
    x = np.array(1.0, "float32")
    expect_error(lambda: run_op(NONZERO, [In(x)], [Out(P.INT64)], [(0, 1)]), "NONZERO", "input", "rank >= 1")


# -- COMPRESS -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "condition, axis",
    [
        ([True, False, True], 0),
        ([False, True, True, False], 1),
        ([True, False], -1),  # shorter than the axis: the rest is not selected
        ([False, False, False], 0),  # nothing selected: size 0 along axis
        ([True, False, True, False, False], 1),  # longer than the axis, false past it
        ([False, True, False, True, True, False, True], None),  # no axis: the flattened input
    ],
)
def test_compress(condition: list[bool], axis: int | None) -> None:
    x = rand(3, 4, seed=2)
    cond = np.array(condition)
    ref = np.compress(cond[: x.shape[axis]] if axis is not None else cond, x, axis=axis)
    inputs = [In(x), In(cond, P.BOOL8)] + ([i64(axis)] if axis is not None else [])
    dims = [UNKNOWN] if axis is None else [UNKNOWN if d == axis % 2 else s for d, s in enumerate(x.shape)]
    check_op(COMPRESS, inputs, [ref], outputs=[Out(P.FLOAT32, dims=dims)])


def test_compress_int_input_symbolic_condition() -> None:
    x = np.arange(12, dtype="int32").reshape(3, 4)
    cond = np.array([True, False, True, True])
    inputs = [In(x, P.INT32), In(cond, P.BOOL8, dims=[UNKNOWN]), i32(1)]
    check_op(COMPRESS, inputs, [np.compress(cond, x, axis=1)], outputs=[Out(P.INT32, dims=[3, UNKNOWN])])


def test_compress_true_past_the_axis_fails() -> None:
    x = rand(2, 3)
    cond = np.array([True, False, False, True])  # the 4th selects past the axis of 3
    inputs = [In(x), In(cond, P.BOOL8), i64(1)]
    expect_error(
        lambda: run_op(COMPRESS, inputs, [Out(P.FLOAT32, dims=[2, UNKNOWN])], [(2, 1)]),
        "COMPRESS",
        "condition",
        "past the input's axis 1 of size 3",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_compress_of_a_2d_condition_fails() -> None:
    inputs = [In(rand(2, 3)), In(np.ones((2, 3), bool), P.BOOL8), i64(1)]
    expect_error(lambda: run_op(COMPRESS, inputs, [Out(P.FLOAT32)], [(2, 3)]), "COMPRESS", "condition", "1-D")


# -- UNIQUE -------------------------------------------------------------------------------


def unique_ref(x: np.ndarray, axis: int | None, ordered: bool) -> list[np.ndarray]:
    """numpy.unique; unsorted: the unique values in the order first met (ONNX's sorted=0)."""
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not ordered:
        order = np.argsort(idx, kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(len(order))
        idx, cnt, inv = idx[order], cnt[order], place[inv]
        y = np.take(x.reshape(-1) if axis is None else x, idx, axis=0 if axis is None else axis)
    return [y, idx.astype("int64"), inv.astype("int64"), cnt.astype("int64")]


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize(
    "x, axis",
    [
        (np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0, -0.5], "float32"), None),
        (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], "int32"), None),
        (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 9, 9]], "int32"), 0),
        (np.array([[[1, 1], [0, 1]], [[1, 1], [0, 1]], [[0, 1], [1, 1]]], "float32"), 2),
        (np.array([[[1, 1], [0, 1]], [[1, 0], [0, 1]], [[0, 1], [0, 1]]], "float32"), -1),
        (np.array([7.0], "float32"), None),
        (np.array([np.nan, 1.0, np.inf, np.nan, -np.inf, 1.0, np.inf], "float32"), None),  # NaNs: one, last
        (np.random.default_rng(4).integers(-20, 20, (10, 30)).astype("int64"), None),  # many ties: a stable sort
        (np.array([[1.0, np.nan], [1.0, np.nan], [0.5, 2.0]], "float32"), 0),
    ],
    ids=["flat-f32", "flat-int32-2d", "axis0", "axis2-3d", "axis-1", "one", "nan-inf", "int64-300", "nan-rows"],
)
def test_unique(x: np.ndarray, axis: int | None, ordered: bool) -> None:
    expected = unique_ref(x, axis, ordered)
    precision = PRECISION[str(x.dtype)]
    inputs = [In(x, precision), b8(ordered)] + ([i64(axis)] if axis is not None else [])
    y_dims = [UNKNOWN] if axis is None else [UNKNOWN if d == axis % x.ndim else s for d, s in enumerate(x.shape)]
    outs = [Out(precision, dims=y_dims), Out(P.INT64, dims=[UNKNOWN]), Out(P.INT64), Out(P.INT64, dims=[UNKNOWN])]
    check_op(UNIQUE, inputs, expected, outputs=outs)


def test_unique_output_only() -> None:
    x = np.array([3, 1, 3, 2], "int32")
    check_op(UNIQUE, [In(x, P.INT32)], [np.unique(x)], outputs=[Out(P.INT32, dims=[UNKNOWN])])


# -- ALL_CLASS_NON_MAX_SUPPRESSION ---------------------------------------------------------


def nms_onnx_ref(boxes, scores, limit, iou, score, center) -> np.ndarray:
    """ONNX's reference evaluator on a one-node NonMaxSuppression model."""
    names = ["boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold"]
    values = [boxes, scores, np.array([limit], "int64"), np.array([iou], "float32")]
    if score is not None:
        values.append(np.array([score], "float32"))
    node = helper.make_node("NonMaxSuppression", names[: len(values)], ["y"], center_point_box=center)
    types = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT]
    inputs = [helper.make_tensor_value_info(n, t, v.shape) for n, t, v in zip(names, types, values)]
    graph = helper.make_graph([node], "nms", inputs, [helper.make_tensor_value_info("y", TensorProto.INT64, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, dict(zip(names, values)))[0].astype("int64").reshape(-1, 3)


def nms_data(batches: int, boxes: int, classes: int, seed: int, center: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if center:
        xy = rng.uniform(0, 4, (batches, boxes, 2))
        wh = rng.uniform(0.5, 3, (batches, boxes, 2))
        data = np.concatenate([xy, wh], axis=2)
    else:
        data = rng.uniform(0, 5, (batches, boxes, 4))  # corners in either order
    # Scores on a grid of 0.05 (ties happen: lower indices first), thresholds between grid points.
    scores = rng.integers(0, 20, (batches, classes, boxes)) * 0.05
    return data.astype("float32"), scores.astype("float32")


@pytest.mark.parametrize(
    "batches, boxes, classes, limit, iou, score, center",
    [
        (1, 8, 1, 3, 0.5, None, 0),
        (2, 10, 3, 5, 0.3, 0.42, 0),
        (1, 9, 2, 100, 0.0, 0.12, 1),
        (2, 6, 2, 0, 0.5, None, 0),  # no box per class: an empty [0, 3] result
        (1, 7, 2, 4, 0.6, 2.0, 1),  # a score threshold above every score: empty
    ],
)
def test_all_class_non_max_suppression(batches, boxes, classes, limit, iou, score, center) -> None:
    data, scores = nms_data(batches, boxes, classes, seed=batches * 10 + boxes, center=center)
    expected = nms_onnx_ref(data, scores, limit, iou, score, center)
    # An empty score_threshold operand is absent: every score is a candidate.
    threshold = f32(np.zeros([0], "float32")) if score is None else f32(score)
    operands = [In(data), In(scores), i64(limit), f32(iou), threshold, i32(center)]
    check_op(ALL_CLASS_NON_MAX_SUPPRESSION, operands, [expected], outputs=[Out(P.INT64, dims=[UNKNOWN, 3])])


def test_all_class_non_max_suppression_class_offset_boxes() -> None:
    """torchvision's batched NMS: one class of boxes offset per detector class, so most pairs are disjoint
    (the kernel skips their IoU) and most boxes survive, each compared with every selected box; boxes that
    touch at an edge, boxes of zero area and overlapping ones within each group."""
    rng = np.random.default_rng(5)
    groups, per = 12, 40
    xy = rng.uniform(0, 20, (groups * per, 2))
    wh = rng.uniform(0, 8, (groups * per, 2))
    wh[::17] = 0.0  # empty boxes never suppress nor are suppressed
    corners = np.concatenate([xy, xy + wh], 1) + (np.repeat(np.arange(groups), per) * 28.0)[:, None]
    corners[1::40, :2] = corners[::40, 2:]  # a box touching another's corner: no intersection
    data = corners[None].astype("float32")
    scores = rng.integers(0, 50, (1, 1, groups * per)).astype("float32") * 0.02
    expected = nms_onnx_ref(data, scores, 1000, 0.45, None, 0)
    operands = [In(data), In(scores), i64(1000), f32(0.45), f32(np.zeros([0], "float32")), i32(0)]
    check_op(ALL_CLASS_NON_MAX_SUPPRESSION, operands, [expected], outputs=[Out(P.INT64, dims=[UNKNOWN, 3])])


@pytest.mark.parametrize("corners", [4, UNKNOWN], ids=["corners-static", "corners-symbolic"])
def test_all_class_non_max_suppression_symbolic_dims(corners) -> None:
    """Batch and box count unknown at compile time, and the 4 corners too (a subgraph's input after a host
    step, as in torchvision's RetinaNet: refused before, "must have shape [B, M, 4]")."""
    data, scores = nms_data(2, 7, 2, seed=5, center=0)
    expected = nms_onnx_ref(data, scores, 3, 0.4, 0.2, 0)
    operands = [
        In(data, dims=[UNKNOWN, UNKNOWN, corners]),
        In(scores, dims=[UNKNOWN, 2, UNKNOWN]),
        i64(3),
        f32(0.4),
        f32(0.2),
    ]
    check_op(ALL_CLASS_NON_MAX_SUPPRESSION, operands, [expected], outputs=[Out(P.INT64, dims=[UNKNOWN, 3])])


def test_all_class_non_max_suppression_parameters_at_run_time() -> None:
    # The cap and both thresholds as model inputs, read at execution (shapes [1] and []).
    data, scores = nms_data(2, 9, 2, seed=8, center=1)
    expected = nms_onnx_ref(data, scores, 2, 0.25, 0.3, 1)
    operands = [
        In(data),
        In(scores),
        In(np.array([2], "int64"), P.INT64),
        In(np.array(0.25, "float32")),
        In(np.array([0.3], "float32")),
        i32(1),
    ]
    check_op(ALL_CLASS_NON_MAX_SUPPRESSION, operands, [expected], outputs=[Out(P.INT64, dims=[UNKNOWN, 3])])


def test_all_class_non_max_suppression_bad_operands() -> None:
    data, scores = nms_data(1, 5, 2, seed=1, center=0)

    def run(boxes, scores_, center=0):
        operands = [In(boxes), In(scores_), i64(2), f32(0.5), f32(0.1), i32(center)]
        return run_op(ALL_CLASS_NON_MAX_SUPPRESSION, operands, [Out(P.INT64, dims=[UNKNOWN, 3])], [(0, 3)])

    expect_error(lambda: run(data[..., :3], scores), "ALL_CLASS_NON_MAX_SUPPRESSION", "boxes", "[B, M, 4]")
    # Corners known only at execution: 3 of them fail the run, naming the operand.
    symbolic = [In(data[..., :3], dims=[1, 5, UNKNOWN]), In(scores), i64(2), f32(0.5), f32(0.1), i32(0)]
    expect_error(
        lambda: run_op(ALL_CLASS_NON_MAX_SUPPRESSION, symbolic, [Out(P.INT64, dims=[UNKNOWN, 3])], [(0, 3)]),
        "boxes",
        "[B, M, 4]",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )
    expect_error(lambda: run(data, scores[:, :, :4]), "scores", "box count M 4 differs from the boxes' 5")
    expect_error(lambda: run(data, scores, center=2), "center_point_box", "got 2")
    operands = [In(data), In(scores), In(np.array([2, 3], "int64"), P.INT64), f32(0.5)]
    expect_error(
        lambda: run_op(ALL_CLASS_NON_MAX_SUPPRESSION, operands, [Out(P.INT64, dims=[UNKNOWN, 3])], [(0, 3)]),
        "max_output_boxes_per_class",
        "must hold one value, got 2",
    )


# -- through the ONNX importer ------------------------------------------------------------------


def test_onnx_graph_with_data_dependent_sizes_matches_onnxruntime() -> None:
    """NonMaxSuppression (parameters as initializers), NonZero -> Transpose, Unique -> ReduceSum and
    Compress in one model with symbolic input sizes, run twice at different sizes: every output,
    shapes included, equals onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import numpy_helper

    from nnadapter_tvm.frontends.onnx import backend

    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score"], ["sel"]),
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
        helper.make_node("Reshape", ["x", "flat"], ["vals"]),
        helper.make_node("Unique", ["vals"], ["u", "ui", "uinv", "uc"], sorted=0),
        helper.make_node("ReduceSum", ["uc"], ["total"], keepdims=0),
        helper.make_node("Compress", ["x", "cond"], ["cx"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(np.array([2], "int64"), "limit"),
        numpy_helper.from_array(np.array([-1], "int64"), "flat"),
        numpy_helper.from_array(np.array([0.3], "float32"), "iou"),
        numpy_helper.from_array(np.array([0.1], "float32"), "score"),
    ]
    inputs = [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["b", "m", 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["b", 3, "m"]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["h", 5]),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, [5]),
    ]
    outs = [("sel", TensorProto.INT64, ["s", 3]), ("nzt", TensorProto.INT64, ["z", 2]), ("u", TensorProto.FLOAT, ["u"])]
    outs += [
        ("uinv", TensorProto.INT64, ["v"]),
        ("total", TensorProto.INT64, []),
        ("cx", TensorProto.FLOAT, ["h", "c"]),
    ]
    outputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outs]
    graph = helper.make_graph(nodes, "data_dependent", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    feeds = {
        "boxes": rng.uniform(0, 5, (2, 9, 4)).astype("float32"),
        "scores": rng.uniform(0, 1, (2, 3, 9)).astype("float32"),
        "x": (rng.integers(0, 3, (4, 5)) * rng.integers(0, 2, (4, 5))).astype("float32"),
        "cond": np.array([1, 0, 1, 1, 0], bool),
    }
    smaller = dict(feeds, x=feeds["x"][:2], boxes=feeds["boxes"][:1, :5], scores=feeds["scores"][:1, :, :5])
    rep = backend.prepare(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for run in (feeds, smaller):
        got = rep.run([run[i.name] for i in inputs])
        for name, g, r in zip([o[0] for o in outs], got, session.run(None, run)):
            assert g.shape == r.shape and g.dtype == r.dtype, name
            np.testing.assert_array_equal(g, r, err_msg=name)


def test_shape_inference_leaves_data_dependent_sizes_unknown() -> None:
    """What importers get from the extensions' shape inference: None exactly where the data decides."""
    from nnadapter_tvm import operations

    def infer(op, shapes, values):
        return operations.lookup(op).infer(shapes, values)

    assert infer(NONZERO, [(2, 3, 4)], [None]) == [(3, None)]
    assert infer(COMPRESS, [(2, 5), (5,), ()], [None, None, np.array(-1)]) == [(2, None)]
    assert infer(COMPRESS, [(2, 5), (5,)], [None, None]) == [(None,)]
    assert infer(UNIQUE, [(2, 5), (), ()], [None, np.array(True), np.array(1)]) == [(2, None), (None,), (5,), (None,)]
    assert infer(UNIQUE, [(2, 5)], [None]) == [(None,), (None,), (10,), (None,)]
    assert infer(ALL_CLASS_NON_MAX_SUPPRESSION, [(1, 4, 4), (1, 2, 4)], [None, None]) == [(None, 3)]
