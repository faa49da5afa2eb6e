"""The CPU build: Relax -> NHWC (``layout``), legalized with packed weights (``lowering``), fused,
scheduled (``schedule``) and compiled, LLVM's share in threads (``codegen``).  The ``llvm`` and ``arm``
drivers build through ``build``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import tvm
from tvm import relax, tirx

from nnadapter_tvm.errors import TVM_ERRORS, tvm_error_text
from nnadapter_tvm.runtime import phases
from nnadapter_tvm.runtime.kernel_cache import KernelCache
from nnadapter_tvm.targets.constant_folding import FoldConstantCalls
from nnadapter_tvm.targets.cpu import codegen
from nnadapter_tvm.targets.cpu.concat import elementwise_into_concat, write_concat_in_place
from nnadapter_tvm.targets.cpu.groups import pad_groups
from nnadapter_tvm.targets.cpu.layout import to_nhwc
from nnadapter_tvm.targets.cpu.lowering import Lowering
from nnadapter_tvm.targets.cpu.schedule import schedule_module
from nnadapter_tvm.targets.kernel_identity import merge_equal_kernels, order_scalar_params
from nnadapter_tvm.targets.relax_passes import (
    legalize_ops,
    order_symbolic_definitions,
    split_fused_shape_params,
    view_guarded_values,
)

log = logging.getLogger("nnadapter_tvm")


def lower(mod: tvm.IRModule, target: tvm.target.Target, winograd: bool = True) -> tvm.IRModule:
    """Relax -> NHWC, legalized with packed weights and fused: the kernels the schedules (or MetaSchedule) see.

    ``FoldConstant`` runs the weight packing once, at compile time, on constant weights; ``FuseOps`` and
    ``FuseTIR`` put bias, batch-norm, activation and residual epilogues into the kernel of the
    convolution or product they follow.  Legalization takes this project's rules (``relax_passes``:
    float zero constants stay tensors) beside the packed lowering; ``split_fused_shape_params`` keeps
    ``FuseTIR`` from failing on fused functions with scalar parameters of two kinds, and
    ``order_symbolic_definitions`` puts back after its definition a binding FuseOps moved before it.
    ``winograd``: stride-1 3x3 convolutions with constant weights by F(4x4, 3x3) (``Lowering``)."""
    with phases.phase(phases.RELAX):  # the passes below are booked by their names (runtime.phases)
        return _lower(mod, target, winograd)


def _lower(mod: tvm.IRModule, target: tvm.target.Target, winograd: bool) -> tvm.IRModule:
    lowering = Lowering(target, winograd)
    mod = elementwise_into_concat(pad_groups(lowering.lanes)(to_nhwc(mod)))
    return tvm.transform.Sequential(
        [
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            legalize_ops(lowering.legalize_map()),
            relax.transform.AnnotateTIROpPattern(),
            # The weight-packing kernels folded with one LLVM build (FoldConstant builds each on its own).
            FoldConstantCalls,
            relax.transform.FoldConstant(),
            view_guarded_values,
            relax.transform.FuseOps(),
            split_fused_shape_params,
            write_concat_in_place,
            relax.transform.FuseTIR(),
            order_scalar_params,
            merge_equal_kernels,
            order_symbolic_definitions,
        ]
    )(mod)


def prepare(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    tuned: Callable[[tvm.IRModule], tvm.IRModule] | None = None,
    check_lowering: bool = True,
    winograd: bool = True,
) -> tuple[tvm.IRModule, dict[str, str]]:
    """Relax -> NHWC, legalized with packed weights, fused and scheduled (call under ``with target``).
    ``tuned`` (tuning records) schedules the kernels it knows first; the default rules take the rest.
    ``check_lowering``: each schedule checked to lower, or left to the build (``schedule.py``)."""
    mod = lower(mod, target, winograd)
    with phases.phase(phases.SCHEDULE):
        if tuned is not None:
            mod = tuned(mod)
        return schedule_module(mod, target, check_lowering)


def build(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    opt_level: int = 3,
    tuned: Callable[[tvm.IRModule], tvm.IRModule] | None = None,
    jobs: int | None = None,
    winograd: bool = True,
    lift: bool = False,
    kernels: KernelCache | None = None,
) -> tuple[relax.VMExecutable, dict]:
    """Schedule (``prepare``) and compile ``mod`` for a CPU ``target``, its LLVM code generated in up to
    ``jobs`` threads (``codegen.build``; default: one per CPU).

    The schedules are not checked one by one to lower (that ran each kernel's TIR pipeline twice): the
    build is tried first, and only where it fails is every kernel scheduled again with the check, which
    drops a rule whose result does not lower for the next, and built again. ``lift``: the weights leave
    the module (``codegen.build``).

    ``kernels``: the kernel cache (``runtime.kernel_cache``; not used with tuning records). Each kernel
    takes the name of its entry, those found are neither scheduled nor compiled, those built are stored;
    the executable then runs once exported (``codegen.export`` links the kernels' object files)."""
    with target, tvm.transform.PassContext(opt_level=opt_level, instruments=phases.instruments()):
        mod = lower(mod, target, winograd)
        cached = None
        if kernels is not None and tuned is None:
            with phases.phase(phases.KERNEL_CACHE):
                mod, cached = codegen.CachedKernels.look_up(mod, kernels)
        with phases.phase(phases.SCHEDULE):
            if tuned is not None:
                mod = tuned(mod)
            skip = cached.found if cached is not None else {}
            unscheduled = {
                gvar: func
                for gvar, func in mod.functions_items()
                if isinstance(func, tirx.PrimFunc) and gvar.name_hint not in skip
            }
            mod, report = schedule_module(mod, target, check_lowering=False, skip=skip)
        with phases.phase(phases.CODEGEN):  # its TIR passes are booked to TIR lowering
            try:
                return codegen.build(mod, target, jobs, lift, cached), report
            except TVM_ERRORS as err:
                if all(rule in ("none", "tuned") for rule in report.values()):
                    raise  # no default schedule to blame
                log.debug("cpu schedules: the build failed (%s); checking each schedule", tvm_error_text(err))
        with phases.phase(phases.SCHEDULE):
            for gvar, func in unscheduled.items():
                mod[gvar] = func
            mod, report = schedule_module(mod, target, check_lowering=True, skip=skip)
        with phases.phase(phases.CODEGEN):
            return codegen.build(mod, target, jobs, lift, cached), report
