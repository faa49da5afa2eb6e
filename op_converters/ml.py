"""ai.onnx.ml and signal extensions (codes 2410-2429): BINARIZER, ARRAY_FEATURE_EXTRACTOR, TREE_ENSEMBLE and
MEL_WEIGHT_MATRIX.

NNAdapter has no operation for the numeric operators of ONNX's ML domain (Binarizer, ArrayFeatureExtractor,
TreeEnsemble) nor for MelWeightMatrix, whose output size depends on input values. Each is registered as one
of nnadapter-tvm's built-in extensions (extensions.register_builtin) and computed by Relax operators and TE.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.extensions import register_builtin
from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import infer_same_shape
from nnadapter_tvm.op_schema import ANY, F32, INT32, INT32_64, Arg
from nnadapter_tvm.types import Precision as P
from nnadapter_tvm.types import storage_dtype

NUMBERS = (P.FLOAT32, P.FLOAT64, P.INT32, P.INT64)
FLOATS = (P.FLOAT32, P.FLOAT64)
I64 = "int64"

# TreeEnsemble's node modes and aggregate functions (ai.onnx.ml opset 5).
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AVERAGE, SUM, MIN, MAX = range(4)


def _const(array: np.ndarray) -> relax.Constant:
    """A constant of the array's own dtype (relax.const would make float64 arrays float32)."""
    return relax.const(array, str(array.dtype))


def binarizer(args: OpArgs) -> relax.Expr:
    """input (FLOAT32, FLOAT64, INT32 or INT64), threshold (FLOAT32 scalar) -> output of the input's
    precision and shape: 1 where input > threshold, else 0 (NaN gives 0).

    Reference: ONNX ai.onnx.ml Binarizer (onnx.reference's ``(x > threshold).astype(x.dtype)``).
    """
    x = args.raw_tensor("input")
    dtype = str(x.ty.dtype)
    threshold = args.float("threshold", 0.0)
    if np.dtype(dtype).kind in "iu":
        # For integers x > t holds exactly where x > floor(t); a threshold outside the type (or NaN) decides
        # every element (a cast would wrap it, and int(-0.5) is 0).
        info = np.iinfo(dtype)
        if math.isnan(threshold) or threshold >= info.max:
            return relax.op.zeros_like(x)
        if threshold < info.min:
            return relax.op.ones_like(x)
        threshold = math.floor(threshold)
    above = relax.op.greater(x, relax.const(threshold, dtype))
    return relax.op.astype(above, dtype)


def _worst_index(indices: te.Tensor) -> te.Tensor:
    """[the minimum of the 1-D ``indices`` if negative, else their maximum]: one index outside [0, n)
    whenever any is."""
    (count,) = indices.shape
    lo, hi = te.reduce_axis((0, count), "lo"), te.reduce_axis((0, count), "hi")
    low = te.compute((1,), lambda _: te.min(indices[lo], axis=lo), name="index_min")
    high = te.compute((1,), lambda _: te.max(indices[hi], axis=hi), name="index_max")
    return te.compute((1,), lambda k: tirx.if_then_else(low[k] < 0, low[k], high[k]), name="worst_index")


def array_feature_extractor(args: OpArgs) -> relax.Expr:
    """input (rank >= 1), indices (INT64 or INT32, any shape, each in [0, n) for the input's last axis of
    size n) -> output [..., k]: the input's elements at the k = size(indices) flattened indices along
    its last axis; a 1-D input gives [1, k].

    Reference: ONNX ai.onnx.ml ArrayFeatureExtractor (onnx.reference's ``data[..., indices]`` reshaped).
    """
    x, indices = args.raw_tensor("input"), args.raw_tensor("indices")
    shape = args.shape(x)
    if not shape:
        args.fail("must have rank >= 1", "input")
    flat = args.emit(relax.op.reshape(args.emit(relax.op.astype(indices, I64)), [-1]))
    n = shape[-1]
    count = args.shape(flat)[0]
    worst = args.emit_te(_worst_index, flat)
    bound = str(n) if isinstance(n, int) else "n (the input's last axis at execution)"

    def in_range(v: tirx.Var) -> tirx.PrimExpr:
        ok = tirx.And(v >= 0, v < n)
        return ok if isinstance(count, int) else tirx.Or(ok, tirx.EQ(count, tirx.const(0, I64)))

    args.check_value(worst, in_range, f"index {{value}} is out of range [0, {bound})", "indices")
    out = args.emit(relax.op.take(x, flat, axis=len(shape) - 1))
    if len(shape) == 1:
        out = relax.op.reshape(out, [1, count])
    return out


