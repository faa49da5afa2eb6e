"""The float32 FMA peak of a CPU target, measured by a kernel built for that target: the yardstick of
``nnadapter-tvm profile``'s "% of peak".

Each thread runs ``CHAINS`` independent accumulators of one SIMD vector each (the target's width: 16 floats
with AVX-512, 8 with AVX2, 4 with NEON), every step one broadcast and ``CHAINS`` multiply-adds, the
accumulators held in registers (a local tile, as the dense rule keeps its own). ``CHAINS`` = 8 covers the
latency of two FMA pipes of 4 cycles each, and with the 8 multiplicands the loop needs 16 registers: it
fits AVX2's 16 as well as AVX-512's and NEON's 32. numpy's GEMM, used before, ran whatever kernel its BLAS
picked for this machine, which is neither the width nor the target our code is built for (an AVX2 build
on an AVX-512 machine, or the arm build).
"""

from __future__ import annotations

import tvm
from tvm import s_tir, te

from nnadapter_tvm.targets.cpu.simd import vector_lanes

#: Independent accumulators per thread.
CHAINS = 8


def fma_kernel(target: tvm.target.Target, threads: int, steps: int) -> tuple[tvm.IRModule, int]:
    """The scheduled FMA loop for ``target`` (``threads`` parallel tasks of ``steps`` steps) and the FLOPs
    of one call."""
    lanes = vector_lanes(target)
    x = te.placeholder((threads, CHAINS, lanes), "float32", name="x")
    y = te.placeholder((steps,), "float32", name="y")
    k = te.reduce_axis((0, steps), "k")
    out = te.compute((threads, CHAINS, lanes), lambda t, c, v: te.sum(x[t, c, v] * y[k], axis=[k]), name="fma")
    sch = s_tir.Schedule(te.create_prim_func([x, y, out]))
    block = sch.get_sblock("fma")
    tile = sch.cache_write(block, 0, "local")
    t, c, v, r = sch.get_loops(block)
    sch.reorder(t, r, c, v)
    sch.reverse_compute_at(tile, t)
    sch.unroll(c)
    sch.vectorize(v)
    sch.parallel(t)
    sch.decompose_reduction(block, r)
    return sch.mod, 2 * threads * CHAINS * lanes * steps


def fma_peak_gflops(target: tvm.target.Target, threads: int, steps: int = 1 << 20, repeat: int = 5) -> float:
    """GFLOP/s of ``fma_kernel`` on this machine (the best of ``repeat`` calls); ``target`` must run here."""
    import time

    import numpy as np

    mod, flops = fma_kernel(target, threads, steps)
    lib = tvm.compile(mod, target)
    dev = tvm.cpu(0)
    x = tvm.runtime.tensor(np.full((threads, CHAINS, vector_lanes(target)), 1.0, "float32"), dev)
    y = tvm.runtime.tensor(np.full((steps,), 1e-9, "float32"), dev)
    out = tvm.runtime.tensor(np.zeros((threads, CHAINS, vector_lanes(target)), "float32"), dev)
    main = lib["main"]
    main(x, y, out)  # the thread pool started, the code paged in
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        main(x, y, out)
        best = min(best, time.perf_counter() - start)
    return flops / best / 1e9
