"""LLVM code generation and object emission spread over threads: the CPU build's last steps.

``tvm.compile`` puts every kernel of a model into one LLVM module, which LLVM optimizes and then turns
into object code (at export) on one core: about 45 ms per kernel, 8.7 s of densenet121's compile on
this project's machines. ``build`` does what ``tvm.compile`` does (Relax's default pipeline, the VM's
bytecode, TIR's default pipeline, ``VMLink``) but hands the lowered kernels to ``jobs`` LLVM modules,
each generated in its own thread; ``export`` writes each module's object file in its own thread and
links them as ``export_library`` does. TVM's FFI releases the GIL during its calls, and each LLVM
module has its own LLVM context, so the threads run in parallel.  TIR's lowering pipeline, which works
function by function, runs in threads too, over groups of the kernels (``_lower_in_parallel``).

The first module imports the others: in memory the VM finds a kernel through the library's imports,
and the exported shared library is one DSO whose imported modules all load as that same library, so
the cache keeps its format (one library per subgraph). Each kernel's code is the one the single module
gives: densenet121's 396 functions disassemble alike either way (call displacements and one alignment
``nop`` aside). A wall-time gain needs idle cores: on a machine busy with other sessions, Linux's
autogroup scheduling gives a session one share of the CPUs whatever its thread count.

Functions with and without ``tirx.noalias`` never share an LLVM module: TVM's LLVM code generator
(``CodeGenLLVM``, 0.27) declares every function of a module before generating any, and the flag that
marks buffers as not aliasing (``is_restricted_``) is set while declaring, so every function of the
module is generated with the flag of the last one declared (by symbol name). A symbolic-shape model's
``shape_func`` (Relax's shape computation, without ``tirx.noalias``) thus took the flag from every
kernel of its module: all their buffers went into one TBAA alias set, and LLVM stored each register
accumulator of a dense product back to memory on every step of its reduction loop (2.6x the kernel's
time). ``_split`` keeps them apart.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax import _ffi_api as relax_api
from tvm.relax import vm_build
from tvm.runtime import _ffi_api as runtime_api
from tvm.tirx.build import codegen_build, split_host_device_mods, tir_to_runtime

from nnadapter_tvm.errors import fail
from nnadapter_tvm.runtime import phases
from nnadapter_tvm.runtime.kernel_cache import SYMBOL_PREFIX, KernelCache
from nnadapter_tvm.runtime.tvm_runtime import usable_cpus
from nnadapter_tvm.targets.kernel_identity import private_kernels, rename_functions
from nnadapter_tvm.targets.relax_passes import guard_reshape_analysis, lift_weights
from nnadapter_tvm.types import ResultCode

#: Overrides the number of LLVM modules (and threads) of a CPU build's kernels; 1 builds them in one
#: module, as ``tvm.compile`` does (functions without ``tirx.noalias`` get one more, see ``_split``).
THREADS_ENV = "NNADAPTER_TVM_BUILD_THREADS"
#: Kernels per LLVM module below which another module (and thread) is not worth its fixed cost.
MIN_KERNELS_PER_MODULE = 8


def default_jobs() -> int:
    """How many LLVM modules a build's kernels use: ``$NNADAPTER_TVM_BUILD_THREADS`` where set (1: one
    module, as TVM builds), else the CPUs this process may run on."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            fail(f"{THREADS_ENV} must be a whole number of threads, got {value!r}", ResultCode.INVALID_PARAMETER)
    return usable_cpus()


@functools.cache
def build_code_fingerprint() -> str:
    """A hash of the code that turns a fused kernel into object code here (this package's schedules and
    build): the kernel cache's entries are only valid for the code that built them."""
    digest = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


