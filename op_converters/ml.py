"""ai.onnx.ml and signal extensions (codes 2410-2429): BINARIZER, ARRAY_FEATURE_EXTRACTOR, TREE_ENSEMBLE,
MEL_WEIGHT_MATRIX and ONE_HOT_ENCODER.

NNAdapter has no operation for the numeric operators of ONNX's ML domain (Binarizer, ArrayFeatureExtractor,
TreeEnsemble, OneHotEncoder) nor for MelWeightMatrix, whose output size depends on input values. Each is
registered as one of nnadapter-tvm's built-in extensions (defined in nnadapter_tvm/operations/) and computed by Relax
operators, TE, or (the tree walk) a TIR kernel. The ONNX importer lowers the older TreeEnsembleClassifier and
TreeEnsembleRegressor onto TREE_ENSEMBLE too (frontends/onnx/ops/ml_trees.py).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.ml import AVERAGE, EQ, GT, GTE, LEQ, LT, MAX, MEMBER, MIN, NEQ, SUM
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P
from nnadapter_tvm.types import storage_dtype

I64 = "int64"


def _const(array: np.ndarray) -> relax.Constant:
    """A constant of the array's own dtype (relax.const would make float64 arrays float32)."""
    return relax.const(array, str(array.dtype))


@converter(O.BINARIZER)
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


@converter(O.ARRAY_FEATURE_EXTRACTOR)
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
    out = args.emit(relax.op.take(x, flat, axis=len(shape) - 1, mode="clip"))
    if len(shape) == 1:
        out = relax.op.reshape(out, [1, count])
    return out


def _leaf_child(leaf: int) -> int:
    """A branch to leaf ``leaf`` as the kernel's tables hold it (a node index is >= 0, a leaf < 0)."""
    return -1 - leaf


def _tree_structure(args: OpArgs, n_leaves: int | None) -> None:
    """Check the trees: every branch names a node or a leaf in range, and no path from a root comes back
    to a node on it (the kernel walks each tree until it reaches a leaf). ``n_leaves``: the leaf count;
    None where any leaf index >= 0 names a leaf (leaf_ids given)."""
    true_ids, false_ids = args.ints("nodes_truenodeids"), args.ints("nodes_falsenodeids")
    true_leafs, false_leafs = args.ints("nodes_trueleafs"), args.ints("nodes_falseleafs")
    n_nodes = len(args.ints("nodes_featureids"))
    for name, values in (
        ("nodes_truenodeids", true_ids),
        ("nodes_falsenodeids", false_ids),
        ("nodes_trueleafs", true_leafs),
        ("nodes_falseleafs", false_leafs),
    ):
        if len(values) != n_nodes:
            args.fail(f"has {len(values)} values for {n_nodes} nodes", name)
    for node in range(n_nodes):
        for ids, leafs in ((true_ids, true_leafs), (false_ids, false_leafs)):
            target = ids[node]
            if leafs[node]:
                if target < 0 or (n_leaves is not None and target >= n_leaves):
                    bound = "" if n_leaves is None else f", outside [0, {n_leaves})"
                    args.fail(f"node {node} names leaf {target}{bound}", "nodes_truenodeids")
            elif not 0 <= target < n_nodes:
                args.fail(f"node {node} names node {target}, outside [0, {n_nodes})", "nodes_truenodeids")
    # A depth-first walk from every root (iterative: trees may be deep): a node met again while it is on
    # the current path closes a cycle.
    state = bytearray(n_nodes)  # 0 unseen, 1 on the current path, 2 done
    for root in args.ints("tree_roots"):
        if not 0 <= root < n_nodes:
            args.fail(f"root {root} is outside [0, {n_nodes})", "tree_roots")
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, 0)]
        while stack:
            node, branch = stack.pop()
            if branch == 2:
                state[node] = 2
                continue
            stack.append((node, branch + 1))
            ids, leafs = (true_ids, true_leafs) if branch == 0 else (false_ids, false_leafs)
            child = ids[node]
            if leafs[node] or state[child] == 2:
                continue
            if state[child] == 1:
                args.fail("the nodes form a cycle (a branch leads back to a node on its path)", "nodes_truenodeids")
            state[child] = 1
            stack.append((child, 0))


