"""Where an inference's time goes: each fused kernel's time per inference, its share, its FLOPs and its
GFLOP/s against the machine's measured peak, so that the gap to a peer shows where it is.

    nnadapter-tvm profile MODEL.onnx [--threads 2] [--repeat 10] [--top 30] [--as-shipped]
                                     [--shape [INPUT=]DIMS ...] [--properties "KEY=VALUE;..."]

It first prints the compile's time per phase (``runtime.phases``: wall and CPU seconds), then the kernels.

The model is rewritten as the benchmark does (``tools/benchmark.optimizable``: constants folded) unless
``--as-shipped``.  Kernel times come from the Relax VM's instrument hook (called before and after every
call the VM makes; the hook's own cost, a few microseconds a call, is included in each kernel's time and
shows in the difference between the kernels' sum and an uninstrumented inference).  FLOPs are TVM's
estimate (``tvm.s_tir.analysis.estimate_tir_flops``) of each fused kernel as the default schedules see it
(``Driver.lower_for_tuning``), so a multiply-add counts two (a Winograd convolution's count is the work it
does, its transforms and 36 products a tile, not the direct convolution's: ``winograd.without_fallback``
leaves out the direct sums it runs for non-finite outputs only); kernels whose extents are symbolic show no
FLOPs (TVM's estimate would take a symbolic extent as 1) and the total says how many it leaves out.  The
peak is measured, not looked up, by a kernel built for the same target as the model
(``targets/cpu/peak.py``: independent vector multiply-adds of the target's width in registers, ``--threads``
threads), so that "% of peak" means the same on every machine and for an AVX2 build on an AVX-512 one
(``--properties "LLVM_MATTR=-avx512f;"``); numpy's GEMM, used before, ran whatever width its BLAS picked.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

import numpy as np
import onnx

from nnadapter_tvm.runtime.kernel_cache import SYMBOL_PREFIX
from nnadapter_tvm.tools.benchmark import add_shape_option

# What the VM calls besides kernels (allocation, shape matching, tuples): summed as one row.
BUILTIN_PREFIX = "vm.builtin."
BUILTINS = "(VM builtins: allocation, shape checks)"


def peak_gflops(threads: int, properties: str = "") -> float:
    """float32 FMA GFLOP/s of a kernel built for the ``llvm`` target that ``properties`` describe
    (``targets.cpu.peak``), with ``threads`` threads."""
    from nnadapter_tvm.context import parse_properties
    from nnadapter_tvm.targets.cpu.peak import fma_peak_gflops
    from nnadapter_tvm.targets.llvm import LlvmDriver

    return fma_peak_gflops(LlvmDriver().tvm_target(parse_properties(properties)), threads)


def kernel_flops(compilation, labels: dict[str, str] | None = None) -> dict[str, float | None]:
    """Each fused kernel of ``compilation`` (by its name in the fused module) -> its estimated FLOPs per
    call (None where symbolic extents leave the count open). ``labels`` receives, for kernels the build
    named after their kernel cache entry (``runtime.kernel_cache``), that symbol -> the name."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    from nnadapter_tvm.runtime.convert import convert_subgraph
    from nnadapter_tvm.runtime.partition import assign_devices, split_by_device
    from nnadapter_tvm.targets.cpu.winograd import without_fallback

    model, context = compilation.model, compilation.context
    flops: dict[str, float | None] = {}
    for sub in split_by_device(model, assign_devices(model, context)):
        driver = context.devices[sub.device_index].driver
        mod, _ = convert_subgraph(sub.inputs, sub.outputs, sub.operations, [])
        fused = driver.lower_for_tuning(mod, context.properties)
        kernels = driver.kernel_cache(context.properties, context.cache_key)
        for gv, func in fused.functions.items():
            if isinstance(func, tvm.tirx.PrimFunc):
                if kernels is not None and labels is not None:
                    labels[SYMBOL_PREFIX + kernels.name(func)] = gv.name_hint
                if _symbolic(func):  # TVM's estimate takes a symbolic extent as 1
                    flops[gv.name_hint] = None
                    continue
                try:
                    func = without_fallback(func)  # a Winograd kernel's work on finite inputs
                    flops[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule({"main": func})))
                except Exception:  # symbolic extents: TVM cannot count them
                    flops[gv.name_hint] = None
    return flops


def _symbolic(func) -> bool:
    """Whether a kernel has sizes known only at execution (a scalar parameter or a symbolic buffer dim)."""
    import tvm

    for param in func.params:
        shape = getattr(param.ty, "shape", None)
        if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            return True
    return False


