"""ai.onnx.ml TreeEnsembleClassifier and TreeEnsembleRegressor (ml opsets 1 and 3) -> TREE_ENSEMBLE
(op_converters/ml.py), with the base values, the post transform and the class labels as standard operations
around it.

The nodes, named by (nodes_treeids, nodes_nodeids) pairs, become TREE_ENSEMBLE's tables: the branch nodes
in order, a child that is a LEAF as a leaf index, and each (class or target) weight attached to its leaf
(leaf_ids: a leaf may hold one weight per class). A tree whose first node is a leaf gets a branch node
whose two children are that leaf. Semantics follow onnxruntime 1.32 (checked against it, not only its
source): a tree's root is its first listed node; weights on a branch node are ignored; a class or target
that no reached leaf names is "unscored", and onnxruntime's rules depend on it:

- regressor, one target: (sum, average, min or max of the reached weights, 0 where unscored) + base_values[0];
  only PROBIT applies.
- regressor, several targets: aggregate + base_values[k] where scored, 0 where not; then the post transform.
- classifier, more than two classes: scores = sums + base_values; label = the labels' argmax among the
  scored classes (every class is scored with base values); probabilities = the post transform of the scores.
- classifier, two classes: onnxruntime's binary special cases (docs/onnx.md, "ai.onnx.ml"), among them the
  complementary column a single weight column gets ([1 - p, p] or [-s, s]) and labels 1 / 0 where the weights
  name both classes.

Whether a class is scored is decided at import where the trees fix it (every leaf of some tree names it, or
no leaf does); otherwise a second TREE_ENSEMBLE counts the reached weights that name it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.ops.elementwise import op, scalar
from nnadapter_tvm.frontends.onnx.ops.ml import (
    argmax_labels,
    class_labels,
    column,
    columns,
    flat,
    logistic,
    negate,
    numbers,
    post_transform,
    probit,
    rows,
    strings,
    transform,
    where,
)
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.ml import AVERAGE, EQ, GT, GTE, LEQ, LT, MAX, MIN, NEQ, SUM, TREE_ENSEMBLE
from nnadapter_tvm.types import OperationType as O

_MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ}
_AGGREGATES = {"AVERAGE": AVERAGE, "SUM": SUM, "MIN": MIN, "MAX": MAX}


@dataclasses.dataclass
class _Forest:
    """The trees as TREE_ENSEMBLE's operands, and what the import decides from them."""

    features: list[int] = dataclasses.field(default_factory=list)
    modes: list[int] = dataclasses.field(default_factory=list)
    splits: list[float] = dataclasses.field(default_factory=list)
    true_ids: list[int] = dataclasses.field(default_factory=list)
    true_leafs: list[int] = dataclasses.field(default_factory=list)
    false_ids: list[int] = dataclasses.field(default_factory=list)
    false_leafs: list[int] = dataclasses.field(default_factory=list)
    tracks: list[int] = dataclasses.field(default_factory=list)
    roots: list[int] = dataclasses.field(default_factory=list)
    leaf_ids: list[int] = dataclasses.field(default_factory=list)  # one per weight: the leaf it belongs to
    targets: list[int] = dataclasses.field(default_factory=list)
    weights: list[float] = dataclasses.field(default_factory=list)
    reached: list[set[int]] = dataclasses.field(default_factory=list)  # per tree: the leaves it can end in
    # Every class or target id the node lists, and every weight (those on branch nodes included).
    all_ids: list[int] = dataclasses.field(default_factory=list)
    all_weights: list[float] = dataclasses.field(default_factory=list)

    def scored(self, count: int) -> list[bool | None]:
        """Per class or target: True where a reached leaf always names it (every leaf of some tree does),
        False where none can, None where it depends on the row."""
        named: dict[int, set[int]] = {}
        for leaf, target in zip(self.leaf_ids, self.targets):
            named.setdefault(leaf, set()).add(target)
        result: list[bool | None] = []
        for k in range(count):
            always = any(all(k in named.get(leaf, ()) for leaf in leaves) for leaves in self.reached)
            never = not any(k in named.get(leaf, ()) for leaves in self.reached for leaf in leaves)
            result.append(True if always else False if never else None)
        return result


