#!/usr/bin/env python3
"""Per-call latency of ``Predictor.run`` against onnxruntime's ``InferenceSession.run`` on small models,
where the runtime's own bookkeeping, not the kernels, sets the time (issue 13's latency target: at most
2x onnxruntime on the tiny model).

    python scripts/bench_latency.py [--rounds 15] [--block-ms 30] [--models tiny,loop,if,silero]
                                    [--save before.json] [--compare before.json] [--cache-dir DIR]
                                    [--property-only]

Models (built with onnx.helper, weights from a fixed seed):

- ``tiny``: y = relu(x @ W + b), x [1, 64], W [64, 64]: one compiled subgraph.
- ``loop``: a Loop of 8 iterations whose body is acc = relu(acc @ W + b) (one compiled body,
  run by the host once per iteration), acc [1, 64].
- ``if``: c = sum(x) > 0, computed at run time; then: relu(x @ W), else: x @ W - 1; then a Tanh
  after the If (three compiled subgraphs around a host If).
- ``silero``: silero_vad.onnx (an If on the sample rate, Ifs in the decoder, an LSTM) on 512 samples
  at 16 kHz, where /tmp/realmodels/silero_vad.onnx exists.

Both runners use one thread: ``TVM_NUM_THREADS=1`` for us (in the environment before TVM is
imported, and as the context property), ``intra_op_num_threads=1`` (and one inter-op thread) for
onnxruntime, both in this process. After a warm-up, each runs N calls in turn (ours x N, onnxruntime
x N; N makes the slower runner's block last ``--block-ms``) for ``--rounds`` rounds; a round's figure
per runner is the mean per call of its block, and the ratio printed is the median of the per-round
ratios ours / onnxruntime (min and max beside it), with each runner's fastest block. ``--save`` writes
the figures as JSON; ``--compare`` prints a saved run (before a change) next to this one (after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

# The variable before TVM is imported, or the context property alone (``--property-only``): the driver sets
# the variable when a module loads (TVM reads it at each parallel launch), so both should measure the same.
if "--property-only" in sys.argv:
    os.environ.pop("TVM_NUM_THREADS", None)
else:
    os.environ.setdefault("TVM_NUM_THREADS", "1")

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
SILERO = "/tmp/realmodels/silero_vad.onnx"


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _weights(rng: np.random.Generator) -> list[onnx.TensorProto]:
    w = (rng.standard_normal((64, 64)) / 8).astype("float32")
    b = (rng.standard_normal(64) / 8).astype("float32")
    return [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")]


def tiny() -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", F, [1, 64])
    y = helper.make_tensor_value_info("y", F, [1, 64])
    model = _model(nodes, [x], [y], _weights(rng))
    return model, {"x": rng.standard_normal((1, 64)).astype("float32")}


def loop() -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(1)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["acc_in", "W"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", B, []),
            helper.make_tensor_value_info("acc_in", F, [1, 64]),
        ],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("acc_out", F, [1, 64])],
    )
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)]
    inputs = [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("x", F, [1, 64])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", F, [1, 64])], _weights(rng))
    return model, {"M": np.array(8, "int64"), "x": rng.standard_normal((1, 64)).astype("float32")}


def if_model() -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(2)
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["tm"]), helper.make_node("Relu", ["tm"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [1, 64])],
    )
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["em"]), helper.make_node("Sub", ["em", "one"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, [1, 64])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Tanh", ["r"], ["y"]),
    ]
    inits = [
        _weights(rng)[0],
        numpy_helper.from_array(np.array(0.0, "float32"), "zero"),
        numpy_helper.from_array(np.array(1.0, "float32"), "one"),
    ]
    x = helper.make_tensor_value_info("x", F, [1, 64])
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", F, [1, 64])], inits)
    return model, {"x": np.abs(rng.standard_normal((1, 64))).astype("float32")}


def silero() -> tuple[onnx.ModelProto, dict]:
    model = onnx.load(SILERO)
    rng = np.random.default_rng(3)
    feeds = {
        "input": (rng.random((1, 512)) - 0.5).astype("float32"),
        "state": np.zeros((2, 1, 128), "float32"),
        "sr": np.array(16000, "int64"),
    }
    return model, feeds


MODELS: dict[str, Callable[[], tuple[onnx.ModelProto, dict]]] = {
    "tiny": tiny,
    "loop": loop,
    "if": if_model,
    "silero": silero,
}


def _block(call: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n


def measure(name: str, rounds: int, block_ms: float, cache_dir: str | None) -> dict:
    model, feeds = MODELS[name]()
    data = model.SerializeToString()
    predictor = nna.Predictor(data, devices=["llvm"], context_properties="TVM_NUM_THREADS=1;", cache_dir=cache_dir)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    ours, theirs = predictor.run(feeds), session.run(None, feeds)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

    def run_ours() -> object:
        return predictor.run(feeds)

    def run_theirs() -> object:
        return session.run(None, feeds)

    # Blocks of about ``block_ms`` for the slower runner: long enough that one preemption by another job
    # on the machine does not decide a block, short enough for rounds to alternate often.
    slowest = max(_block(run_ours, 20), _block(run_theirs, 20))
    n = max(5, int(block_ms / 1000 / slowest))
    us, them = [], []
    for _ in range(rounds):
        us.append(_block(run_ours, n) * 1e6)
        them.append(_block(run_theirs, n) * 1e6)
    ratios = [a / b for a, b in zip(us, them)]
    return {
        "ours_us": statistics.median(us),
        "ort_us": statistics.median(them),
        "ours_best_us": min(us),
        "ort_best_us": min(them),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "calls_per_block": n,
        "rounds": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--block-ms", type=float, default=30.0, help="length of a block of calls (the slower runner's)")
    parser.add_argument("--models", default="tiny,loop,if,silero")
    parser.add_argument("--save", help="write the figures to this JSON file")
    parser.add_argument("--compare", help="a JSON file saved by --save (before), printed beside this run")
    parser.add_argument("--cache-dir", help="compiled models are cached here (a second run skips compiling)")
    parser.add_argument(
        "--property-only",
        action="store_true",
        help="leave TVM_NUM_THREADS out of the environment (one thread through the context property only)",
    )
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    if "silero" in names and not os.path.exists(SILERO):
        print(f"# {SILERO} not found: silero skipped", file=sys.stderr)
        names.remove("silero")
    before = {}
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
    results = {}
    where = "context property only" if args.property_only else "environment and context property"
    print(f"# one thread each (TVM_NUM_THREADS=1: {where}; onnxruntime intra_op_num_threads=1), alternating blocks;")
    print("# per call: median of the rounds' block means; ratio: median of the per-round ratios [min-max]")
    print("# best: the fastest block of each runner (the floor, where other jobs on the machine interfere least)")
    header = f"{'model':8} {'ours us':>9} {'ort us':>8} {'ratio':>6} {'[min-max]':>13} {'best: ours':>11} {'ort':>6}"
    print(header + ("  | before: ours us, ratio" if before else ""))
    for name in names:
        r = results[name] = measure(name, args.rounds, args.block_ms, args.cache_dir)
        line = (
            f"{name:8} {r['ours_us']:9.1f} {r['ort_us']:8.1f} {r['ratio']:6.2f} "
            f"[{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] {r['ours_best_us']:11.1f} {r['ort_best_us']:6.1f}"
        )
        if name in before:
            b = before[name]
            line += f"  | {b['ours_us']:9.1f} {b['ratio']:6.2f}  ({b['ours_us'] / r['ours_us']:.1f}x faster)"
        print(line, flush=True)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
