"""Where a compile's time goes: wall and CPU seconds per phase, each phase's own time (a phase inside
another is not counted twice).

Code marks its phases with ``with phase(NAME):``; TVM's passes are booked to phases by a pass
instrument (``instruments()``, given to the ``PassContext`` of a build).  Nothing is measured unless a
recorder is active: ``with recording() as times:`` collects every phase this thread runs until the
block ends (recorders nest: each active one gets every phase).  ``Compilation.compile_phases`` holds
its own compile's; ``nnadapter-tvm run MODEL -v`` and ``nnadapter-tvm profile`` print them.

CPU time is the process's user + system time (``time.process_time``) plus that of its finished child
processes (the linker; ``os.times``): on a machine shared with other jobs, wall time alone measures the neighbours too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Iterator

IMPORT = "ONNX import, partitioning (before the first compile)"
CONVERT = "conversion to Relax"
RELAX = "our Relax passes (NHWC layout)"
LEGALIZE = "legalization (LegalizeOps)"
FOLD = "constant folding (weight packing)"
FUSE = "fusion (FuseOps, FuseTIR)"
KERNEL_CACHE = "kernel cache lookup"
SCHEDULE = "TIR scheduling (targets/cpu)"
TIR = "TIR lowering"
CODEGEN = "LLVM codegen, VM build"
EXPORT = "export (object code, link)"
LOAD = "load of the built module"
CACHE = "cache write"
#: The order phases are printed in (a build's order); phases not listed come after.
ORDER = (IMPORT, CONVERT, RELAX, LEGALIZE, FOLD, FUSE, KERNEL_CACHE, SCHEDULE, TIR, CODEGEN, EXPORT, LOAD, CACHE)

# Passes of the CPU pipeline's ``lower`` (run under RELAX) and the phase each is booked to; a pass
# nested in another (FoldConstant's own builds, the schedules' lowering checks) stays in its parent's.
_PASS_PHASES = {
    "DispatchSampling": LEGALIZE,
    "DispatchSortScan": LEGALIZE,
    "LegalizeOps": LEGALIZE,
    "AnnotateTIROpPattern": LEGALIZE,
    "nna.FoldConstantCalls": FOLD,
    "FoldConstant": FOLD,
    "FuseOps": FUSE,
    "FuseTIR": FUSE,
    "nnadapter_tvm.MergeEqualKernels": FUSE,
}
_TIR_PREFIXES = ("tirx.", "s_tir.")


def _cpu() -> float:
    # process_time: this process's user + system time, finely; os.times: finished children's (in ticks).
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


@dataclasses.dataclass(eq=False)  # recorders are told apart by identity: two may hold the same times
class PhaseTimes:
    """Seconds per phase: ``{name: [wall, cpu]}``, in the order the phases first ran."""

    seconds: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def add(self, name: str, wall: float, cpu: float) -> None:
        entry = self.seconds.setdefault(name, [0.0, 0.0])
        entry[0] += wall
        entry[1] += cpu

    def total(self) -> tuple[float, float]:
        return sum(w for w, _ in self.seconds.values()), sum(c for _, c in self.seconds.values())

    def rows(self) -> list[tuple[str, float, float]]:
        """``(phase, wall, cpu)`` in build order."""
        rank = {name: k for k, name in enumerate(ORDER)}
        names = sorted(self.seconds, key=lambda n: rank.get(n, len(ORDER)))
        return [(n, *self.seconds[n]) for n in names]

    def format(self) -> str:
        wall, cpu = self.total()
        lines = [f"{'compile phase':<54}{'wall s':>9}{'CPU s':>9}{'share':>7}"]
        for name, w, c in self.rows():
            lines.append(f"{name:<54}{w:>9.2f}{c:>9.2f}{w / wall if wall else 0:>7.0%}")
        lines.append(f"{'total':<54}{wall:>9.2f}{cpu:>9.2f}")
        return "\n".join(lines)


class _State(threading.local):
    def __init__(self) -> None:
        self.recorders: list[PhaseTimes] = []
        # Open phases: [name, wall start, cpu start, wall of nested phases, cpu of nested phases].
        self.stack: list[list] = []
        # (recorder, wall, cpu) of recorders started with a lead-in phase and not yet in a phase.
        self.lead: list[tuple[PhaseTimes, str, float, float]] = []


_STATE = _State()


def active() -> bool:
    """Whether some recorder is collecting on this thread."""
    return bool(_STATE.recorders)


@contextlib.contextmanager
def recording(times: PhaseTimes | None = None, lead: str | None = None) -> Iterator[PhaseTimes]:
    """Collect this thread's phases into ``times`` (a new one by default) while the block runs. With
    ``lead``, the time from here to the first phase is booked to that phase (the import before a compile)."""
    times = PhaseTimes() if times is None else times
    state = _STATE
    state.recorders.append(times)
    if lead is not None:
        state.lead.append((times, lead, time.perf_counter(), _cpu()))
    try:
        yield times
    finally:
        state.recorders.remove(times)
        state.lead = [entry for entry in state.lead if entry[0] is not times]


def _begin(name: str) -> int:
    """Open phase ``name``; returns the depth to close it at."""
    state = _STATE
    wall, cpu = time.perf_counter(), _cpu()
    if state.lead:
        for times, lead, w0, c0 in state.lead:
            times.add(lead, wall - w0, cpu - c0)
        state.lead = []
    state.stack.append([name, wall, cpu, 0.0, 0.0])
    return len(state.stack) - 1


def _end(depth: int) -> None:
    """Close the open phases down to ``depth`` (more than one where a pass raised and was never closed)."""
    state = _STATE
    while len(state.stack) > depth:
        name, w0, c0, nested_w, nested_c = state.stack.pop()
        wall, cpu = time.perf_counter() - w0, _cpu() - c0
        for times in state.recorders:
            times.add(name, wall - nested_w, cpu - nested_c)
        if state.stack:
            state.stack[-1][3] += wall
            state.stack[-1][4] += cpu


def current() -> str | None:
    """The innermost open phase on this thread."""
    return _STATE.stack[-1][0] if _STATE.stack else None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Book the block's time (less its nested phases') to ``name`` in the active recorders."""
    if not _STATE.recorders:
        yield
        return
    depth = _begin(name)
    try:
        yield
    finally:
        _end(depth)


def _pass_phase(pass_name: str, enclosing: str | None) -> str | None:
    if enclosing == RELAX and pass_name in _PASS_PHASES:
        return _PASS_PHASES[pass_name]
    if enclosing == CODEGEN and pass_name.startswith(_TIR_PREFIXES):
        return TIR
    return enclosing


def instruments() -> list:
    """The pass instruments for a build's ``PassContext``: none unless a recorder is active."""
    if not _STATE.recorders:
        return []
    import tvm  # the compiler: only a build asks for instruments

    @tvm.ir.instrument.pass_instrument
    class PassPhases:
        """Books each pass to the phase ``_pass_phase`` gives it where that differs from the open one. A
        pass that raises gets no ``run_after_pass``: the depth recorded lets the enclosing phase close it."""

        def __init__(self) -> None:
            self.opened: list[int | None] = []

        def run_before_pass(self, mod: object, info: object) -> None:
            enclosing = current()
            name = _pass_phase(str(info.name), enclosing)
            self.opened.append(_begin(name) if name is not None and name != enclosing else None)

        def run_after_pass(self, mod: object, info: object) -> None:
            depth = self.opened.pop() if self.opened else None
            if depth is not None:
                _end(depth)

    return [PassPhases()]