def _forest(ctx: NodeContext, prefix: str, dtype: str, count: int) -> _Forest:
    """The node's trees; ``prefix``: "class" or "target" (the weights' attributes), ``count``: the number of
    classes or targets the ids must lie below."""

    def ints(name: str) -> list[int]:
        return [int(v) for v in np.asarray(ctx.attrs.get(name, []), "int64").reshape(-1)]

    tree_ids, node_ids = ints("nodes_treeids"), ints("nodes_nodeids")
    n = len(tree_ids)
    if n == 0:
        ctx.fail("the ensemble has no nodes")
    features, true_ids, false_ids = ints("nodes_featureids"), ints("nodes_truenodeids"), ints("nodes_falsenodeids")
    modes = strings(ctx, "nodes_modes")
    values = numbers(ctx, "nodes_values", dtype, "nodes_values_as_tensor")
    tracks = ints("nodes_missing_value_tracks_true")
    for name, got in (
        ("nodes_nodeids", node_ids),
        ("nodes_featureids", features),
        ("nodes_truenodeids", true_ids),
        ("nodes_falsenodeids", false_ids),
        ("nodes_modes", modes),
        ("nodes_values", [] if values is None else values),
    ):
        if len(got) != n:
            ctx.fail(f"{name} has {len(got)} values for {n} nodes (nodes_treeids)")
    index: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(tree_ids, node_ids)):
        if key in index:
            ctx.fail(f"node {key[1]} of tree {key[0]} is listed twice")
        index[key] = i
    unknown = sorted({m for m in modes if m != "LEAF" and m not in _MODES})
    if unknown:
        ctx.fail(f"nodes_modes {unknown} are not LEAF or BRANCH_LEQ/LT/GTE/GT/EQ/NEQ")
    is_leaf = [m == "LEAF" for m in modes]
    position, leaf_position = {}, {}
    for i in range(n):
        (leaf_position if is_leaf[i] else position)[i] = len(leaf_position if is_leaf[i] else position)

    def child(i: int, ids: list[int]) -> tuple[int, int]:
        c = index.get((tree_ids[i], ids[i]))
        if c is None:
            ctx.fail(f"node {node_ids[i]} of tree {tree_ids[i]} branches to node {ids[i]}, which the tree lacks")
        return (leaf_position[c], 1) if is_leaf[c] else (position[c], 0)

    forest = _Forest()
    for i in position:
        forest.features.append(features[i])
        forest.modes.append(_MODES[modes[i]])
        forest.splits.append(values[i])
        for ids, out_ids, out_leafs in (
            (true_ids, forest.true_ids, forest.true_leafs),
            (false_ids, forest.false_ids, forest.false_leafs),
        ):
            target, leaf = child(i, ids)
            out_ids.append(target)
            out_leafs.append(leaf)
        forest.tracks.append(int(i < len(tracks) and tracks[i] == 1))
    # onnxruntime's roots: the first node of each run of one tree id.
    for i in range(n):
        if i and tree_ids[i] == tree_ids[i - 1]:
            continue
        if is_leaf[i]:  # a tree that is one leaf: a branch node whose both children are it
            forest.roots.append(len(forest.features))
            forest.features.append(0)
            forest.modes.append(LEQ)
            forest.splits.append(0.0)
            for out_ids, out_leafs in ((forest.true_ids, forest.true_leafs), (forest.false_ids, forest.false_leafs)):
                out_ids.append(leaf_position[i])
                out_leafs.append(1)
            forest.tracks.append(0)
        else:
            forest.roots.append(position[i])

    ids, e_nodes, e_trees = ints(f"{prefix}_ids"), ints(f"{prefix}_nodeids"), ints(f"{prefix}_treeids")
    weights = numbers(ctx, f"{prefix}_weights", dtype, f"{prefix}_weights_as_tensor")
    weights = np.zeros(0, dtype) if weights is None else weights
    if not len(ids) == len(e_nodes) == len(e_trees) == len(weights):
        ctx.fail(f"{prefix}_ids, {prefix}_nodeids, {prefix}_treeids and {prefix}_weights differ in length")
    if not ids:
        ctx.fail(f"the ensemble has no weights ({prefix}_weights)")
    if min(ids) < 0 or max(ids) >= count:
        ctx.fail(f"{prefix}_ids {sorted(set(ids))} must lie in [0, {count})")
    forest.all_ids, forest.all_weights = ids, [float(w) for w in weights]
    for j in sorted(range(len(ids)), key=lambda j: (e_trees[j], e_nodes[j])):
        c = index.get((e_trees[j], e_nodes[j]))
        if c is None:
            ctx.fail(f"{prefix}_nodeids names node {e_nodes[j]} of tree {e_trees[j]}, which is not listed")
        if is_leaf[c]:  # onnxruntime ignores weights on branch nodes (old converters wrote some)
            forest.leaf_ids.append(leaf_position[c])
            forest.targets.append(ids[j])
            forest.weights.append(weights[j])
    if not forest.weights:
        ctx.fail(f"no {prefix} weight is on a leaf")
    for root in forest.roots:
        leaves, seen, stack = set(), set(), [root]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            for ids_, leafs in ((forest.true_ids, forest.true_leafs), (forest.false_ids, forest.false_leafs)):
                (leaves.add if leafs[node] else stack.append)(ids_[node])
        forest.reached.append(leaves)
    return forest