def _tree_paths(args: OpArgs) -> list[tuple[list[tuple[int, bool]], int]]:
    """Every root-to-leaf path of the ensemble as ([(node, branch taken)], leaf index)."""
    true_ids, false_ids = args.ints("nodes_truenodeids"), args.ints("nodes_falsenodeids")
    true_leafs, false_leafs = args.ints("nodes_trueleafs"), args.ints("nodes_falseleafs")
    n_nodes, n_leaves = len(args.ints("nodes_featureids")), len(args.ints("leaf_targetids"))
    for name, values in (("nodes_truenodeids", true_ids), ("nodes_falsenodeids", false_ids)):
        if len(values) != n_nodes:
            args.fail(f"has {len(values)} values for {n_nodes} nodes", name)
    paths: list = []

    def walk(node: int, prefix: list, depth: int) -> None:
        if depth > n_nodes:
            args.fail("the nodes form a cycle (a path is longer than the node count)", "nodes_truenodeids")
        for taken, ids, leafs in ((True, true_ids, true_leafs), (False, false_ids, false_leafs)):
            target, path = ids[node], [*prefix, (node, taken)]
            limit, what = (n_leaves, "leaf") if leafs[node] else (n_nodes, "node")
            if not 0 <= target < limit:
                args.fail(f"node {node} names {what} {target}, outside [0, {limit})", "nodes_truenodeids")
            if leafs[node]:
                paths.append((path, target))
            else:
                walk(target, path, depth + 1)

    for root in args.ints("tree_roots"):
        if not 0 <= root < n_nodes:
            args.fail(f"root {root} is outside [0, {n_nodes})", "tree_roots")
        if true_leafs[root] and false_leafs[root] and true_ids[root] == false_ids[root]:
            paths.append(([], true_ids[root]))  # a tree that is one leaf
        else:
            walk(root, [], 0)
    return paths


