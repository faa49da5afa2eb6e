"""What the run-time data checks cost: each model compiled twice, with the checks (the default) and with
``NNADAPTER_TVM_DATA_CHECKS=0``, timed in alternating blocks; the median of the per-round ratios.

    python scripts/bench_checks.py                       # squeezenet, shufflenet, embedding, gather
    python scripts/bench_checks.py --models resnet50 --rounds 7 --block 20

``embedding`` is a synthetic model where the check does run (a Gather of fed token ids from a
[vocab, width] table, then MatMul + Relu), ``gather`` its Gather alone (the worst case); the light
models have no gather of fed indices, so their two builds should be the same code (the script prints
how many data checks each build has).
No cache is used: the switch is read at compile time and is not part of the model token.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nnadapter_tvm.frontends.onnx import Predictor
from nnadapter_tvm.runtime.runtime_check import DATA_CHECKS_ENV, VALUE
from nnadapter_tvm.tools.benchmark import LIGHT_DIR, model_inputs


def embedding_model(
    vocab: int = 4096, width: int = 256, tokens: int = 512, alone: bool = False
) -> tuple[onnx.ModelProto, dict]:
    """Gather(table, ids) -> MatMul(width x width) -> Relu: the check reads every id once.  ``alone``:
    the Gather only (the worst case: nothing else to hide the check's cost)."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((vocab, width)).astype("float32"), "table")
    weight = numpy_helper.from_array((rng.standard_normal((width, width)) / 16).astype("float32"), "w")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e" if not alone else "y"], axis=0),
        helper.make_node("MatMul", ["e", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ][: 1 if alone else 3]
    graph = helper.make_graph(
        nodes,
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, width])],
        [table] if alone else [table, weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"ids": rng.integers(-vocab, vocab, (1, tokens)).astype("int64")}


def build(model: onnx.ModelProto | str, checks: bool, threads: int) -> Predictor:
    os.environ[DATA_CHECKS_ENV] = "1" if checks else "0"
    try:
        return Predictor(model, context_properties=f"TVM_NUM_THREADS={threads}")
    finally:
        os.environ.pop(DATA_CHECKS_ENV, None)


def data_checks(predictor: Predictor) -> int:
    """How many data checks the compiled subgraphs carry (their messages hold the value placeholder)."""
    count = 0
    for step in predictor.plan:
        compilation = getattr(step, "compilation", None)
        for sub in getattr(compilation, "_steps", []):
            count += sum(VALUE in c.message for c in sub.checks)
    return count


def block_ms(predictor: Predictor, feeds: dict, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        predictor.run(feeds)
    return (time.perf_counter() - start) * 1000 / n


def measure(name: str, model, feeds: dict, rounds: int, block: int, threads: int) -> dict:
    on, off = build(model, True, threads), build(model, False, threads)
    for p in (on, off):
        p.run(feeds)  # warm up
    np.testing.assert_array_equal(on.run(feeds)[0], off.run(feeds)[0])
    ratios, on_ms, off_ms = [], [], []
    for _ in range(rounds):
        a, b = block_ms(on, feeds, block), block_ms(off, feeds, block)
        on_ms.append(a)
        off_ms.append(b)
        ratios.append(a / b)
    return {
        "model": name,
        "checks": (data_checks(on), data_checks(off)),
        "on_ms": statistics.median(on_ms),
        "off_ms": statistics.median(off_ms),
        "ratio": statistics.median(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "shufflenet", "embedding", "gather"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=10, help="runs per timed block")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    print("| model | data checks (on/off build) | checks on, ms | checks off, ms | on / off (median of rounds) |")
    print("|---|---|---|---|---|")
    for name in args.models:
        if name in ("embedding", "gather"):
            model, feeds = embedding_model(alone=name == "gather")
        else:
            model = os.path.join(LIGHT_DIR, f"light_{name}.onnx")
            feeds = model_inputs(onnx.load(model))
        r = measure(name, model, feeds, args.rounds, args.block, args.threads)
        on, off = r["checks"]
        print(f"| {name} | {on} / {off} | {r['on_ms']:.3f} | {r['off_ms']:.3f} | {r['ratio']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