def _ensemble(ctx: NodeContext, x: Value, forest: _Forest, count: int, aggregate: int, ones: bool = False) -> Value:
    """TREE_ENSEMBLE over ``x`` [N, F]: [N, count] of x's type. ``ones``: every weight 1 (with SUM, how many
    reached weights name each class)."""
    weights = np.ones(len(forest.weights)) if ones else np.asarray(forest.weights)
    inputs = [
        x,
        ctx.i64(forest.features),
        ctx.i64(forest.modes),
        ctx.constant(np.asarray(forest.splits), x.dtype),
        ctx.i64(forest.true_ids),
        ctx.i64(forest.true_leafs),
        ctx.i64(forest.false_ids),
        ctx.i64(forest.false_leafs),
        ctx.i64(forest.targets),
        ctx.constant(weights, x.dtype),
        ctx.i64(forest.roots),
        ctx.i32(count),
        ctx.i32(aggregate),
        ctx.constant(np.zeros(0), x.dtype),  # no membership_values: empty operands count as omitted
        ctx.i64(forest.tracks if any(forest.tracks) else np.zeros(0, "int64")),
        ctx.i64(forest.leaf_ids),
    ]
    return ctx.emit(TREE_ENSEMBLE, inputs, shape=(rows(x), count))


def _scored(ctx: NodeContext, x: Value, forest: _Forest, count: int) -> tuple[list[bool | Value], bool | Value]:
    """Whether a reached leaf names each class or target: per class a bool where the trees decide it, else a
    BOOL8 column [N, 1]; and all of them as one condition for WHERE on [N, K] (True, a [1, K] constant, or
    [N, K] from a second TREE_ENSEMBLE counting the reached weights that name each class)."""
    static = forest.scored(count)
    if all(s is not None for s in static):
        return static, True if all(static) else ctx.constant(np.array([static], bool))
    counts = _ensemble(ctx, x, forest, count, SUM, ones=True)
    named = op(ctx, O.GREATER, counts, scalar(ctx, 0, counts), dtype="bool")
    return [s if s is not None else column(ctx, named, k) for k, s in enumerate(static)], named