class KernelTimer:
    """The VM instrument: seconds and calls per symbol, summed over the runs made while it is set."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._started: list[float] = []

    def __call__(self, func, symbol: str, before_run: bool, ret_value, *args) -> int:
        if before_run:
            self._started.append(time.perf_counter())
        else:
            name = BUILTINS if symbol.startswith(BUILTIN_PREFIX) else symbol
            self.seconds[name] += time.perf_counter() - self._started.pop()
            self.calls[name] += 1
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    def relabel(self, labels: dict[str, str]) -> None:
        """Symbols renamed by ``labels`` (a kernel cache entry's symbol -> the kernel's own name)."""
        for table in (self.seconds, self.calls):
            for symbol in [s for s in table if s in labels]:
                table[labels[symbol]] += table.pop(symbol)


def profile(predictor, feeds: dict[str, np.ndarray], repeat: int) -> tuple[KernelTimer, float, dict]:
    """Kernel times over ``repeat`` instrumented inferences, the median uninstrumented inference in
    seconds, and every compiled kernel's FLOPs."""
    predictor.run(feeds)  # warm-up: first-call allocations, thread pool start
    whole = []
    for _ in range(repeat):
        start = time.perf_counter()
        predictor.run(feeds)
        whole.append(time.perf_counter() - start)
    timer, flops, labels = KernelTimer(), {}, {}
    programs = []
    for segment in predictor.plan.all_segments():
        compilation = segment.compilation
        flops.update(kernel_flops(compilation, labels))
        programs += compilation.programs
    for program in programs:
        program.vm.set_instrument(timer)
    try:
        for _ in range(repeat):
            predictor.run(feeds)
    finally:
        for program in programs:
            program.vm.set_instrument(None)
    timer.relabel(labels)
    return timer, statistics.median(whole), flops


def report(timer: KernelTimer, whole_s: float, flops: dict, repeat: int, peak: float, top: int) -> str:
    rows = sorted(timer.seconds.items(), key=lambda item: -item[1])
    kernels_ms = sum(timer.seconds.values()) / repeat * 1000
    lines = [
        f"one inference: {whole_s * 1000:.3f} ms uninstrumented; kernels and VM calls sum to {kernels_ms:.3f} ms "
        f"instrumented; peak {peak:.1f} GFLOP/s (float32 FMA loop built for the target, measured)",
        f"{'kernel':<52}{'calls':>6}{'ms':>9}{'share':>7}{'GFLOP':>8}{'GFLOP/s':>9}{'peak':>6}",
    ]
    total_flops = 0.0
    for name, seconds in rows[:top]:
        ms = seconds / repeat * 1000
        calls = timer.calls[name] // repeat
        count = flops.get(name)
        cells = f"{'':>8}{'':>9}{'':>6}"
        if count:
            rate = count * calls / (seconds / repeat) / 1e9
            cells = f"{count * calls / 1e9:>8.3f}{rate:>9.1f}{rate / peak:>6.0%}"
        lines.append(f"{name[:51]:<52}{calls:>6}{ms:>9.3f}{ms / kernels_ms:>7.1%}{cells}")
    for name in timer.seconds:
        total_flops += (flops.get(name) or 0) * (timer.calls[name] // repeat)
    if len(rows) > top:
        rest = sum(s for _, s in rows[top:]) / repeat * 1000
        lines.append(f"{f'({len(rows) - top} more)':<52}{'':>6}{rest:>9.3f}{rest / kernels_ms:>7.1%}")
    rate = total_flops / whole_s / 1e9
    uncounted = [name for name in timer.seconds if name in flops and flops[name] is None]
    lines.append(
        f"whole model: {total_flops / 1e9:.3f} GFLOP in {whole_s * 1000:.3f} ms = {rate:.1f} GFLOP/s "
        f"({rate / peak:.0%} of peak)"
        + (f"; {len(uncounted)} kernel(s) with sizes known only at execution not counted" if uncounted else "")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nnadapter-tvm profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="an ONNX file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10, help="inferences timed (%(default)s)")
    parser.add_argument("--top", type=int, default=30, help="kernels listed (%(default)s); the rest in one row")
    parser.add_argument("--as-shipped", action="store_true", help="profile the file as it is (no rewrite)")
    parser.add_argument(
        "--properties",
        default="",
        help='context properties of the build, e.g. "LLVM_MATTR=-avx512f;" (an AVX2 build); the peak is '
        "measured for the same target",
    )
    add_shape_option(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))  # before TVM's pool starts
    import nnadapter_tvm as nna
    from nnadapter_tvm.runtime import phases
    from nnadapter_tvm.tools.benchmark import model_inputs, optimizable, parse_shapes

    model = onnx.load(args.model)
    if not args.as_shipped:
        model, _ = optimizable(model)
    with phases.recording(lead=phases.IMPORT) as compile_times:
        properties = f"TVM_NUM_THREADS={args.threads};{args.properties}"
        predictor = nna.Predictor(model, context_properties=properties, host_fallback=True)
    timer, whole_s, flops = profile(predictor, model_inputs(model, parse_shapes(args.shape)), args.repeat)
    print(compile_times.format())
    print(report(timer, whole_s, flops, args.repeat, peak_gflops(args.threads, args.properties), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
