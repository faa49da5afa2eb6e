"""Side-by-side latency of ONNX models, measured so that every runner runs at its own speed.

    nnadapter-tvm bench [MODEL.onnx ...]   (or python scripts/benchmark.py ...)
                        [--threads 2] [--block 8] [--rounds 4] [--tuning-db [MODEL=]DIR ...]
                        [--tvm-frontend] [--as-shipped] [--shape [INPUT=]DIMS ...]
                        [--properties "KEY=VALUE;..."] [--json out.json] [--png out.png]

Without models it runs the nine light models of onnx's backend test data.  A model whose input dims are
unknown (a detector's height and width) stays compiled that way by every runner; ``--shape`` gives the
size fed (unknown dims are 1 otherwise).

How it stays honest (docs/performance.md, section 3):

- **The same network, in a form every runner can optimize.** The file is rewritten once for all runners:
  initializers are no longer listed as graph inputs (an input a caller may override is one onnxruntime
  must not fold), and weights built at run time by ConstantOfShape from an initializer (onnx's light
  models) become seeded random initializers of the same shape. ``--as-shipped`` measures the file as it
  is instead.
- **Each runner at its defaults, in its own process.** onnxruntime gets its default session options
  (spinning on) with ``intra_op_num_threads`` set to the thread count; nnadapter-tvm gets
  ``TVM_NUM_THREADS``. Each runner lives in a worker process that waits, idle, while another is timed.
- **Blocks that alternate.** Runner A runs ``--block`` times, then runner B, and so on, for ``--rounds``
  rounds after one untimed warm-up block each; a round's ratio is the median of our block over the
  median of onnxruntime's, and a row shows the median of the per-round ratios and their min-max.
- **The peer checked against itself.** After the rounds, onnxruntime runs alone in a fresh process, the
  same number of times; its median is printed beside its median inside the benchmark, and a
  difference above 5 % marks the row (its ratio then does not count).

- **The same answer.** Before timing, each runner's outputs are compared with onnxruntime's; a runner more
  than 1e-3 off (relative to the output's magnitude) is marked and its ratio does not count.

Also printed: nnadapter-tvm's compile time and a fresh process's cached load plus first inference.
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
from onnx import numpy_helper

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
PEER = "onnxruntime"
# onnxruntime's median inside the benchmark and alone in a fresh process must agree within this.
PEER_AGREEMENT = 0.05
# Outputs must agree with onnxruntime's within this (relative to each output's magnitude) for a ratio to count.
MAX_ERROR = 1e-3
# Between blocks: idle runtimes' threads stop spinning (onnxruntime's and TVM's pools spin a while after a
# call) before the next runner is timed.
SETTLE_S = 0.1


def light_models() -> list[str]:
    return [os.path.join(LIGHT_DIR, f"light_{name}.onnx") for name in LIGHT_MODELS]


def model_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0].removeprefix("light_")


def parse_shapes(specs: list[str]) -> dict[str | None, list[int]]:
    """``--shape`` values: ``[INPUT=]DIMS`` (``1x3x320x320``); without a name, for every input."""
    shapes: dict[str | None, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shapes[name if sep else None] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            raise SystemExit(f"--shape {spec!r}: expected [INPUT=]DIMS such as data=1x3x320x320") from None
    return shapes


def add_shape_option(parser: argparse.ArgumentParser) -> None:
    """``--shape`` (``bench``, ``profile``): read with ``parse_shapes``."""
    parser.add_argument(
        "--shape",
        metavar="[INPUT=]DIMS",
        action="append",
        default=[],
        help="the size to feed a model whose input dims are unknown (1x3x320x320; INPUT= for one input of "
        "several); the model stays compiled with its unknown dims. Unknown dims are 1 otherwise; repeatable",
    )


def model_inputs(model: onnx.ModelProto, shapes: dict[str | None, list[int]] | None = None) -> dict[str, np.ndarray]:
    """Seeded random feeds for the graph inputs that are not initializers: of the sizes in ``shapes`` (by
    input name, or None for every input), which must agree with the model's fixed dims; unknown dims
    otherwise 1."""
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    shapes = shapes or {}
    for x in model.graph.input:
        if x.name in inits:
            continue
        # (a dim_value of 0 or -1, as some exporters write, is unknown too)
        fixed = [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in x.type.tensor_type.shape.dim
        ]
        shape = [1 if f is None else f for f in fixed]
        given = shapes.get(x.name, shapes.get(None))
        if given is not None:
            if len(given) != len(fixed) or any(f is not None and f != g for f, g in zip(fixed, given)):
                shown = "x".join("?" if f is None else str(f) for f in fixed)
                raise SystemExit(f"--shape for input {x.name!r}: {given} does not fit its dims {shown}")
            shape = given
        dtype = onnx.helper.tensor_dtype_to_np_dtype(x.type.tensor_type.elem_type)
        feeds[x.name] = rng.random(shape).astype(dtype)
    return feeds


def optimizable(model: onnx.ModelProto, seed: int = 0) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` rewritten so that a runtime may fold its constants, and what was changed.

    Initializers leave the graph inputs (IR version raised to 4, which allows that), and each
    ConstantOfShape whose shape is an initializer and whose value is floating point becomes a seeded
    random initializer: a weight of rank 2 or more uniform in +-1/sqrt(fan-in), a vector (biases,
    normalization parameters) uniform in [0.5, 1.5] so that variances stay positive.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: i for i in graph.initializer}
    notes = []
    kept, weights, used = [], [], set()
    for node in graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.data_type) if value is not None else np.float32
        if node.op_type == "ConstantOfShape" and node.input[0] in inits and np.issubdtype(dtype, np.floating):
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]]).reshape(-1)]
            if len(shape) >= 2:
                bound = 1 / math.sqrt(max(int(np.prod(shape[1:])), 1))
                data = rng.uniform(-bound, bound, shape)
            else:
                data = rng.uniform(0.5, 1.5, shape)
            weights.append(numpy_helper.from_array(data.astype(dtype), node.output[0]))
            continue
        kept.append(node)
        used.update(node.input)
    if weights:
        notes.append(f"{len(weights)} ConstantOfShape weights became seeded random initializers")
        del graph.node[:]
        graph.node.extend(kept)
        outputs = {o.name for o in graph.output}
        survivors = [i for i in graph.initializer if i.name in used or i.name in outputs]
        del graph.initializer[:]
        graph.initializer.extend([*survivors, *weights])
    names = set(inits) | {i.name for i in graph.initializer}
    listed = [x for x in graph.input if x.name in names]
    if listed:
        notes.append(f"{len(listed)} initializers no longer listed as graph inputs")
        inputs = [x for x in graph.input if x.name not in names]
        del graph.input[:]
        graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, 4)
    onnx.checker.check_model(model)
    return model, notes


# -- runners: each runs in its own worker process ------------------------------------------------------


def _onnxruntime(path: str, threads: int, props: str) -> tuple[Callable[[dict], object], dict]:
    import onnxruntime as ort

    options = ort.SessionOptions()  # the defaults (spinning on), the same intra-op thread count as ours
    options.intra_op_num_threads = threads
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return (lambda feeds: session.run(None, feeds)), {"compile_s": time.perf_counter() - start}


def _nnadapter(path: str, threads: int, props: str) -> tuple[Callable[[dict], object], dict]:
    import nnadapter_tvm as nna

    cache_dir = os.environ["NNADAPTER_TVM_BENCH_CACHE"]
    start = time.perf_counter()
    predictor = nna.Predictor(path, context_properties=f"TVM_NUM_THREADS={threads};{props}", cache_dir=cache_dir)
    info = {"compile_s": time.perf_counter() - start, "loaded_from_cache": predictor.loaded_from_cache}
    return predictor.run, info


def _tvm_frontend(path: str, threads: int, props: str) -> tuple[Callable[[dict], object], dict]:
    """TVM's own Relax ONNX frontend, built the default way (tvm.compile, no tuning)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    start = time.perf_counter()
    mod = from_onnx(onnx.load(path), keep_params_in_input=False)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, tvm.target.Target("llvm")), tvm.cpu())
    main = vm["main"]
    return (lambda feeds: main(*[tvm.runtime.tensor(v) for v in feeds.values()])), {
        "compile_s": time.perf_counter() - start
    }