def _input(ctx: NodeContext) -> Value:
    """Input 0 as [N, F] in the trees' type: float32 or float64 as given, integers as float32 (onnxruntime
    compares them with float thresholds)."""
    x = ctx.input(0)
    if x.dtype.kind not in "fiu" or x.rank != 2:
        ctx.unsupported(f"{x.describe()}: {ctx.op_type} takes numbers of shape [N, F]")
    return x if x.dtype in (np.float32, np.float64) else cast(ctx, x, "float32")


@onnx_op("ai.onnx.ml.TreeEnsembleRegressor")
def tree_ensemble_regressor(ctx: NodeContext) -> Value:
    """TreeEnsembleRegressor -> TREE_ENSEMBLE (aggregate_function SUM, AVERAGE, MIN or MAX), base_values added,
    then the post transform (module docstring); float32 out."""
    x = _input(ctx)
    count = int(ctx.attr("n_targets", 0))
    if count < 1:
        ctx.fail(f"n_targets must be >= 1, got {count}")
    aggregate = _AGGREGATES.get(ctx.attr("aggregate_function", "SUM"))
    if aggregate is None:
        ctx.fail(f"aggregate_function '{ctx.attr('aggregate_function')}' is not SUM, AVERAGE, MIN or MAX")
    post = post_transform(ctx)
    base = numbers(ctx, "base_values", x.dtype.name, "base_values_as_tensor")
    if base is not None and base.size != count:
        ctx.fail(f"base_values has {base.size} values: it needs 0 or n_targets ({count})")
    forest = _forest(ctx, "target", x.dtype.name, count)
    y = _ensemble(ctx, x, forest, count, aggregate)
    scored: bool | Value = True
    if count > 1 or aggregate in (MIN, MAX):  # SUM and AVERAGE give 0 to an unscored single target already
        scored = _scored(ctx, x, forest, count)[1]
    if count == 1:
        y = where(ctx, scored, y, scalar(ctx, 0, y))
        if base is not None:
            y = op(ctx, O.ADD, y, ctx.constant(base, x.dtype))
        y = cast(ctx, y, "float32")
        return probit(ctx, y) if post == "PROBIT" else y
    if base is not None:
        y = op(ctx, O.ADD, y, ctx.constant(base, x.dtype))
    y = cast(ctx, where(ctx, scored, y, scalar(ctx, 0, y)), "float32")
    return transform(ctx, y, post)


@onnx_op("ai.onnx.ml.TreeEnsembleClassifier")
def tree_ensemble_classifier(ctx: NodeContext) -> list[Value]:
    """TreeEnsembleClassifier -> TREE_ENSEMBLE (SUM of the class weights), base_values added, label and
    probabilities by onnxruntime's rules (module docstring); int64 labels, float32 probabilities. String
    class labels: the probabilities run where the label output is read by nothing, else the node is refused."""
    x = _input(ctx)
    post = post_transform(ctx)
    labels, _ = class_labels(ctx, "classlabels_int64s", "classlabels_strings")
    count = labels.size
    if count < 2:
        ctx.unsupported(f"{count} class label(s): a classifier needs two or more")
    base = numbers(ctx, "base_values", x.dtype.name, "base_values_as_tensor")
    base = np.zeros(0, x.dtype) if base is None else base
    if (count == 2 and base.size > 2) or (count > 2 and base.size not in (0, count)):
        ctx.fail(f"base_values has {base.size} values for {count} classes (onnxruntime takes 0 or {count})")
    forest = _forest(ctx, "class", x.dtype.name, count)
    agg = _ensemble(ctx, x, forest, count, SUM)
    if count > 2:
        mask: bool | Value = True  # base values score every class
        if base.size:
            agg = op(ctx, O.ADD, agg, ctx.constant(base, x.dtype))
        else:
            mask = _scored(ctx, x, forest, count)[1]
        ranked = where(ctx, mask, agg, scalar(ctx, -np.inf, agg))  # the unscored classes never win
        return [argmax_labels(ctx, ranked, labels), transform(ctx, cast(ctx, agg, "float32"), post)]
    return _binary(ctx, agg, _scored(ctx, x, forest, count)[0], base, forest, labels, post)


