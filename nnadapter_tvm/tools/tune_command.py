"""``nnadapter-tvm tune MODEL`` / ``scripts/tune.py``: MetaSchedule a model's kernels into a database
that compilations apply when their context says ``TUNING_DATABASE=DIR``."""

from __future__ import annotations

import argparse
import sys

from nnadapter_tvm.context import parse_properties
from nnadapter_tvm.errors import fail
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime.convert import convert_model
from nnadapter_tvm.targets import DRIVERS
from nnadapter_tvm.tools import builtin_model, tuning
from nnadapter_tvm.types import NNAdapterError, ResultCode


def nnadapter_models(spec: str) -> list[Model]:
    """'builtin' or an ONNX file -> its NNAdapter subgraph models."""
    if spec in ("", "builtin"):
        return [builtin_model.build(batch=1)]  # MetaSchedule tunes static loops only
    if not spec.lower().endswith(".onnx"):
        fail(f"MODEL must be 'builtin' or an .onnx file, got {spec!r}")
    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
    from nnadapter_tvm.frontends.onnx.loader import load_model
    from nnadapter_tvm.frontends.onnx.plan import make_plan

    return [s.build_model() for s in make_plan(ImportedGraph(load_model(spec))).segments]


def _rpc_config(spec: str):  # -> ms.runner.RPCConfig
    from tvm.s_tir import meta_schedule as ms

    host, _, rest = spec.partition(":")
    port, _, key = rest.partition(":")
    if not host or not port.isdigit() or not key:
        fail(f"--rpc {spec!r}: expected TRACKER_HOST:PORT:KEY")
    return ms.runner.RPCConfig(tracker_host=host, tracker_port=int(port), tracker_key=key, session_timeout_sec=60)


def selection_table(rows: list[dict]) -> str:
    lines = [f"{'kernel':48} {'uses':>4} {'default us':>11} {'tuned us':>11}  applied"]
    for r in sorted(rows, key=lambda r: -r["default_us"] * r["uses"]):
        lines.append(
            f"{r['kernel'][:48]:48} {r['uses']:>4} {r['default_us']:>11.1f} {r['tuned_us']:>11.1f}  "
            + ("yes" if r["kept"] else "no")
        )
    kept = sum(r["kept"] for r in rows)
    lines.append(f"{kept} of {len(rows)} tuned kernels beat their default schedule and are applied")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nnadapter-tvm tune", description=__doc__)
    parser.add_argument(
        "model", help="MODEL.onnx (static shapes: MetaSchedule does not tune dynamic loops) or 'builtin'"
    )
    parser.add_argument("--device", default="llvm", choices=["llvm", "arm"])
    parser.add_argument("--trials", type=int, default=200, help="measured candidates in all (%(default)s)")
    parser.add_argument("--work-dir", required=True, help="the database directory (resumed if it exists)")
    parser.add_argument("--properties", default="", help="context properties of the target (e.g. LLVM_MCPU=...;)")
    parser.add_argument("--rpc", metavar="HOST:PORT:KEY", help="measure on a board through a TVM RPC tracker")
    parser.add_argument(
        "--num-cores", type=int, help="cores the kernels may run on (default: this machine's; give the board's)"
    )
    args = parser.parse_args(argv)
    try:
        from tqdm import tqdm

        driver = DRIVERS[args.device]
        # Tuning for a board this host cannot run: measured over RPC, candidates linked by its cross compiler.
        for_board = args.device == "arm" and not driver.can_run_here()[0]
        if for_board and not args.rpc:
            fail(
                "tuning for arm measures on the board: give --rpc TRACKER_HOST:PORT:KEY (docs/performance.md)",
                ResultCode.INVALID_PARAMETER,
            )
        rpc = _rpc_config(args.rpc) if args.rpc else None
        props = parse_properties(args.properties)
        target = tuning.with_core_count(driver.tvm_target(props), args.num_cores)
        models = nnadapter_models(args.model)
        fused = [driver.lower_for_tuning(convert_model(m)[0], props) for m in models]
        cxx = driver.cross_compiler(props) if for_board else None
        bar = tqdm(total=args.trials, unit="trial", desc=f"tuning {args.model}")

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        summary = tuning.tune(
            fused, target, args.work_dir, args.trials, progress=progress, rpc_config=rpc, cross_compiler=cxx
        )
        bar.close()
        for line in summary["failed_kernels"]:
            print(f"skipped (MetaSchedule cannot search it): {line}")
        print(f"measuring the best records against the default schedules ({summary['kernels']} kernels) ...")
        rows = tuning.select(fused, target, args.work_dir, lambda f: driver.default_schedule(f, props), rpc, cxx)
    except NNAdapterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(selection_table(rows))
    state = "resumed" if summary["resumed"] else "new"
    print(
        f"database: {summary['work_dir']} ({state}; {summary['records_before']} -> {summary['records_after']} records)"
    )
    print(
        f"tuning: {summary['seconds']:.1f} s; use it with the context property TUNING_DATABASE={summary['work_dir']};"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
