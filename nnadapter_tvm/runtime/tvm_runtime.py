"""TVM as a process that only runs compiled models needs it: the runtime library, without ``import tvm``.

``import tvm`` loads the 260 MB compiler library (LLVM inside) and imports Relax, TIR, TE and the
script printer: 0.7-0.9 s on the 2-core machine of docs/performance.md, most of a cached load.
Running an exported module needs none of it: the module's loader, the Relax VM and the thread pool
live in ``libtvm_runtime.so``, and every object crosses into Python through ``tvm_ffi``. This module
loads that library the way ``tvm.base`` does (same file, ``RTLD_GLOBAL``), so a later ``import tvm``
in the same process (a compile) finds it already loaded and adds the compiler beside it: modules,
tensors and VMs made before it stay valid, since both sides are ``tvm_ffi`` objects.

``TVM_USE_RUNTIME_LIB=1`` is not used: it makes ``import tvm`` skip the compiler for the whole process
(``tvm.base._RUNTIME_ONLY``), and the Python modules imported that way bind their functions at
import, so a compile later in that process fails.

``tvm`` and ``relax`` here are stand-ins that import the real modules on first attribute access; the
drivers and the runtime checks import them instead of ``tvm`` so that importing nnadapter_tvm, making
a context and loading a cache never import TVM's Python package (a CUDA device does, on load: TVM's
NVRTC callback is registered by ``import tvm``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Sequence
from pathlib import Path

import tvm_ffi

_LOCK = threading.Lock()
_LOADED = False
_VERSION: str | None = None
_KEEP: list[object] = []  # the runtime library's handle: it must never be unloaded

#: Relax VM allocator kinds (``tvm.runtime.vm.VirtualMachine``): 2 = pooled, TVM's default.
POOLED_ALLOCATOR = 2
_CPU = int(tvm_ffi.DLDeviceType.kDLCPU)


class LazyModule(types.ModuleType):
    """A module imported on first attribute access (``tvm.target.Target`` imports ``tvm`` there)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attr: str) -> object:
        module = importlib.import_module(self.__dict__["_lazy_name"])
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


tvm = LazyModule("tvm")
relax = LazyModule("tvm.relax")


def _package_dir() -> Path:
    """TVM's package directory, found without importing it (importing ``tvm`` is what we avoid)."""
    if "tvm" in sys.modules and getattr(sys.modules["tvm"], "__file__", None):
        return Path(sys.modules["tvm"].__file__).parent
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the apache-tvm package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _lib_paths(pkg: Path) -> list[Path]:
    # tvm.libinfo.package_lib_paths(), repeated: the same search order finds the same file, so the
    # dlopen of a later `import tvm` returns this handle instead of loading a second copy.
    paths = [Path(os.environ["TVM_LIBRARY_PATH"])] if os.environ.get("TVM_LIBRARY_PATH") else []
    return [*paths, pkg / "lib", pkg / ".." / ".." / "build" / "lib", pkg / ".." / ".." / "lib"]


def ensure_loaded() -> None:
    """Load TVM's runtime library into the process (once); nothing when ``tvm`` is imported already."""
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        if "tvm.base" not in sys.modules:
            from tvm_ffi.libinfo import load_lib_ctypes

            runtime = load_lib_ctypes("tvm", "tvm_runtime", "RTLD_GLOBAL", extra_lib_paths=_lib_paths(_package_dir()))
            _KEEP.append(runtime)
            # The functions compiled kernels call that live outside the runtime library: the sorts behind
            # argsort / TOP_K / NON_MAX_SUPPRESSION ("tvm.contrib.sort.*"), registered when the library
            # loads. ``import tvm`` loads it too (tvm.backend._autoload_backends), from the same file.
            # (A TVM build without it: a model that calls into it fails naming the function.)
            with contextlib.suppress(OSError, RuntimeError):
                here = [Path(runtime._name).resolve().parent]
                _KEEP.append(load_lib_ctypes("tvm", "tvm_runtime_extra", "RTLD_LOCAL", extra_lib_paths=here))
        _LOADED = True


