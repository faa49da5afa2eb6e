"""ai.onnx.ml models on the compiled path against onnxruntime: TreeEnsembleRegressor, TreeEnsembleClassifier,
LinearClassifier, LinearRegressor, Scaler, Normalizer, Imputer, OneHotEncoder, LabelEncoder, Binarizer, ZipMap.

The models are built with onnx.helper (no sklearn here), shaped as skl2onnx writes them (random forests, boosted
trees, linear models). To keep compiles few, each group of cases is one model with one output per case (every
node reads the same inputs, batch symbolic), compiled once; each parametrized case then compares its own
outputs at one row and at many rows. Labels must be equal, values within rtol 1e-5 (float32) plus atol 1e-6
for values near 0 (sums of float32 weights in another order, softmax and logistic tails).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnadapter_tvm as nna

F = 6  # features
ROWS = (1, 2000)
GRID = np.array([-1.5, -0.5, 0.0, 0.5, 1.5], "float32")  # split values, also fed exactly (EQ, NEQ, LEQ at equality)
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


# -- trees -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Forest:
    """Trees in the attributes' layout: node lists (root first in each tree) and the leaves per tree."""

    nodes: dict
    leaves: list  # (tree id, node id) of every leaf


def random_forest(
    seed: int, trees: int, depth: int, modes=("BRANCH_LEQ",), tracks: float = 0.0, leaf_trees: int = 0
) -> Forest:
    """Trees of random shape (a branch becomes a leaf early with probability 0.2), node ids shuffled within
    each tree, splits from GRID, modes drawn from ``modes``, missing_value_tracks_true with probability ``tracks``;
    the last ``leaf_trees`` trees are a single leaf."""
    rng = np.random.default_rng(seed)
    keys = ["treeids", "nodeids", "featureids", "modes", "values", "truenodeids", "falsenodeids", "tracks"]
    nodes: dict = {k: [] for k in keys}
    leaves = []
    for t in range(trees):
        listed: list = []
        one_leaf = t >= trees - leaf_trees

        def grow(level: int, listed: list = listed, one_leaf: bool = one_leaf) -> int:
            last = level == depth or one_leaf
            entry: dict = {"leaf": last or (level > 0 and rng.random() < 0.2)}
            index = len(listed)
            listed.append(entry)
            if not entry["leaf"]:
                entry["true"], entry["false"] = grow(level + 1, listed), grow(level + 1, listed)
            return index

        grow(0)
        ids = rng.permutation(len(listed)).tolist()  # onnxruntime wants node ids below the node count
        for entry, node_id in zip(listed, ids):  # depth-first order: the root is listed first
            nodes["treeids"].append(t)
            nodes["nodeids"].append(node_id)
            if entry["leaf"]:
                nodes["featureids"].append(0)
                nodes["modes"].append("LEAF")
                nodes["values"].append(0.0)
                nodes["truenodeids"].append(0)
                nodes["falsenodeids"].append(0)
                nodes["tracks"].append(0)
                leaves.append((t, node_id))
            else:
                nodes["featureids"].append(int(rng.integers(F)))
                nodes["modes"].append(str(rng.choice(modes)))
                nodes["values"].append(float(rng.choice(GRID)))
                nodes["truenodeids"].append(ids[entry["true"]])
                nodes["falsenodeids"].append(ids[entry["false"]])
                nodes["tracks"].append(int(rng.random() < tracks))
    return Forest(nodes, leaves)


