#!/usr/bin/env python3
"""Soak: many executions of one compiled model in one process; resident memory must stay flat and
every result identical.

    python scripts/soak.py [--iterations 10000] [--model add|builtin] [--tolerance-mib 4]

Each iteration makes a new Execution (set_input, set_output through the access callbacks,
compute) on the same Compilation and the same input, so whatever a call leaks accumulates.
Resident memory (RSS) is measured after a warm-up (allocator pools, TVM's workspace, the VM of
the thread filled) and again at the end, after a garbage collection both times. Exit status 0
when the growth is within the tolerance and every result is bit-identical to the first, 1 if not.
``--json`` prints the figures as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np

import nnadapter_tvm as nna
from nnadapter_tvm.tools import builtin_model

MIB = 1 << 20


def rss_bytes() -> int:
    """Resident set size of this process now (not the peak)."""
    try:
        import psutil
    except ImportError:
        with open("/proc/self/statm") as f:  # Linux without psutil: pages
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return psutil.Process().memory_info().rss


MODELS = {
    "add": lambda: (builtin_model.build_tiny(), np.linspace(-3, 3, 24, dtype="float32").reshape(8, 3)),
    "builtin": lambda: (builtin_model.build(), builtin_model.sample_input(2)),
}


def execute(compilation: nna.Compilation, x: np.ndarray) -> np.ndarray:
    with nna.Execution(compilation) as execution:
        outputs = execution.use_arrays([x])
        execution.compute()
    return outputs[0]


def soak(model: str, iterations: int, warmup: int, samples: int = 10) -> dict:
    built, x = MODELS[model]()
    compilation = nna.Compilation(built, nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    first = execute(compilation, x)
    reference = first.tobytes()
    for _ in range(warmup):
        execute(compilation, x)
    gc.collect()
    before = rss_bytes()
    trace, mismatches, first_mismatch = [], 0, None
    every = max(1, iterations // samples)
    start = time.perf_counter()
    for i in range(iterations):
        if execute(compilation, x).tobytes() != reference:
            mismatches += 1
            first_mismatch = i if first_mismatch is None else first_mismatch
        if (i + 1) % every == 0:
            trace.append(rss_bytes())
    seconds = time.perf_counter() - start
    gc.collect()
    after = rss_bytes()
    return {
        "model": model,
        "iterations": iterations,
        "warmup": warmup,
        "seconds": round(seconds, 3),
        "executions_per_second": round(iterations / seconds, 1) if seconds else None,
        "rss_before_mib": round(before / MIB, 2),
        "rss_after_mib": round(after / MIB, 2),
        "rss_growth_mib": round((after - before) / MIB, 3),
        "rss_max_during_mib": round(max(trace, default=after) / MIB, 2),
        "rss_trace_mib": [round(r / MIB, 2) for r in trace],
        "identical": mismatches == 0,
        "mismatches": mismatches,
        "first_mismatch": first_mismatch,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--model", choices=sorted(MODELS), default="add")
    parser.add_argument("--warmup", type=int, default=500, help="executions before the first measure (default 500)")
    parser.add_argument(
        "--tolerance-mib",
        type=float,
        default=4.0,
        help="largest RSS growth accepted, in MiB (default 4: over 10,000 executions, a leak of 420 bytes each)",
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON on the last line")
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.warmup < 0:
        parser.error("--iterations must be >= 1 and --warmup >= 0")

    figures = soak(args.model, args.iterations, args.warmup)
    figures["tolerance_mib"] = args.tolerance_mib
    figures["rss_ok"] = figures["rss_growth_mib"] <= args.tolerance_mib
    figures["ok"] = figures["rss_ok"] and figures["identical"]
    print(f"model            {figures['model']}")
    print(f"executions       {figures['iterations']} (after {figures['warmup']} warm-up), {figures['seconds']} s")
    print(f"RSS before       {figures['rss_before_mib']} MiB")
    print(f"RSS after        {figures['rss_after_mib']} MiB")
    print(f"RSS growth       {figures['rss_growth_mib']} MiB (tolerance {args.tolerance_mib} MiB)")
    print(f"RSS trace        {figures['rss_trace_mib']}")
    print(f"results          {'all identical' if figures['identical'] else str(figures['mismatches']) + ' differ'}")
    print("SOAK " + ("PASSED" if figures["ok"] else "FAILED"))
    if args.json:
        print(json.dumps(figures))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
