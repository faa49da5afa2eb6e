"""Int8 against float32, ours against onnxruntime's: models quantized by onnxruntime's own tools.

    python scripts/bench_int8.py [--models squeezenet resnet50 inception_v1 vgg19] [--onnx FILE ...]
                                 [--dynamic FILE ...] [--shape INPUT=DIMS ...]
                                 [--threads 2] [--block 5] [--rounds 4] [--opset 13] [--format qdq]
                                 [--json out.json]

Each model (onnx's light models by name, or an ONNX file of float32) is written at ``--opset`` with its
weights as initializers (``tools/benchmark.optimizable``), then quantized by ``onnxruntime.quantization.
quantize_static`` as its documentation recommends for CNNs on x86: QDQ format, int8 weights per channel,
uint8 activations, calibrated (MinMax) on 8 seeded random inputs (``--format qoperator``: the same
quantization written in onnxruntime's QOperator form, QLinearConv and com.microsoft's QLinear operators).
Files given with ``--dynamic`` (transformers: a BERT exported by ``scripts/make_exports.py``) are quantized by
``quantize_dynamic`` instead, as onnxruntime recommends for them: int8 weights per tensor, activations
quantized at run time.  ``--shape`` sets the inputs' sizes (``input_ids=1x128``; unknown dims are 1
otherwise).  Four runners, each in its own process (``tools/benchmark.Worker``): onnxruntime and
nnadapter-tvm, each on the float32 and the int8 file, timed in alternating blocks.  A row shows:

- ``int8 / f32`` for each runtime: how much faster its int8 build runs than its own float32 (< 1: faster);
- ``ours / ort (int8)``: our int8 time over onnxruntime's, per round, median and min-max;
- each int8 output's distance to the float32 model's (max |difference| / max |float output|), ours beside
  onnxruntime's: an int8 build should be no farther from the float model than onnxruntime's is;
- compile times of our two builds (fresh cache each);
- onnxruntime's int8 time alone in a fresh process beside its time in the benchmark (more than 5 % apart:
  the row is marked and its ratios do not count).

The CPU model and its vector ISA are printed first: figures mean nothing without them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import numpy as np
import onnx

from nnadapter_tvm.tools import benchmark
from nnadapter_tvm.tools.benchmark import LIGHT_DIR, PEER_AGREEMENT, Worker, alternate, model_inputs, optimizable

DEFAULT_MODELS = ["squeezenet", "resnet50", "inception_v1", "vgg19"]
RUNNERS = {
    "ort-f32": ("onnxruntime", "f32"),
    "ort-int8": ("onnxruntime", "int8"),
    "ours-f32": ("nnadapter-tvm", "f32"),
    "ours-int8": ("nnadapter-tvm", "int8"),
}


def cpu_description() -> str:
    """The CPU model and the widest vector extensions it has (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    isa = [name for name in ("avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "avx2") if name in flags]
    return f"{model} ({', '.join(isa) or 'no AVX2'}), {os.cpu_count()} CPUs"


def float_model(source: str, opset: int, out: str) -> str:
    """``source`` (a light model's name or a file) as the float32 file every runner reads."""
    path = source if source.endswith(".onnx") else os.path.join(LIGHT_DIR, f"light_{source}.onnx")
    model, _ = optimizable(onnx.load(path))
    if model.opset_import[0].version < opset:
        model = onnx.version_converter.convert_version(model, opset)
    onnx.save(model, out)
    return out


def quantize(f32: str, out: str, samples: int = 8, form: str = "qdq") -> str:
    """onnxruntime's static quantization of ``f32`` (QDQ or QOperator ``form``, per-channel int8 weights,
    uint8 activations)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    feeds = [model_inputs(onnx.load(f32, load_external_data=False)) for _ in range(samples)]
    rng = np.random.default_rng(0)
    for feed in feeds:  # model_inputs is seeded: vary the samples
        for name, value in feed.items():
            if value.dtype == np.float32:
                feed[name] = rng.standard_normal(value.shape).astype("float32")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self) -> dict | None:
            return next(self.items, None)

    pre = out + ".pre.onnx"
    quant_pre_process(f32, pre, skip_symbolic_shape=True)
    quantize_static(
        pre,
        out,
        Reader(),
        quant_format=QuantFormat.QOperator if form == "qoperator" else QuantFormat.QDQ,
        per_channel=True,
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QUInt8,
    )
    os.remove(pre)
    return out


def quantize_dynamically(f32: str, out: str) -> str:
    """onnxruntime's dynamic quantization of ``f32``, as its documentation recommends for transformers:
    int8 weights per tensor, activations quantized at run time (DynamicQuantizeLinear + MatMulInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(f32, out, weight_type=QuantType.QInt8)
    return out


def distance(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-12)) for g, w in zip(got, want))


def bench(name: str, files: dict[str, str], args: argparse.Namespace, workdir: str) -> dict:
    workers = {}
    try:
        for runner, (kind, which) in RUNNERS.items():
            cache = tempfile.mkdtemp(dir=workdir)
            workers[runner] = Worker(kind, files[which], args.threads, cache_dir=cache, shapes=args.shape)
        outputs = {r: w.outputs(os.path.join(workdir, f"{name}-{r}.npz")) for r, w in workers.items()}
        samples = alternate(workers, args.block, args.rounds)
        compile_s = {r: w.info.get("compile_s") for r, w in workers.items()}
    finally:
        for worker in workers.values():
            worker.close()
    alone_worker = Worker("onnxruntime", files["int8"], args.threads, shapes=args.shape)
    try:
        alone_worker.block(args.block)
        alone = statistics.median(t for _ in range(args.rounds) for t in alone_worker.block(args.block))
    finally:
        alone_worker.close()
    medians = {r: [statistics.median(b) for b in blocks] for r, blocks in samples.items()}

    def ratio(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(medians[a], medians[b])]

    ms = {r: statistics.median(t for b in blocks for t in b) for r, blocks in samples.items()}
    row = {
        "model": name,
        "ms": ms,
        "ort_int8_alone_ms": alone,
        "peer_agrees": abs(ms["ort-int8"] / alone - 1) <= PEER_AGREEMENT,
        "ours_int8_over_f32": ratio("ours-int8", "ours-f32"),
        "ort_int8_over_f32": ratio("ort-int8", "ort-f32"),
        "ours_over_ort_int8": ratio("ours-int8", "ort-int8"),
        "distance_to_float": {
            "ours": distance(outputs["ours-int8"], outputs["ort-f32"]),
            "onnxruntime": distance(outputs["ort-int8"], outputs["ort-f32"]),
        },
        "compile_s": {"f32": compile_s["ours-f32"], "int8": compile_s["ours-int8"]},
    }
    return row


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"


def report(rows: list[dict], threads: int) -> str:
    lines = [
        f"CPU: {cpu_description()}; threads: {threads}; median ms; ratios: median of per-round ratios [min-max]",
        f"{'model':<14}{'ort f32':>9}{'ort int8':>9}{'alone':>8}{'ours f32':>10}{'ours int8':>10}"
        f"  {'ours int8/f32':<20}{'ort int8/f32':<20}{'ours/ort int8':<20}{'dist ours':>10}{'dist ort':>10}"
        f"{'compile f32/int8 s':>20}",
    ]
    for r in rows:
        ms, d, c = r["ms"], r["distance_to_float"], r["compile_s"]
        mark = "" if r["peer_agrees"] else "  (onnxruntime's int8 differs from its time alone by > 5%: not counted)"
        lines.append(
            f"{r['model']:<14}{ms['ort-f32']:>9.2f}{ms['ort-int8']:>9.2f}{r['ort_int8_alone_ms']:>8.2f}"
            f"{ms['ours-f32']:>10.2f}{ms['ours-int8']:>10.2f}  {_span(r['ours_int8_over_f32']):<20}"
            f"{_span(r['ort_int8_over_f32']):<20}{_span(r['ours_over_ort_int8']):<20}{d['ours']:>10.2e}"
            f"{d['onnxruntime']:>10.2e}{c['f32']:>10.1f}/{c['int8']:.1f}{mark}"
        )
    counted = [r for r in rows if r["peer_agrees"]]
    if counted:
        speedup = [statistics.median(r["ours_int8_over_f32"]) for r in counted]
        peer = [statistics.median(r["ours_over_ort_int8"]) for r in counted]
        lines.append(
            f"geomean over {len(counted)} counted rows: ours int8/f32 {np.exp(np.mean(np.log(speedup))):.2f}x, "
            f"ours/ort int8 {np.exp(np.mean(np.log(peer))):.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=None, help=f"light models (default {DEFAULT_MODELS})")
    parser.add_argument("--onnx", nargs="*", default=[], help="float32 ONNX files to quantize and measure too")
    parser.add_argument(
        "--dynamic",
        nargs="*",
        default=[],
        help="float32 ONNX files (transformers) to quantize with quantize_dynamic instead of quantize_static",
    )
    parser.add_argument(
        "--shape", action="append", default=[], help="INPUT=DIMS fed to every runner (e.g. input_ids=1x128)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("--format", choices=["qdq", "qoperator"], default="qdq", help="quantize_static's format")
    parser.add_argument("--json", default=None)
    # Four runners' idle thread pools: onnxruntime's spin a while after a call (0.1 s, the bench command's
    # pause between two runners, left onnxruntime's in-benchmark times up to 5x its time alone here).
    parser.add_argument("--settle", type=float, default=1.0, help="seconds between two runners' blocks")
    args = parser.parse_args(argv)
    benchmark.SETTLE_S = args.settle
    given = args.onnx or args.dynamic
    sources = (DEFAULT_MODELS if args.models is None and not given else args.models or []) + args.onnx
    sources += [(source, "dynamic") for source in args.dynamic]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for source in sources:
            source, how = source if isinstance(source, tuple) else (source, "static")
            name = os.path.splitext(os.path.basename(source))[0]
            f32 = float_model(source, args.opset, os.path.join(workdir, f"{name}_f32.onnx"))
            int8 = os.path.join(workdir, f"{name}_int8.onnx")
            int8 = quantize_dynamically(f32, int8) if how == "dynamic" else quantize(f32, int8, form=args.format)
            files = {"f32": f32, "int8": int8}
            rows.append(bench(name, files, args, workdir))
            print(report(rows[-1:], args.threads).splitlines()[-1], file=sys.stderr, flush=True)
    print(report(rows, args.threads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_description(), "threads": args.threads, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
