#!/usr/bin/env python3
"""A cached load plus the first inference, in a fresh process: what a deployed application pays at start.

    python scripts/bench_cached_load.py prepare WORKDIR [MODEL ...]   # rewrite, compile, cache (once)
    python scripts/bench_cached_load.py measure WORKDIR [MODEL ...] [--runs 5] [--steps]

MODEL is a light model's name (``resnet50``, ``squeezenet``, ``vgg19``, ...: onnx's backend test data,
rewritten as ``nnadapter-tvm bench`` rewrites them: constant initializers not graph inputs, seeded
random weights) or an ONNX file. ``prepare`` compiles each into ``WORKDIR/cache`` through the ONNX
``Predictor`` (``TVM_NUM_THREADS=2``) and stores its inputs and onnxruntime's outputs beside it.

``--properties KEY=VALUE;...`` adds context properties to both (``CPU_WINOGRAD=0;``: the direct 3x3
kernels, a model of a quarter the size); a model prepared with other properties is not found in the cache.

``measure`` starts ``--runs`` fresh processes per model. Each imports numpy and nnadapter_tvm, makes the
``Predictor`` (which finds the compiled model through its ``.nnp`` index and loads the ``.nnc``), runs it
once on the stored inputs and checks the outputs against onnxruntime's. It never imports onnx: the
inputs come from an ``.npz``. Printed per model, medians over the runs: the process's wall time from
``exec`` to exit (interpreter start included), the time from the first line of the script to the end
of the first run (what ``nnadapter-tvm bench`` reports), the process's CPU time (user + system: this
machine is shared, wall times drift), and with ``--steps`` the split into imports, Predictor and first
run. Beside each run, onnxruntime in a fresh process of its own (its defaults, 2 threads): a session on the
same file and one run of the same inputs; both processes' peak resident memory (``ru_maxrss``: the mapped
cache's pages that were read count, as do onnxruntime's copies of the weights) and onnxruntime's script
time are printed with ours. Any module among ``tvm``, ``onnx`` and the converters found imported is
printed. ``--by-hash`` deletes the cache's ``.nnf`` identity entries before each run: the load of a model
file changed in the last minute (or loaded for the first time), which finds its entry by hashing the
file's bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import time
start = time.perf_counter()
import json, resource, sys
import numpy as np
import nnadapter_tvm as nna
imported = time.perf_counter()
path, cache_dir, inputs, want, properties = sys.argv[1:6]
p = nna.Predictor(path, context_properties=properties, cache_dir=cache_dir)
loaded = time.perf_counter()
got = p.run(dict(np.load(inputs)))
done = time.perf_counter()
got = list(got.values()) if isinstance(got, dict) else list(got)
reference = np.load(want)
error = max(float(np.max(np.abs(g - reference[f"arr_{i}"]))) for i, g in enumerate(got))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "from_cache": bool(p.loaded_from_cache), "import_s": imported - start, "predictor_s": loaded - imported,
    "first_run_s": done - loaded, "script_s": done - start, "cpu_s": usage.ru_utime + usage.ru_stime,
    "max_error": error, "peak_mb": usage.ru_maxrss / 1024,
    "imported": [m for m in ("tvm", "tvm.relax", "onnx", "nnadapter_tvm.op_converters") if m in sys.modules],
}))
"""

# The peer: onnxruntime at its defaults (2 intra-op threads, as ours), the same file and inputs, one run.
PEER_CHILD = r"""
import time
start = time.perf_counter()
import json, resource, sys
import numpy as np
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 2
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
session.run(None, dict(np.load(sys.argv[2])))
done = time.perf_counter()
print(json.dumps({"script_s": done - start, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _files(workdir: str, model: str) -> tuple[str, str, str, str]:
    name = os.path.splitext(os.path.basename(model))[0].removeprefix("light_")
    base = os.path.join(workdir, name)
    return name, base + ".onnx", base + "_in.npz", base + "_out.npz"


def _properties(extra: str) -> str:
    """The Predictor's context properties: 2 runtime threads, then ``extra`` (``KEY=VALUE;...``)."""
    return "TVM_NUM_THREADS=2;" + extra


