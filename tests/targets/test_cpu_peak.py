"""The FMA peak kernel ``profile`` measures "% of peak" against (``targets/cpu/peak.py``): built at each
target's vector width, its accumulators in registers, and computing the sums it claims."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from nnadapter_tvm.targets.cpu.peak import CHAINS, fma_kernel, fma_peak_gflops
from nnadapter_tvm.targets.cpu.simd import vector_lanes
from nnadapter_tvm.targets.llvm import LlvmDriver

TARGETS = {
    "avx512": (tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"}), 16),
    "avx2": (tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}), 8),
    "neon": (tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}), 4),
}


@pytest.mark.parametrize("name", list(TARGETS))
def test_fma_kernel_runs_vectors_of_the_target_width_in_registers(name):
    target, lanes = TARGETS[name]
    mod, flops = fma_kernel(target, threads=3, steps=100)
    text = mod["main"].script()
    assert f"T.vectorized({lanes})" in text and f"T.unroll({CHAINS})" in text and "T.parallel(3)" in text
    assert 'scope="local"' in text  # the accumulators: a register tile
    assert flops == 2 * 3 * CHAINS * lanes * 100


def test_fma_kernel_computes_its_sums_and_the_peak_is_measured():
    target = LlvmDriver().tvm_target({})
    mod, _ = fma_kernel(target, threads=2, steps=1000)
    lib = tvm.compile(mod, target)
    x = np.arange(2 * CHAINS * vector_lanes(target), dtype="float32").reshape(2, CHAINS, -1) / 7
    y = np.linspace(0.1, 1, 1000, dtype="float32")
    out = tvm.runtime.tensor(np.zeros_like(x))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x * y.astype(np.float64).sum(), rtol=1e-5)
    peak = fma_peak_gflops(target, threads=1, steps=1 << 12, repeat=2)
    assert np.isfinite(peak) and peak > 0