RUNNERS: dict[str, Callable[[str, int, str], tuple[Callable[[dict], object], dict]]] = {
    "onnxruntime": _onnxruntime,
    "nnadapter-tvm": _nnadapter,
    "tvm-onnx-frontend": _tvm_frontend,
}


def _worker(kind: str, path: str, threads: int, props: str, shapes: list[str]) -> int:
    """Prepare one runner, say so on stdout, then time ``N`` calls per line ``N`` read from stdin."""
    run, info = RUNNERS[kind](path, threads, props)
    feeds = model_inputs(onnx.load(path, load_external_data=False), parse_shapes(shapes))
    print(json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        if line.startswith("outputs "):  # write one run's outputs for the parent to compare
            outputs = [np.asarray(o.numpy() if hasattr(o, "numpy") else o) for o in _as_list(run(feeds))]
            np.savez(line.split(" ", 1)[1].strip(), *outputs)
            print(json.dumps({"saved": len(outputs)}), flush=True)
            continue
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            run(feeds)
            times.append((time.perf_counter() - start) * 1000)
        print(json.dumps({"ms": times}), flush=True)
    return 0


def _as_list(result: object) -> list:
    if isinstance(result, (list, tuple)):
        return list(result)
    if hasattr(result, "__len__") and not hasattr(result, "shape"):  # a TVM Array of tensors
        return [result[i] for i in range(len(result))]
    return [result]


class Worker:
    """A runner in its own process: thread count in its environment before anything is imported."""

    def __init__(
        self, kind: str, path: str, threads: int, props: str = "", cache_dir: str = "", shapes: list[str] = ()
    ):
        env = dict(os.environ, TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        env["NNADAPTER_TVM_BENCH_CACHE"] = cache_dir
        command = [sys.executable, "-m", "nnadapter_tvm.tools.benchmark", "--worker", kind, path]
        command += ["--threads", str(threads), "--props", props] + [f"--shape={s}" for s in shapes]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited with status {self.process.wait()} (its stderr is above)")
        return json.loads(line)

    def block(self, count: int) -> list[float]:
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()
        return self._read()["ms"]

    def outputs(self, path: str) -> list[np.ndarray]:
        """One run's outputs, in order."""
        self.process.stdin.write(f"outputs {path}\n")
        self.process.stdin.flush()
        self._read()
        with np.load(path) as saved:
            return [saved[f"arr_{i}"] for i in range(len(saved.files))]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()


def alternate(workers: dict[str, Worker], block: int, rounds: int) -> dict[str, list[list[float]]]:
    """Blocks that alternate: one untimed warm-up block each, then ``rounds`` rounds of one block each."""
    samples: dict[str, list[list[float]]] = {name: [] for name in workers}
    for round_ in range(rounds + 1):
        for name, worker in workers.items():
            time.sleep(SETTLE_S)
            times = worker.block(block)
            if round_:
                samples[name].append(times)
    return samples


def summarize(samples: dict[str, list[list[float]]]) -> dict[str, dict]:
    """Per runner: the median ms over all timed calls and, against the peer, the median and min-max of the
    per-round ratios of block medians."""
    peer = [statistics.median(b) for b in samples[PEER]]
    result = {}
    for name, blocks in samples.items():
        entry = {"ms": statistics.median([t for b in blocks for t in b])}
        if name != PEER:
            per_round = [statistics.median(b) / p for b, p in zip(blocks, peer)]
            entry |= {"ratio": statistics.median(per_round), "ratio_min": min(per_round), "ratio_max": max(per_round)}
        result[name] = entry
    return result


def cached_load_seconds(path: str, threads: int, props: str, cache_dir: str, shapes: list[str] = ()) -> float:
    """A fresh process: import, load from the cache and run once (the number a deployed app sees)."""
    code = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "import onnx, nnadapter_tvm as nna\n"
        "from nnadapter_tvm.tools.benchmark import model_inputs, parse_shapes\n"
        "p = nna.Predictor(sys.argv[1], context_properties=sys.argv[2], cache_dir=sys.argv[3])\n"
        "assert p.loaded_from_cache\n"
        "p.run(model_inputs(onnx.load(sys.argv[1]), parse_shapes(sys.argv[4:])))\n"
        "print(time.perf_counter() - start)\n"
    )
    properties = f"TVM_NUM_THREADS={threads};{props}"
    out = subprocess.run(
        [sys.executable, "-c", code, path, properties, cache_dir, *shapes], capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def tuning_dbs(specs: list[str]) -> dict[str | None, str]:
    """``--tuning-db`` values: ``DIR`` for every model, or ``MODEL=DIR`` for one (by its short name)."""
    found: dict[str | None, str] = {}
    for spec in specs:
        name, sep, directory = spec.rpartition("=")
        found[name if sep else None] = directory
    return found


def bench_model(path: str, args: argparse.Namespace, workdir: str) -> dict:
    name = model_name(path)
    row: dict = {"model": name}
    if args.as_shipped:
        prepared = path
    else:
        model, row["rewritten"] = optimizable(onnx.load(path))
        prepared = os.path.join(workdir, f"{name}.onnx")
        onnx.save(model, prepared)
    tuning_db = tuning_dbs(args.tuning_db)
    database = tuning_db.get(name, tuning_db.get(None))
    cache_dir = os.path.join(workdir, "cache")
    ours = getattr(args, "properties", "").strip()
    if ours:
        ours += "" if ours.endswith(";") else ";"
    runners = {PEER: ("onnxruntime", ""), "nnadapter-tvm": ("nnadapter-tvm", ours)}
    if database:
        runners["nnadapter-tvm tuned"] = ("nnadapter-tvm", f"{ours}TUNING_DATABASE={database};")
    if args.tvm_frontend:
        runners["tvm-onnx-frontend"] = ("tvm-onnx-frontend", "")
    workers: dict[str, Worker] = {}
    try:
        for runner, (kind, props) in runners.items():
            try:
                workers[runner] = Worker(kind, prepared, args.threads, props, cache_dir, args.shape)
                row[runner] = dict(workers[runner].info) | ({"properties": props} if props else {})
            except Exception as err:  # a runner that cannot start is a row entry, not the end of the benchmark
                row[runner] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        if PEER not in workers:
            return row
        # Every runner computes what onnxruntime computes, or its time means nothing.
        want = workers[PEER].outputs(os.path.join(workdir, "peer.npz"))
        for runner, worker in workers.items():
            if runner != PEER:
                row[runner]["max_error"] = max_error(worker.outputs(os.path.join(workdir, "out.npz")), want)
        for runner, entry in summarize(alternate(workers, args.block, args.rounds)).items():
            row[runner] |= entry
    finally:
        for worker in workers.values():
            worker.close()
    alone = Worker("onnxruntime", prepared, args.threads, shapes=args.shape)
    try:
        alone.block(args.block)  # warm-up, as inside the benchmark
        row[PEER]["alone_ms"] = statistics.median([t for _ in range(args.rounds) for t in alone.block(args.block)])
    finally:
        alone.close()
    row[PEER]["agrees"] = abs(row[PEER]["ms"] / row[PEER]["alone_ms"] - 1) <= PEER_AGREEMENT
    if "ms" in row.get("nnadapter-tvm", {}):
        row["nnadapter-tvm"]["cached_load_first_run_s"] = cached_load_seconds(
            prepared, args.threads, ours, cache_dir, args.shape
        )
    return row


def max_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """The largest difference between two runners' outputs, relative to each output's magnitude (inf where
    the outputs do not correspond)."""
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return math.inf
    errors = [
        float(np.max(np.abs(g.astype("float64") - w.astype("float64")))) / max(float(np.max(np.abs(w))), 1e-30)
        for g, w in zip(got, want)
        if w.size
    ]
    return max(errors, default=0.0)


def ratios(rows: list[dict], runner: str) -> list[float]:
    """The per-model ratios of ``runner`` that count: both ran, their outputs agree (``MAX_ERROR``), and the
    peer agreed with itself alone."""
    return [
        r[runner]["ratio"]
        for r in rows
        if "ratio" in r.get(runner, {}) and r[PEER].get("agrees", True) and r[runner].get("max_error", 0) <= MAX_ERROR
    ]


def runner_names(rows: list[dict]) -> list[str]:
    """Every runner of any row, in first-seen order (a tuned row exists only for models given a database)."""
    return list(dict.fromkeys(k for row in rows for k in row if k not in ("model", "rewritten")))


def report(rows: list[dict], threads: int) -> str:
    runners = runner_names(rows)
    lines = [f"threads: {threads}; median ms; ratio to onnxruntime: median of per-round ratios [min-max]"]
    lines.append(f"{'model':<14}{'onnxruntime':>12}{'alone':>10}" + "".join(f"{r:>36}" for r in runners[1:]))
    for row in rows:
        peer = row.get(PEER, {})
        if "ms" not in peer:
            lines.append(f"{row['model']:<14} onnxruntime error: {peer.get('error', 'not run')}")
            continue
        mark = "" if peer["agrees"] else "  (onnxruntime differs from its time alone by more than 5%: not counted)"
        cells = []
        for runner in runners[1:]:
            res = row.get(runner)
            if res is None:
                cells.append(f"{'-':>36}")
            elif "ratio" not in res:
                cells.append(f"{'error':>36}")
            else:
                cells.append(f"{res['ms']:>10.2f} {res['ratio']:6.2f}x [{res['ratio_min']:.2f}-{res['ratio_max']:.2f}]")
                if res.get("max_error", 0) > MAX_ERROR:
                    mark += f"  ({runner}'s outputs differ from onnxruntime's by {res['max_error']:.1e}: not counted)"
        lines.append(f"{row['model']:<14}{peer['ms']:>12.2f}{peer['alone_ms']:>10.2f}" + "".join(cells) + mark)
    for runner in runners[1:]:
        rs = ratios(rows, runner)
        if rs:
            geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
            lines.append(f"geometric mean ratio, {runner}: {geo:.2f}x over {len(rs)} models (worst {max(rs):.2f}x)")
    for row in rows:
        for runner in runners[1:]:
            res = row.get(runner, {})
            if "error" in res:
                lines.append(f"{row['model']:<14} {runner}: {res['error']}")
        nn = row.get("nnadapter-tvm", {})
        if "cached_load_first_run_s" in nn:
            lines.append(
                f"{row['model']:<14} nnadapter-tvm compile {nn['compile_s']:.1f} s, "
                f"cached load + first run in a fresh process {nn['cached_load_first_run_s']:.2f} s"
            )
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runners = [k for k in runner_names(rows) if k != PEER]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(len(runners), 1)
    for k, runner in enumerate(runners):
        xs = [i + k * width for i in range(len(rows))]
        mid = [r.get(runner, {}).get("ratio", 0) for r in rows]
        low = [m - r.get(runner, {}).get("ratio_min", m) for m, r in zip(mid, rows)]
        high = [r.get(runner, {}).get("ratio_max", m) - m for m, r in zip(mid, rows)]
        ax.bar(xs, mid, width, yerr=[low, high], label=runner, capsize=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("latency / onnxruntime (log; min-max of rounds)")
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
    parser.add_argument("--block", type=int, default=8, help="calls per block (%(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of alternating blocks (%(default)s)")
    parser.add_argument(
        "--tuning-db",
        metavar="[MODEL=]DIR",
        action="append",
        default=[],
        help="a tuning directory (nnadapter-tvm tune) for a tuned row: for every model, or MODEL=DIR for the "
        "model of that short name (squeezenet=DIR); repeatable",
    )
    parser.add_argument("--tvm-frontend", action="store_true", help="add TVM's own ONNX frontend as a runner")
    parser.add_argument(
        "--as-shipped", action="store_true", help="measure the files as they are (initializers as inputs included)"
    )
    add_shape_option(parser)
    parser.add_argument("--json", default="benchmark.json", help="table as JSON (%(default)s)")
    parser.add_argument("--png", default="benchmark.png", help="ratio plot (%(default)s)")
    parser.add_argument("--worker", nargs=2, metavar=("RUNNER", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--properties",
        default="",
        help='context properties of our build, e.g. "LLVM_MATTR=-avx512f;" (an AVX2 build); onnxruntime runs at '
        "its defaults",
    )
    # A worker's properties (the runner's own, set by the benchmark for each process).
    parser.add_argument("--props", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.worker[0], args.worker[1], args.threads, args.props, args.shape)
    rows = []
    with tempfile.TemporaryDirectory(prefix="nnadapter-bench-") as workdir:
        for path in args.models or light_models():
            rows.append(bench_model(path, args, workdir))
            print(report(rows[-1:], args.threads).splitlines()[2], file=sys.stderr, flush=True)
    text = report(rows, args.threads)
    print(text)
    with open(args.json, "w") as f:
        json.dump({"threads": args.threads, "block": args.block, "rounds": args.rounds, "rows": rows}, f, indent=2)
    plot(rows, args.png)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
