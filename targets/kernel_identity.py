"""One kernel per structure: the Relax passes that let structurally equal kernels be lowered and compiled
once (``merge_equal_kernels``; ``order_scalar_params`` first, so that a fused kernel's scalar parameters
come in an order that depends on its structure, not on the process), and the renaming the kernel cache
needs (``private_kernels``, ``rename_functions``). The CPU and GPU pipelines run the two passes right
after ``FuseTIR``.
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
import tvm_ffi
from tvm import relax


@relax.expr_functor.mutator
class _RenameCallees(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, renamed: dict):
        super().__init__(mod)
        self.renamed = renamed

    def visit_global_var_(self, gvar: tvm.ir.GlobalVar) -> relax.Expr:
        return self.renamed.get(gvar, gvar)


def private_kernels(mod: tvm.IRModule) -> dict[tvm.ir.GlobalVar, tvm.tirx.PrimFunc]:
    """``mod``'s kernels that only its own functions call: the ``PrimFunc``s without a ``global_symbol``
    (one with it is callable by name from outside and must stay as it is)."""
    return {
        gvar: func
        for gvar, func in mod.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc) and (func.attrs is None or "global_symbol" not in func.attrs)
    }


def _in_canonical_order(func: tvm.tirx.PrimFunc) -> list[int] | None:
    """The positions of ``func``'s scalar parameters in the order their variables first appear in its
    buffers' types (in parameter order) and then its body; None where that is the order they have."""
    positions = [k for k, p in enumerate(func.params) if isinstance(p.ty, tvm.ir.PrimType)]
    if len(positions) < 2:
        return None
    seen: list = []

    def visit(var) -> None:
        if not any(var.same_as(v) for v in seen):
            seen.append(var)

    roots = [p.ty for p in func.params if not isinstance(p.ty, tvm.ir.PrimType)] + [func.body]
    for root in roots:
        tvm_ffi.structural_walk(root, [(tvm.tirx.Var, visit)], order="pre")

    def rank(k: int) -> tuple:
        found = [i for i, v in enumerate(seen) if v.same_as(func.params[k])]
        return (found[0] if found else len(seen), func.params[k].name)

    ordered = sorted(positions, key=rank)
    return None if ordered == positions else ordered


@relax.expr_functor.mutator
class _PermutedArgs(relax.PyExprMutator):
    """``call_tir`` calls of the kernels in ``moves`` (callee -> {new position: old position}) with their
    arguments moved likewise."""

    def __init__(self, mod: tvm.IRModule, moves: dict):
        super().__init__(mod)
        self.moves = moves

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        visited = super().visit_call_(call)
        callee = visited.args[0] if len(visited.args) > 1 else None
        if not isinstance(callee, tvm.ir.GlobalVar) or callee not in self.moves:
            return visited
        fields = list(visited.args[1].fields)
        moved = [fields[self.moves[callee].get(k, k)] for k in range(len(fields))]
        args = [callee, relax.Tuple(moved), *visited.args[2:]]
        return relax.Call(visited.op, args, visited.attrs, visited.ty_args, visited.span)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.OrderScalarParams")
def order_scalar_params(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Run after ``FuseTIR``: each private kernel takes its scalar parameters (symbolic sizes such as
    ``sym_height`` and ``sym_width``) in the order they first appear in it, and its calls pass them so.

    ``FuseTIR`` orders them differently from one process to the next (it collects them in a hash map),
    so a kernel's structural hash changed between compiles of the same model: equal kernels were not
    merged (``merge_equal_kernels``) and the kernel cache missed them. The order derived here depends
    on the kernel's structure only."""
    moves: dict = {}
    functions = dict(mod.functions_items())
    for gvar, func in private_kernels(mod).items():
        ordered = _in_canonical_order(func)
        if ordered is None:
            continue
        positions = sorted(ordered)
        params = list(func.params)
        for new, old in zip(positions, ordered):
            params[new] = func.params[old]
        functions[gvar] = tvm.tirx.PrimFunc(params, func.body, func.ret_type, func.attrs, func.span)
        moves[gvar] = dict(zip(positions, ordered))
    if not moves:
        return mod
    for gvar, func in list(functions.items()):
        if isinstance(func, relax.Function):
            functions[gvar] = _PermutedArgs(mod, moves).visit_expr(func)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.MergeEqualKernels")
def merge_equal_kernels(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """One private kernel for each structure: calls of a ``PrimFunc`` structurally equal to an earlier one
    go to the earlier one, and the copy leaves the module.

    ``FuseTIR`` names each fused kernel after its operators' own (``fused_dense3_add7_erf2``), and such
    names differ between the repeated layers of a network whose kernels are otherwise the same:
    convnext_tiny's 132 kernels are 68 structures, a BERT's twelve layers one; each was scheduled,
    lowered and compiled again (issue: compile in seconds). Kernels with a ``global_symbol`` (callable
    by name from outside) stay as they are."""
    groups: dict[int, list] = {}
    renamed: dict = {}
    for gvar, func in private_kernels(mod).items():
        same = groups.setdefault(tvm_ffi.structural_hash(func), [])
        kept = next((g for g, f in same if tvm_ffi.structural_equal(f, func)), None)
        if kept is None:
            same.append((gvar, func))
        else:
            renamed[gvar] = kept
    if not renamed:
        return mod
    functions = {g: f for g, f in mod.functions_items() if g not in renamed}
    for gvar, func in list(functions.items()):
        if isinstance(func, relax.Function):
            functions[gvar] = _RenameCallees(mod, renamed).visit_expr(func)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def rename_functions(mod: tvm.IRModule, names: Mapping[tvm.ir.GlobalVar, str]) -> tvm.IRModule:
    """``mod`` with the functions ``names`` maps renamed (their ``GlobalVar``s, and every call of them)."""
    if not names:
        return mod
    renamed = {}
    for gvar, name in names.items():
        renamed[gvar] = tvm.ir.GlobalVar(name)
        relax.expr._update_type(renamed[gvar], gvar.ty)  # a call's callee must carry its function's type
    functions = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            func = _RenameCallees(mod, renamed).visit_expr(func)
        functions[renamed.get(gvar, gvar)] = func
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
