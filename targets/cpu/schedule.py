"""Choosing the schedule of each fused PrimFunc: the rule for its main block (``tiled``, ``winograd``), else
the generic rule (``generic``), else none.  A rule may return a function that finishes the scheduled
PrimFunc where schedule primitives cannot (Winograd's ``guard_direct``).

A rule that raises, or whose result does not lower through TVM's TIR pipeline, is dropped for the next
one; the last resort is the unscheduled function, so a schedule never fails a compile. Checking that a
result lowers runs it through the whole TIR pipeline, which the build then runs again (half of the
scheduling time of densenet121): the build (``pipeline.build``) therefore schedules without the check
(``check_lowering=False``, the first rule that applies) and schedules again with it only where the build
fails, which gives the module and report the checked scheduling would have given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from nnadapter_tvm import extensions
from nnadapter_tvm.errors import fail
from nnadapter_tvm.targets.base import is_scheduled
from nnadapter_tvm.targets.cpu.compute import CONV, DENSE, DEPTHWISE, PAD
from nnadapter_tvm.targets.cpu.generic import schedule_generic
from nnadapter_tvm.targets.cpu.int8 import INT8_CONV, INT8_DENSE
from nnadapter_tvm.targets.cpu.int8 import schedule_conv as schedule_int8_conv
from nnadapter_tvm.targets.cpu.int8 import schedule_dense as schedule_int8_dense
from nnadapter_tvm.targets.cpu.loops import BUFFER_LOAD, child_blocks
from nnadapter_tvm.targets.cpu.reduction_init import hoist_reduction_inits
from nnadapter_tvm.targets.cpu.simd import vector_lanes
from nnadapter_tvm.targets.cpu.softmax import RULE as SOFTMAX_ROWS
from nnadapter_tvm.targets.cpu.softmax import schedule_rows
from nnadapter_tvm.targets.cpu.tiled import NotThisRule, schedule_conv, schedule_dense, schedule_depthwise
from nnadapter_tvm.targets.cpu.winograd import WINOGRAD, schedule_winograd

log = logging.getLogger("nnadapter_tvm")


def schedule_prim_func(
    func: tirx.PrimFunc, target: tvm.target.Target, check_lowering: bool = True
) -> tuple[tirx.PrimFunc, str]:
    """``func`` with the first CPU schedule that applies and lowers, and that rule's name; without
    ``check_lowering``, the first that applies (whether it lowers is left to the build)."""
    if is_scheduled(func):
        return func, "none"
    extension = func.attrs.get(extensions.SCHEDULE_ATTR) if func.attrs is not None else None
    if extension is not None:
        # A custom operation's own schedule (nnadapter_tvm.extensions), else the rules below.
        schedule = extensions.schedule_of(str(extension))
        if schedule is not None:
            sch = s_tir.Schedule(func)
            try:
                schedule(sch, target)
            except Exception as err:
                fail(f"the CPU schedule of custom operation {extension} failed: {type(err).__name__}: {err}")
            if check_lowering and not _lowers(sch.mod["main"], target):
                fail(f"the CPU schedule of custom operation {extension} gives a function that does not lower")
            return sch.mod["main"], f"extension {extension}"
    if not _single_root(func):
        return func, "none"
    rules: list[tuple[str, Callable]] = []
    main_rules = (
        (CONV, schedule_conv),
        (DEPTHWISE, schedule_depthwise),
        (DENSE, schedule_dense),
        (WINOGRAD, schedule_winograd),
        (INT8_CONV, schedule_int8_conv),
        (INT8_DENSE, schedule_int8_dense),
    )
    for name, fn in main_rules:
        rules.append((name, lambda sch, n=name, f=fn: f(sch, _require(_main_block(sch, n)), target)))
    rules.append((SOFTMAX_ROWS, lambda sch: schedule_rows(sch, vector_lanes(target))))
    if _has_bool(func):
        # LLVM miscompiles some vectors of i1 (bool casts and comparisons came out wrong): scalar loops.
        # Inlining the kernel's own bools into their selects and vectorizing was tried and gave wrong
        # answers (ai.onnx.ml Imputer of NaN, PROBIT post-transforms).
        rules = [("generic-scalar", lambda sch: schedule_generic(sch, target, vectorize=False))]
    else:
        rules.append(("generic", lambda sch: schedule_generic(sch, target)))
    for name, rule in rules:
        sch = s_tir.Schedule(func)
        try:
            # A rule may return what finishes the function where schedule primitives cannot.
            finish = rule(sch)
            candidate = sch.mod["main"] if finish is None else finish(sch.mod["main"])
        except NotThisRule:
            continue
        except Exception as err:  # a rule that half-matches: try the next
            level = logging.WARNING if name == WINOGRAD else logging.DEBUG
            # A Winograd kernel under another rule runs its direct fallback for every output: many times
            # the direct kernel's time, so its failure is worth seeing.
            log.log(level, "cpu schedules: rule %s failed: %s", name, str(err).strip().splitlines()[-1:])
            continue
        if not check_lowering or _lowers(candidate, target):
            return candidate, name
        log.debug("cpu schedules: rule %s produced a function that does not lower", name)
    return func, "none"


def schedule_module(
    mod: tvm.IRModule, target: tvm.target.Target, check_lowering: bool = True, skip: Collection[str] = ()
) -> tuple[tvm.IRModule, dict[str, str]]:
    """Every PrimFunc of a fused module scheduled (``mod`` is updated); returns ``{function name: rule}``.
    ``check_lowering``: see ``schedule_prim_func``. The functions named in ``skip`` (kernels the kernel
    cache holds compiled) are left as they are, reported as ``"cached"``."""
    report: dict[str, str] = {}
    updates = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if gvar.name_hint in skip:
            report[gvar.name_hint] = "cached"
            continue
        if is_scheduled(func):
            report[gvar.name_hint] = "tuned"  # MetaSchedule's record applied
            continue
        scheduled, rule = schedule_prim_func(func, target, check_lowering)
        report[gvar.name_hint] = rule
        if rule != "none":
            updates[gvar] = scheduled
        elif _single_root(func):
            # Visible without debug logging: such a kernel runs as TVM's naive single-threaded loops.
            log.info("cpu schedules: no default schedule applied to %s (naive loops)", gvar.name_hint)
    for gvar, func in updates.items():
        mod[gvar] = func
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and _single_root(func) and gvar.name_hint not in skip:
            mod[gvar] = hoist_reduction_inits(func)  # whatever scheduled it: see reduction_init
    return mod, report


def _main_block(sch: s_tir.Schedule, name: str):
    for blk in child_blocks(sch):
        if sch.get(blk).name_hint.startswith(name) and not sch.get(blk).name_hint.startswith(PAD):
            return blk
    return None


def _require(block):
    if block is None:
        raise NotThisRule
    return block


def _lowers(func: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    try:
        host = target if target.host is None else target.host
        mod = tirx.transform.BindTarget(target.with_host(host))(mod)
        pipeline, _, _ = tirx.get_default_tir_pipeline(target)
        pipeline(mod)
    except Exception:  # any failure means the schedule is unusable
        return False
    return True


def _single_root(func: tirx.PrimFunc) -> bool:
    body = func.body
    return isinstance(body, s_tir.SBlockRealize) and body.block.name_hint == "root"


def _has_bool(func: tirx.PrimFunc) -> bool:
    found = []

    def visit(node: object) -> None:
        if isinstance(node, (tirx.BufferStore, BUFFER_LOAD)):
            buffer = node.buffer if isinstance(node, tirx.BufferStore) else node.source
            if str(buffer.dtype) == "bool":
                found.append(node)

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, visit), (BUFFER_LOAD, visit)], order="pre")
    return bool(found) or any(str(p.ty.dtype) == "bool" for p in func.params if hasattr(p.ty, "dtype"))