def prepare(workdir: str, models: list[str], extra: str = "") -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort

    import nnadapter_tvm as nna
    from nnadapter_tvm.tools.benchmark import LIGHT_DIR, model_inputs, optimizable

    os.makedirs(workdir, exist_ok=True)
    for model in models:
        name, path, inputs, outputs = _files(workdir, model)
        source = model if os.path.exists(model) else os.path.join(LIGHT_DIR, f"light_{model}.onnx")
        rewritten, _ = optimizable(onnx.load(source))
        onnx.save(rewritten, path)
        feeds = model_inputs(rewritten)
        np.savez(inputs, **feeds)
        np.savez(outputs, *ort.InferenceSession(path).run(None, feeds))
        start = time.perf_counter()
        nna.Predictor(path, context_properties=_properties(extra), cache_dir=os.path.join(workdir, "cache"))
        print(f"{name}: compiled and cached in {time.perf_counter() - start:.1f} s", flush=True)


def measure(
    workdir: str, models: list[str], runs: int, steps: bool, by_hash: bool = False, extra: str = ""
) -> list[dict]:
    rows = []
    cache_dir = os.path.join(workdir, "cache")
    for model in models:
        name, path, inputs, outputs = _files(workdir, model)
        samples = []
        for _ in range(runs):
            if by_hash:
                for entry in os.listdir(cache_dir):
                    if entry.endswith(".nnf"):
                        os.remove(os.path.join(cache_dir, entry))
            start = time.perf_counter()
            child = [path, os.path.join(workdir, "cache"), inputs, outputs, _properties(extra)]
            out = subprocess.run(
                [sys.executable, "-c", CHILD, *child],
                capture_output=True,
                text=True,
                check=True,
            )
            sample = json.loads(out.stdout.strip().splitlines()[-1])
            sample["process_s"] = time.perf_counter() - start
            if not sample["from_cache"]:
                raise SystemExit(f"{name}: not loaded from the cache (run prepare first, with this version)")
            peer = subprocess.run(
                [sys.executable, "-c", PEER_CHILD, path, inputs], capture_output=True, text=True, check=True
            )
            peer_sample = json.loads(peer.stdout.strip().splitlines()[-1])
            sample["peer_script_s"], sample["peer_peak_mb"] = peer_sample["script_s"], peer_sample["peak_mb"]
            samples.append(sample)
        row = {"model": name, "runs": runs}
        keys = ("process_s", "script_s", "cpu_s", "import_s", "predictor_s", "first_run_s", "max_error", "peak_mb")
        for key in (*keys, "peer_script_s", "peer_peak_mb"):
            row[key] = statistics.median(s[key] for s in samples)
        row["min_script_s"] = min(s["script_s"] for s in samples)
        row["imported"] = sorted({m for s in samples for m in s["imported"]})
        rows.append(row)
        line = (
            f"{name:12s} process {row['process_s']:.3f} s  script {row['script_s']:.3f} s "
            f"(min {row['min_script_s']:.3f})  cpu {row['cpu_s']:.3f} s  max error {row['max_error']:.1e}"
            f"  peak {row['peak_mb']:.0f} MB; onnxruntime: script {row['peer_script_s']:.3f} s, "
            f"peak {row['peer_peak_mb']:.0f} MB (ours {row['peak_mb'] / row['peer_peak_mb']:.2f}x)"
        )
        if steps:
            line += (
                f"  [imports {row['import_s']:.3f}, Predictor {row['predictor_s']:.3f}, "
                f"first run {row['first_run_s']:.3f}]"
            )
        if row["imported"]:
            line += f"  imported: {', '.join(row['imported'])}"
        print(line, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["prepare", "measure"])
    parser.add_argument("workdir")
    parser.add_argument("models", nargs="*", default=["squeezenet", "resnet50", "vgg19"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", action="store_true", help="split the time into imports, Predictor, first run")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--by-hash", action="store_true", help="delete the .nnf identity entries before each run")
    parser.add_argument(
        "--properties",
        default="",
        help="more context properties, KEY=VALUE;... (e.g. CPU_WINOGRAD=0;), the same for prepare and measure",
    )
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.workdir, args.models, args.properties)
        return 0
    rows = measure(args.workdir, args.models, args.runs, args.steps, args.by_hash, args.properties)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
