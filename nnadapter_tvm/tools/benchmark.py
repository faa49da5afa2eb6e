"""Side-by-side latency of ONNX models: nnadapter-tvm untuned (and tuned, given a database), TVM's own
ONNX frontend built the default way, and onnxruntime, all with the same thread count, in one process.

    nnadapter-tvm bench [MODEL.onnx ...]   (or python scripts/benchmark.py ...)
                       [--threads 2] [--repeat 20] [--tuning-db [MODEL=]DIR ...]
                                [--json out.json] [--png out.png]

Without models it runs the nine light models of onnx's backend test data. Prints median ms per
runner, the ratio to onnxruntime, the geometric mean of the ratios, compile time and the cached-load
time of a fresh process (load + first inference).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import onnx

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]


def light_models() -> list[str]:
    return [os.path.join(LIGHT_DIR, f"light_{name}.onnx") for name in LIGHT_MODELS]


def model_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for x in model.graph.input:
        if x.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(x.type.tensor_type.elem_type)
        feeds[x.name] = rng.random(shape).astype(dtype)
    return feeds


def median_ms(run: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench_onnxruntime(path: str, feeds: dict, threads: int, repeat: int) -> dict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Runners share one process: idle worker threads must not spin on the cores the next one times.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    prepare = time.perf_counter() - start
    return {"ms": median_ms(lambda: session.run(None, feeds), repeat), "compile_s": prepare}


def bench_nnadapter(path: str, feeds: dict, threads: int, repeat: int, cache_dir: str, props: str = "") -> dict:
    import nnadapter_tvm as nna

    properties = f"TVM_NUM_THREADS={threads};{props}"
    start = time.perf_counter()
    predictor = nna.Predictor(path, context_properties=properties, cache_dir=cache_dir)
    compile_s = time.perf_counter() - start
    ms = median_ms(lambda: predictor.run(feeds), repeat)
    load_s = cached_load_seconds(path, properties, cache_dir, feeds)
    return {"ms": ms, "compile_s": compile_s, "cached_load_first_run_s": load_s}


def cached_load_seconds(path: str, properties: str, cache_dir: str, feeds: dict) -> float:
    """A fresh process: import, load from the cache and run once (the number a deployed app sees)."""
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(os.path.join(tmp, "feeds.npz"), **feeds)
        code = (
            "import sys, time\n"
            "start = time.perf_counter()\n"
            "import numpy as np, nnadapter_tvm as nna\n"
            "feeds = dict(np.load(sys.argv[4]))\n"
            "p = nna.Predictor(sys.argv[1], context_properties=sys.argv[2], cache_dir=sys.argv[3])\n"
            "assert p.loaded_from_cache\n"
            "p.run(feeds)\n"
            "print(time.perf_counter() - start)\n"
        )
        args = [sys.executable, "-c", code, path, properties, cache_dir, os.path.join(tmp, "feeds.npz")]
        out = subprocess.run(args, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def bench_tvm_frontend(path: str, feeds: dict, threads: int, repeat: int) -> dict:
    """TVM's own Relax ONNX frontend, built the default way (tvm.compile, no tuning)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    tvm.get_global_func("runtime.config_threadpool")(1, threads)
    start = time.perf_counter()
    mod = from_onnx(onnx.load(path), keep_params_in_input=False)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    executable = tvm.compile(mod, tvm.target.Target("llvm"))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    compile_s = time.perf_counter() - start
    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    return {"ms": median_ms(lambda: vm["main"](*args), repeat), "compile_s": compile_s}


def model_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0].removeprefix("light_")


def tuning_dbs(specs: list[str]) -> dict[str | None, str]:
    """``--tuning-db`` values: ``DIR`` for every model, or ``MODEL=DIR`` for one (by its short name)."""
    found: dict[str | None, str] = {}
    for spec in specs:
        name, sep, directory = spec.rpartition("=")
        found[name if sep else None] = directory
    return found


def run(models: list[str], threads: int, repeat: int, tuning_db: dict[str | None, str], skip_tvm: bool) -> list[dict]:
    cache_dir = tempfile.mkdtemp(prefix="nnadapter-bench-")
    return [
        bench_model(path, threads, repeat, cache_dir, tuning_db.get(model_name(path), tuning_db.get(None)), skip_tvm)
        for path in models
    ]