@dataclass
class CachedKernels:
    """A build's use of the kernel cache: its kernels renamed to their entries' symbols, the object code
    found for some (``found``, by symbol) and, for the others, what to store once built (``wanted``:
    symbol -> (entry name, the kernel as keyed))."""

    cache: KernelCache
    found: dict[str, bytes] = field(default_factory=dict)
    wanted: dict[str, tuple[str, tirx.PrimFunc]] = field(default_factory=dict)

    @classmethod
    def look_up(cls, mod: tvm.IRModule, cache: KernelCache) -> tuple[tvm.IRModule, CachedKernels | None]:
        """``mod`` (fused, unscheduled) with each private kernel named after its cache entry, and what
        the cache holds of them. No use of the cache (None) where a kernel calls another: such kernels
        must share one LLVM module, and entries are one kernel each."""
        kernels = private_kernels(mod)
        if not kernels or _has_internal_calls(tvm.IRModule(kernels)):
            return mod, None
        plan, names = cls(cache), {}
        for gvar, func in kernels.items():
            name = cache.name(func)
            symbol = SYMBOL_PREFIX + name
            if symbol in names.values():
                continue  # two kernels under one hash: the second keeps its own name and is built
            names[gvar] = symbol
            obj = cache.read(name, func)
            if obj is not None:
                plan.found[symbol] = obj
            else:
                plan.wanted[symbol] = (name, func)
        return rename_functions(mod, names), plan

    def store(self, symbol: str, path: str) -> None:
        """The object file at ``path``, built for ``symbol``, into the cache."""
        name, func = self.wanted[symbol]
        with open(path, "rb") as f:
            self.cache.write(name, func, f.read())


class WeightedExecutable(relax.VMExecutable):
    """A VM executable whose ``main`` takes ``weights`` (arrays lifted out of the module,
    ``relax_passes.lift_weights``) as its last parameter, a tuple; ``Program`` passes them."""

    def __init__(self, mod: tvm.runtime.Module, weights: list[np.ndarray]):
        super().__init__(mod)
        self.weights = weights


def build(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    jobs: int | None = None,
    lift: bool = False,
    cached: CachedKernels | None = None,
) -> relax.VMExecutable:
    """``tvm.compile(mod, target)`` for a CPU target, with the kernels' code generated by up to ``jobs``
    LLVM modules in parallel (default: ``default_jobs()``). Call under the build's ``PassContext``.
    ``lift``: the large constants leave the module (a ``WeightedExecutable``, what the drivers build).

    ``cached`` (``CachedKernels.look_up``): the kernels it found are not built, each other kernel it names
    is built in an LLVM module of its own, whose object file goes into the cache; the executable's
    ``kernel_objects`` lists all their object files, which ``export`` links into the library: such an
    executable runs only once exported."""
    with target:
        mod = relax.get_pipeline("default")(guard_reshape_analysis(mod))
    weights: list[np.ndarray] = []
    if lift:
        mod, weights = lift_weights(mod)
    attrs = dict(mod.attrs) if mod.attrs else {}
    ext_libs = list(attrs.get("external_mods", []))
    params = dict(attrs.get("const_name_to_constant", {}))
    builder = relax.ExecBuilder()
    mod = vm_build._vmcodegen(builder, mod, "bytecode")
    tir_mod = vm_build._filter_tir(mod)
    lib, objects = None, None
    if cached is not None:
        objects = _KernelObjects()
        tir_mod = _without(tir_mod, set(cached.found)) if tir_mod is not None else None
        if tir_mod is None or len(tir_mod.get_global_vars()) == 0:
            # The library's kernels all come from the cache: one function keeps a DSO module in the tree.
            tir_mod = _placeholder()
    try:
        if objects is not None:
            for symbol, obj in cached.found.items():
                objects.add(symbol, obj)
        if tir_mod is not None and len(tir_mod.get_global_vars()) > 0:
            lib = _build_tir(vm_build._auto_attach_system_lib_prefix(tir_mod, target), target, jobs, cached, objects)
    except BaseException:
        if objects is not None:
            objects.close()
        raise
    linked = relax_api.VMLink(builder, target, lib, ext_libs, params)
    executable = WeightedExecutable(linked, weights) if weights else relax.VMExecutable(linked)
    if objects is not None:
        executable.kernel_objects = objects
    return executable


class _KernelObjects(list):
    """The object files of kernels built apart (the kernel cache's), in a directory that lives as long
    as the executable holding this list."""

    def __init__(self) -> None:
        super().__init__()
        self._directory = tempfile.TemporaryDirectory(prefix="nnadapter-tvm-kernels-")

    def path(self, symbol: str) -> str:
        return os.path.join(self._directory.name, symbol + ".o")

    def add(self, symbol: str, obj: bytes) -> None:
        with open(self.path(symbol), "wb") as f:
            f.write(obj)
        self.append(self.path(symbol))

    def close(self) -> None:
        """Remove the files now: once exported, or when the build fails (an error's traceback may keep
        this list alive for as long as the caller holds the error)."""
        self.clear()
        self._directory.cleanup()


def _without(tir_mod: tvm.IRModule, symbols: set[str]) -> tvm.IRModule:
    kept = {gvar: func for gvar, func in tir_mod.functions_items() if gvar.name_hint not in symbols}
    return tvm.IRModule(kept, attrs=tir_mod.attrs)


