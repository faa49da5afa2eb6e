"""A differential fuzzing campaign: random ONNX graphs through nnadapter_tvm's Predictor and onnxruntime.

    nice -n 19 python scripts/fuzz_onnx.py --graphs 2000 --seed 1            # ~8 graphs per compilation
    python scripts/fuzz_onnx.py --graphs 200 --batch 10 --nodes 20 --out /tmp/found

Graphs are drawn by tests/fuzz_onnx.py (hypothesis), several merged into one model per compilation
(compiling dominates on small machines).  Every output that differs from the reference (or fails with
anything but NNAdapterError) is minimized to the first node that differs and written to ``--out``
(default tests/fuzz_corpus_onnx/new/), one file per distinct signature (operator + outcome).  The last
line is a summary for docs/reliability.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzz_onnx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=200, help="graphs to run")
    parser.add_argument("--batch", type=int, default=8, help="graphs per compilation")
    parser.add_argument("--nodes", type=int, default=16, help="most nodes per graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=fuzz_onnx.CORPUS / "new", help="where minimized cases go")
    parser.add_argument("--ops", default="", help="comma-separated operators to draw from (default: all)")
    parser.add_argument(
        "--engine",
        choices=("random", "hypothesis"),
        default="random",
        help="who answers the generator's choices: a seeded random.Random (default: every graph new) or "
        "hypothesis (as CI does; it mutates earlier examples, so graphs repeat)",
    )
    parser.add_argument("--minutes", type=float, default=0, help="stop drawing batches after this long (0: no limit)")
    args = parser.parse_args(argv)

    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    vocabulary = [o for o in args.ops.split(",") if o] or None
    tally: Counter = Counter()
    seen: set[str] = set()
    findings: dict[str, dict] = {}
    refusals: Counter = Counter()
    start = time.time()
    batches = -(-args.graphs // args.batch)

    def batch(draw: fuzz_onnx.Draw) -> None:
        if args.minutes and time.time() - start > args.minutes * 60:
            return  # out of time: the remaining examples are skipped (raising would make hypothesis shrink)
        try:
            cases = [fuzz_onnx.draw_graph(draw, f"g{k}_", args.nodes, vocabulary) for k in range(args.batch)]
            # hypothesis mutates earlier examples, so a batch may repeat graphs already run: run and
            # count each graph (model and feeds) once.
            fresh = {_key(c): c for c in cases if _key(c) not in seen}
            tally["repeated"] += len(cases) - len(fresh)
            seen.update(fresh)
            if not fresh:
                return
            results = fuzz_onnx.run_graphs(list(fresh.values()))
        except Exception as err:  # the harness's own fault: counted, never the end of the run
            tally["harness_error"] += 1
            print(f"\nharness error: {type(err).__name__}: {err}", file=sys.stderr)
            return
        for case, outcomes in results:
            statuses = {o.status for o in outcomes.values()}
            worst = next((s for s in ("error", "differs", "ambiguous", "refused", "invalid") if s in statuses), "ok")
            tally[worst] += 1
            tally["nodes"] += len(case.model.graph.node)
            for outcome in outcomes.values():
                if outcome.status == "refused":  # what users would meet unsupported, by message
                    refusals[re.sub(r"\d+", "N", outcome.detail)[:160]] += 1
                    break
            # An error is the whole compilation's: minimize it first (once), else the first difference
            # whose minimized cause still differs.
            found_cause = False
            for name, outcome in sorted(outcomes.items(), key=lambda item: item[1].status != "error"):
                if outcome.status not in ("differs", "error"):
                    continue
                small = fuzz_onnx.minimize(case, name, outcome.status)
                small_outcome = next(iter(fuzz_onnx.run_case(small).values()))
                if outcome.status == "differs" and small_outcome.status == "ambiguous":
                    continue  # the difference starts where the oracles disagree (below)
                detail = small_outcome.detail if small_outcome.status == outcome.status else outcome.detail
                key = fuzz_onnx.signature(small, outcome.status, detail)
                found = findings.setdefault(
                    key, {"count": 0, "detail": detail, "nodes": fuzz_onnx.describe(small.model)}
                )
                found["count"] += 1
                if found["count"] == 1:
                    fuzz_onnx.save(small, args.out / f"{key}.json", detail, status=outcome.status)
                found_cause = True
                break  # one finding per graph: its other outputs mostly share the cause
            if worst == "differs" and not found_cause:
                # No node differs alone: each difference starts at a node the two oracles disagree on (NaN
                # in an LSTM that onnxruntime drops), and grows downstream. Counted ambiguous.
                tally["differs"] -= 1
                tally["ambiguous"] += 1
                tally["ambiguous_after_minimizing"] += 1
        done = sum(tally[s] for s in ("ok", "differs", "ambiguous", "refused", "invalid", "error"))
        rate = done / max(time.time() - start, 1e-9)
        counts = " ".join(f"{s}={tally[s]}" for s in ("ok", "differs", "error", "ambiguous", "refused", "invalid"))
        print(
            f"\r[{done}/{args.graphs}] {counts} distinct={len(findings)} {rate:.2f} graphs/s", end="", file=sys.stderr
        )
        _write_summary(args.out / "summary.json", tally, findings, start, refusals)

    if args.engine == "hypothesis":
        settings(max_examples=batches, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
            seed(args.seed)(given(st.data())(lambda data: batch(fuzz_onnx.Draw(data))))
        )()
    else:
        for b in range(batches):
            if args.minutes and time.time() - start > args.minutes * 60:
                break
            batch(fuzz_onnx.RandomDraw(args.seed * 1_000_003 + b))
    print(file=sys.stderr)
    for key, found in sorted(findings.items()):
        print(f"{found['count']:5d}  {key}: {found['detail'][:200]}")
    print(json.dumps(_write_summary(args.out / "summary.json", tally, findings, start, refusals)))
    return 0


def _key(case: fuzz_onnx.Case) -> str:
    digest = hashlib.sha256(case.model.SerializeToString(deterministic=True))
    for name in sorted(case.feeds):
        digest.update(name.encode() + case.feeds[name].tobytes())
    return digest.hexdigest()


def _write_summary(path: Path, tally: Counter, findings: dict, start: float, refusals: Counter) -> dict:
    """The campaign's figures so far (rewritten after every batch, so that an interrupted campaign
    still has them)."""
    summary = {
        "graphs": sum(tally[s] for s in ("ok", "differs", "ambiguous", "refused", "invalid", "error")),
        "nodes": tally["nodes"],
        **{s: tally[s] for s in ("ok", "differs", "error", "ambiguous", "refused", "invalid")},
        "distinct": {k: f["count"] for k, f in sorted(findings.items())},
        "ambiguous_after_minimizing": tally["ambiguous_after_minimizing"],
        "harness_error": tally["harness_error"],
        "repeated_not_rerun": tally["repeated"],
        "seconds": round(time.time() - start),
        "refusals": dict(refusals.most_common(20)),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(main())
