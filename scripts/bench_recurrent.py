#!/usr/bin/env python3
"""One recurrent layer (ONNX LSTM / GRU) on nnadapter-tvm against onnxruntime, same thread count.

    python scripts/bench_recurrent.py [--threads 2] [--rounds 7] [--block 20] [--cases lstm,silero,...]
                                      [--json]

Cases (ONNX models built here, weights from a fixed seed; the sequence length is a ``dim_param``, so
nnadapter-tvm compiles once for every length and runs the length given):

- ``lstm``: LSTM T=100, B=1, I=64, H=128, forward (the issue's reference size).
- ``silero``: LSTM T=64, B=1, I=128, H=128 with initial h and c (silero-vad's decoder LSTM).
- ``ocr``: bidirectional LSTM T=40, B=1, I=512, H=512 (ddddocr's recognizer).
- ``wide``: its forward half alone (one sequence: each step split over the threads).
- ``gru``: GRU T=100, B=4, I=64, H=128, linear_before_reset (PyTorch's GRU export).

Timing: onnxruntime at its default session options (spinning on) with ``intra_op_num_threads`` set to
the thread count, nnadapter-tvm's Predictor with ``TVM_NUM_THREADS``; after a warm-up, each runs
``--block`` times in turn (A x N, B x N) for ``--rounds`` rounds; a round's figure is each side's
median, and the ratio printed is the median of the per-round ratios nnadapter-tvm / onnxruntime (these
machines drift within minutes; see docs/performance.md).  Each side's time alone (its own rounds,
nothing interleaved) is printed too, and each side's time for the same model fed one step (T=1): the
fixed cost of a call, which the layer's own time adds to.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

CASES = {
    # name: (op, T, B, I, H, direction, initial states, extra attributes)
    "lstm": ("LSTM", 100, 1, 64, 128, "forward", False, {}),
    "silero": ("LSTM", 64, 1, 128, 128, "forward", True, {}),
    "ocr": ("LSTM", 40, 1, 512, 512, "bidirectional", False, {}),
    "wide": ("LSTM", 40, 1, 512, 512, "forward", False, {}),
    "gru": ("GRU", 100, 4, 64, 128, "forward", False, {"linear_before_reset": 1}),
}


def build(name: str) -> tuple[onnx.ModelProto, dict]:
    """The case's ONNX model (sequence length symbolic) and its feeds."""
    op, steps, batch, size, hidden, direction, states, attrs = CASES[name]
    gates = {"LSTM": 4, "GRU": 3}[op]
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(0)
    scale = 1 / np.sqrt(hidden)

    def init(tensor_name: str, shape: list[int]) -> onnx.TensorProto:
        return helper.make_tensor(tensor_name, TensorProto.FLOAT, shape, rng.uniform(-scale, scale, shape).ravel())

    inits = [
        init("W", [dirs, gates * hidden, size]),
        init("R", [dirs, gates * hidden, hidden]),
        init("B", [dirs, 2 * gates * hidden]),
    ]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["seq", batch, size])]
    node_inputs = ["X", "W", "R", "B"]
    feeds = {"X": rng.uniform(-1, 1, [steps, batch, size]).astype("float32")}
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    if states:
        node_inputs += ["", "h0"] + (["c0"] if op == "LSTM" else [])
        for state in node_inputs[5:]:
            inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, [dirs, batch, hidden]))
            feeds[state] = rng.uniform(-1, 1, [dirs, batch, hidden]).astype("float32")
    node = helper.make_node(op, node_inputs, outputs, hidden_size=hidden, direction=direction, **attrs)
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["seq", dirs, batch, hidden])]
    outs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, [dirs, batch, hidden]) for o in outputs[1:]]
    graph = helper.make_graph([node], name, inputs, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


def block_ms(run: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench(name: str, threads: int, rounds: int, block: int, cache_dir: str) -> dict:
    import onnxruntime as ort

    import nnadapter_tvm as nna

    model, feeds = build(name)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    predictor = nna.Predictor(model, context_properties=f"TVM_NUM_THREADS={threads};", cache_dir=cache_dir)
    compile_s = time.perf_counter() - start
    expected = session.run(None, feeds)
    got = predictor.run(feeds)
    error = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected))

    def ours() -> object:
        return predictor.run(feeds)

    def peer() -> object:
        return session.run(None, feeds)

    for run in (ours, peer):
        block_ms(run, 3)
    alone = {"nnadapter-tvm": block_ms(ours, block * 2), "onnxruntime": block_ms(peer, block * 2)}
    ratios, ours_ms, peer_ms = [], [], []
    for _ in range(rounds):
        a = block_ms(ours, block)
        b = block_ms(peer, block)
        ours_ms.append(a)
        peer_ms.append(b)
        ratios.append(a / b)
    # The fixed cost of one call (Predictor, VM, kernel launches): the same model fed one step.
    one_step = dict(feeds, X=feeds["X"][:1])
    fixed = {"nnadapter-tvm": block_ms(lambda: predictor.run(one_step), block * 2)}
    fixed["onnxruntime"] = block_ms(lambda: session.run(None, one_step), block * 2)
    op, steps, batch, size, hidden, direction, _, _ = CASES[name]
    return {
        "case": name,
        "shape": f"{op} T={steps} B={batch} I={size} H={hidden} {direction}",
        "nnadapter_tvm_ms": statistics.median(ours_ms),
        "onnxruntime_ms": statistics.median(peer_ms),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "alone_ms": alone,
        "one_step_ms": fixed,
        "compile_s": compile_s,
        "max_abs_error": error,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as cache_dir:
        for name in args.cases.split(","):
            rows.append(bench(name, args.threads, args.rounds, args.block, cache_dir))
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(f"threads: {args.threads}; medians of {args.rounds} rounds x {args.block} runs, alternating")
    print(
        f"{'case':8} {'layer':44} {'ours ms':>9} {'ort ms':>9} {'ratio':>6}  alone (ours / ort)  "
        "T=1 (ours / ort)  max|err|"
    )
    for r in rows:
        alone = r["alone_ms"]
        print(
            f"{r['case']:8} {r['shape']:44} {r['nnadapter_tvm_ms']:9.3f} {r['onnxruntime_ms']:9.3f} "
            f"{r['ratio']:6.2f}  {alone['nnadapter-tvm']:.3f} / {alone['onnxruntime']:.3f}     "
            f"{r['one_step_ms']['nnadapter-tvm']:.3f} / {r['one_step_ms']['onnxruntime']:.3f}    "
            f"{r['max_abs_error']:.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