def _placeholder() -> tvm.IRModule:
    func = tirx.PrimFunc([], tirx.Evaluate(tirx.const(0, "int32"))).with_attr(
        "global_symbol", "__nnadapter_tvm_placeholder"
    )
    return tvm.IRModule({"__nnadapter_tvm_placeholder": func})


def _build_tir(
    tir_mod: tvm.IRModule,
    target: tvm.target.Target,
    jobs: int | None,
    cached: CachedKernels | None = None,
    objects: _KernelObjects | None = None,
) -> tvm.runtime.Module:
    """``tvm.tirx.build(tir_mod, target)`` (host code only) split into several LLVM modules. The kernels
    ``cached`` wants are built one per module, written to ``objects`` and stored, outside the result."""
    host = target if target.host is None else target.host
    tir_mod = tirx.transform.BindTarget(target.with_host(host))(tir_mod)
    pipeline, finalize_host, _ = tirx.get_tir_pipeline("default")
    tir_mod = _lower_in_parallel(tir_mod, pipeline, jobs or default_jobs())
    host_mod, device_mods = split_host_device_mods(tir_mod)
    if any(len(m.functions) for m in device_mods.values()):  # not a CPU build: TVM's own way
        return tir_to_runtime(finalize_host()(host_mod), device_mods, host)
    host_mod = finalize_host()(host_mod)
    apart: list[tvm.IRModule] = []
    if cached is not None:
        wanted = [gvar for gvar in host_mod.get_global_vars() if gvar.name_hint in cached.wanted]
        apart = [tvm.IRModule({gvar: host_mod[gvar]}, attrs=host_mod.attrs) for gvar in wanted]
        host_mod = _without(host_mod, {gvar.name_hint for gvar in wanted})
    parts = _split(host_mod, jobs or default_jobs())
    if len(parts) == 1 and not apart:
        return codegen_build(parts[0], host)
    context = tvm.transform.PassContext.current()
    config = dict(context.config) if context.config is not None else {}
    apart_ids = {id(part) for part in apart}

    def generate(part: tvm.IRModule) -> tvm.runtime.Module | None:
        # PassContext and Target are per thread: the worker gets the build's options (not its instruments).
        with host, tvm.transform.PassContext(opt_level=context.opt_level, config=config):
            lib = codegen_build(part, host)
        if id(part) not in apart_ids:
            return lib
        (symbol,) = [gvar.name_hint for gvar in part.get_global_vars()]
        lib.write_to_file(objects.path(symbol))
        cached.store(symbol, objects.path(symbol))
        return None

    # Kernels apart first: a pool works in order, and they are the many small tasks to spread.
    with ThreadPoolExecutor(max_workers=jobs or default_jobs(), thread_name_prefix="nnadapter-tvm-llvm") as pool:
        libs = list(pool.map(generate, apart + parts))
    for part in apart:
        objects.append(objects.path(part.get_global_vars()[0].name_hint))
    libs = libs[len(apart) :]
    for other in libs[1:]:
        libs[0].import_module(other)
    return libs[0]


