"""The extensions BINARIZER, ARRAY_FEATURE_EXTRACTOR, TREE_ENSEMBLE, ONE_HOT_ENCODER and MEL_WEIGHT_MATRIX
(op_converters/ml.py)
against references written from ONNX's definitions: numpy for Binarizer and ArrayFeatureExtractor, a tree walk
written from TreeEnsemble's text (one node at a time, as the operator describes), and onnx's reference
evaluator for MelWeightMatrix (a one-node model)."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from oputil import UNKNOWN, Const, In, Out, P, expect_error, f32, i32, i64, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.ml import (
    ARRAY_FEATURE_EXTRACTOR,
    BINARIZER,
    MEL_WEIGHT_MATRIX,
    ONE_HOT_ENCODER,
    TREE_ENSEMBLE,
)

PRECISION = {"float32": P.FLOAT32, "float64": P.FLOAT64, "int32": P.INT32, "int64": P.INT64}


# -- BINARIZER ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(PRECISION))
@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_binarizer(dtype, shape):
    x = (np.random.default_rng(0).uniform(-3, 3, shape) * 2).astype(dtype)
    x.reshape(-1)[0] = 1  # exactly the threshold: not above it
    got = run_op(BINARIZER, [In(x, PRECISION[dtype]), f32(1.0)], [Out(PRECISION[dtype])], [shape])[0]
    np.testing.assert_array_equal(got, np.where(x > 1, 1, 0).astype(dtype))
    assert got.dtype == np.dtype(dtype)


def test_binarizer_nan_and_default_threshold_symbolic_dims():
    x = np.array([[np.nan, -1.0, 0.0, 2.5]], "float32")
    got = run_op(BINARIZER, [In(x, dims=[UNKNOWN, 4]), Const(None)], [Out(dims=[UNKNOWN, 4])], [x.shape])[0]
    np.testing.assert_array_equal(got, np.array([[0, 0, 0, 1]], "float32"))


# -- ARRAY_FEATURE_EXTRACTOR ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "indices"),
    [((3, 4), [0, 2]), ((2, 3, 5), [[4, 0, 4]]), ((6,), [5, 1]), ((2, 4), [[1], [3]])],
)
@pytest.mark.parametrize("symbolic", [False, True])
def test_array_feature_extractor(shape, indices, symbolic):
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    idx = np.array(indices, "int64")
    flat = idx.reshape(-1)
    expected = x[..., flat].reshape((1, flat.size) if x.ndim == 1 else (*x.shape[:-1], flat.size))
    dims = [UNKNOWN] * x.ndim if symbolic else None
    out_dims = [UNKNOWN] * expected.ndim if symbolic else None
    inputs = [In(x, dims=dims), In(idx, P.INT64)]
    got = run_op(ARRAY_FEATURE_EXTRACTOR, inputs, [Out(dims=out_dims)], [expected.shape])[0]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("bad", [4, -1])
def test_array_feature_extractor_index_out_of_range(bad):
    x = np.zeros((2, 4), "float32")
    idx = np.array([0, bad], "int64")
    expect_error(
        lambda: run_op(ARRAY_FEATURE_EXTRACTOR, [In(x), In(idx, P.INT64)], [Out()], [(2, 2)]),
        "ARRAY_FEATURE_EXTRACTOR",
        "indices",
        f"index {bad} is out of range [0, 4)",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


# -- TREE_ENSEMBLE --------------------------------------------------------------------------------------

# Two trees over 3 features, 2 targets. Tree 0: node 0 (x0 <= 0.5) -> node 1 (x1 in {1, 3}) | leaf 0;
# node 1 -> leaf 1 | node 2 (x2 > -1) -> leaf 2 | leaf 3. Tree 1: node 3 (x1 < 2, NaN tracks true) -> leaf 4 |
# node 4 (x0 == 1) -> leaf 5 | leaf 6.
TREES = {
    "nodes_featureids": [0, 1, 2, 1, 0],
    "nodes_modes": [0, 6, 3, 1, 4],
    "nodes_splits": [0.5, 0.0, -1.0, 2.0, 1.0],
    "nodes_truenodeids": [1, 1, 2, 4, 5],
    "nodes_trueleafs": [0, 1, 1, 1, 1],
    "nodes_falsenodeids": [0, 2, 3, 4, 6],
    "nodes_falseleafs": [1, 0, 1, 0, 1],
    "leaf_targetids": [0, 1, 0, 1, 0, 1, 1],
    "leaf_weights": [1.5, -2.0, 4.0, 0.25, 8.0, -16.0, 32.0],
    "tree_roots": [0, 3],
    "membership_values": [1.0, 3.0, np.nan],
    "nodes_missing_value_tracks_true": [0, 0, 0, 1, 0],
}


def tree_reference(x: np.ndarray, trees: dict, n_targets: int, aggregate: int) -> np.ndarray:
    """TreeEnsemble as its text describes it: each tree walked from its root, one comparison per node."""
    sets, members = {}, iter(trees["membership_values"])
    for k, mode in enumerate(trees["nodes_modes"]):
        if mode == 6:
            sets[k] = set()
            while not np.isnan(v := next(members)):
                sets[k].add(v)
    compare = [
        lambda a, s: a <= s,
        lambda a, s: a < s,
        lambda a, s: a >= s,
        lambda a, s: a > s,
        lambda a, s: a == s,
        lambda a, s: a != s,
    ]
    init = {0: 0.0, 1: 0.0, 2: np.finfo(x.dtype).max, 3: np.finfo(x.dtype).min}[aggregate]
    out = np.full((len(x), n_targets), init, x.dtype)
    for row, values in enumerate(x):
        for root in trees["tree_roots"]:
            node, leaf = root, None
            while leaf is None:
                a, mode = values[trees["nodes_featureids"][node]], trees["nodes_modes"][node]
                hit = a in sets[node] if mode == 6 else compare[mode](a, trees["nodes_splits"][node])
                hit = hit or (bool(trees["nodes_missing_value_tracks_true"][node]) and np.isnan(a))
                side = "true" if hit else "false"
                target = trees[f"nodes_{side}nodeids"][node]
                if trees[f"nodes_{side}leafs"][node]:
                    leaf = target
                else:
                    node = target
            owners = trees.get("leaf_ids", range(len(trees["leaf_weights"])))
            for t, w, owner in zip(trees["leaf_targetids"], trees["leaf_weights"], owners):
                if owner != leaf:
                    continue
                if aggregate in (0, 1):
                    out[row, t] += w
                elif aggregate == 2:
                    out[row, t] = min(out[row, t], w)
                else:
                    out[row, t] = max(out[row, t], w)
    return out / len(trees["tree_roots"]) if aggregate == 0 else out


def tree_inputs(x: In, trees: dict, dtype: str, n_targets: int, aggregate: int) -> list:
    def ints(name):
        return i64(np.array(trees[name], "int64"))

    def floats(name):
        return Const(np.array(trees[name], dtype), PRECISION[dtype])

    return [
        x,
        ints("nodes_featureids"),
        ints("nodes_modes"),
        floats("nodes_splits"),
        ints("nodes_truenodeids"),
        ints("nodes_trueleafs"),
        ints("nodes_falsenodeids"),
        ints("nodes_falseleafs"),
        ints("leaf_targetids"),
        floats("leaf_weights"),
        ints("tree_roots"),
        i32(n_targets),
        i32(aggregate),
        floats("membership_values"),
        ints("nodes_missing_value_tracks_true"),
        *([ints("leaf_ids")] if "leaf_ids" in trees else []),
    ]


def tree_features(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(2)
    x = rng.choice([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, np.nan], size=(12, 3)).astype(dtype)
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3], ids=["AVERAGE", "SUM", "MIN", "MAX"])
@pytest.mark.parametrize("symbolic", [False, True])
def test_tree_ensemble(dtype, aggregate, symbolic):
    x = tree_features(dtype)
    expected = tree_reference(x, TREES, 2, aggregate)
    model_in = In(x, PRECISION[dtype], dims=[UNKNOWN, 3] if symbolic else None)
    out = Out(PRECISION[dtype], dims=[UNKNOWN, 2] if symbolic else None)
    got = run_op(TREE_ENSEMBLE, tree_inputs(model_in, TREES, dtype, 2, aggregate), [out], [expected.shape])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got.dtype == np.dtype(dtype)


# Leaves holding several weights (leaf_ids: the leaf of each entry), one holding none: tree 0's leaf 1 names
# both targets, leaf 2 target 0 twice, leaf 6 nothing.
SHARED_LEAVES = {
    **TREES,
    "leaf_targetids": [0, 1, 0, 0, 0, 1, 1, 0, 1],
    "leaf_weights": [1.5, -2.0, 0.75, 4.0, 1.0, 0.25, 8.0, -16.0, 3.0],
    "leaf_ids": [0, 1, 1, 2, 2, 3, 4, 5, 5],
}


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3], ids=["AVERAGE", "SUM", "MIN", "MAX"])
def test_tree_ensemble_leaves_with_several_weights(aggregate):
    x = tree_features("float32")
    expected = tree_reference(x, SHARED_LEAVES, 2, aggregate)
    inputs = tree_inputs(In(x, dims=[UNKNOWN, 3]), SHARED_LEAVES, "float32", 2, aggregate)
    got = run_op(TREE_ENSEMBLE, inputs, [Out(dims=[UNKNOWN, 2])], [expected.shape])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_tree_ensemble_bad_feature_id():
    trees = {**TREES, "nodes_featureids": [0, 1, 7, 1, 0]}
    x = tree_features("float32")
    expect_error(
        lambda: run_op(TREE_ENSEMBLE, tree_inputs(In(x), trees, "float32", 2, 1), [Out()], [(12, 2)]),
        "TREE_ENSEMBLE",
        "nodes_featureids",
        "must lie in [0, 3)",
    )


def test_tree_ensemble_cycle():
    trees = {**TREES, "nodes_falsenodeids": [0, 0, 3, 4, 6]}  # node 1's false branch back to the root
    x = tree_features("float32")
    expect_error(
        lambda: run_op(TREE_ENSEMBLE, tree_inputs(In(x), trees, "float32", 2, 1), [Out()], [(12, 2)]),
        "TREE_ENSEMBLE",
        "cycle",
    )


# -- ONE_HOT_ENCODER ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int64", "int32", "float32", "float64"])
def test_one_hot_encoder(dtype):
    # 5 is listed twice: its last position holds the 1 (onnxruntime's map keeps the last); -7 is no category.
    cats = np.array([3, 5, -1, 0, 5], "int64")
    x = np.array([[3, 5, -7], [0, -1, 5]], dtype)
    if dtype.startswith("float"):
        x = x + np.array(0.75, dtype) * np.sign(x)  # truncated toward zero, as onnxruntime casts
    expected = (np.trunc(x)[..., None] == cats).astype("float32")
    expected[..., 1] = 0
    inputs = [In(x, PRECISION[dtype]), i64(cats), Const(np.array(True), P.BOOL8)]
    got = run_op(ONE_HOT_ENCODER, inputs, [Out(P.FLOAT32)], [expected.shape])[0]
    np.testing.assert_array_equal(got, expected)


def test_one_hot_encoder_unknown_category_with_zeros_false():
    x = np.array([[3, 9], [8, 0]], "int64")
    inputs = [In(x, P.INT64), i64(np.array([0, 3], "int64")), Const(np.array(False), P.BOOL8)]
    expect_error(
        lambda: run_op(ONE_HOT_ENCODER, inputs, [Out(P.FLOAT32)], [(2, 2, 2)]),
        "ONE_HOT_ENCODER",
        "2 element(s) are none of the categories",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


# -- MEL_WEIGHT_MATRIX -------------------------------------------------------------------------------------


def mel_reference(mel_bins: int, dft: int, rate: int, low: float, high: float) -> np.ndarray:
    node = helper.make_node("MelWeightMatrix", ["m", "d", "r", "l", "h"], ["y"])
    names = ["m", "d", "r", "l", "h"]
    types = [onnx.TensorProto.INT64] * 3 + [onnx.TensorProto.FLOAT] * 2
    graph = helper.make_graph(
        [node],
        "mel",
        [helper.make_tensor_value_info(n, t, []) for n, t in zip(names, types)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = dict(zip(names, [np.array(v, "int64") for v in (mel_bins, dft, rate)]))
    feeds.update(l=np.array(low, "float32"), h=np.array(high, "float32"))
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize(
    "params", [(8, 16, 8192, 0.0, 4096.0), (6, 64, 16000, 100.0, 7500.0), (3, 9, 1000, 20.0, 480.0)]
)
def test_mel_weight_matrix_from_inputs(params):
    mel_bins, dft, rate, low, high = params
    expected = mel_reference(*params)
    inputs = [
        In(np.array(mel_bins, "int64"), P.INT64),
        In(np.array(dft, "int64"), P.INT64),
        In(np.array(rate, "int64"), P.INT64),
        In(np.array(low, "float32")),
        In(np.array(high, "float32")),
    ]
    got = run_op(MEL_WEIGHT_MATRIX, inputs, [Out(dims=[UNKNOWN, UNKNOWN])], [expected.shape])[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix_constant_inputs_float64():
    expected = mel_reference(5, 20, 4000, 50.0, 1900.0).astype("float64")
    inputs = [i64(5), i64(20), i64(4000), f32(50.0), f32(1900.0), i32(int(P.FLOAT64))]
    got = run_op(MEL_WEIGHT_MATRIX, inputs, [Out(P.FLOAT64)], [expected.shape])[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("threshold", [-0.5, 1.5, -1e10, 1e10, float("nan")])
def test_binarizer_integer_thresholds(threshold):
    x = np.array([-3, -1, 0, 1, 2, 5], "int32")
    got = run_op(BINARIZER, [In(x, P.INT32), f32(threshold)], [Out(P.INT32)], [x.shape])[0]
    np.testing.assert_array_equal(got, (x > np.float32(threshold)).astype("int32"))


@pytest.mark.parametrize("aggregate", [0, 1], ids=["AVERAGE", "SUM"])
def test_onnx_tree_ensemble_and_feature_extractor_match_onnxruntime(aggregate):
    """The ONNX side (ai.onnx.ml.ArrayFeatureExtractor then TreeEnsemble, a symbolic batch) against
    onnxruntime. (MIN and MAX follow onnx's reference, checked above: a target no reached leaf names keeps
    the type's max or min there, where onnxruntime 1.32 writes 0.)"""
    import onnxruntime as ort

    tensor = onnx.numpy_helper.from_array
    attrs = {k: v for k, v in TREES.items() if k not in ("nodes_modes", "nodes_splits", "leaf_weights")}
    attrs["membership_values"] = tensor(np.array(TREES["membership_values"], "float32"))
    tree = helper.make_node(
        "TreeEnsemble",
        ["f"],
        ["y"],
        domain="ai.onnx.ml",
        nodes_modes=tensor(np.array(TREES["nodes_modes"], "uint8")),
        nodes_splits=tensor(np.array(TREES["nodes_splits"], "float32")),
        leaf_weights=tensor(np.array(TREES["leaf_weights"], "float32")),
        n_targets=2,
        aggregate_function=aggregate,
        **attrs,
    )
    pick = helper.make_node("ArrayFeatureExtractor", ["x", "idx"], ["f"], domain="ai.onnx.ml")
    graph = helper.make_graph(
        [pick, tree],
        "trees",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 2])],
        [tensor(np.array([4, 0, 2], "int64"), "idx")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)], ir_version=10
    )
    x = np.concatenate([tree_features("float32"), tree_features("float32")[::-1]], axis=1)[:, :5]
    predictor = nna.Predictor(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for rows in (x, x[:3]):
        np.testing.assert_allclose(predictor.run({"x": rows})[0], session.run(None, {"x": rows})[0], rtol=1e-6)
