"""Reductions over axes that may be empty at execution: their initial value written before the loops.

TIR writes a reduction block's ``init`` inside its loops, on the iteration where every reduction index
is 0 (``LowerInitBlock``).  Over an axis whose size is known only at execution, a size of 0 never runs
that iteration: the output keeps whatever the memory held.  NONZERO counts its output rows with such a
sum, so the count of an empty mask was garbage and the next allocation asked for terabytes
(``std::bad_alloc``: a detector's second NonZero over boxes that all fell below the score threshold).
``hoist_reduction_inits`` moves each such ``init`` before the outermost loop its reduction runs over
(``decompose_reduction``), after whichever rule scheduled the function; reductions over static,
non-empty axes are left as the rules made them.
"""

from __future__ import annotations

import logging

import tvm_ffi
from tvm import s_tir, tirx

log = logging.getLogger("nnadapter_tvm")


def hoist_reduction_inits(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with the ``init`` of every reduction that may run over an empty axis written before its
    reduction loops (see the module's docstring); ``func`` itself where none needs it."""
    pending = _inits_inside_symbolic_loops(func)
    if not pending:
        return func
    sch = s_tir.Schedule(func)
    for name, reduce_vars in pending:
        try:
            block = sch.get_sblock(name)
            loop = next(lp for lp in sch.get_loops(block) if any(sch.get(lp).loop_var.same_as(v) for v in reduce_vars))
            sch.decompose_reduction(block, loop)
        except Exception as err:
            log.warning(
                "cpu schedules: the initial value of reduction %s stays inside its loops (%s): a size of 0 "
                "at execution leaves its output unset",
                name,
                str(err).strip().splitlines()[-1:],
            )
    return sch.mod["main"]


def _inits_inside_symbolic_loops(func: tirx.PrimFunc) -> list[tuple[str, list[tirx.Var]]]:
    """(block name, loop variables its reduction indices are bound to) for each block with an ``init``
    whose reduction loops include one of a size not known to be positive."""
    realizes: list[s_tir.SBlockRealize] = []
    extents: dict[tirx.Var, tirx.PrimExpr] = {}

    def on_realize(node: s_tir.SBlockRealize) -> None:
        if node.block.init is not None:
            realizes.append(node)

    def on_loop(node: tirx.For) -> None:
        extents[node.loop_var] = node.extent

    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, on_realize), (tirx.For, on_loop)], order="pre")
    found = []
    for realize in realizes:
        reduce_vars = [
            v
            for iv, value in zip(realize.block.iter_vars, realize.iter_values)
            if iv.iter_type == tirx.IterVar.CommReduce
            for v in tirx.analysis.undefined_vars(value, [])
        ]
        over = [v for v in reduce_vars if v in extents]
        if any(not (isinstance(extents[v], tirx.IntImm) and extents[v].value > 0) for v in over):
            found.append((realize.block.name_hint, over))
    return found