def tvm_version() -> str:
    """``tvm.__version__`` without importing ``tvm`` (read from the package's ``_version.py``)."""
    global _VERSION
    if _VERSION is None:
        module = sys.modules.get("tvm")
        if module is not None and hasattr(module, "__version__"):
            _VERSION = str(module.__version__)
        else:
            namespace: dict = {}
            try:
                source = (_package_dir() / "_version.py").read_text()
                exec(compile(source, "tvm/_version.py", "exec"), namespace)
                _VERSION = str(namespace["version"])
            except (OSError, KeyError, SyntaxError):
                _VERSION = str(importlib.import_module("tvm").__version__)  # the long way, as tvm.libinfo does
    return _VERSION


def global_func(name: str) -> tvm_ffi.Function:
    ensure_loaded()
    return tvm_ffi.get_global_func(name)


def cpu(index: int = 0) -> tvm_ffi.Device:
    return tvm_ffi.device("cpu", index)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the machine's count where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def config_threadpool(threads: int) -> None:
    """The runtime's one worker pool: ``threads`` workers, big cores first (mode 1).

    The pool's size alone is not enough: each parallel loop asks TVM's ``MaxConcurrency``, which reads
    ``TVM_NUM_THREADS`` from the environment at every launch, how many tasks to split into; unset, that
    is the core count, so a pool of one still hands every kernel to a worker and waits for it (about
    3 us a launch, 15 us a small model's call on 2 cores). With the variable set too, one thread runs
    the kernels inline and more threads split them as configured, whatever the order of the imports."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    global_func("runtime.config_threadpool")(1, threads)


def load_module(path: str) -> tvm_ffi.Module:
    """An exported shared library (``export_library``), as ``tvm.runtime.load_module`` loads a ``.so``."""
    ensure_loaded()
    return tvm_ffi.load_module(path)


def load_module_bytes(blob: bytes | memoryview) -> tvm_ffi.Module:
    """The module whose shared library is ``blob`` (an ``.nnc``'s blob), through a temporary file.

    ``dlopen`` needs a file of its own. An in-memory file (``memfd_create``, loaded through
    ``/proc/self/fd/N``) was tried and is wrong twice over: glibc's ``dlopen`` returns the library already
    loaded under the same path *name*, so a second model loaded through a reused descriptor number runs
    the first model's code; and its pages are unevictable RAM for as long as the library stays mapped
    (a whole second copy of vgg19's 548 MB of constants), where a deleted file's are clean page cache."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-") as tmp:
        path = os.path.join(tmp, "module.so")
        with open(path, "wb") as f:
            f.write(blob)
        return load_module(path)


class VirtualMachine:
    """The Relax VM of a loaded module on ``device`` (what ``tvm.relax.VirtualMachine`` does for a
    module, pooled allocators, without importing ``tvm``): ``vm["main"]`` and ``set_instrument``."""

    def __init__(self, module: tvm_ffi.Module, device: tvm_ffi.Device | Sequence[tvm_ffi.Device]):
        self.module = module["vm_load_executable"]()
        devices = list(device) if isinstance(device, (list, tuple)) else [device]
        # The host runs shape functions: a device list must end with the CPU (as TVM's wrapper does).
        if devices[-1].dlpack_device_type() % _RPC_SESS_MASK != _CPU:
            devices.append(cpu(0))
        arguments: list[int] = []
        for d in devices:
            arguments += [d.dlpack_device_type() % _RPC_SESS_MASK, d.index, POOLED_ALLOCATOR]
        self.module["vm_initialization"](*arguments)

    def __getitem__(self, name: str) -> tvm_ffi.Function:
        return self.module[name]

    def set_instrument(self, instrument: object) -> None:
        """A function the VM calls around every instruction (the profiler's timer), None to stop."""
        self.module["set_instrument"](instrument)


_RPC_SESS_MASK = 128  # tvm.rpc.base.RPC_SESS_MASK: device types of a remote session carry it


def runtime_enabled(kind: str) -> bool:
    """Whether the loaded TVM runtime supports device ``kind`` (``tvm.runtime.enabled``)."""
    return bool(global_func("runtime.RuntimeEnabled")(kind))
