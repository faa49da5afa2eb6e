"""A differential fuzzing campaign: random ONNX graphs through nnadapter_tvm's Predictor and onnxruntime.

    nice -n 19 python scripts/fuzz_onnx.py --graphs 2000 --seed 1            # ~8 graphs per compilation
    python scripts/fuzz_onnx.py --graphs 20000 --jobs 2 --minutes 60 --seed 7 # two worker processes
    python scripts/fuzz_onnx.py --graphs 200 --batch 10 --nodes 20 --out /tmp/found

Graphs are drawn by tests/fuzz_onnx/, several merged into one model per compilation (compiling dominates
on small machines).  Batches run in worker processes (``--jobs``): a graph that crashes the process (a
segfault in TVM or in a kernel) costs the worker, not the campaign; the batch is run again graph by graph
in fresh workers, and the graph that crashes alone is recorded as a crash.  Every output that differs from
the reference (or fails with anything but NNAdapterError) is minimized to the first node that differs and
written to ``--out`` (default tests/fuzz_corpus_onnx/new/), one file per distinct signature (operator +
outcome).  The last line is a summary for docs/reliability.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzz_onnx

STATUSES = (
    "ok",
    "differs",
    "ambiguous",
    "float32_range",
    "ill_conditioned",
    "amplified",
    "refused",
    "invalid",
    "error",
    "crash",
)


@dataclasses.dataclass
class GraphResult:
    """One graph's verdict: its worst outcome, its size, what a refusal said, and its minimized finding."""

    status: str
    nodes: int
    refusal: str | None = None
    finding: tuple | None = None  # (signature, detail, node lines, minimized case, outcome status)
    ambiguous_after_minimizing: bool = False


def judge(cases: list[fuzz_onnx.Case]) -> list[GraphResult]:
    """Run ``cases`` (one compilation where they merge) and minimize each failure (in a worker process)."""
    results = []
    for case, outcomes in fuzz_onnx.run_graphs(cases):
        statuses = {o.status for o in outcomes.values()}
        worst = next((s for s in ("error", "differs", "ambiguous", "refused", "invalid") if s in statuses), "ok")
        result = GraphResult(worst, len(case.model.graph.node))
        for outcome in outcomes.values():
            if outcome.status == "refused":  # what users would meet unsupported, by message
                result.refusal = re.sub(r"\d+", "N", outcome.detail)[:160]
                break
        # An error is the whole compilation's: minimize it first (once), else the first difference whose
        # minimized cause still differs and is not explained (fuzz_onnx.explain).
        explained: set[str] = set()
        for name, outcome in sorted(outcomes.items(), key=lambda item: item[1].status != "error"):
            if outcome.status not in ("differs", "error"):
                continue
            small = fuzz_onnx.minimize(case, name, outcome.status)
            small_outcome = next(iter(fuzz_onnx.run_case(small).values()))
            if outcome.status == "differs" and small_outcome.status == "ambiguous":
                continue  # the difference starts where the oracles disagree (below)
            why = fuzz_onnx.explain(small) if outcome.status == "differs" else None
            if why:
                explained.add(why)
                continue
            detail = small_outcome.detail if small_outcome.status == outcome.status else outcome.detail
            key = fuzz_onnx.signature(small, outcome.status, detail)
            result.finding = (key, detail, fuzz_onnx.describe(small.model), small, outcome.status)
            break  # one finding per graph: its other outputs mostly share the cause
        if worst == "differs" and result.finding is None:
            if explained:
                result.status = sorted(explained)[0]
            else:
                # No node differs alone: each difference starts at a node the two oracles disagree on (NaN
                # in an LSTM that onnxruntime drops), and grows downstream. Counted ambiguous.
                result.status, result.ambiguous_after_minimizing = "ambiguous", True
        results.append(result)
    return results