def tree_attributes(forest: Forest, prefix: str, weights: list) -> dict:
    """The node attributes and the (class or target) weights: ``weights`` lists (leaf index, id, weight)."""
    n = forest.nodes
    attrs = {
        "nodes_treeids": n["treeids"],
        "nodes_nodeids": n["nodeids"],
        "nodes_featureids": n["featureids"],
        "nodes_modes": n["modes"],
        "nodes_values": n["values"],
        "nodes_truenodeids": n["truenodeids"],
        "nodes_falsenodeids": n["falsenodeids"],
        "nodes_hitrates": [1.0] * len(n["treeids"]),
    }
    if any(n["tracks"]):
        attrs["nodes_missing_value_tracks_true"] = n["tracks"]
    attrs[f"{prefix}_treeids"] = [forest.leaves[leaf][0] for leaf, _, _ in weights]
    attrs[f"{prefix}_nodeids"] = [forest.leaves[leaf][1] for leaf, _, _ in weights]
    attrs[f"{prefix}_ids"] = [k for _, k, _ in weights]
    attrs[f"{prefix}_weights"] = [float(w) for _, _, w in weights]
    return attrs


def leaf_weights(forest: Forest, seed: int, classes: int, kind: str) -> list:
    """(leaf, id, weight) lists as trainers write them. kind: "proba" (every class, weights that sum to 1 over
    a leaf, divided by the tree count: a random forest), "one" (tree t scores class t % classes: boosting),
    "signed" (one class per tree, weights in [-1, 1]), "some" (each leaf names a random non-empty subset of
    the classes: which classes a row scores depends on the row), "class1" / "class0" (every leaf names only
    that class: binary boosting, positive or signed weights)."""
    rng = np.random.default_rng(seed)
    trees = max(t for t, _ in forest.leaves) + 1
    out = []
    for leaf, (tree, _) in enumerate(forest.leaves):
        if kind == "proba":
            p = rng.dirichlet(np.ones(classes)) / trees
            out += [(leaf, k, p[k]) for k in range(classes)]
        elif kind == "one":
            out.append((leaf, tree % classes, rng.uniform(0.05, 0.3)))
        elif kind == "signed":
            out.append((leaf, tree % classes, rng.uniform(-1, 1)))
        elif kind == "some":
            chosen = rng.permutation(classes)[: rng.integers(1, classes + 1)]
            out += [(leaf, int(k), rng.uniform(-0.5, 1)) for k in sorted(chosen)]
        elif kind in ("class0", "class1"):
            positive = rng.uniform(0.0, 1.0 / trees)
            out.append((leaf, int(kind[-1]), positive if seed % 2 == 0 else rng.uniform(-1, 1)))
    return out


def dyadic(w: float) -> float:
    """``w`` rounded to a multiple of 1/256: sums of a few such weights are exact in float32, in any order."""
    return round(w * 256) / 256


def features(rows: int, seed: int) -> np.ndarray:
    """Rows with exact grid values (equality), values between them, and NaN (missing values)."""
    rng = np.random.default_rng(seed)
    x = rng.choice(GRID, size=(rows, F)) + rng.choice([0.0, 0.0, 0.25, -0.25], size=(rows, F)).astype("float32")
    x[rng.random((rows, F)) < 0.05] = np.nan
    return x.astype("float32")


