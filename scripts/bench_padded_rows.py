#!/usr/bin/env python3
"""Rows no register tile divides: padded to whole tiles (``simd.padded_rows``) against the one-row tiles
they had before, kernels alone, for a build of the target the properties describe.

    python scripts/bench_padded_rows.py [--properties "LLVM_MATTR=-avx512f;"] [--rounds 7] [--calls 20]

The "before" build is the same code with the static padding turned off (``Lowering._tile`` giving a
budget of 0, which is what the computes did before), so the two differ in that alone. Cases: the deep 3x3
convolutions of a ResNet (7x7x512 and 14x14x256, bias and ReLU, direct kernels: 7 and 14 have no divisor
in AVX2's 6-row budget) and a [197, 768] x [768, 3072] product (ViT's tokens, prime). Both builds'
outputs are compared before timing; each round times ``--calls`` calls of each, alternating; medians.
Set ``TVM_NUM_THREADS`` for the thread count.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import tvm
from tvm import relax

from nnadapter_tvm.context import parse_properties
from nnadapter_tvm.targets.cpu import lowering, pipeline
from nnadapter_tvm.targets.cpu.peak import fma_peak_gflops
from nnadapter_tvm.targets.llvm import LlvmDriver

RNG = np.random.default_rng(0)


def _conv(c: int, hw: int) -> tuple[tvm.IRModule, list[int], float]:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, c, hw, hw], "float32"))
    w = relax.const(RNG.standard_normal((c, c, 3, 3)).astype("float32") * 0.05)
    b = relax.const(RNG.standard_normal((1, c, 1, 1)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=[1, 1, 1, 1]))
            y = bb.emit_output(bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, b)))))
        bb.emit_func_output(y)
    return bb.finalize(), [1, c, hw, hw], 2.0 * hw * hw * c * c * 9


def _dense(m: int, k: int, n: int) -> tuple[tvm.IRModule, list[int], float]:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([m, k], "float32"))
    w = relax.const(RNG.standard_normal((k, n)).astype("float32") * 0.05)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
        bb.emit_func_output(y)
    return bb.finalize(), [m, k], 2.0 * m * k * n


CASES = {
    "conv 7x7x512 -> 512": lambda: _conv(512, 7),
    "conv 14x14x256 -> 256": lambda: _conv(256, 14),
    "dense [197, 768] x [768, 3072]": lambda: _dense(197, 768, 3072),
}


def _build(mod: tvm.IRModule, target: tvm.target.Target, padded: bool) -> relax.VirtualMachine:
    original = lowering.Lowering._tile
    if not padded:
        lowering.Lowering._tile = lambda self, block: (original(self, block)[0], 0)
    try:
        executable, _ = pipeline.build(mod, target, winograd=False)
    finally:
        lowering.Lowering._tile = original
    return relax.VirtualMachine(executable, tvm.cpu())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--properties", default="", help='context properties of the build ("LLVM_MATTR=-avx512f;")')
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    target = LlvmDriver().tvm_target(parse_properties(args.properties))
    threads = tvm.get_global_func("runtime.NumThreads")()
    peak = fma_peak_gflops(target, threads)
    print(f"target {target}; FMA peak {peak:.0f} GFLOP/s on {threads} thread(s)")
    for name, make in CASES.items():
        mod, shape, flops = make()
        x = tvm.runtime.tensor(RNG.standard_normal(shape).astype("float32"))
        vms = {"one-row tiles": _build(mod, target, False), "padded": _build(mod, target, True)}
        got = {k: vm["main"](x).numpy() for k, vm in vms.items()}
        np.testing.assert_allclose(got["padded"], got["one-row tiles"], rtol=1e-4, atol=1e-4)
        times: dict[str, list[float]] = {k: [] for k in vms}
        for _ in range(args.rounds):
            for k, vm in vms.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    vm["main"](x)
                times[k].append((time.perf_counter() - start) / args.calls)
        cells = []
        for k, values in times.items():
            seconds = statistics.median(values)
            rate = flops / seconds / 1e9
            cells.append(f"{k} {seconds * 1e3:.3f} ms ({rate:.0f} GFLOP/s, {rate / peak:.0%} of peak)")
        print(f"{name}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
