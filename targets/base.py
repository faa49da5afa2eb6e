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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import tvm_ffi

from nnadapter_tvm.properties import Property
from nnadapter_tvm.runtime import tvm_runtime
from nnadapter_tvm.runtime.tvm_runtime import relax, tvm  # imported on first use: loading needs neither
from nnadapter_tvm.runtime.weights import ALIGNMENT, aligned_empty, host_tensors
from nnadapter_tvm.types import DeviceType, OperationType

if TYPE_CHECKING:
    from nnadapter_tvm.runtime.kernel_cache import KernelCache

#: The attribute a scheduled kernel carries: MetaSchedule's applied records, dlight's GPU schedules.
SCHEDULED = "tirx.is_scheduled"


def is_scheduled(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a kernel already has its schedule (a tuned record, a GPU rule): the default rules leave it."""
    return bool(func.attrs is not None and func.attrs.get(SCHEDULED, False))


def _opt_level(text: str) -> int:
    level = int(text)
    if not 0 <= level <= 3:
        raise ValueError("must be 0..3")
    return level


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


# Common context properties (every context accepts them; context.py lists them) that the drivers read.
TVM_OPT_LEVEL = Property("TVM_OPT_LEVEL", "TVM pass-context optimization level, 0..3", _opt_level, 3)
TVM_NUM_THREADS = Property(
    "TVM_NUM_THREADS", "worker threads of the TVM runtime (default: one per core)", _positive, codegen=False
)


class Program:
    """A loaded, runnable module: the spec's ``program`` of ``execute_program``.

    ``run`` is the hot path of every inference. Per thread it keeps the Relax VM, its ``main`` (looked
    up once) and the aligned staging buffers of the inputs it had to copy. A host input that is
    contiguous, writable and 64-byte aligned is passed to the VM without a copy (DLPack); any other
    is copied once into the staging buffer, because TVM's kernels assume 64-byte aligned data
    (``tvm.runtime.from_dlpack`` requires it: the generated code does not guard misaligned access).

    ``weights``: the arrays a CPU build kept out of the module (``runtime.weights``), passed to every
    call of ``main`` as its last argument, one tuple of tensors made once (views of the mapped cache).
    """

    def __init__(self, module: tvm_ffi.Module, device: tvm_ffi.Device, weights: Sequence[np.ndarray] | None = None):
        self.module = module
        self.device = device
        self._local = threading.local()
        # On the host a numpy array and a CPU tensor share memory both ways (DLPack).
        self._on_host = device.dlpack_device_type() == _HOST
        self._weights: tuple = ()
        if weights:
            if self._on_host:
                self._weights = (host_tensors(weights),)
            else:
                self._weights = (tvm_ffi.convert([tvm.runtime.tensor(w, device) for w in weights]),)

    @property
    def vm(self) -> tvm_runtime.VirtualMachine:
        # A Relax VM keeps per-call state; one per thread lets executions run concurrently.
        vm = getattr(self._local, "vm", None)
        if vm is None:
            vm = self._local.vm = tvm_runtime.VirtualMachine(self.module, self.device)
        return vm

    def run(self, inputs: Sequence[np.ndarray | tvm.runtime.Tensor]) -> list[tvm.runtime.Tensor]:
        """``main`` on ``inputs`` (numpy arrays, or tensors: one already on this device is not copied);
        the output tensors, which live on this device until the caller reads them."""
        local = self._local
        main = getattr(local, "main", None)
        if main is None:
            main = local.main = self.vm["main"]
            local.staging = {}
        staged: list[int] | None = None
        arguments = []
        for k, x in enumerate(inputs):
            if type(x) is np.ndarray and self._on_host:
                # The common case: a host array shared as it is when TVM's kernels may read it in place.
                if x.flags.c_contiguous and x.flags.writeable and x.size:
                    tensor = _from_dlpack(x)
                    if tensor is not None and tensor.data_ptr() % ALIGNMENT == 0:
                        arguments.append(tensor)
                        continue
            elif isinstance(x, tvm_ffi.Tensor):
                if x.device == self.device:
                    arguments.append(x)  # the previous subgraph ran here: no copy
                    continue
                x = np.from_dlpack(x) if x.__dlpack_device__()[0] == _HOST else x.numpy()
            else:
                x = np.asarray(x)
            if self._on_host and x.size:  # numpy gives an empty array zero strides, which TVM calls not compact
                tensor = self._stage(local.staging, k, x)
                if tensor is not None:
                    arguments.append(tensor)
                    staged = [*(staged or []), k]
                    continue
            arguments.append(tvm.runtime.tensor(x, self.device))  # another device, or no DLPack (bfloat16)
        results = main(*arguments, *self._weights)
        if isinstance(results, tvm_ffi.Tensor):
            results = [results]
        else:  # a tuple: read through the FFI directly (the Array's Python iterator costs ~1.5 us an item)
            results = [_ARRAY_GET(results, i) for i in range(_ARRAY_SIZE(results))]
        if staged:
            self._release_aliased(local.staging, staged, results)
        return results

    def _stage(self, staging: dict, k: int, x: np.ndarray) -> tvm_ffi.Tensor | None:
        """``x`` copied into this thread's aligned buffer for input ``k`` (grown when too small), and
        the tensor over it (kept while the next calls' shapes are the same); None where numpy cannot
        share the element type over DLPack."""
        entry = staging.get(k)
        if entry is not None and entry.shape == x.shape and entry.dtype == x.dtype:
            np.copyto(entry.view, x)
            return entry.tensor
        buffer = aligned_empty(x.nbytes) if entry is None or entry.buffer.size < x.nbytes else entry.buffer
        view = buffer[: x.nbytes].view(x.dtype).reshape(x.shape)
        np.copyto(view, x)
        tensor = _from_dlpack(view)
        if tensor is None:
            return None
        start = _from_dlpack(buffer).data_ptr()
        staging[k] = _Staged(buffer, start, start + buffer.size, x.shape, x.dtype, view, tensor)
        return tensor

    @staticmethod
    def _release_aliased(staging: dict, staged: list[int], results: list) -> None:
        """A staging buffer that an output shares (``main`` returned an input, or a reshape of one: a
        view) now belongs to that output: the next call stages into a new one."""
        for k in staged:
            entry = staging[k]
            if any(entry.start <= r.data_ptr() < entry.end for r in results if isinstance(r, tvm_ffi.Tensor)):
                del staging[k]


@dataclasses.dataclass
class _Staged:
    """An input's aligned staging buffer (bytes ``start``..``end``), and its view and tensor for the
    last shape and element type staged."""

    buffer: np.ndarray
    start: int
    end: int
    shape: tuple[int, ...]
    dtype: np.dtype
    view: np.ndarray
    tensor: tvm_ffi.Tensor


_HOST = tvm_ffi.DLDeviceType.kDLCPU
_ARRAY_SIZE = tvm_ffi.get_global_func("ffi.ArraySize")
_ARRAY_GET = tvm_ffi.get_global_func("ffi.ArrayGetItem")


def _jsonable(value: object) -> object:
    """A property's parsed value as JSON (sets and tuples as lists, other objects as their text)."""
    if isinstance(value, (set, frozenset)):
        return sorted(str(getattr(v, "name", v)) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _from_dlpack(x: np.ndarray) -> tvm_ffi.Tensor | None:
    """A tensor sharing ``x``'s memory; None where numpy does not export its element type."""
    try:
        return tvm_ffi.from_dlpack(x)
    except (BufferError, TypeError, ValueError):
        return None


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
    def tvm_device(self) -> tvm_ffi.Device: ...

    def target_key(self, props: dict) -> list:
        """What ``tvm_target(props)`` is a function of, as JSON values, computed without TVM's compiler:
        the driver and its properties (a target that also depends on the host adds what it reads of it).
        Equal keys give equal targets (within one TVM version), so a cache whose recorded key equals the
        context's needs no ``tvm.target.Target`` to be checked, and the model token keys on it."""
        return [self.name, {p.key: _jsonable(p.read(props)) for p in self.properties}]

    def supports(self, op_type: OperationType, props: dict) -> bool:
        """Whether this target builds ``op_type``'s kernels, given that a converter exists (the runtime
        checks that: ``runtime.partition``); a target that cannot builds says so here (``gpu.CPU_ONLY``)."""
        return True

    def kernel_cache(self, props: dict, key: bytes | None = None) -> KernelCache | None:
        """The kernel cache this driver's builds use with ``props`` (``runtime.kernel_cache``; entries
        signed with ``key``), or None: drivers whose builds do not use one."""
        return None

    def build(self, mod: tvm.IRModule, props: dict, kernels: KernelCache | None = None) -> relax.VMExecutable:
        """``tvm.compile``'s default pipeline, legalizing with this project's rules (``relax_passes``).
        An executable may carry ``weights`` (``codegen.WeightedExecutable``): arrays kept out of the
        module, which ``main`` takes as its last parameter; the cache stores them beside the module.
        ``kernels`` (from ``kernel_cache``): the built executable then runs once exported."""
        from nnadapter_tvm.targets.relax_passes import default_pipeline

        target = self.tvm_target(props)
        with tvm.transform.PassContext(opt_level=TVM_OPT_LEVEL.read(props)):
            return tvm.compile(mod, target, relax_pipeline=default_pipeline())

    def export(self, executable: relax.VMExecutable, path: str) -> None:
        executable.export_library(path, workspace_dir=os.path.dirname(path))

    def load(self, path: str | bytes | memoryview, props: dict, weights: Sequence[np.ndarray] | None = None) -> Program:
        """The program of an exported module: a file's ``path``, or the library's bytes (written to a
        temporary file: tvm_runtime.load_module_bytes), with the ``weights`` its build kept out of it
        (``runtime.weights``). Needs only TVM's runtime library."""
        threads = TVM_NUM_THREADS.read(props)
        if threads:
            # Process-wide: TVM has one worker pool.  Mode 1 = use the big cores first.
            tvm_runtime.config_threadpool(threads)
        if isinstance(path, (str, os.PathLike)):
            module = tvm_runtime.load_module(os.fspath(path))
        else:
            module = tvm_runtime.load_module_bytes(path)
        return Program(module, self.tvm_device(), weights)

    def lower_for_tuning(self, mod: tvm.IRModule, props: dict) -> tvm.IRModule:
        """The fused, unscheduled module whose kernels MetaSchedule tunes (targets that tune override it)."""
        from nnadapter_tvm.errors import fail
        from nnadapter_tvm.types import ResultCode

        fail(f"the {self.name} device does not tune (llvm and arm do)", ResultCode.FEATURE_NOT_SUPPORTED)

    def describe(self) -> str:
        return f"{self.name} ({self.vendor}, {self.type.name})"