def tree_ensemble(args: OpArgs) -> relax.Expr:
    """input [N, F] (FLOAT32 or FLOAT64), nodes_featureids, nodes_modes (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ,
    5 NEQ, 6 MEMBER), nodes_splits, nodes_truenodeids, nodes_trueleafs, nodes_falsenodeids,
    nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets, aggregate_function (0 AVERAGE,
    1 SUM, 2 MIN, 3 MAX), then optional membership_values (the sets of the MEMBER nodes, in node order,
    each ended by NaN) and nodes_missing_value_tracks_true -> output [N, n_targets] of the input's
    precision: per row, the weights of the leaves its trees reach aggregated per target (0 for SUM and
    AVERAGE, the type's max for MIN and min for MAX where no reached leaf names the target, as onnx's
    reference does; onnxruntime 1.32 writes 0 there).

    A node compares input[:, featureid] with its split (or its set); the true branch is taken where the
    comparison holds, or where the value is NaN and the node's missing_value_tracks_true is set. The
    trees, constants, become matrices at conversion: every row's comparisons are one take and a few
    element-wise operations, a leaf is reached where no comparison on its path disagrees (a product with
    the path matrix), and the aggregation is a product with the leaf-weight matrix (or a masked MIN/MAX).

    Reference: ONNX ai.onnx.ml TreeEnsemble (opset 5; onnx.reference's TreeEnsemble, post_transform NONE).
    """
    x = args.raw_tensor("input")
    dtype = str(x.ty.dtype)
    if len(args.shape(x)) != 2:
        args.fail(f"must be 2-D [N, F], got shape {args.shape(x)}", "input")
    features, modes = args.ints("nodes_featureids"), args.ints("nodes_modes")
    splits = np.asarray(args.value("nodes_splits"), dtype=dtype).reshape(-1)
    n_nodes = len(features)
    if len(modes) != n_nodes or splits.size != n_nodes:
        args.fail(f"nodes_modes and nodes_splits must have {n_nodes} values (one per node)", "nodes_modes")
    if any(m not in range(7) for m in modes):
        args.fail(f"modes {sorted(set(modes))} must lie in [0, 6]", "nodes_modes")
    n_features = args.shape(x)[1]
    if isinstance(n_features, int) and any(not 0 <= f < n_features for f in features):
        args.fail(f"feature ids {sorted(set(features))} must lie in [0, {n_features})", "nodes_featureids")
    targets, weights = args.ints("leaf_targetids"), np.asarray(args.value("leaf_weights"), dtype).reshape(-1)
    n_targets, aggregate = args.int("n_targets"), args.int("aggregate_function", SUM)
    if aggregate not in (AVERAGE, SUM, MIN, MAX):
        args.fail(
            f"aggregate_function {aggregate} is not 0 (AVERAGE), 1 (SUM), 2 (MIN) or 3 (MAX)", "aggregate_function"
        )
    if len(weights) != len(targets) or any(not 0 <= t < n_targets for t in targets):
        args.fail(f"must have one target in [0, {n_targets}) per leaf weight", "leaf_targetids")
    membership = np.asarray(args.value("membership_values", np.zeros(0)), dtype).reshape(-1)
    member_nodes = [k for k, m in enumerate(modes) if m == MEMBER]
    sets = np.split(membership, np.flatnonzero(np.isnan(membership)) + 1)[: len(member_nodes)]
    if int(np.isnan(membership).sum()) != len(member_nodes):
        args.fail(f"must hold one NaN-ended set per MEMBER node ({len(member_nodes)})", "membership_values")
    tracks = args.ints("nodes_missing_value_tracks_true", [0] * n_nodes)
    if len(tracks) != n_nodes:
        args.fail(f"must have {n_nodes} values (one per node)", "nodes_missing_value_tracks_true")
    paths = _tree_paths(args)

    if n_nodes:
        value = args.emit(relax.op.take(x, relax.const(np.array(features, I64)), axis=1))  # [N, M]
        split = _const(splits)
        compare = {
            LEQ: relax.op.less_equal,
            LT: relax.op.less,
            GTE: relax.op.greater_equal,
            GT: relax.op.greater,
            EQ: relax.op.equal,
            NEQ: relax.op.not_equal,
        }
        cond = relax.const(np.zeros(n_nodes, bool))
        for mode, fn in compare.items():
            mask = np.array([m == mode for m in modes])
            if mask.any():
                cond = relax.op.logical_or(cond, relax.op.logical_and(fn(value, split), relax.const(mask)))
        if member_nodes:
            width = max(1, max(len(s) - 1 for s in sets))
            table = np.full((n_nodes, width), np.nan, dtype)
            for k, members in zip(member_nodes, sets):
                table[k, : len(members) - 1] = members[:-1]
            hits = relax.op.equal(relax.op.expand_dims(value, 2), _const(table))  # NaN never matches
            cond = relax.op.logical_or(
                cond, relax.op.greater(relax.op.max(relax.op.astype(hits, "int8"), axis=2), relax.const(0, "int8"))
            )
        if any(tracks):
            missing = relax.op.logical_and(relax.op.isnan(value), relax.const(np.array([bool(t) for t in tracks])))
            cond = relax.op.logical_or(cond, missing)
        cond = args.emit(relax.op.astype(cond, "float32"))
    # disagree[n, p]: the comparisons on path p that row n's values contradict (0: the path is taken).
    expect_true = np.zeros((max(n_nodes, 1), len(paths)), "float32")
    expect_false = np.zeros_like(expect_true)
    for p, (path, _) in enumerate(paths):
        for node, taken in path:
            (expect_true if taken else expect_false)[node, p] = 1
    if n_nodes:
        disagree = relax.op.add(
            relax.op.matmul(cond, relax.const(expect_false - expect_true[:n_nodes])),
            relax.const(expect_true.sum(axis=0)),
        )
    else:
        disagree = relax.op.zeros([args.shape(x)[0], len(paths)], "float32")
    reached = args.emit(relax.op.equal(disagree, relax.const(0, "float32")))  # [N, paths]
    onehot = np.zeros((len(paths), n_targets), bool)
    leaf_weight = np.zeros(len(paths), dtype)
    for p, (_, leaf) in enumerate(paths):
        onehot[p, targets[leaf]] = True
        leaf_weight[p] = weights[leaf]
    if aggregate in (SUM, AVERAGE):
        matrix = np.where(onehot, leaf_weight[:, None], 0).astype(dtype)
        if aggregate == AVERAGE:
            matrix = matrix / max(len(args.ints("tree_roots")), 1)
        return relax.op.matmul(relax.op.astype(reached, dtype), _const(matrix.astype(dtype)))
    info = np.finfo(dtype)
    fill = info.max if aggregate == MIN else info.min
    table = np.where(onehot, leaf_weight[:, None], fill).astype(dtype)  # [paths, T]
    masked = relax.op.where(relax.op.expand_dims(reached, 2), _const(table[None]), _const(np.array(fill, dtype)))
    return (relax.op.min if aggregate == MIN else relax.op.max)(masked, axis=1)