def _binary(
    ctx: NodeContext,
    agg: Value,
    scored: list[bool | Value],
    base: np.ndarray,
    forest: _Forest,
    labels: np.ndarray,
    post: str,
) -> list[Value]:
    """onnxruntime's two-class rules (TreeAggregatorClassifier::FinalizeScores, as 1.32 runs it). With h0, h1
    whether classes 0 and 1 are scored and s0, s1 their sums:

    - two base values: where h1, s1 = b1 + s0 and s0 = -s1; else s0 += b0, s1 += b1. One: s0 += b0.
    - the row keeps two scores where it has two base values or h1, else one (s0).
    - the label compares p = s1 (h1) or s0 (h0) or 0 with 0.5 (all weights >= 0) or 0 and picks labels[1] or
      labels[0] where the weights name one class id; where they name both, it is 1 or 0 itself.
    - two scores: the post transform of (h0 ? s0 : 0, h1 ? s1 : 0). One score s: LOGISTIC [logistic(-s),
      logistic(s)], PROBIT [probit(s), 0] (onnxruntime leaves the second unwritten), else [1 - s, s] (one id,
      weights >= 0) or [-s, s] (one id with a negative weight, or both ids without base values) or [s, 0].
    """
    binary_case = len(set(forest.all_ids)) == 1
    all_positive = all(w >= 0 for w in forest.all_weights)
    h0, h1 = scored
    s0, s1 = column(ctx, agg, 0), column(ctx, agg, 1)

    def c(v: float) -> Value:
        return scalar(ctx, v, agg)

    if base.size == 2:
        plus = op(ctx, O.ADD, s0, c(base[1]))
        s0, s1 = (
            where(ctx, h1, negate(ctx, plus), op(ctx, O.ADD, s0, c(base[0]))),
            where(ctx, h1, plus, op(ctx, O.ADD, s1, c(base[1]))),
        )
        two: bool | Value = True
    else:
        if base.size == 1:
            s0 = op(ctx, O.ADD, s0, c(base[0]))
        two = h1
    zeros = zero_column(ctx, s0)
    v0, v1 = where(ctx, h0, s0, zeros), where(ctx, h1, s1, zeros)
    positive_weight = where(ctx, h1, s1, v0)
    threshold = 0.5 if binary_case and all_positive else 0.0
    positive = flat(ctx, op(ctx, O.GREATER, positive_weight, c(threshold), dtype="bool"))
    pair = labels if binary_case else np.array([0, 1], "int64")
    label = op(ctx, O.WHERE, positive, ctx.i64(pair[1]), ctx.i64(pair[0]))

    v0, v1 = cast(ctx, v0, "float32"), cast(ctx, v1, "float32")
    both = transform(ctx, columns(ctx, [v0, v1]), post) if two is not False else None
    one = None
    if two is not True:
        if post == "PROBIT":
            one = columns(ctx, [probit(ctx, v0), zero_column(ctx, v0)])
        elif post == "LOGISTIC":
            one = columns(ctx, [logistic(ctx, negate(ctx, v0)), logistic(ctx, v0)])
        elif binary_case and all_positive:
            one = columns(ctx, [op(ctx, O.SUB, scalar(ctx, 1, v0), v0), v0])
        elif binary_case or base.size == 0:
            one = columns(ctx, [negate(ctx, v0), v0])
        else:
            one = columns(ctx, [v0, zero_column(ctx, v0)])
    if both is None:
        return [label, one]
    if one is None:
        return [label, both]
    return [label, op(ctx, O.WHERE, two, both, one)]


def zero_column(ctx: NodeContext, like: Value) -> Value:
    """Zeros of ``like``'s shape and type."""
    return cast(ctx, ctx.emit(O.FILL_LIKE, [like, ctx.f32(0.0)], dtype="float32", shape=like.shape), like.dtype)
