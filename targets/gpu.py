"""GPU code generation shared by the ``cuda`` and ``opencl`` drivers.

``tvm.compile`` schedules nothing, and in TVM 0.27 a GPU PrimFunc whose loops are not bound to
``blockIdx``/``threadIdx`` no longer fails ("did you forget to bind?"): it is quietly compiled
as host code that dereferences device pointers.  ``schedule_module`` therefore gives every
PrimFunc of a legalized, fused Relax module a GPU schedule, trying in order:

1. the dlight rules ``Matmul``, ``GEMV``, ``Reduction``, ``GeneralReduction``, ``Fallback``
   (``tvm.s_tir.dlight.gpu``).  Unlike ``dl.ApplyDefaultSchedule``, a rule that raises (dlight
   rules assert on patterns they half-match) or whose schedule is unusable is skipped and the
   next rule tried;
2. ``spatial``: each top-level block's leading data-parallel loops fused over
   ``blockIdx.x``/``threadIdx.x``, its other loops serial in each thread (blocks dlight cannot
   normalize, e.g. TE computes with data-dependent reads);
3. ``serial``: the whole function on one GPU thread (sequential IR-builder kernels such as
   NON_MAX_SUPPRESSION's, zero-sized tensors).

A candidate is usable when no global-memory access lies outside a GPU thread scope
(``unbound_accesses``) and the PrimFunc lowers on its own through TVM's TIR pipeline, so
whatever reaches ``tvm.compile`` compiles.  ``build`` compiles with an LLVM host (this machine's
or, for ``opencl``, aarch64); ``kernel_sources`` returns the generated CUDA C / OpenCL C.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import re
from collections.abc import Iterator

import tvm_ffi

from nnadapter_tvm.runtime.tvm_runtime import LazyModule, relax, tvm
from nnadapter_tvm.targets import toolchain
from nnadapter_tvm.targets.base import SCHEDULED, TVM_OPT_LEVEL, Driver, is_scheduled
from nnadapter_tvm.types import DeviceType, OperationType, ResultCode

# Imported on first use: making a context or loading a cached module never imports TVM's compiler side.
s_tir = LazyModule("tvm.s_tir")
tirx = LazyModule("tvm.tirx")
dl = LazyModule("tvm.s_tir.dlight")

log = logging.getLogger("nnadapter_tvm")

#: The LLVM host targets a GPU module's host code can be generated for.
HOST_TRIPLES = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def host_machine() -> str:
    """This machine's architecture in ``HOST_TRIPLES`` terms (``x86_64``, ``aarch64``, ...)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def llvm_host(machine: str | None = None) -> dict:
    """The LLVM host target config for ``machine`` (``None`` or this machine's: the default triple)."""
    if machine is None or machine == host_machine():
        return {"kind": "llvm"}
    config: dict = {"kind": "llvm", "mtriple": HOST_TRIPLES[machine]}
    if machine == "aarch64":
        config["mattr"] = ["+neon"]
    return config


# -- scheduling ---------------------------------------------------------------------------