def mel_weight_matrix(args: OpArgs) -> relax.Expr:
    """num_mel_bins, dft_length, sample_rate (integer scalars), lower_edge_hertz, upper_edge_hertz
    (float scalars), output_datatype (a Precision code, FLOAT32 by default) -> output
    [dft_length // 2 + 1, num_mel_bins]: triangular filters spaced evenly on the mel scale
    (mel = 2595 log10(1 + hz / 700)) over the DFT's bins.

    The inputs may be computed at execution: the output size is then read from them in the graph and
    bound as two symbolic sizes. The band edges are num_mel_bins + 2 points between the edge
    frequencies, in bins floor((dft_length + 1) hz / sample_rate); filter i rises from edge i to edge
    i + 1 and falls to edge i + 2.

    Reference: ONNX MelWeightMatrix (onnx.reference's MelWeightMatrix, float32 mel edges as it computes them).
    """
    mel_bins, dft, rate = (args.raw_tensor(n) for n in ("num_mel_bins", "dft_length", "sample_rate"))
    low, high = args.raw_tensor("lower_edge_hertz"), args.raw_tensor("upper_edge_hertz")
    dtype = storage_dtype(P(args.int("output_datatype", int(P.FLOAT32))))
    # Shape values come from data here: each step is emitted (Relax infers the type of emitted bindings only).
    rows_value = args.emit(relax.op.astype(dft, I64))
    rows_value = args.emit(relax.op.add(relax.op.floor_divide(rows_value, relax.const(2, I64)), relax.const(1, I64)))
    cols_value = args.emit(relax.op.astype(mel_bins, I64))
    rows_value = args.emit(relax.op.reshape(rows_value, [1]))
    cols_value = args.emit(relax.op.reshape(cols_value, [1]))
    sizes = args.emit(relax.op.concat([rows_value, cols_value]))
    shape = args.emit(relax.op.tensor_to_shape(sizes))
    rows, cols = tirx.Var("mel_rows", I64), tirx.Var("mel_bins", I64)
    args.match_cast(shape, [rows, cols])
    args.require_dims(
        tirx.all(rows >= 1, cols >= 0), rows, "dft_length must be >= 0 and num_mel_bins >= 0", "dft_length"
    )

    def compute(dft_t: te.Tensor, rate_t: te.Tensor, low_t: te.Tensor, high_t: te.Tensor) -> te.Tensor:
        def mel(hz: te.Tensor) -> tirx.PrimExpr:
            # onnx.reference: 2595 * log1p(hz / 700) in the input's float32, then / log(10) in float64.
            v = hz().astype("float32")
            return (tirx.const(2595, "float32") * tirx.log1p(v / tirx.const(700, "float32"))).astype(
                "float64"
            ) / math.log(10)

        low_mel, high_mel = mel(low_t), mel(high_t)
        step = (high_mel - low_mel) / (cols + 2).astype("float64")
        length, sample_rate = dft_t().astype("float64"), rate_t().astype("float64")

        def edge(k: tirx.PrimExpr) -> tirx.PrimExpr:
            m = k.astype("float64") * step + low_mel
            hz = tirx.const(700.0, "float64") * (tirx.exp(m / 2595.0 * math.log(10)) - 1.0)
            return tirx.floor((length + 1.0) * hz / sample_rate).astype(I64)

        def weight(j: tirx.PrimExpr, i: tirx.PrimExpr) -> tirx.PrimExpr:
            left, center, right = edge(i), edge(i + 1), edge(i + 2)
            zero, one = tirx.const(0.0, "float64"), tirx.const(1.0, "float64")
            rise = (j - left).astype("float64") / tirx.max(center - left, 1).astype("float64")
            rising = tirx.if_then_else(
                center == left,
                tirx.if_then_else(j == center, one, zero),
                tirx.if_then_else(tirx.all(j >= left, j <= center), rise, zero),
            )
            fall = (right - j).astype("float64") / tirx.max(right - center, 1).astype("float64")
            falling = tirx.all(right > center, j >= center, j < right)
            return tirx.if_then_else(falling, fall, rising).astype(dtype)

        return te.compute((rows, cols), weight, name="mel_weight_matrix")

    scalar = [args.emit(relax.op.reshape(t, [])) for t in (dft, rate, low, high)]
    return args.emit_te(compute, *scalar)