# -- cases and the shared models -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One node of a shared model: its outputs' names; ``columns``: the probability columns to compare (None:
    all; onnxruntime leaves some unwritten)."""

    name: str
    node: onnx.NodeProto
    outputs: list
    columns: list | None = None


def graph_outputs(case: Case) -> list:
    infos = []
    for name, elem, dims in case.outputs:
        infos.append(helper.make_tensor_value_info(name, elem, dims))
    return infos


def build_model(cases: list, inputs: list, ml_opset: int) -> onnx.ModelProto:
    graph = helper.make_graph([c.node for c in cases], "ml", inputs, [info for c in cases for info in graph_outputs(c)])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", ml_opset)],
        ir_version=9,
    )
    onnx.checker.check_model(model)
    return model


def run_both(model: onnx.ModelProto, feeds_for) -> dict:
    """{output name: [(ours, onnxruntime's) per batch size]}, the model compiled once (one compiled segment,
    no host step: the symbolic batch serves every size)."""
    predictor = nna.Predictor(model)
    assert not predictor.graph.host_units, [u.host for u in predictor.graph.host_units]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results: dict = {n: [] for n in names}
    for k, rows in enumerate(ROWS):
        feeds = feeds_for(rows, k)
        ours, theirs = predictor.run(feeds), session.run(None, feeds)
        for name, a, b in zip(names, ours, theirs):
            results[name].append((a, b))
    return results


def check(results: dict, case: Case) -> None:
    for name, elem, _ in case.outputs:
        for got, want in results[name]:
            assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
            if elem == TensorProto.INT64:
                np.testing.assert_array_equal(got, want, err_msg=name)
            else:
                if case.columns is not None and got.ndim == 2:
                    got, want = got[:, case.columns], want[:, case.columns]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def regressor(name, forest, weights, n_targets, aggregate="SUM", post="NONE", base=None, x="X"):
    attrs = tree_attributes(forest, "target", weights)
    attrs.update(n_targets=n_targets, aggregate_function=aggregate, post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    node = helper.make_node("TreeEnsembleRegressor", [x], [name], name=name, domain="ai.onnx.ml", **attrs)
    return Case(name, node, [(name, TensorProto.FLOAT, [None, n_targets])])


def classifier(name, forest, weights, labels, post="NONE", base=None, x="X", columns=None):
    attrs = tree_attributes(forest, "class", weights)
    attrs.update(classlabels_int64s=labels, post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    outs = [f"{name}_label", f"{name}_proba"]
    node = helper.make_node("TreeEnsembleClassifier", [x], outs, name=name, domain="ai.onnx.ml", **attrs)
    dims = [(outs[0], TensorProto.INT64, ["N"]), (outs[1], TensorProto.FLOAT, ["N", len(labels)])]
    return Case(name, node, dims, columns)


def tree_feeds(rows: int, k: int) -> dict:
    x = features(rows, 100 + k)
    return {"X": x, "Xd": x.astype("float64") * 1.25, "Xi": np.nan_to_num(x * 2).astype("int64")}


TREE_INPUTS = [
    helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", F]),
    helper.make_tensor_value_info("Xd", TensorProto.DOUBLE, [None, F]),
    helper.make_tensor_value_info("Xi", TensorProto.INT64, ["N", F]),
]


def regressor_cases() -> list:
    forest = random_forest(1, trees=6, depth=4)
    mixed = random_forest(2, trees=5, depth=5, modes=MODES, tracks=0.5, leaf_trees=1)
    single = [(leaf, 0, w) for leaf, _, w in leaf_weights(forest, 3, 1, "signed")]
    some = leaf_weights(forest, 4, 3, "some")  # target scored or not depending on the row
    # PROBIT: sums in (0, 1), of weights that are multiples of 1/256, exact in any order (onnxruntime splits the
    # trees over threads; its erfinv approximation cancels near 0.5, where a last-bit difference moves it 2e-5).
    small = [(leaf, k, dyadic(w / 8)) for leaf, k, w in leaf_weights(forest, 5, 3, "proba")]
    cases = []
    for aggregate in ("SUM", "AVERAGE", "MIN", "MAX"):
        cases.append(regressor(f"reg_{aggregate}_1", forest, single, 1, aggregate, base=[0.25]))
        cases.append(regressor(f"reg_{aggregate}_3", forest, some, 3, aggregate, base=[1.0, -2.0, 0.5]))
    for post in TRANSFORMS[1:]:
        cases.append(regressor(f"reg_{post}_3", forest, small if post == "PROBIT" else some, 3, post=post))
        positive = [(leaf, 0, dyadic(abs(w) / 8)) for leaf, _, w in single]
        cases.append(regressor(f"reg_{post}_1", forest, positive, 1, post=post))
    mixed_weights = [(leaf, 0, w) for leaf, _, w in leaf_weights(mixed, 6, 1, "signed")]
    cases.append(regressor("reg_modes_tracks", mixed, mixed_weights, 1, "AVERAGE"))
    cases.append(regressor("reg_double", mixed, leaf_weights(mixed, 7, 2, "proba"), 2, "SUM", x="Xd"))
    return cases


def classifier_cases(binary: bool) -> list:
    forest = random_forest(11, trees=6, depth=4)
    mixed = random_forest(12, trees=4, depth=5, modes=MODES, tracks=0.5, leaf_trees=1)
    cases = []
    if not binary:
        labels = [10, 20, 30]
        proba, boosted = leaf_weights(forest, 13, 3, "proba"), leaf_weights(forest, 14, 3, "signed")
        cases.append(classifier("rf_NONE", forest, proba, labels))
        for post in TRANSFORMS:
            weights = (
                [(leaf, k, dyadic(w)) for leaf, k, w in leaf_weights(forest, 15, 3, "one")]
                if post == "PROBIT"
                else boosted
            )
            cases.append(classifier(f"gb_{post}", forest, weights, labels, post, base=[0.1, -0.2, 0.05]))
        cases.append(classifier("some_NONE", forest, leaf_weights(forest, 16, 3, "some"), labels))
        cases.append(classifier("some_SOFTMAX", forest, leaf_weights(forest, 17, 3, "some"), labels, "SOFTMAX"))
        cases.append(classifier("modes_tracks", mixed, leaf_weights(mixed, 18, 3, "proba"), labels, x="X"))
        cases.append(classifier("double", mixed, leaf_weights(mixed, 19, 3, "proba"), labels, "SOFTMAX", x="Xd"))
        cases.append(classifier("int64", forest, boosted, labels, x="Xi"))
        return cases
    labels = [3, 7]
    # Every leaf names class 1 (weights >= 0: seed even), class 0 with signed or positive weights (binary
    # boosting: one column of weights, onnxruntime adds the complementary one), both classes (forests), or
    # one class or the other depending on the leaf (which classes a row scores depends on the row).
    variants = {
        "one_pos": (leaf_weights(forest, 20, 2, "class1"), None),
        "zero_signed_base1": (leaf_weights(forest, 21, 2, "class0"), [0.1]),
        "zero_pos": (leaf_weights(forest, 22, 2, "class0"), None),
        "zero_pos_base2": (leaf_weights(forest, 24, 2, "class0"), [0.1, 0.2]),
        "one_pos_base2": (leaf_weights(forest, 26, 2, "class1"), [0.1, 0.2]),
        "both": (leaf_weights(forest, 27, 2, "proba"), None),
        "some": ([(leaf, k, abs(w)) for leaf, k, w in leaf_weights(forest, 28, 2, "some")], None),
        "some_base1": (leaf_weights(forest, 29, 2, "some"), [0.3]),
        "some_base2": (leaf_weights(forest, 30, 2, "some"), [-0.1, 0.4]),
    }
    for variant, (weights, base) in variants.items():
        for post in TRANSFORMS:
            # One score column under PROBIT: onnxruntime writes the first column only.
            single = (variant.startswith("zero") and base is None) or variant == "zero_signed_base1"
            columns = [0] if post == "PROBIT" and (single or variant.startswith("some")) else None
            if post == "PROBIT":  # sums exact in any order (see regressor_cases)
                weights = [(leaf, k, dyadic(w)) for leaf, k, w in weights]
            cases.append(classifier(f"bin_{variant}_{post}", forest, weights, labels, post, base, columns=columns))
    cases.append(
        classifier("bin_double", mixed, leaf_weights(mixed, 31, 2, "class0"), labels, "LOGISTIC", [0.2], x="Xd")
    )
    return cases


REGRESSORS = regressor_cases()
MULTICLASS = classifier_cases(binary=False)
BINARY = classifier_cases(binary=True)


@pytest.fixture(scope="module")
def regressor_results() -> dict:
    return run_both(build_model(REGRESSORS, TREE_INPUTS, 3), tree_feeds)


@pytest.fixture(scope="module")
def multiclass_results() -> dict:
    return run_both(build_model(MULTICLASS, TREE_INPUTS, 3), tree_feeds)


@pytest.fixture(scope="module")
def binary_results() -> dict:
    return run_both(build_model(BINARY, TREE_INPUTS, 3), tree_feeds)


@pytest.mark.parametrize("case", REGRESSORS, ids=lambda c: c.name)
def test_tree_ensemble_regressor(case: Case, regressor_results: dict) -> None:
    check(regressor_results, case)


@pytest.mark.parametrize("case", MULTICLASS, ids=lambda c: c.name)
def test_tree_ensemble_classifier_multiclass(case: Case, multiclass_results: dict) -> None:
    check(multiclass_results, case)


@pytest.mark.parametrize("case", BINARY, ids=lambda c: c.name)
def test_tree_ensemble_classifier_binary(case: Case, binary_results: dict) -> None:
    check(binary_results, case)


# -- linear models and preprocessing -------------------------------------------------------------------------------


def node_case(name: str, op_type: str, x: str, outputs: list, columns=None, **attrs) -> Case:
    """One ai.onnx.ml node on input ``x``; ``outputs``: (suffix, element type, dims) per output."""
    names = [f"{name}{suffix}" for suffix, _, _ in outputs]
    node = helper.make_node(op_type, [x], names, name=name, domain="ai.onnx.ml", **attrs)
    return Case(name, node, [(n, elem, dims) for n, (_, elem, dims) in zip(names, outputs)], columns)


def classifier_outputs(classes: int) -> list:
    return [("_label", TensorProto.INT64, ["N"]), ("_proba", TensorProto.FLOAT, ["N", classes])]


def linear_cases() -> list:
    rng = np.random.default_rng(40)
    coefficients = rng.uniform(-1, 1, (3, F)).astype("float32")
    value = [("", TensorProto.FLOAT, ["N", None])]
    cases = []
    for post in TRANSFORMS:
        # One row of coefficients, two labels: onnxruntime adds the complementary column (PROBIT: it misplaces
        # its values, we follow onnx's reference there; the labels are compared).
        cases.append(
            node_case(
                f"lin_bin_{post}",
                "LinearClassifier",
                "X",
                classifier_outputs(2),
                [] if post == "PROBIT" else None,
                coefficients=coefficients[0].tolist(),
                intercepts=[0.1],
                classlabels_ints=[3, 7],
                post_transform=post,
            )
        )
        cases.append(
            node_case(
                f"lin_multi_{post}",
                "LinearClassifier",
                "X",
                classifier_outputs(3),
                coefficients=(coefficients / (8 if post == "PROBIT" else 1)).reshape(-1).tolist(),
                intercepts=[0.5, 0.4, 0.45] if post == "PROBIT" else [0.1, -0.2, 0.0],
                classlabels_ints=[10, 20, 30],
                multi_class=1,
                post_transform=post,
            )
        )
    cases.append(
        node_case(
            "lin_two_rows",
            "LinearClassifier",
            "Xd",
            classifier_outputs(2),
            coefficients=coefficients[:2].reshape(-1).tolist(),
            intercepts=[0.0, 0.3],
            classlabels_ints=[5, 9],
        )
    )
    for post in ("NONE", "LOGISTIC", "PROBIT"):
        attrs = dict(coefficients=(coefficients[0] / 8).tolist(), intercepts=[0.5], post_transform=post)
        cases.append(node_case(f"linreg_1_{post}", "LinearRegressor", "X", value, **attrs))
    for post in ("LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"):
        attrs = dict(coefficients=(coefficients / 8).reshape(-1).tolist(), intercepts=[0.5, 0.4, 0.0])
        cases.append(
            node_case(f"linreg_3_{post}", "LinearRegressor", "X", value, targets=3, post_transform=post, **attrs)
        )
    return cases


def preprocessing_cases() -> list:
    value = [("", TensorProto.FLOAT, ["N", F])]
    same = [("", TensorProto.FLOAT, ["N", F])]
    ints = [("", TensorProto.INT64, ["N", F])]
    cases = [
        node_case(
            "scaler", "Scaler", "X", value, offset=np.linspace(-1, 1, F).tolist(), scale=np.linspace(0.5, 2, F).tolist()
        ),
        node_case("scaler_int", "Scaler", "Xi", value, offset=[1.5], scale=[0.25]),
        node_case("scaler_double", "Scaler", "Xd", value, offset=[0.1] * F, scale=np.linspace(0.5, 2, F).tolist()),
        node_case("binarizer", "Binarizer", "X", same, threshold=0.5),
        node_case(
            "imputer_nan",
            "Imputer",
            "Xn",
            same,
            imputed_value_floats=np.arange(F, dtype=float).tolist(),
            replaced_value_float=float("nan"),
        ),
        node_case("imputer_value", "Imputer", "X", same, imputed_value_floats=[9.0], replaced_value_float=0.5),
        node_case("imputer_int", "Imputer", "Xi", ints, imputed_value_int64s=[42], replaced_value_int64=1),
        node_case(
            "onehot_int", "OneHotEncoder", "Xi", [("", TensorProto.FLOAT, ["N", F, 5])], cats_int64s=[0, 1, 2, -1, 3]
        ),
        node_case("onehot_float", "OneHotEncoder", "X", [("", TensorProto.FLOAT, ["N", F, 3])], cats_int64s=[0, 1, -1]),
        node_case(
            "label_int",
            "LabelEncoder",
            "Xi",
            ints,
            keys_int64s=[0, 1, 2, 3],
            values_int64s=[10, 11, 12, 13],
            default_int64=-7,
        ),
        node_case(
            "label_float_int", "LabelEncoder", "Xn", ints, keys_floats=GRID.tolist(), values_int64s=[5, 4, 3, 2, 1]
        ),
        node_case(
            "label_tensor",
            "LabelEncoder",
            "Xn",
            same,
            keys_tensor=onnx.numpy_helper.from_array(np.array([0.5, np.nan, -1.5], "float32")),
            values_tensor=onnx.numpy_helper.from_array(np.array([1.0, 2.0, 3.0], "float32")),
            default_tensor=onnx.numpy_helper.from_array(np.array([-1.0], "float32")),
        ),
    ]
    for norm in ("MAX", "L1", "L2"):
        cases.append(node_case(f"normalizer_{norm}", "Normalizer", "X", value, norm=norm))
    return cases


def linear_feeds(rows: int, k: int) -> dict:
    rng = np.random.default_rng(200 + k)
    x = rng.uniform(-2, 2, (rows, F)).astype("float32")
    x[::7] = 0  # zero rows (Normalizer passes them)
    x[3::7] = rng.choice(GRID, size=(len(x[3::7]), F))  # exact values (Imputer, LabelEncoder, Binarizer)
    return {
        "X": x,
        "Xn": features(rows, 300 + k),
        "Xi": np.rint(x * 1.5).astype("int64"),
        "Xd": x.astype("float64") / 3,
    }


LINEAR_INPUTS = [
    helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", F]),
    helper.make_tensor_value_info("Xn", TensorProto.FLOAT, ["N", F]),
    helper.make_tensor_value_info("Xi", TensorProto.INT64, ["N", F]),
    helper.make_tensor_value_info("Xd", TensorProto.DOUBLE, ["N", F]),
]
LINEAR = linear_cases()
PREPROCESSING = preprocessing_cases()


@pytest.fixture(scope="module")
def linear_results() -> dict:
    cases = LINEAR + PREPROCESSING
    # ZipMap after a classifier, its sequence of maps read by nothing: passed over.
    zipmap = helper.make_node(
        "ZipMap", ["lin_multi_NONE_proba"], ["unused_maps"], domain="ai.onnx.ml", classlabels_int64s=[10, 20, 30]
    )
    model = build_model(cases, LINEAR_INPUTS, 4)
    model.graph.node.append(zipmap)
    return run_both(model, linear_feeds)


@pytest.mark.parametrize("case", LINEAR + PREPROCESSING, ids=lambda c: c.name)
def test_linear_and_preprocessing(case: Case, linear_results: dict) -> None:
    check(linear_results, case)


# -- what stays refused, and the run-time check ------------------------------------------------------------------


def single_node_model(node: onnx.NodeProto, x_type: int, outputs: list) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("X", x_type, ["N", F])],
        [helper.make_tensor_value_info(*o) for o in outputs],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)], ir_version=9
    )


def string_classifier(read_label: bool) -> onnx.ModelProto:
    forest = random_forest(50, trees=3, depth=3)
    attrs = tree_attributes(forest, "class", leaf_weights(forest, 51, 3, "proba"))
    node = helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "proba"], name="trees", domain="ai.onnx.ml",
        classlabels_strings=["a", "b", "c"], **attrs,
    )  # fmt: skip
    outputs = [("label", TensorProto.STRING, ["N"])] if read_label else []
    return single_node_model(node, TensorProto.FLOAT, [*outputs, ("proba", TensorProto.FLOAT, ["N", 3])])


def test_string_class_labels_refused_where_the_label_is_read() -> None:
    with pytest.raises(nna.NNAdapterError) as err:
        nna.Predictor(string_classifier(read_label=True))
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
    assert "TreeEnsembleClassifier 'trees'" in str(err.value) and "classlabels_strings" in str(err.value)


def test_string_class_labels_probabilities_compiled_where_the_label_is_unread() -> None:
    model = string_classifier(read_label=False)
    predictor = nna.Predictor(model)
    assert not predictor.graph.host_units
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = features(50, 52)
    np.testing.assert_allclose(predictor.run({"X": x})[0], session.run(None, {"X": x})[0], rtol=1e-5, atol=1e-6)


def test_zipmap_read_is_refused() -> None:
    linear = helper.make_node(
        "LinearClassifier", ["X"], ["label", "proba"], domain="ai.onnx.ml",
        coefficients=[0.5] * (2 * F), intercepts=[0.0, 1.0], classlabels_ints=[0, 1],
    )  # fmt: skip
    zipmap = helper.make_node("ZipMap", ["proba"], ["maps"], name="zip", domain="ai.onnx.ml", classlabels_int64s=[0, 1])
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    maps = helper.make_value_info("maps", helper.make_sequence_type_proto(map_type))
    model = single_node_model(linear, TensorProto.FLOAT, [("label", TensorProto.INT64, ["N"])])
    model.graph.node.append(zipmap)
    model.graph.output.append(maps)
    with pytest.raises(nna.NNAdapterError, match=r"ZipMap 'zip'.*sequence of maps"):
        nna.Predictor(model)


@pytest.mark.parametrize(
    ("attrs", "what"),
    [
        ({"keys_strings": ["a", "b"], "values_int64s": [1, 2]}, "keys_strings"),
        ({"keys_int64s": [1, 2], "values_strings": ["a", "b"]}, "values_strings"),
    ],
)
def test_label_encoder_string_forms_refused(attrs: dict, what: str) -> None:
    node = helper.make_node("LabelEncoder", ["X"], ["Y"], name="enc", domain="ai.onnx.ml", **attrs)
    model = single_node_model(node, TensorProto.INT64, [("Y", TensorProto.INT64, ["N", F])])
    with pytest.raises(nna.NNAdapterError, match=f"LabelEncoder 'enc'.*{what}.*string"):
        nna.Predictor(model)


def test_one_hot_encoder_zeros_0_fails_on_an_unknown_category() -> None:
    node = helper.make_node("OneHotEncoder", ["X"], ["Y"], domain="ai.onnx.ml", cats_int64s=[0, 1, 2], zeros=0)
    predictor = nna.Predictor(single_node_model(node, TensorProto.INT64, [("Y", TensorProto.FLOAT, ["N", F, 3])]))
    known = np.tile(np.array([0, 1, 2, 2, 1, 0], "int64"), (4, 1))
    np.testing.assert_array_equal(predictor.run({"X": known})[0], np.eye(3, dtype="float32")[known])
    unknown = known.copy()
    unknown[2, 3] = 7
    with pytest.raises(nna.NNAdapterError, match=r"ONE_HOT_ENCODER.*1 element.*none of the categories"):
        predictor.run({"X": unknown})