def _identity(aggregate: int, dtype: str) -> np.ndarray:
    """What a target no reached leaf names holds: 0 for SUM and AVERAGE, the type's max for MIN, its min
    for MAX (onnx's reference)."""
    if aggregate in (SUM, AVERAGE):
        return np.zeros((), dtype)
    info = np.finfo(dtype)
    return np.array(info.max if aggregate == MIN else info.min, dtype)


def _uniform(values: list[int]) -> int | None:
    """The one value of ``values``, None where they differ (or there are none)."""
    return values[0] if values and all(v == values[0] for v in values) else None


def _tree_kernel_ir(ins, outs, *, n_trees: int, aggregate: int, mode: int | None, tracks: int | None, member: bool):
    """The trees walked row by row: ``ins`` are x [N, F], the node tables feature, split, true child,
    false child (a child < 0 is the leaf -1 - child), the roots [T], the leaf table [leaves, K], then the
    modes [M] where ``mode`` is None (they differ), missing-value flags [M] where ``tracks`` is None, and
    the MEMBER nodes' hits [N, members] with each node's member position [M] where ``member``.

    Rows are independent: one parallel loop over them; each row walks every tree from its root to a leaf
    (a while loop: no depth bound needed, the converter rejected cycles) and aggregates the leaf's row of
    the table into its K accumulators."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    x, feature, split, true_next, false_next, roots, table = ins[:7]
    rest = list(ins[7:])
    (out,) = outs
    dtype = str(x.dtype)
    rows, n_targets = out.shape
    with IRBuilder() as ib, T.serial(0, 1):
        x, feature, split, true_next, false_next, roots, table, out = (
            T.buffer_proxy(b) for b in (x, feature, split, true_next, false_next, roots, table, out)
        )
        modes = T.buffer_proxy(rest.pop(0)) if mode is None else None
        flags = T.buffer_proxy(rest.pop(0)) if tracks is None else None
        hits, member_of = (T.buffer_proxy(rest.pop(0)), T.buffer_proxy(rest.pop(0))) if member else (None, None)
        init = tirx.const(float(_identity(aggregate, dtype)), dtype)
        with T.parallel(0, rows) as n:
            acc = T.buffer_proxy(T.alloc_buffer((n_targets,), dtype, scope="local"))
            node = T.buffer_proxy(T.alloc_buffer((1,), "int32", scope="local"))
            with T.serial(0, n_targets) as k:
                acc[k] = init
            with T.serial(0, n_trees) as t:
                node[0] = roots[t]
                with T.While(node[0] >= 0):
                    i = node[0]
                    v, s = x[n, feature[i]], split[i]

                    def holds(m: int, v=v, s=s, i=i, n=n) -> tirx.PrimExpr:
                        if m == MEMBER:
                            return hits[n, member_of[i]] != tirx.const(0, "int8")
                        if m == NEQ:  # NaN differs from everything (an explicit test: LLVM's fcmp one says no)
                            return tirx.Or(v != s, tirx.Or(tirx.isnan(v), tirx.isnan(s)))
                        return {LEQ: v <= s, LT: v < s, GTE: v >= s, GT: v > s, EQ: v == s}[m]

                    if mode is not None:
                        go = holds(mode)
                    else:
                        go = tirx.const(False, "bool")
                        for m in range(MEMBER + 1):
                            if m != MEMBER or member:
                                go = tirx.Or(go, tirx.And(modes[i] == m, holds(m)))
                    if tracks is None:
                        go = tirx.Or(go, tirx.And(flags[i] != tirx.const(0, "int8"), tirx.isnan(v)))
                    elif tracks:
                        go = tirx.Or(go, tirx.isnan(v))
                    node[0] = tirx.Select(go, true_next[i], false_next[i])
                leaf = -1 - node[0]
                with T.serial(0, n_targets) as k:
                    w = table[leaf, k]
                    if aggregate in (SUM, AVERAGE):
                        acc[k] = acc[k] + w
                    else:
                        acc[k] = tirx.min(acc[k], w) if aggregate == MIN else tirx.max(acc[k], w)
            with T.serial(0, n_targets) as k:
                if aggregate == AVERAGE:
                    out[n, k] = acc[k] / tirx.const(n_trees, dtype)
                else:
                    out[n, k] = acc[k]
    return ib.get()


@converter(O.TREE_ENSEMBLE)
def tree_ensemble(args: OpArgs) -> relax.Expr:
    """input [N, F] (FLOAT32 or FLOAT64), nodes_featureids, nodes_modes (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ,
    5 NEQ, 6 MEMBER), nodes_splits, nodes_truenodeids, nodes_trueleafs, nodes_falsenodeids,
    nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets, aggregate_function (0 AVERAGE,
    1 SUM, 2 MIN, 3 MAX), then optional membership_values (the sets of the MEMBER nodes, in node order,
    each ended by NaN), nodes_missing_value_tracks_true and leaf_ids (the leaf each (leaf_targetids,
    leaf_weights) entry belongs to, so that a leaf may hold several; absent: entry i is leaf i) -> output
    [N, n_targets] of the input's precision: per row, the weights of the leaves its trees reach aggregated
    per target (AVERAGE: the sum over the trees divided by their count; 0 for SUM and AVERAGE, the type's
    max for MIN and min for MAX where no reached leaf names the target, as onnx's reference does;
    onnxruntime 1.32 writes 0 there).

    A node compares input[:, featureid] with its split (or its set); the true branch is taken where the
    comparison holds, or where the value is NaN and the node's missing_value_tracks_true is set (NaN
    compares false, except NEQ, which holds). The trees, constants, become tables at conversion (a node's
    feature, split and two children, a leaf's row of weights per target); the kernel walks every tree of a
    row from its root to a leaf, one comparison per node, rows in parallel. A cycle in the nodes is
    refused at conversion.

    The ONNX importer lowers TreeEnsembleClassifier and TreeEnsembleRegressor onto it (their leaves hold a
    weight per class: leaf_ids).

    Reference: ONNX ai.onnx.ml TreeEnsemble (opset 5; onnx.reference's TreeEnsemble, post_transform NONE).
    """
    x = args.raw_tensor("input")
    dtype = str(x.ty.dtype)
    if len(args.shape(x)) != 2:
        args.fail(f"must be 2-D [N, F], got shape {args.shape(x)}", "input")
    rows, n_features = args.shape(x)
    features, modes = args.ints("nodes_featureids"), args.ints("nodes_modes")
    splits = np.asarray(args.value("nodes_splits"), dtype=dtype).reshape(-1)
    n_nodes = len(features)
    if len(modes) != n_nodes or splits.size != n_nodes:
        args.fail(f"nodes_modes and nodes_splits must have {n_nodes} values (one per node)", "nodes_modes")
    if any(m not in range(7) for m in modes):
        args.fail(f"modes {sorted(set(modes))} must lie in [0, 6]", "nodes_modes")
    if any(f < 0 for f in features) or (isinstance(n_features, int) and any(f >= n_features for f in features)):
        bound = n_features if isinstance(n_features, int) else "F"
        args.fail(f"feature ids {sorted(set(features))} must lie in [0, {bound})", "nodes_featureids")
    targets, weights = args.ints("leaf_targetids"), np.asarray(args.value("leaf_weights"), dtype).reshape(-1)
    n_targets, aggregate = args.int("n_targets"), args.int("aggregate_function", SUM)
    if aggregate not in (AVERAGE, SUM, MIN, MAX):
        args.fail(
            f"aggregate_function {aggregate} is not 0 (AVERAGE), 1 (SUM), 2 (MIN) or 3 (MAX)", "aggregate_function"
        )
    if n_targets < 1:
        args.fail(f"must be >= 1, got {n_targets}", "n_targets")
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
    if args.has("leaf_ids"):
        leaf_ids = args.ints("leaf_ids")
        if len(leaf_ids) != len(targets) or any(i < 0 for i in leaf_ids):
            args.fail(f"must hold one leaf index >= 0 per leaf weight ({len(targets)})", "leaf_ids")
        _tree_structure(args, None)
    else:
        leaf_ids = list(range(len(targets)))
        _tree_structure(args, len(targets))
    roots = args.ints("tree_roots")
    if not isinstance(n_features, int) and features:
        args.require_dims(
            n_features > max(features),
            n_features,
            f"the trees read feature {max(features)}: the input must have more than that many columns",
            "input",
        )

    # The leaf table: row l holds leaf l's aggregated weight per target (the identity where it has none).
    true_ids, false_ids = args.ints("nodes_truenodeids"), args.ints("nodes_falsenodeids")
    true_leafs, false_leafs = args.ints("nodes_trueleafs"), args.ints("nodes_falseleafs")
    leaf_refs = [true_ids[k] for k in range(n_nodes) if true_leafs[k]]
    leaf_refs += [false_ids[k] for k in range(n_nodes) if false_leafs[k]]
    n_leaves = max([*leaf_ids, *leaf_refs, -1]) + 1
    table = np.full((max(n_leaves, 1), n_targets), _identity(aggregate, dtype), dtype)
    combine = {SUM: np.add, AVERAGE: np.add, MIN: np.minimum, MAX: np.maximum}[aggregate]
    combine.at(table, (np.array(leaf_ids, np.int64), np.array(targets, np.int64)), weights)
    if not roots:
        # No tree: every target keeps the aggregation's identity.
        return relax.op.broadcast_to(_const(_identity(aggregate, dtype)), relax.ShapeExpr([rows, n_targets]))

    def child(ids: list[int], leafs: list[int]) -> np.ndarray:
        return np.array([_leaf_child(ids[k]) if leafs[k] else ids[k] for k in range(n_nodes)], "int32")

    mode, track = _uniform(modes), _uniform([int(bool(t)) for t in tracks])
    kernel_ins = [
        x,
        relax.const(np.array(features, "int32")),
        _const(splits),
        relax.const(child(true_ids, true_leafs)),
        relax.const(child(false_ids, false_leafs)),
        relax.const(np.array(roots, "int32")),
        _const(table),
    ]
    if mode is None:
        kernel_ins.append(relax.const(np.array(modes, "int32")))
    if track is None:
        kernel_ins.append(relax.const(np.array([int(bool(t)) for t in tracks], "int8")))
    if member_nodes:
        # hits[n, j]: whether row n's value for MEMBER node j lies in its set (one compare with a NaN-padded
        # table; NaN never matches).
        member_features = relax.const(np.array([features[k] for k in member_nodes], I64))
        value = args.emit(relax.op.take(x, member_features, axis=1, mode="clip"))
        width = max(1, max(len(s) - 1 for s in sets))
        table_m = np.full((len(member_nodes), width), np.nan, dtype)
        for j, members in enumerate(sets):
            table_m[j, : len(members) - 1] = members[:-1]
        hits = relax.op.equal(relax.op.expand_dims(value, 2), _const(table_m))
        kernel_ins.append(args.emit(relax.op.max(relax.op.astype(hits, "int8"), axis=2)))
        position = np.zeros(n_nodes, "int32")
        position[member_nodes] = np.arange(len(member_nodes), dtype="int32")
        kernel_ins.append(relax.const(position))
    kernel = functools.partial(
        _tree_kernel_ir, n_trees=len(roots), aggregate=aggregate, mode=mode, tracks=track, member=bool(member_nodes)
    )

    def compute(*tensors: te.Tensor) -> te.Tensor:
        return te.extern([(tensors[0].shape[0], n_targets)], list(tensors), kernel, dtype=[dtype], name="tree_ensemble")

    return args.emit_te(compute, *kernel_ins, primfunc_name_hint="tree_ensemble")


@converter(O.ONE_HOT_ENCODER)
def one_hot_encoder(args: OpArgs) -> relax.Expr:
    """input (INT32, INT64, FLOAT32 or FLOAT64; floats truncated toward zero), categories (INT64 [C]), zeros
    (BOOL8 scalar, true by default) -> output FLOAT32 [..., C]: 1 where the input, as an integer, is the
    category (the last position of a category listed twice), else 0; with zeros false, an element that is no
    category fails the execution.

    Reference: ONNX ai.onnx.ml OneHotEncoder (onnxruntime's kernel: other inputs cast to int64).
    """
    x = args.raw_tensor("input")
    cats = np.array(args.ints("categories"), I64)
    if cats.size == 0:
        args.fail("must hold at least one category", "categories")
    values = x if str(x.ty.dtype) == I64 else relax.op.astype(x, I64)
    match = args.emit(relax.op.equal(relax.op.expand_dims(values, -1), relax.const(cats)))
    last = np.array([cats[k] not in cats[k + 1 :] for k in range(cats.size)])
    out = relax.op.astype(match if last.all() else relax.op.logical_and(match, relax.const(last)), "float32")
    if not args.bool("zeros", True):
        found = relax.op.max(relax.op.astype(match, I64), axis=-1)
        unknown = relax.op.sum(relax.op.subtract(relax.const(1, I64), found))
        unknown = args.emit(relax.op.reshape(unknown, [1]))
        message = "{value} element(s) are none of the categories (zeros is false)"
        args.check_value(unknown, lambda v: v == 0, message, "input")
    return out


@converter(O.MEL_WEIGHT_MATRIX)
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