def _infer_feature_extractor(shapes: list, values: list) -> list:
    x, indices = shapes[0], shapes[1]
    if x is None or indices is None:
        return [None]
    k = None if any(d is None for d in indices) else int(np.prod(indices, dtype=np.int64))
    return [(1, k) if len(x) == 1 else (*x[:-1], k)]


def _infer_tree_ensemble(shapes: list, values: list) -> list:
    n = None if shapes[0] is None else shapes[0][0]
    return [(n, None if values[11] is None else int(np.reshape(values[11], -1)[0]))]


def _infer_mel(shapes: list, values: list) -> list:
    mel, dft = values[0], values[1]
    rows = None if dft is None else int(np.reshape(dft, -1)[0]) // 2 + 1
    return [(rows, None if mel is None else int(np.reshape(mel, -1)[0]))]


BINARIZER = register_builtin(
    "BINARIZER",
    2410,
    [Arg("input", NUMBERS), Arg("threshold", F32, optional=True)],
    [Arg("output", NUMBERS)],
    binarizer,
    infer=infer_same_shape,
)
ARRAY_FEATURE_EXTRACTOR = register_builtin(
    "ARRAY_FEATURE_EXTRACTOR",
    2411,
    [Arg("input", ANY), Arg("indices", INT32_64)],
    [Arg("output", ANY)],
    array_feature_extractor,
    infer=_infer_feature_extractor,
)
TREE_ENSEMBLE = register_builtin(
    "TREE_ENSEMBLE",
    2412,
    [
        Arg("input", FLOATS),
        Arg("nodes_featureids", INT32_64),
        Arg("nodes_modes", INT32_64),
        Arg("nodes_splits", FLOATS, same_as="input"),
        Arg("nodes_truenodeids", INT32_64),
        Arg("nodes_trueleafs", INT32_64),
        Arg("nodes_falsenodeids", INT32_64),
        Arg("nodes_falseleafs", INT32_64),
        Arg("leaf_targetids", INT32_64),
        Arg("leaf_weights", FLOATS, same_as="input"),
        Arg("tree_roots", INT32_64),
        Arg("n_targets", INT32),
        Arg("aggregate_function", INT32, optional=True),
        Arg("membership_values", FLOATS, optional=True),
        Arg("nodes_missing_value_tracks_true", INT32_64, optional=True),
    ],
    [Arg("output", FLOATS)],
    tree_ensemble,
    infer=_infer_tree_ensemble,
)
MEL_WEIGHT_MATRIX = register_builtin(
    "MEL_WEIGHT_MATRIX",
    2413,
    [
        Arg("num_mel_bins", INT32_64),
        Arg("dft_length", INT32_64),
        Arg("sample_rate", INT32_64),
        Arg("lower_edge_hertz", FLOATS),
        Arg("upper_edge_hertz", FLOATS),
        Arg("output_datatype", INT32, optional=True),
    ],
    [Arg("output", ANY)],
    mel_weight_matrix,
    infer=_infer_mel,
)
