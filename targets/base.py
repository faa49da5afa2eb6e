"""The device interface (the spec's HAL) that every TVM target implements.

How the spec's ``hal::Device`` maps here:

- ``name``, ``vendor``, ``type``, ``version``  -> the same attributes of ``Driver``
- ``open_device`` / ``close_device``          -> ``Device.acquire`` / ``release`` (drivers are stateless)
- ``create_context``                            -> ``Context`` parses the properties a driver declares
- ``create_program`` (from a model)             -> the runtime converts the model to Relax once, then
                                                   ``Driver.build`` + ``Driver.export`` + ``Driver.load``
- ``create_program`` (from a cache)             -> ``Driver.load`` of the module stored in the ``.nnc``
- ``execute_program``                           -> ``Program.run``

A new target (``arm``, ``cuda``, ``opencl``) subclasses ``Driver``, says which properties it reads
and how it builds, exports and loads, and is added to ``DRIVERS`` in ``targets/__init__.py``.
"""

from __future__ import annotations

import abc
import dataclasses
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

from nnadapter_tvm.types import DeviceType, OperationType

#: The attribute a scheduled kernel carries: MetaSchedule's applied records, dlight's GPU schedules.
SCHEDULED = "tirx.is_scheduled"


def is_scheduled(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a kernel already has its schedule (a tuned record, a GPU rule): the default rules leave it."""
    return bool(func.attrs is not None and func.attrs.get(SCHEDULED, False))


@dataclasses.dataclass(frozen=True)
class Property:
    """A context property a device understands (``KEY=VALUE;`` in the properties string)."""

    key: str
    description: str
    parse: Callable[[str], object]
    default: object = None
    codegen: bool = True  # changes the compiled code, so it enters the model token


class Program:
    """A loaded, runnable module: the spec's ``program`` of ``execute_program``."""

    def __init__(self, module: tvm.runtime.Module, device: tvm.runtime.Device):
        self.module = module
        self.device = device
        self._local = threading.local()

    @property
    def vm(self) -> relax.VirtualMachine:
        # A Relax VM keeps per-call state; one per thread lets executions run concurrently.
        vm = getattr(self._local, "vm", None)
        if vm is None:
            vm = self._local.vm = relax.VirtualMachine(self.module, self.device)
        return vm

    def run(self, inputs: Sequence[np.ndarray | tvm.runtime.Tensor]) -> list[tvm.runtime.Tensor]:
        return list(self.vm["main"](*[self._on_device(x) for x in inputs]))

    def _on_device(self, x: np.ndarray | tvm.runtime.Tensor) -> tvm.runtime.Tensor:
        if isinstance(x, tvm.runtime.Tensor):
            if x.device == self.device:
                return x  # the previous subgraph ran here: no copy
            x = x.numpy()
        return tvm.runtime.tensor(x, self.device)


class Driver(abc.ABC):
    """One kind of device: its identity, the context keys it reads, build/export/load."""

    name: str
    vendor: str = "Apache TVM"
    type: DeviceType = DeviceType.CPU
    version: int = 1
    properties: tuple[Property, ...] = ()

    @abc.abstractmethod
    def can_run_here(self) -> tuple[bool, str]:
        """Whether modules built for this device can execute in this process, and why not."""

    @abc.abstractmethod
    def tvm_target(self, props: dict) -> tvm.target.Target: ...

    @abc.abstractmethod
    def tvm_device(self) -> tvm.runtime.Device: ...

    def supports(self, op_type: OperationType, props: dict) -> bool:
        from nnadapter_tvm.op_converters import supported_operations

        return op_type in supported_operations()

    def build(self, mod: tvm.IRModule, props: dict) -> relax.VMExecutable:
        target = self.tvm_target(props)
        with tvm.transform.PassContext(opt_level=int(props.get("TVM_OPT_LEVEL", 3))):
            return tvm.compile(mod, target)

    def export(self, executable: relax.VMExecutable, path: str) -> None:
        executable.export_library(path, workspace_dir=os.path.dirname(path))

    def load(self, path: str, props: dict) -> Program:
        if props.get("TVM_NUM_THREADS"):
            # Process-wide: TVM has one worker pool.  Mode 1 = use the big cores first.
            tvm.get_global_func("runtime.config_threadpool")(1, int(props["TVM_NUM_THREADS"]))
        return Program(tvm.runtime.load_module(path), self.tvm_device())

    def lower_for_tuning(self, mod: tvm.IRModule, props: dict) -> tvm.IRModule:
        """The fused, unscheduled module whose kernels MetaSchedule tunes (targets that tune override it)."""
        from nnadapter_tvm.errors import fail
        from nnadapter_tvm.types import ResultCode

        fail(f"the {self.name} device does not tune (llvm and arm do)", ResultCode.FEATURE_NOT_SUPPORTED)

    def describe(self) -> str:
        return f"{self.name} ({self.vendor}, {self.type.name})"