def bench_model(path: str, threads: int, repeat: int, cache_dir: str, tuning_db: str | None, skip_tvm: bool) -> dict:
    name = model_name(path)
    feeds = model_inputs(onnx.load(path))
    runners: dict[str, Callable[[], dict]] = {
        "onnxruntime": lambda: bench_onnxruntime(path, feeds, threads, repeat),
        "nnadapter-tvm": lambda: bench_nnadapter(path, feeds, threads, repeat, cache_dir),
    }
    if tuning_db:
        tuned = f"TUNING_DATABASE={tuning_db};"
        runners["nnadapter-tvm tuned"] = lambda: bench_nnadapter(path, feeds, threads, repeat, cache_dir, tuned)
    if not skip_tvm:
        runners["tvm-onnx-frontend"] = lambda: bench_tvm_frontend(path, feeds, threads, repeat)
    row: dict = {"model": name}
    for runner, fn in runners.items():
        try:
            row[runner] = fn()
        except Exception as err:  # a failing runner is a row entry, not the end of the benchmark
            row[runner] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        print(f"  {name:<14} {runner:<20} {_cell(row[runner])}", file=sys.stderr, flush=True)
    return row


def _cell(result: dict) -> str:
    return f"{result['ms']:9.2f} ms" if "ms" in result else f"error ({result['error']})"


def ratios(rows: list[dict], runner: str) -> list[float]:
    return [
        r[runner]["ms"] / r["onnxruntime"]["ms"]
        for r in rows
        if "ms" in r.get(runner, {}) and "ms" in r.get("onnxruntime", {})
    ]


def runner_names(rows: list[dict]) -> list[str]:
    """Every runner of any row, in first-seen order (a tuned row exists only for models given a database)."""
    return list(dict.fromkeys(k for row in rows for k in row if k != "model"))


def report(rows: list[dict], threads: int) -> str:
    runners = runner_names(rows)
    lines = [f"threads: {threads}; median ms (ratio to onnxruntime)"]
    lines.append(f"{'model':<14}" + "".join(f"{r:>28}" for r in runners))
    for row in rows:
        cells = []
        for runner in runners:
            res = row.get(runner, {"error": "not run"})
            if "ms" not in res:
                cells.append(f"{'-' if runner not in row else 'error':>28}")
                continue
            ratio = res["ms"] / row["onnxruntime"]["ms"] if "ms" in row["onnxruntime"] else float("nan")
            cells.append(f"{res['ms']:>17.2f} ({ratio:6.2f}x)")
        lines.append(f"{row['model']:<14}" + "".join(cells))
    for runner in runners[1:]:
        rs = ratios(rows, runner)
        if rs:
            geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
            lines.append(f"geometric mean ratio, {runner}: {geo:.2f}x over {len(rs)} models (worst {max(rs):.2f}x)")
    for row in rows:
        nn = row.get("nnadapter-tvm", {})
        if "compile_s" in nn:
            lines.append(
                f"{row['model']:<14} nnadapter-tvm compile {nn['compile_s']:.1f} s, "
                f"cached load + first run in a fresh process {nn['cached_load_first_run_s']:.2f} s"
            )
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runners = [k for k in runner_names(rows) if k != "onnxruntime"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(len(runners), 1)
    for k, runner in enumerate(runners):
        values = [
            r[runner]["ms"] / r["onnxruntime"]["ms"] if "ms" in r.get(runner, {}) and "ms" in r["onnxruntime"] else 0
            for r in rows
        ]
        ax.bar([i + k * width for i in range(len(rows))], values, width, label=runner)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("latency / onnxruntime (log)")
    ax.set_xticks([i + width * (len(runners) - 1) / 2 for i in range(len(rows))], [r["model"] for r in rows])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nnadapter-tvm bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="*", help="ONNX files (default: the nine light models)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--tuning-db",
        metavar="[MODEL=]DIR",
        action="append",
        default=[],
        help="a tuning directory (nnadapter-tvm tune) for a tuned row: for every model, or MODEL=DIR for the "
        "model of that short name (squeezenet=DIR); repeatable",
    )
    parser.add_argument("--skip-tvm-frontend", action="store_true", help="leave out TVM's own ONNX frontend")
    parser.add_argument("--json", default="benchmark.json", help="table as JSON (%(default)s)")
    parser.add_argument("--png", default="benchmark.png", help="ratio plot (%(default)s)")
    args = parser.parse_args(argv)
    # The same for TVM's thread pool (read when the pool starts): no runner spins while another is timed.
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
    dbs = tuning_dbs(args.tuning_db)
    rows = run(args.models or light_models(), args.threads, args.repeat, dbs, args.skip_tvm_frontend)
    text = report(rows, args.threads)
    print(text)
    with open(args.json, "w") as f:
        json.dump({"threads": args.threads, "repeat": args.repeat, "rows": rows}, f, indent=2)
    plot(rows, args.png)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
