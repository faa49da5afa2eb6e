"""``cuda``: NVIDIA GPUs through TVM's CUDA code generator.

Building needs no GPU: every PrimFunc gets a GPU schedule (``targets/gpu.py``: dlight, then
fallbacks), the kernels become CUDA C and the host code x86-64 (the machine's LLVM default),
and ``export`` writes an ordinary shared library that carries the CUDA C.  TVM 0.27 compiles
that CUDA C when the library is loaded on a GPU machine (``tvm_callback_cuda_compile`` from
``tvm.support.nvcc``: NVRTC through the ``cuda-bindings`` package, or ``nvcc`` with
``TVM_CUDA_COMPILE_MODE=nvcc``), for the GPU actually present.  ``CUDA_ARCH`` therefore only names
the target the kernels are scheduled for (and enters the model token); dlight reads the target's limits,
which TVM's cuda kind gives alike for every architecture, and the CUDA C came out the same for sm_61,
sm_75 and sm_90 on every model of tests/targets/test_gpu_targets.py; see docs/targets-gpu.md.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.properties import Property
from nnadapter_tvm.runtime.tvm_runtime import tvm  # imported on first use: a context needs none of it
from nnadapter_tvm.targets.base import Program
from nnadapter_tvm.targets.gpu import GpuDriver
from nnadapter_tvm.types import ResultCode

log = logging.getLogger("nnadapter_tvm")

#: Ampere: the oldest architecture CUDA 13 (the TVM wheel's CUDA) targets well, and what
#: dlight's tensor-core-free schedules assume; newer GPUs run the same kernels.
DEFAULT_ARCH = "sm_80"
_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}[af]?")


def _cuda_arch(text: str) -> str:
    """``sm_XY`` (optionally with an ``a``/``f`` suffix, e.g. ``sm_90a``)."""
    if not _ARCH.fullmatch(text):
        raise ValueError(f"expected sm_XY such as sm_80 or sm_90, got {text!r}")
    return text


def _kernel_compiler() -> str | None:
    """How TVM will compile the module's CUDA C at load time here: ``nvrtc``, ``nvcc`` or None."""
    mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower()
    if mode == "nvcc":
        return "nvcc" if shutil.which("nvcc") else None
    if importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None:
        return "nvrtc"
    if shutil.which("nvcc"):
        # No NVRTC bindings, but a toolkit: let TVM's callback run nvcc instead.
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        log.info("cuda: cuda-bindings is not installed; TVM compiles kernels with nvcc at load time")
        return "nvcc"
    return None


CUDA_ARCH = Property(
    "CUDA_ARCH",
    f"GPU architecture the kernels are scheduled for, sm_XY (default {DEFAULT_ARCH})",
    _cuda_arch,
    DEFAULT_ARCH,
)


class CudaDriver(GpuDriver):
    """``cuda``: kernels in CUDA C, host code for this machine's CPU."""

    name = "cuda"
    vendor = "NVIDIA (via TVM)"
    properties = (CUDA_ARCH,)

    def can_run_here(self) -> tuple[bool, str]:
        """Whether TVM's CUDA runtime is loaded and sees a GPU (``tvm.cuda(0).exist``)."""
        if not tvm.runtime.enabled("cuda"):
            return False, (
                "the TVM runtime in this process has no CUDA support loaded "
                "(libtvm_runtime_cuda needs the NVIDIA driver's libcuda.so.1 and CUDA 13's libcudart.so.13)"
            )
        device = tvm.cuda(0)
        if not device.exist:
            return False, "no CUDA GPU is visible"
        return True, f"{device.device_name} (compute capability {device.compute_version})"

    def tvm_target(self, props: dict) -> tvm.target.Target:
        arch = CUDA_ARCH.read(props)
        return tvm.target.Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"})

    def tvm_device(self) -> tvm.runtime.Device:
        return tvm.cuda(0)

    def load(self, path: str, props: dict, weights: Sequence[np.ndarray] | None = None) -> Program:
        """Load an exported module onto GPU 0; fails with DEVICE_NOT_FOUND where no GPU is usable."""
        ok, why = self.can_run_here()
        if not ok:
            fail(f"cuda modules cannot run here: {why}", ResultCode.DEVICE_NOT_FOUND)
        if _kernel_compiler() is None:
            fail(
                "cuda: TVM compiles a module's CUDA C when it is loaded, and neither NVRTC "
                "(pip install cuda-bindings) nor nvcc (a CUDA toolkit on PATH) is available",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        return super().load(path, props, weights)
