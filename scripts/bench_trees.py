#!/usr/bin/env python3
"""Tree ensembles (ai.onnx.ml TreeEnsembleClassifier / TreeEnsembleRegressor, laid out as skl2onnx writes them)
on nnadapter-tvm against onnxruntime, each runtime in its own worker process.

    python scripts/bench_trees.py [--threads 2] [--rounds 5] [--block 10] [--batches 1,10000]
                                  [--models rf,gbdt] [--trees 100] [--depth 8] [--features 20] [--json]

Models (built here with onnx.helper from a fixed seed; the batch is a ``dim_param``, so nnadapter-tvm compiles
each model once, in the first worker, and the others load it from the cache):

- ``rf``: a random-forest-like TreeEnsembleClassifier: ``--trees`` full trees of ``--depth`` over
  ``--features`` features, 3 classes, every leaf holding one probability per class divided by the tree count
  (what skl2onnx writes for RandomForestClassifier), post_transform NONE.
- ``gbdt``: a boosted TreeEnsembleRegressor: ``--trees`` full trees of ``--depth`` - 2, one target, signed leaf
  values, a base value, SUM (GradientBoostingRegressor).

Inputs are uniform in [0, 1) (nnadapter_tvm.tools.benchmark.model_inputs), and so are the thresholds, so that
rows go down both sides of every node.

Timing is nnadapter_tvm.tools.benchmark's (``nnadapter-tvm bench``): each runner at its defaults in its own
process with the same thread count (onnxruntime's intra_op_num_threads, our TVM_NUM_THREADS), outputs compared
with onnxruntime's before timing, then blocks of ``--block`` calls that alternate for ``--rounds`` rounds after
a warm-up block; the ratio is the median of the per-round ratios of block medians (min-max beside it). On a
loaded machine the figures move: compare runs made on the same quiet machine only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

from nnadapter_tvm.tools.benchmark import PEER, Worker, alternate, max_error, summarize

CLASSES = 3


def full_trees(rng: np.random.Generator, trees: int, depth: int, features: int) -> tuple[dict, list]:
    """``trees`` complete binary trees of ``depth`` (node ids breadth first, the root 0), BRANCH_LEQ on a random
    feature against a threshold in [0, 1); returns the node attributes and the (tree, node id) of every leaf."""
    inner, total = 2**depth - 1, 2 ** (depth + 1) - 1
    attrs: dict = {
        k: [] for k in ("treeids", "nodeids", "featureids", "modes", "values", "truenodeids", "falsenodeids")
    }
    leaves = []
    for t in range(trees):
        for node in range(total):
            branch = node < inner
            attrs["treeids"].append(t)
            attrs["nodeids"].append(node)
            attrs["featureids"].append(int(rng.integers(features)) if branch else 0)
            attrs["modes"].append("BRANCH_LEQ" if branch else "LEAF")
            attrs["values"].append(float(rng.random()) if branch else 0.0)
            attrs["truenodeids"].append(2 * node + 1 if branch else 0)
            attrs["falsenodeids"].append(2 * node + 2 if branch else 0)
            if not branch:
                leaves.append((t, node))
    return {f"nodes_{k}": v for k, v in attrs.items()}, leaves


def _model(node: onnx.NodeProto, features: int, outputs: list) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "trees", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", features])], outputs
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)], ir_version=9
    )
    onnx.checker.check_model(model)
    return model


def random_forest(trees: int, depth: int, features: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    attrs, leaves = full_trees(rng, trees, depth, features)
    proba = rng.dirichlet(np.ones(CLASSES), size=len(leaves)) / trees
    attrs["class_treeids"] = [t for t, _ in leaves for _ in range(CLASSES)]
    attrs["class_nodeids"] = [n for _, n in leaves for _ in range(CLASSES)]
    attrs["class_ids"] = list(range(CLASSES)) * len(leaves)
    attrs["class_weights"] = proba.reshape(-1).tolist()
    node = helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "probabilities"], domain="ai.onnx.ml",
        classlabels_int64s=list(range(CLASSES)), post_transform="NONE", **attrs,
    )  # fmt: skip
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", CLASSES]),
    ]
    return _model(node, features, outputs)


def boosted_trees(trees: int, depth: int, features: int, seed: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    attrs, leaves = full_trees(rng, trees, depth, features)
    attrs["target_treeids"] = [t for t, _ in leaves]
    attrs["target_nodeids"] = [n for _, n in leaves]
    attrs["target_ids"] = [0] * len(leaves)
    attrs["target_weights"] = (rng.standard_normal(len(leaves)) * 0.1).tolist()
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["variable"], domain="ai.onnx.ml",
        n_targets=1, base_values=[0.5], aggregate_function="SUM", post_transform="NONE", **attrs,
    )  # fmt: skip
    return _model(node, features, [helper.make_tensor_value_info("variable", TensorProto.FLOAT, ["N", 1])])


def bench(path: str, batch: int, features: int, args: argparse.Namespace, cache_dir: str, workdir: str) -> dict:
    """One model at one batch size: both runners started, their outputs compared, then alternating blocks."""
    shape = [f"X={batch}x{features}"]
    row: dict = {"batch": batch}
    workers: dict[str, Worker] = {}
    try:
        for runner in (PEER, "nnadapter-tvm"):
            workers[runner] = Worker(runner, path, args.threads, cache_dir=cache_dir, shapes=shape)
            row[runner] = dict(workers[runner].info)
        want = workers[PEER].outputs(os.path.join(workdir, "peer.npz"))
        got = workers["nnadapter-tvm"].outputs(os.path.join(workdir, "ours.npz"))
        row["nnadapter-tvm"]["max_error"] = max_error(got, want)
        row["labels_equal"] = bool(np.array_equal(got[0], want[0])) if want[0].dtype.kind == "i" else None
        for runner, entry in summarize(alternate(workers, args.block, args.rounds)).items():
            row[runner] |= entry
    finally:
        for worker in workers.values():
            worker.close()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--batches", default="1,10000")
    parser.add_argument("--models", default="rf,gbdt")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args(argv)
    builders = {
        "rf": lambda: random_forest(args.trees, args.depth, args.features),
        "gbdt": lambda: boosted_trees(args.trees, max(args.depth - 2, 1), args.features),
    }
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        cache_dir = os.path.join(workdir, "cache")
        for name in args.models.split(","):
            path = os.path.join(workdir, f"{name}.onnx")
            onnx.save(builders[name](), path)
            for batch in (int(b) for b in args.batches.split(",")):
                row = {"model": name, **bench(path, batch, args.features, args, cache_dir, workdir)}
                rows.append(row)
                ours, peer = row["nnadapter-tvm"], row[PEER]
                print(
                    f"{name:5} batch {batch:6}: onnxruntime {peer['ms']:9.3f} ms  nnadapter-tvm {ours['ms']:9.3f} ms  "
                    f"ratio {ours['ratio']:.2f} ({ours['ratio_min']:.2f}-{ours['ratio_max']:.2f})  "
                    f"max error {ours['max_error']:.1e}"
                    + ("" if row["labels_equal"] is None else f"  labels equal: {row['labels_equal']}")
                    + (f"  compile {ours['compile_s']:.1f} s" if not ours.get("loaded_from_cache") else "  (cached)"),
                    flush=True,
                )
    print(f"threads {args.threads}, {args.trees} trees of depth {args.depth}, {args.features} features")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