def dlight_rules() -> list[dl.ScheduleRule]:
    """The dlight GPU rules, most specific first (the order TVM's own GPU pipelines use)."""
    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def _lowers(func: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    """Whether ``func`` goes through TVM's TIR lowering for ``target``."""
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    try:
        mod = tirx.transform.BindTarget(target)(mod)
        pipeline, _, _ = tirx.get_default_tir_pipeline(target)
        pipeline(mod)
    except Exception:  # any failure means "this schedule is unusable"
        return False
    return True


_BUFFER_LOAD_CLASS: list[type] = []


def _buffer_load() -> type:
    # BufferLoad's Python class is not exported; made on first use (building a node needs the compiler).
    if not _BUFFER_LOAD_CLASS:
        _BUFFER_LOAD_CLASS.append(type(tirx.BufferLoad(tirx.decl_buffer((1,)), [0])))
    return _BUFFER_LOAD_CLASS[0]


def _accesses(node: object) -> list:
    found: list = []
    tvm_ffi.structural_walk(node, [(tirx.BufferStore, found.append), (_buffer_load(), found.append)], order="pre")
    return found


def _thread_scopes(node: object) -> list:
    found: list = []

    def on_for(loop: tirx.For) -> None:
        if loop.kind == tirx.ForKind.THREAD_BINDING:
            found.append(loop.body)

    def on_attr(attr: tirx.AttrStmt) -> None:
        if attr.attr_key == "thread_extent":
            found.append(attr.body)

    tvm_ffi.structural_walk(node, [(tirx.For, on_for), (tirx.AttrStmt, on_attr)], order="pre")
    return found


def unbound_accesses(func: tirx.PrimFunc) -> int:
    """How many reads/writes of global memory in ``func`` lie outside every GPU thread scope.

    TVM 0.27 does not reject these ("did you forget to bind?" is gone): it quietly compiles
    such a PrimFunc as *host* code that dereferences device pointers, which crashes or
    misbehaves on a real GPU.  A usable GPU schedule has none."""
    inside = {access.__chandle__() for scope in _thread_scopes(func.body) for access in _accesses(scope)}
    count = 0
    for access in _accesses(func.body):
        buffer = access.buffer if isinstance(access, tirx.BufferStore) else access.source
        if access.__chandle__() not in inside and buffer.scope() == "global":
            count += 1
    return count


def _usable(func: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    return unbound_accesses(func) == 0 and _lowers(func, target)


def _bind_spatial(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc | None:
    """Each top-level block's leading data-parallel loops fused over ``blockIdx.x``/``threadIdx.x``,
    the rest of its loops serial in each thread; None unless some block got more than one thread."""
    max_threads = int(target.attrs.get("max_num_threads", 256))
    try:
        sch = s_tir.Schedule(func)
        root = sch.get_sblock(func.body.block.name_hint)
        any_parallel = False
        for block in sch.get_child_blocks(root):
            loops = sch.get_loops(block)
            if any(sch.get(loop).kind == tirx.ForKind.THREAD_BINDING for loop in loops):
                continue  # shares a loop nest that is bound already
            spatial = _spatial_prefix(sch, block, loops)
            extent = _const_extent(sch, spatial)
            if spatial and extent != 0:
                fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
                factors = [1, None] if extent is not None and extent <= max_threads else [None, max_threads]
                bx, tx = sch.split(fused, factors=factors)
                any_parallel = True
            else:
                tx = sch.add_unit_loop(loops[0] if loops else block)
                bx = sch.add_unit_loop(tx)
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
        return sch.mod["main"] if any_parallel else None
    except Exception:  # the caller falls back to one thread
        return None


def _one_thread(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """The whole function body as one kernel on one GPU thread (always correct, rarely fast)."""
    realize = func.body
    if not isinstance(realize, s_tir.SBlockRealize) or _thread_scopes(realize):
        return None  # thread launches cannot nest
    block = realize.block
    body = block.body
    for tag in ("threadIdx.x", "blockIdx.x"):
        var = tirx.Var(tag.replace(".", "_"), "int32")
        axis = tirx.IterVar(tvm.ir.Range(0, 1), var, tirx.IterVar.ThreadIndex, tag)
        body = tirx.For(var, 0, 1, tirx.ForKind.THREAD_BINDING, body, thread_binding=axis)
    block = s_tir.SBlock(
        block.iter_vars,
        block.reads,
        block.writes,
        block.name_hint,
        body,
        block.init,
        block.alloc_buffers,
        block.match_buffers,
        block.annotations,
    )
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, block))


def _spatial_prefix(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, loops: list) -> list:
    """The outermost loops of a perfect nest above ``block`` that feed only data-parallel iterators."""
    if not loops:
        return []
    realize = sch.get(loops[-1]).body
    if not isinstance(realize, s_tir.SBlockRealize):
        return []
    reduction_vars: set = set()
    for iter_var, value in zip(realize.block.iter_vars, realize.iter_values):
        if iter_var.iter_type != tirx.IterVar.DataPar:
            reduction_vars.update(v.name for v in tirx.analysis.undefined_vars(value))
    prefix = []
    for i, loop in enumerate(loops):
        node = sch.get(loop)
        perfect = i == len(loops) - 1 or isinstance(node.body, tirx.For)
        if node.loop_var.name in reduction_vars or node.kind != tirx.ForKind.SERIAL or not perfect:
            break
        prefix.append(loop)
    return prefix


def _const_extent(sch: s_tir.Schedule, loops: list) -> int | None:
    extent = 1
    for loop in loops:
        value = sch.get(loop).extent
        if not isinstance(value, tirx.IntImm):
            return None
        extent *= int(value.value)
    return extent


@dataclasses.dataclass
class ScheduleReport:
    """How each PrimFunc of a module was scheduled: ``{name: strategy}``.

    A strategy is a dlight rule's class name, ``given`` (scheduled before, e.g. the GPU sort
    kernels TVM dispatches), ``spatial`` or ``serial`` (see the module docstring)."""

    strategies: dict[str, str] = dataclasses.field(default_factory=dict)

    def of(self, strategy: str) -> list[str]:
        return sorted(name for name, s in self.strategies.items() if s == strategy)


def schedule_prim_func(
    func: tirx.PrimFunc, target: tvm.target.Target, rules: list[dl.ScheduleRule] | None = None
) -> tuple[tirx.PrimFunc, str]:
    """``func`` with a GPU schedule that lowers for ``target``, and the strategy that made it."""
    if (is_scheduled(func) or _thread_scopes(func.body)) and _usable(func, target):
        return func, "given"  # e.g. TVM's GPU sort and scan kernels, which launch their own threads
    for rule in dlight_rules() if rules is None else rules:
        try:
            space = rule.apply(func, target, False)
        except Exception:  # dlight rules assert on patterns they half-match
            continue
        if space is None:
            continue
        sch = space[0] if isinstance(space, list) else space
        candidate = sch.mod["main"]
        if _usable(candidate, target):
            return candidate, type(rule).__name__
    for strategy, candidate in (("spatial", _bind_spatial(func, target)), ("serial", _one_thread(func))):
        if candidate is not None and _usable(candidate, target):
            return candidate, strategy
    raise ValueError(f"no GPU schedule for this PrimFunc lowers on {target.kind.name}")


def schedule_module(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[tvm.IRModule, ScheduleReport]:
    """Schedule every PrimFunc of a legalized, fused module (see the module docstring)."""
    report = ScheduleReport()
    updates = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            scheduled, strategy = schedule_prim_func(func, target)
        except ValueError as err:
            raise ValueError(f"{gvar.name_hint}: {err}") from None
        report.strategies[gvar.name_hint] = strategy
        if strategy != "given":
            updates[gvar] = scheduled.with_attr(SCHEDULED, True)
    for gvar, func in updates.items():
        mod[gvar] = func
    serial = report.of("serial")
    if serial:
        log.info("%s: %d kernel(s) run on one GPU thread: %s", target.kind.name, len(serial), ", ".join(serial))
    return mod, report


def prepare(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[tvm.IRModule, ScheduleReport]:
    """Relax -> legalized, fused, GPU-scheduled module (call under ``with target`` and a PassContext).
    Legalization takes this project's rules (``relax_passes.legalize_ops``); ``split_fused_shape_params``
    keeps ``FuseTIR`` from failing on fused functions with scalar parameters of two kinds, and
    ``order_symbolic_definitions`` puts back after its definition a binding FuseOps moved before it."""
    from nnadapter_tvm.targets.kernel_identity import merge_equal_kernels, order_scalar_params
    from nnadapter_tvm.targets.relax_passes import (
        legalize_ops,
        order_symbolic_definitions,
        split_fused_shape_params,
        view_guarded_values,
    )

    mod = tvm.transform.Sequential(
        [
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),  # sort/argsort/topk -> TVM's GPU kernels
            legalize_ops(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            view_guarded_values,
            relax.transform.FuseOps(),
            split_fused_shape_params,
            relax.transform.FuseTIR(),
            order_scalar_params,
            merge_equal_kernels,
            order_symbolic_definitions,
        ]
    )(mod)
    return schedule_module(mod, target)


def _lower_pipeline() -> tvm.transform.Pass:
    """What TVM's generic GPU pipeline runs after scheduling (dataflow lowering, memory planning, VM)."""
    from nnadapter_tvm.targets.relax_passes import guard_reshape_analysis

    return tvm.transform.Sequential(
        [
            guard_reshape_analysis,
            relax.transform.RewriteDataflowReshape(),
            relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(),
            relax.transform.CallTIRRewrite(),
            relax.transform.StaticPlanBlockMemory(),
            relax.transform.LowerAllocTensor(),
            relax.transform.KillAfterLastUse(),
            relax.transform.LowerRuntimeBuiltin(),
            relax.transform.ComputePrimValue(),
            relax.transform.VMShapeLower(),
            relax.transform.AttachGlobalSymbol(),
        ]
    )


def build(
    mod: tvm.IRModule, target: tvm.target.Target, opt_level: int = 3
) -> tuple[relax.VMExecutable, ScheduleReport]:
    """Schedule and compile a Relax module for a GPU ``target`` (which carries its LLVM host)."""
    with target, tvm.transform.PassContext(opt_level=opt_level):
        mod, report = prepare(mod, target)
        return tvm.compile(mod, target, relax_pipeline=_lower_pipeline()), report


# -- generated kernels --------------------------------------------------------------------


def _walk(module: tvm.runtime.Module) -> Iterator[tvm.runtime.Module]:
    yield module
    for imported in module.imports:
        yield from _walk(imported)


def kernel_sources(executable: relax.VMExecutable | tvm.runtime.Module, kind: str) -> list[str]:
    """The device source (CUDA C for ``cuda``, OpenCL C for ``opencl``) of every ``kind`` module
    an executable (or a loaded module) imports."""
    root = executable.mod if isinstance(executable, relax.VMExecutable) else executable
    return [m.inspect_source() for m in _walk(root) if m.kind == kind]


# -- the driver base ----------------------------------------------------------------------


def host_of(executable: relax.VMExecutable) -> str:
    """The machine (``x86_64``, ``aarch64``, ...) an executable's host code was generated for."""
    for module in _walk(executable.mod):
        if module.kind == "llvm":
            text = str(module.get_function("_get_target_string")())
            try:
                triple = json.loads(text).get("mtriple")
            except ValueError:  # an older "llvm -mtriple=..." spelling
                found = re.search(r"-mtriple=(\S+)", text)
                triple = found.group(1) if found else None
            return triple.split("-")[0] if triple else host_machine()
    return host_machine()


class GpuDriver(Driver):
    """A TVM GPU target: builds with ``build`` above and exports host code for this machine or,
    with a cross compiler, another; subclasses give the target, the device and loading."""

    type = DeviceType.GPU
    # Extension operations whose kernels are written for CPUs (the recurrence is one sequential kernel
    # with per-thread scratch, which GPU code generation refuses): a multi-device context places them
    # on another device, and a GPU-only one names them.
    CPU_ONLY = frozenset({OperationType.LSTM, OperationType.GRU, OperationType.RNN})

    def supports(self, op_type: OperationType, props: dict) -> bool:
        return op_type not in self.CPU_ONLY and super().supports(op_type, props)

    def target_key(self, props: dict) -> list:
        # The host code's LLVM target defaults to this machine's triple.
        return [*super().target_key(props), host_machine()]

    def build(self, mod: tvm.IRModule, props: dict, kernels: object = None) -> relax.VMExecutable:
        """Legalize, fuse, schedule (dlight and fallbacks) and compile ``mod``."""
        executable, report = build(mod, self.tvm_target(props), TVM_OPT_LEVEL.read(props))
        log.debug("%s schedules: %s", self.name, report.strategies)
        return executable

    def export(self, executable: relax.VMExecutable, path: str) -> None:
        """Write the shared library; host code for another machine is linked by its cross linker
        (``targets.toolchain``: ``$NNADAPTER_TVM_ARM_CXX``, the system's ``<triple>-g++``, else the
        ``ziglang`` wheel's zig, so ``pip install`` alone can export for a board)."""
        machine = host_of(executable)
        if machine == host_machine():
            executable.export_library(path, workspace_dir=os.path.dirname(path))
            return
        linker = toolchain.cross_linker(HOST_TRIPLES[machine], self.name, ResultCode.FEATURE_NOT_SUPPORTED)
        executable.export_library(path, workspace_dir=os.path.dirname(path), fcompile=linker)
