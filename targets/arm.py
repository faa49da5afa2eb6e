"""``arm``: 64-bit ARM CPUs (aarch64 with NEON), cross-compiled here and run on a board.

The target is LLVM's aarch64 backend; the CPU model and features come from the context
properties (``ARM_MCPU``, ``ARM_MATTR``, ``ARM_MTRIPLE``), so a module can be tuned to the
board's ``-mcpu``.  On any other host the module is linked with the aarch64 cross compiler
(Debian ``g++-aarch64-linux-gnu``, else zig from the ``ziglang`` wheel: ``targets/toolchain.py``)
and stored in the ``.nnc``; it cannot run in this process
(the runtime keeps it unloaded) and is deployed to a board (``nnadapter-tvm deploy``), which loads
it from the cache with the TVM runtime alone.  On an aarch64 host it also runs locally.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import struct
from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.properties import Property
from nnadapter_tvm.runtime.tvm_runtime import relax, tvm  # imported on first use: loading needs neither
from nnadapter_tvm.targets import toolchain
from nnadapter_tvm.targets.base import Driver, Program
from nnadapter_tvm.targets.llvm import LlvmDriver, _csv
from nnadapter_tvm.types import ResultCode

DEFAULT_MTRIPLE = "aarch64-linux-gnu"
DEFAULT_MATTR = ("+neon",)
#: Overrides the cross compiler (default: ``<ARM_MTRIPLE>-g++``, else zig from the ``ziglang`` wheel).
CXX_ENV = toolchain.CXX_ENV
_AARCH64_MACHINES = ("aarch64", "arm64")


def _mtriple(text: str) -> str:
    triple = text.strip()
    if triple.split("-")[0] not in _AARCH64_MACHINES or len(triple.split("-")) < 2:
        raise ValueError("must be a 64-bit ARM triple such as aarch64-linux-gnu")
    return triple


def _mattr(text: str) -> list[str]:
    # An empty ARM_MATTR= means the default: NEON is what every aarch64 kernel assumes.
    features = _csv(text) or list(DEFAULT_MATTR)
    bad = [f for f in features if f[:1] not in "+-" or len(f) < 2]
    if bad:
        raise ValueError(f"features must look like +neon or -sve, got {', '.join(bad)}")
    return features


def _mcpu(text: str) -> str:
    cpu = text.strip()
    if not cpu or any(c.isspace() for c in cpu):
        raise ValueError("must be one LLVM CPU name such as cortex-a72")
    return cpu


ARM_MCPU = Property("ARM_MCPU", "CPU model of the ARM board, as for -mcpu, e.g. cortex-a72 (default: generic)", _mcpu)
ARM_MATTR = Property(
    "ARM_MATTR",
    "comma-separated aarch64 features for arm, e.g. +neon,+dotprod (default: +neon)",
    _mattr,
    list(DEFAULT_MATTR),
)
ARM_MTRIPLE = Property("ARM_MTRIPLE", f"target triple for arm (default: {DEFAULT_MTRIPLE})", _mtriple, DEFAULT_MTRIPLE)


def host_is_aarch64() -> bool:
    """Whether this process runs on a 64-bit ARM CPU."""
    return platform.machine().lower() in _AARCH64_MACHINES


class ArmDriver(LlvmDriver):
    """aarch64 CPUs through LLVM; shares the ``llvm`` driver's build pipeline (and so its CPU
    schedules), with its own target, cross export and load."""

    name = "arm"
    vendor = "Apache TVM"
    properties = (ARM_MCPU, ARM_MATTR, ARM_MTRIPLE)
    # CPU_SCHEDULES, declared by the llvm driver, applies here too: build() is LlvmDriver.build.

    def can_run_here(self) -> tuple[bool, str]:
        if host_is_aarch64():
            return True, "aarch64 host"
        return False, f"cross-compiles on {platform.machine()}; runs on an aarch64 board (nnadapter-tvm deploy)"

    def tvm_target(self, props: dict) -> tvm.target.Target:
        config: dict = {
            "kind": "llvm",
            "mtriple": ARM_MTRIPLE.read(props),
            "mattr": list(ARM_MATTR.read(props)),
        }
        cpu = ARM_MCPU.read(props)
        if cpu:
            known = _known_cpus(config["mtriple"])
            if known and cpu not in known:
                fail(f"ARM_MCPU={cpu!r} is not an LLVM CPU for {config['mtriple']}; e.g. {', '.join(known[:8])}, ...")
            config["mcpu"] = cpu
        return tvm.target.Target(config)

    def tvm_device(self) -> tvm.runtime.Device:
        return tvm.cpu(0)

    def target_key(self, props: dict) -> list:
        # The board's target is all in the properties: not the llvm driver's host CPU.
        return Driver.target_key(self, props)

    def cross_compiler(self, props: dict | None = None) -> toolchain.Linker:
        """The linker of the board's library on this (non-aarch64) host, an ``fcompile`` for TVM:
        ``$NNADAPTER_TVM_ARM_CXX``, else ``<ARM_MTRIPLE>-g++``, else the ``ziglang`` wheel's zig
        (``targets/toolchain.py``); DEVICE_INTERNAL_ERROR naming both packages when there is none."""
        return toolchain.cross_linker(ARM_MTRIPLE.read(props or {}), "arm")

    def kernel_cache(self, props: dict, key: bytes | None = None) -> None:
        """None: the board's library is linked by ``export_library`` with a cross linker, from the modules
        the build holds (the kernel cache's objects are linked by ``codegen.export`` only)."""
        return None

    def build(self, mod: tvm.IRModule, props: dict, kernels: object = None) -> relax.VMExecutable:
        executable = super().build(mod, props)
        # The runtime calls export(executable, path) without the properties; the triple picks the linker.
        executable._nnadapter_arm_props = dict(props)
        return executable

    def export(self, executable: relax.VMExecutable, path: str, props: dict | None = None) -> None:
        if props is None:
            props = getattr(executable, "_nnadapter_arm_props", None)
        if host_is_aarch64():
            native = os.environ.get(CXX_ENV) or "g++"
            if shutil.which(native) is None:
                fail(
                    f"the arm device links its module with {native!r}, which is not on PATH: install g++ "
                    f"(apt-get install g++) or set {CXX_ENV}; a board that only runs cached models needs none",
                    ResultCode.DEVICE_INTERNAL_ERROR,
                )
            executable.export_library(
                path, workspace_dir=os.path.dirname(path), fcompile=tvm.support.cc.cross_compiler(native)
            )
            return
        executable.export_library(path, workspace_dir=os.path.dirname(path), fcompile=self.cross_compiler(props))

    def load(self, path: str, props: dict, weights: Sequence[np.ndarray] | None = None) -> Program:
        # The runtime loads only what can_run_here() allows; this guards direct callers.
        if not host_is_aarch64():
            fail(
                f"the arm module is aarch64 code and this host is {platform.machine()}: run it on an aarch64 host "
                "or deploy it to a board (nnadapter-tvm deploy MODEL --host user@board --verify)",
                ResultCode.DEVICE_NOT_FOUND,
            )
        return super().load(path, props, weights)


@functools.lru_cache(maxsize=8)
def _known_cpus(mtriple: str) -> tuple[str, ...]:
    try:
        from tvm.target import codegen

        target = tvm.target.Target({"kind": "llvm", "mtriple": mtriple})
        return tuple(sorted(str(c) for c in codegen.llvm_get_cpu_archlist(target)))
    except Exception:  # an LLVM without the query: leave the CPU to LLVM's own warning
        return ()


def elf_machine(data: bytes) -> int | None:
    """``e_machine`` of an ELF image (183 = EM_AARCH64, 62 = EM_X86_64), None if not ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        return None
    order = "<" if data[5] == 1 else ">"
    return struct.unpack_from(order + "H", data, 18)[0]