class Campaign:
    """The tally, the findings and the summary file of one campaign."""

    def __init__(self, out: Path):
        self.out = out
        self.tally: Counter = Counter()
        self.findings: dict[str, dict] = {}
        self.refusals: Counter = Counter()
        self.start = time.time()

    def add(self, results: list[GraphResult]) -> None:
        for r in results:
            self.tally[r.status] += 1
            self.tally["nodes"] += r.nodes
            self.tally["ambiguous_after_minimizing"] += r.ambiguous_after_minimizing
            if r.refusal:
                self.refusals[r.refusal] += 1
            if r.finding:
                key, detail, lines, small, status = r.finding
                found = self.findings.setdefault(key, {"count": 0, "detail": detail, "nodes": lines})
                found["count"] += 1
                if found["count"] == 1:
                    fuzz_onnx.save(small, self.out / f"{key}.json", detail, status=status)

    def crashed(self, case: fuzz_onnx.Case) -> None:
        """``case`` killed its worker process on its own."""
        key = "crash-" + "+".join(sorted({n.op_type for n in case.model.graph.node}))
        self.tally["crash"] += 1
        self.tally["nodes"] += len(case.model.graph.node)
        found = self.findings.setdefault(key, {"count": 0, "detail": "the process crashed", "nodes": []})
        found["count"] += 1
        if found["count"] == 1:
            found["nodes"] = fuzz_onnx.describe(case.model)
            fuzz_onnx.save(case, self.out / f"{key}.json", "the process crashed (segfault or abort)", status="error")

    @property
    def graphs(self) -> int:
        return sum(self.tally[s] for s in STATUSES)

    def progress(self, total: int) -> None:
        rate = self.graphs / max(time.time() - self.start, 1e-9)
        counts = " ".join(f"{s}={self.tally[s]}" for s in STATUSES)
        line = f"[{self.graphs}/{total}] {counts} distinct={len(self.findings)} {rate:.2f} graphs/s"
        print("\r" + line, end="", file=sys.stderr)
        self.summary()

    def summary(self) -> dict:
        """The campaign's figures so far (rewritten after every batch, so that an interrupted campaign
        still has them)."""
        summary = {
            "graphs": self.graphs,
            "nodes": self.tally["nodes"],
            **{s: self.tally[s] for s in STATUSES},
            "distinct": {k: f["count"] for k, f in sorted(self.findings.items())},
            "ambiguous_after_minimizing": self.tally["ambiguous_after_minimizing"],
            "harness_error": self.tally["harness_error"],
            "repeated_not_rerun": self.tally["repeated"],
            "seconds": round(time.time() - self.start),
            "refusals": dict(self.refusals.most_common(20)),
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        return summary


def _draw_batch(seed: int, b: int, size: int, nodes: int, vocabulary: list[str] | None) -> list[fuzz_onnx.Case]:
    draw = fuzz_onnx.RandomDraw(seed * 1_000_003 + b)
    return [fuzz_onnx.draw_graph(draw, f"g{k}_", nodes, vocabulary) for k in range(size)]


def _alone(campaign: Campaign, cases: list[fuzz_onnx.Case]) -> None:
    """A batch whose worker died: each graph again in a fresh worker of its own."""
    for case in cases:
        with ProcessPoolExecutor(max_workers=1) as pool:
            try:
                campaign.add(pool.submit(judge, [case]).result())
            except BrokenProcessPool:
                campaign.crashed(case)
            except Exception as err:
                campaign.tally["harness_error"] += 1
                print(f"\nharness error: {type(err).__name__}: {err}", file=sys.stderr)


def run_random(args: argparse.Namespace, campaign: Campaign, vocabulary: list[str] | None) -> None:
    """Batches drawn by a seeded random.Random, judged by ``--jobs`` worker processes."""
    batches = -(-args.graphs // args.batch)
    pool = ProcessPoolExecutor(max_workers=args.jobs)
    pending: dict = {}
    b = args.from_batch
    try:
        while b < batches or pending:
            out_of_time = args.minutes and time.time() - campaign.start > args.minutes * 60
            while b < batches and len(pending) < 2 * args.jobs and not out_of_time:
                cases = _draw_batch(args.seed, b, args.batch, args.nodes, vocabulary)
                pending[pool.submit(judge, cases)] = cases
                b += 1
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                cases = pending.pop(future)
                try:
                    campaign.add(future.result())
                except BrokenProcessPool:
                    # The pool is gone with every batch in it: those run again, each graph alone.
                    lost = [cases, *pending.values()]
                    pending.clear()
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = ProcessPoolExecutor(max_workers=args.jobs)
                    for batch in lost:
                        _alone(campaign, batch)
                    break
                except Exception as err:  # the harness's own fault: counted, never the end of the run
                    campaign.tally["harness_error"] += 1
                    print(f"\nharness error: {type(err).__name__}: {err}", file=sys.stderr)
            campaign.progress(args.graphs)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def run_hypothesis(args: argparse.Namespace, campaign: Campaign, vocabulary: list[str] | None) -> None:
    """Batches drawn by hypothesis (as CI does: it mutates earlier examples, so graphs repeat; each graph
    is run once), judged in this process."""
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    seen: set[str] = set()

    def batch(draw: fuzz_onnx.Draw) -> None:
        if args.minutes and time.time() - campaign.start > args.minutes * 60:
            return  # out of time: the remaining examples are skipped (raising would make hypothesis shrink)
        try:
            cases = [fuzz_onnx.draw_graph(draw, f"g{k}_", args.nodes, vocabulary) for k in range(args.batch)]
            fresh = {_key(c): c for c in cases if _key(c) not in seen}
            campaign.tally["repeated"] += len(cases) - len(fresh)
            seen.update(fresh)
            if fresh:
                campaign.add(judge(list(fresh.values())))
        except Exception as err:  # the harness's own fault: counted, never the end of the run
            campaign.tally["harness_error"] += 1
            print(f"\nharness error: {type(err).__name__}: {err}", file=sys.stderr)
        campaign.progress(args.graphs)

    batches = -(-args.graphs // args.batch)
    settings(max_examples=batches, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
        seed(args.seed)(given(st.data())(lambda data: batch(fuzz_onnx.Draw(data))))
    )()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=200, help="graphs to run")
    parser.add_argument("--batch", type=int, default=8, help="graphs per compilation")
    parser.add_argument("--nodes", type=int, default=16, help="most nodes per graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (random engine)")
    parser.add_argument(
        "--from-batch", type=int, default=0, help="start at this batch of the seed's sequence (to replay one)"
    )
    parser.add_argument("--out", type=Path, default=fuzz_onnx.CORPUS / "new", help="where minimized cases go")
    parser.add_argument("--ops", default="", help="comma-separated operators to draw from (default: all)")
    parser.add_argument(
        "--engine",
        choices=("random", "hypothesis"),
        default="random",
        help="who answers the generator's choices: a seeded random.Random (default: every graph new, run in "
        "worker processes that survive crashes) or hypothesis (as CI does; in this process)",
    )
    parser.add_argument("--minutes", type=float, default=0, help="stop drawing batches after this long (0: no limit)")
    args = parser.parse_args(argv)
    vocabulary = [o for o in args.ops.split(",") if o] or None
    campaign = Campaign(args.out)
    if args.engine == "hypothesis":
        run_hypothesis(args, campaign, vocabulary)
    else:
        run_random(args, campaign, vocabulary)
    print(file=sys.stderr)
    for key, found in sorted(campaign.findings.items()):
        print(f"{found['count']:5d}  {key}: {found['detail'][:200]}")
    print(json.dumps(campaign.summary()))
    return 0


def _key(case: fuzz_onnx.Case) -> str:
    digest = hashlib.sha256(case.model.SerializeToString(deterministic=True))
    for name in sorted(case.feeds):
        digest.update(name.encode() + case.feeds[name].tobytes())
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
