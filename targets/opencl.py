"""``opencl``: OpenCL GPUs (Mali, Adreno, Intel, ...) through TVM's OpenCL code generator.

Every PrimFunc gets a GPU schedule (``targets/gpu.py``), the kernels become OpenCL C and the
host code is generated for this machine or, with ``OPENCL_HOST=aarch64``, cross-compiled for
an ARM board (``aarch64-linux-gnu-g++``, else zig from the ``ziglang`` wheel: ``targets/toolchain.py``).
The board's OpenCL driver compiles the OpenCL C when the module is loaded.  The apache-tvm
wheel has OpenCL *codegen* but no OpenCL *runtime*, so a module compiles and exports here but
runs only where TVM's runtime was built with OpenCL (``USE_OPENCL=ON``); see docs/targets-gpu.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.properties import Property
from nnadapter_tvm.runtime.tvm_runtime import tvm  # imported on first use: a context needs none of it
from nnadapter_tvm.targets.base import Program
from nnadapter_tvm.targets.gpu import HOST_TRIPLES, GpuDriver, host_machine, llvm_host
from nnadapter_tvm.types import ResultCode


def _host(text: str) -> str:
    """``x86_64`` or ``aarch64`` (``arm64``/``amd64`` accepted)."""
    machine = {"arm64": "aarch64", "amd64": "x86_64", "x86-64": "x86_64"}.get(text.lower(), text.lower())
    if machine not in HOST_TRIPLES:
        raise ValueError(f"expected one of {', '.join(HOST_TRIPLES)}, got {text!r}")
    return machine


OPENCL_HOST = Property(
    "OPENCL_HOST",
    "CPU the host code is generated for: x86_64 or aarch64 (default: this machine's); "
    "aarch64 from another machine needs aarch64-linux-gnu-g++ or the ziglang package",
    _host,
)


class OpenclDriver(GpuDriver):
    """``opencl``: kernels in OpenCL C, host code for this machine or an aarch64 board."""

    name = "opencl"
    vendor = "Khronos OpenCL (via TVM)"
    properties = (OPENCL_HOST,)

    def can_run_here(self) -> tuple[bool, str]:
        """Whether TVM's OpenCL runtime is present and sees a device (``tvm.opencl(0).exist``)."""
        if not tvm.runtime.enabled("opencl"):
            return False, (
                "the TVM runtime in this process has no OpenCL support (the apache-tvm wheel ships "
                "OpenCL code generation but not the OpenCL runtime; build TVM with USE_OPENCL=ON)"
            )
        if not tvm.opencl(0).exist:
            return False, "no OpenCL device is visible"
        return True, tvm.opencl(0).device_name

    def tvm_target(self, props: dict) -> tvm.target.Target:
        return tvm.target.Target({"kind": "opencl"}, host=llvm_host(OPENCL_HOST.read(props)))

    def tvm_device(self) -> tvm.runtime.Device:
        return tvm.opencl(0)

    def load(self, path: str, props: dict, weights: Sequence[np.ndarray] | None = None) -> Program:
        """Load an exported module onto OpenCL device 0.

        Fails with FEATURE_NOT_SUPPORTED where the module's host code is for another CPU or the
        TVM runtime has no OpenCL, and with DEVICE_NOT_FOUND where no OpenCL device is visible."""
        machine = OPENCL_HOST.read(props) or host_machine()
        if machine != host_machine():
            fail(
                f"opencl: this module's host code is for {machine} (OPENCL_HOST) and this machine is "
                f"{host_machine()}; copy the cache to the board and load it there",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        ok, why = self.can_run_here()
        if not ok:
            runtime = tvm.runtime.enabled("opencl")
            code = ResultCode.DEVICE_NOT_FOUND if runtime else ResultCode.FEATURE_NOT_SUPPORTED
            fail(f"opencl modules cannot run here: {why}", code)
        return super().load(path, props, weights)
