"""Choosing the schedule of each fused PrimFunc from ``RULES``, a list of rule objects tried in order: the
rules for a main block (``tiled``, ``winograd``, ``int8``), the softmax rows, else the generic rule
(``generic``), else none. A rule says whether it applies to a function (``applies``, a cheap look at its
blocks) and schedules it (``apply``), returning the scheduled function, or ``None`` where a closer look
declines it. A rule may return a function that it finished where schedule primitives cannot (Winograd's
``guard_direct``).

A rule that raises, or whose result does not lower through TVM's TIR pipeline, is reported as a WARNING
naming the kernel, and dropped for the next; the last resort is the unscheduled function, so a schedule
never fails a compile. Checking that a result lowers runs it through the whole TIR pipeline, which the
build then runs again (half of the scheduling time of densenet121): the build (``pipeline.build``)
therefore schedules without the check (``check_lowering=False``, the first rule that applies) and
schedules again with it only where the build fails, which gives the module and report the checked
scheduling would have given.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from nnadapter_tvm import extensions
from nnadapter_tvm.errors import fail
from nnadapter_tvm.targets.base import is_scheduled
from nnadapter_tvm.targets.cpu.compute import CONV, DENSE, DEPTHWISE
from nnadapter_tvm.targets.cpu.generic import schedule_generic
from nnadapter_tvm.targets.cpu.int8 import INT8_CONV, INT8_DENSE
from nnadapter_tvm.targets.cpu.int8 import schedule_conv as schedule_int8_conv
from nnadapter_tvm.targets.cpu.int8 import schedule_dense as schedule_int8_dense
from nnadapter_tvm.targets.cpu.loops import BUFFER_LOAD, child_blocks
from nnadapter_tvm.targets.cpu.reduction_init import hoist_reduction_inits
from nnadapter_tvm.targets.cpu.simd import vector_lanes
from nnadapter_tvm.targets.cpu.softmax import ROW_STAGE as SOFTMAX_STAGE
from nnadapter_tvm.targets.cpu.softmax import RULE as SOFTMAX_ROWS
from nnadapter_tvm.targets.cpu.softmax import schedule_rows
from nnadapter_tvm.targets.cpu.tiled import NotThisRule, schedule_conv, schedule_dense, schedule_depthwise
from nnadapter_tvm.targets.cpu.winograd import WINOGRAD, schedule_winograd

log = logging.getLogger("nnadapter_tvm")


class Kernel:
    """What the rules' ``applies`` look at, computed once per function: its blocks' names and whether it
    touches bools."""

    def __init__(self, func: tirx.PrimFunc) -> None:
        # A walk, not a Schedule: making a Schedule analyses every block (seconds for a kernel whose
        # symbolic shapes are long expressions), and each rule that applies makes its own anyway.
        names: list[str] = []
        tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, lambda b: names.append(b.name_hint))], order="pre")
        self.blocks = [n for n in names if n != "root"]
        self.has_bool = _has_bool(func)

    def has_main_block(self, prefix: str) -> bool:
        return any(_is_main(b, prefix) for b in self.blocks)


class ScheduleRule:
    """One way to schedule a kernel: ``name`` (in a build's schedule report), ``applies`` (whether the
    function is of the kind the rule schedules) and ``apply`` (the scheduled function, or ``None``)."""

    name: str

    def applies(self, kernel: Kernel) -> bool:
        raise NotImplementedError

    def apply(self, sch: s_tir.Schedule, target: tvm.target.Target) -> tirx.PrimFunc | None:
        raise NotImplementedError


class MainBlockRule(ScheduleRule):
    """A kernel built around one main block, the compute ``prefix`` names (of ``cpu.compute``, ``int8`` or
    ``winograd``; ``_is_main``), scheduled by ``schedule(sch, block, target)``; the schedule raises
    ``NotThisRule`` to decline a shape it does not handle, and may return what finishes the scheduled
    function."""

    def __init__(self, prefix: str, schedule: Callable) -> None:
        self.name = prefix
        self.schedule = schedule

    def applies(self, kernel: Kernel) -> bool:
        return kernel.has_main_block(self.name) and not kernel.has_bool

    def apply(self, sch: s_tir.Schedule, target: tvm.target.Target) -> tirx.PrimFunc | None:
        block = _main_block(sch, self.name)
        if block is None:  # ``applies`` saw every block; the rules schedule one directly under the root
            return None
        try:
            finish = self.schedule(sch, block, target)
        except NotThisRule:
            return None
        return sch.mod["main"] if finish is None else finish(sch.mod["main"])


class SoftmaxRows(ScheduleRule):
    """A kernel ending in a softmax along the last axis (``softmax.schedule_rows``)."""

    name = SOFTMAX_ROWS

    def applies(self, kernel: Kernel) -> bool:
        return SOFTMAX_STAGE in kernel.blocks and not kernel.has_bool

    def apply(self, sch: s_tir.Schedule, target: tvm.target.Target) -> tirx.PrimFunc | None:
        try:
            schedule_rows(sch, vector_lanes(target))
        except NotThisRule:
            return None
        return sch.mod["main"]


class Generic(ScheduleRule):
    """Any other kernel, its loops vectorized (``generic.schedule_generic``). A kernel that touches bools
    takes scalar loops (``generic-scalar``): LLVM miscompiles some vectors of i1 (bool casts and
    comparisons came out wrong), and inlining the kernel's own bools into their selects then vectorizing
    gave wrong answers (ai.onnx.ml Imputer of NaN, PROBIT post-transforms), so no other rule takes them."""

    def __init__(self, vectorize: bool) -> None:
        self.vectorize = vectorize
        self.name = "generic" if vectorize else "generic-scalar"

    def applies(self, kernel: Kernel) -> bool:
        return kernel.has_bool != self.vectorize

    def apply(self, sch: s_tir.Schedule, target: tvm.target.Target) -> tirx.PrimFunc | None:
        schedule_generic(sch, target, vectorize=self.vectorize)
        return sch.mod["main"]


#: The rules in the order they are tried; the first that applies, schedules and lowers wins.
RULES: list[ScheduleRule] = [
    MainBlockRule(CONV, schedule_conv),
    MainBlockRule(DEPTHWISE, schedule_depthwise),
    MainBlockRule(DENSE, schedule_dense),
    MainBlockRule(WINOGRAD, schedule_winograd),
    MainBlockRule(INT8_CONV, schedule_int8_conv),
    MainBlockRule(INT8_DENSE, schedule_int8_dense),
    SoftmaxRows(),
    Generic(vectorize=False),
    Generic(vectorize=True),
]


def schedule_prim_func(
    func: tirx.PrimFunc, target: tvm.target.Target, check_lowering: bool = True, kernel: str = "main"
) -> tuple[tirx.PrimFunc, str]:
    """``func`` with the first rule of ``RULES`` that applies and lowers, and that rule's name; without
    ``check_lowering``, the first that applies (whether it lowers is left to the build). ``kernel`` names
    the function in warnings."""
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
    kernel_info = Kernel(func)
    for rule in RULES:
        if not rule.applies(kernel_info):
            continue
        try:
            candidate = rule.apply(s_tir.Schedule(func), target)
        except Exception as err:  # a rule's bug must not fail the compile: the next rule, seen in the log
            reason = (str(err).strip().splitlines() or [type(err).__name__])[-1]
            log.warning("cpu schedules: rule %s failed on kernel %s: %s", rule.name, kernel, reason)
            continue
        if candidate is None:
            continue
        if not check_lowering or _lowers(candidate, target):
            return candidate, rule.name
        log.warning("cpu schedules: rule %s gave kernel %s a function that does not lower", rule.name, kernel)
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
        scheduled, rule = schedule_prim_func(func, target, check_lowering, gvar.name_hint)
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


def _main_block(sch: s_tir.Schedule, prefix: str):
    return next((b for b in child_blocks(sch) if _is_main(sch.get(b).name_hint, prefix)), None)


def _is_main(name: str, prefix: str) -> bool:
    """Whether a block is the compute ``prefix`` names: that name, or with the suffixes fusion adds to
    keep names apart (``nna_conv2d_nhwc_1``; not ``nna_conv2d_nhwc_int8``, another rule's)."""
    return re.fullmatch(re.escape(prefix) + r"(_\d+)*", name) is not None


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