def _lower_in_parallel(tir_mod: tvm.IRModule, pipeline, jobs: int) -> tvm.IRModule:
    """TIR's default ``pipeline`` run on groups of ``tir_mod``'s kernels in ``jobs`` threads, the results
    merged into one module: its passes work function by function (a Winograd kernel takes 0.13 s, and
    this was densenet121's longest serial phase).  One group where a function calls another."""
    functions = list(tir_mod.functions_items())
    count = max(1, min(jobs, len(functions) // MIN_KERNELS_PER_MODULE))
    if count == 1 or _has_internal_calls(tir_mod):
        return pipeline(tir_mod)
    groups = [tvm.IRModule(dict(functions[k::count]), attrs=tir_mod.attrs) for k in range(count)]
    context = tvm.transform.PassContext.current()
    config = dict(context.config) if context.config is not None else {}
    target = tvm.target.Target.current(allow_none=True)

    def lower(group: tvm.IRModule) -> tvm.IRModule:
        # PassContext and Target are per thread: the worker gets the build's options (not its instruments).
        in_target = target if target is not None else contextlib.nullcontext()
        with tvm.transform.PassContext(opt_level=context.opt_level, config=config), in_target:
            return pipeline(group)

    # The workers' passes are not seen by the build's instruments: their time is booked here.
    with phases.phase(phases.TIR), ThreadPoolExecutor(count, thread_name_prefix="nnadapter-tvm-tir") as pool:
        lowered = list(pool.map(lower, groups))
    merged = {gvar.name_hint: (gvar, func) for part in lowered for gvar, func in part.functions_items()}
    # In the module's own order: ``_split`` deals neighbouring kernels to different LLVM modules.
    ordered = [merged.pop(gvar.name_hint) for gvar, _ in functions if gvar.name_hint in merged]
    return tvm.IRModule(dict(ordered + list(merged.values())), attrs=lowered[0].attrs)


def _split(host_mod: tvm.IRModule, jobs: int) -> list[tvm.IRModule]:
    """The module's functions in at most ``jobs`` modules of kernels declared ``tirx.noalias``, dealt
    round-robin (in their order, so that neighbouring kernels of one size spread over all), plus one
    module of the functions without it (see the module's docstring for why they never share one).
    One module where a function calls another (a callee must be in its caller's LLVM module): there
    the two kinds still share it, and its kernels may lose ``noalias`` (no CPU build of ours has such
    calls)."""
    if _has_internal_calls(host_mod):
        return [host_mod]
    items = list(host_mod.functions_items())
    restricted = [(gvar, func) for gvar, func in items if _is_noalias(func)]
    others = {gvar: func for gvar, func in items if not _is_noalias(func)}
    count = max(1, min(jobs, len(restricted) // MIN_KERNELS_PER_MODULE))
    groups: list[dict] = [{} for _ in range(count)]
    for k, (gvar, func) in enumerate(restricted):
        groups[k % count][gvar] = func
    groups = [group for group in groups if group]
    if others:
        groups.append(others)
    return [tvm.IRModule(group, attrs=host_mod.attrs) for group in groups] or [host_mod]


def _is_noalias(func: object) -> bool:
    attrs = getattr(func, "attrs", None)
    return bool(attrs is not None and attrs.get("tirx.noalias", False))


def _has_internal_calls(host_mod: tvm.IRModule) -> bool:
    """Whether some function calls another function of the module (a ``GlobalVar`` as a call's op)."""
    found: list[object] = []

    def visit(node: tvm.ir.Call) -> None:
        if isinstance(node.op, tvm.ir.GlobalVar):
            found.append(node)

    for _, func in host_mod.functions_items():
        tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, visit)], order="pre")
        if found:
            return True
    return False


def export(executable: relax.VMExecutable, path: str, fcompile: object = None) -> None:
    """``executable.export_library(path)`` with each LLVM module's object file written in its own thread.

    The same files as ``export_library`` gives (``lib<k>.o`` per module, ``devc.o`` holding the VM's
    bytecode and constants and the import tree) linked by ``fcompile`` (TVM's ``create_shared`` by
    default) into ``path``; the objects go into ``path``'s directory. A module of another kind (C
    source, a device's code) goes through ``export_library`` unchanged."""
    root = executable.mod
    modules: Sequence = root._collect_dso_modules()
    kernels = list(getattr(executable, "kernel_objects", ()))  # built apart: the kernel cache's
    own_way = any(m.kind != "llvm" for m in modules) or hasattr(fcompile, "object_format")
    if kernels and (own_way or not modules):
        fail("an executable built with the kernel cache is exported by codegen.export to an LLVM shared library")
    if (len(modules) <= 1 and not kernels) or own_way:
        executable.export_library(path, workspace_dir=os.path.dirname(path), fcompile=fcompile)
        return
    workspace = os.path.dirname(path)
    files = [os.path.join(workspace, f"lib{k}.o") for k in range(len(modules))]
    with ThreadPoolExecutor(max_workers=len(modules), thread_name_prefix="nnadapter-tvm-emit") as pool:
        list(pool.map(lambda m, f: m.write_to_file(f), modules, files))
    files += kernels
    first = modules[-1]  # export_library reads the last module's target and system-library settings
    is_system_lib = bool(first.get_function("__tvm_is_system_module")())
    llvm_target = first.get_function("_get_target_string")()
    prefix = first.get_function("__tvm_get_system_lib_prefix")() or ""
    if root.imports:
        devc = os.path.join(workspace, f"{prefix}devc.o")
        runtime_api.ModulePackImportsToLLVM(root, is_system_lib, llvm_target, prefix).write_to_file(devc)
        files.append(devc)
    if fcompile is None:
        from tvm.support import cc

        fcompile = cc.create_shared
    fcompile(path, files)
