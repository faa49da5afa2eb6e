"""``llvm``: the host CPU.

Modules are generated for this machine's CPU (``LLVM_MCPU`` overrides it) and every kernel gets a
default CPU schedule from the ``targets/cpu/`` package (``CPU_SCHEDULES=0`` turns them off).
"""

from __future__ import annotations

import logging
import platform
from typing import TYPE_CHECKING

import tvm_ffi

from nnadapter_tvm.properties import Property, switch
from nnadapter_tvm.runtime import tuning_database, tvm_runtime
from nnadapter_tvm.runtime.tvm_runtime import relax, tvm  # imported on first use: loading needs neither
from nnadapter_tvm.targets.base import TVM_OPT_LEVEL, Driver

if TYPE_CHECKING:
    from nnadapter_tvm.runtime.kernel_cache import KernelCache

log = logging.getLogger("nnadapter_tvm")


def _cpu_pipeline():  # -> the targets.cpu.pipeline module
    # Imported on first build: a process that only loads cached modules never needs the schedules.
    from nnadapter_tvm.targets.cpu import pipeline

    return pipeline


def host_cpu() -> str | None:
    """LLVM's name for this machine's CPU (``emeraldrapids``, ``neoverse-n1``, ...), None if unknown."""
    try:
        cpu = str(tvm.target.codegen.llvm_get_system_cpu())
    except Exception:  # an LLVM without the query
        return None
    return cpu if cpu and cpu != "generic" else None


def host_identity() -> list[str] | None:
    """What LLVM's host CPU name is a function of, read without LLVM: the machine and, on Linux, the
    first CPU's vendor, family, model and feature flags (``/proc/cpuinfo``: what ``cpuid`` reports).
    None where they cannot be read (then the host's target is told by LLVM itself)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            fields: dict[str, str] = {}
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough: all cores of a machine share one model
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return None
    wanted = ("vendor_id", "cpu family", "model", "flags", "CPU implementer", "CPU part", "Features")
    found = [f"{k}={fields[k]}" for k in wanted if k in fields]
    return [platform.machine(), *found] if found else None


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


#: Read by the ``llvm`` and ``arm`` drivers (both build through ``LlvmDriver.build``); declared once, here.
CPU_SCHEDULES = Property(
    "CPU_SCHEDULES",
    "1: default CPU schedules (NHWC, packed weights, tiled, vectorized, parallel); 0: TVM's unscheduled loops "
    "(default: 1)",
    switch,
    True,
)
CPU_WINOGRAD = Property(
    "CPU_WINOGRAD",
    "1: stride-1 3x3 convolutions with constant weights by Winograd F(4x4, 3x3), 1.5-2.8x faster, their "
    "weights 5x the bytes in the compiled model; 0: direct kernels (default: 1)",
    switch,
    True,
)
LLVM_MCPU = Property("LLVM_MCPU", "CPU model for code generation, e.g. skylake-avx512 (default: the host's)", str)
LLVM_MATTR = Property("LLVM_MATTR", "comma-separated LLVM features, e.g. +avx2,+fma", _csv)


class LlvmDriver(Driver):
    name = "llvm"
    properties = (LLVM_MCPU, LLVM_MATTR, CPU_SCHEDULES, CPU_WINOGRAD)

    def can_run_here(self) -> tuple[bool, str]:
        return True, "host CPU"

    def tvm_target(self, props: dict) -> tvm.target.Target:
        config: dict = {"kind": "llvm"}
        cpu = LLVM_MCPU.read(props) or host_cpu()
        if cpu:
            # Without a CPU, LLVM generates baseline code (SSE2 on x86-64: no AVX, no FMA).
            config["mcpu"] = cpu
        features = LLVM_MATTR.read(props)
        if features:
            config["mattr"] = list(features)
        return tvm.target.Target(config)

    def tvm_device(self) -> tvm_ffi.Device:
        return tvm_runtime.cpu(0)

    def target_key(self, props: dict) -> list:
        """The properties, and where no ``LLVM_MCPU`` is set the host's identity (its CPU names the target)."""
        key = super().target_key(props)
        if not LLVM_MCPU.read(props):
            identity = host_identity()
            # Without an identity the key holds LLVM's own answer (a compiler import, once per process).
            key.append(identity if identity is not None else ["mcpu", host_cpu()])
        return key

    def kernel_cache(self, props: dict, key: bytes | None = None) -> KernelCache | None:
        """The machine's kernel cache for this target, where the default schedules build every kernel
        (``CPU_SCHEDULES`` on, no ``TUNING_DATABASE``). Its entries are valid for the target, the
        optimization level and the code of ``targets/cpu`` that built them."""
        if not CPU_SCHEDULES.read(props) or tuning_database.TUNING_DATABASE.read(props) is not None:
            return None
        from nnadapter_tvm.runtime.kernel_cache import KernelCache
        from nnadapter_tvm.targets.cpu import codegen

        salt = f"opt_level={TVM_OPT_LEVEL.read(props)};code={codegen.build_code_fingerprint()}"
        return KernelCache.open(str(self.tvm_target(props)), salt, key)

    def build(self, mod: tvm.IRModule, props: dict, kernels: KernelCache | None = None) -> relax.VMExecutable:
        """Compile ``mod``; with ``CPU_SCHEDULES`` (the default) every kernel is scheduled first.
        ``kernels``: the kernel cache (``kernel_cache``), whose executable runs once exported."""
        target = self.tvm_target(props)
        opt_level = TVM_OPT_LEVEL.read(props)
        if not CPU_SCHEDULES.read(props):
            # TVM's default pipeline, legalizing with this project's rules first (relax_passes).
            from nnadapter_tvm.targets.relax_passes import default_pipeline

            with tvm.transform.PassContext(opt_level=opt_level):
                return tvm.compile(mod, target, relax_pipeline=default_pipeline())
        database = tuning_database.TUNING_DATABASE.read(props)
        tuned = (lambda fused: tuning_database.apply(fused, target, database)) if database is not None else None
        executable, report = _cpu_pipeline().build(
            mod, target, opt_level, tuned, winograd=CPU_WINOGRAD.read(props), lift=True, kernels=kernels
        )
        log.debug("%s schedules: %s", self.name, report)
        return executable

    def export(self, executable: relax.VMExecutable, path: str) -> None:
        """The shared library, each of the build's LLVM modules emitted as object code in its own thread
        (``targets/cpu/codegen.py``)."""
        from nnadapter_tvm.targets.cpu import codegen

        try:
            codegen.export(executable, path)
        finally:
            # Built with the kernel cache: its objects are linked now or never (one export per build).
            objects = getattr(executable, "kernel_objects", None)
            if objects is not None:
                objects.close()

    def lower_for_tuning(self, mod: tvm.IRModule, props: dict) -> tvm.IRModule:
        """The fused kernels the default schedules would see: what MetaSchedule tunes."""
        target = self.tvm_target(props)
        with target, tvm.transform.PassContext(opt_level=TVM_OPT_LEVEL.read(props)):
            return _cpu_pipeline().lower(mod, target, winograd=CPU_WINOGRAD.read(props))

    def default_schedule(self, func: tvm.tirx.PrimFunc, props: dict) -> tvm.tirx.PrimFunc:
        """One kernel under the default CPU schedules: what a tuned record must beat to be applied."""
        from nnadapter_tvm.targets.cpu.schedule import schedule_prim_func

        target = self.tvm_target(props)
        with target:
            return schedule_prim_func(func, target)[0]
