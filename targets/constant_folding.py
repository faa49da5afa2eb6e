"""Folding the kernels that read only constants (weight packing above all) with one LLVM build.

Relax's ``FoldConstant`` evaluates a ``call_tir`` whose arguments are all constants by building its
PrimFunc on its own: one ``tirx.build`` and one LLVM module per distinct function, about a quarter of a
second each on this machine.  After ``LegalizeOps`` with packed weights (``cpu.lowering``) every
convolution and dense layer has such a packing kernel, so ``FoldConstant`` took 13 of resnet50's 18 s
of compile time (53 packing kernels) and most of densenet121's.

``fold_constant_calls`` does the same evaluation in rounds: each round collects every ``call_tir`` whose
arguments are constants (or variables bound to constants), builds the distinct PrimFuncs among them
(``structural_equal`` ones once) into one LLVM module, runs each call and puts its result in its place.
The kernels, the target (plain ``llvm``, as ``FoldConstant`` uses) and so the constants are the same as
``FoldConstant`` gives; ``FoldConstant`` still runs after it for anything else (tuples, shape values).
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

log = logging.getLogger("nnadapter_tvm")

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
#: What ``FoldConstant`` evaluates with: the plain host target (no CPU model), so the constants are the same.
_EVAL_TARGET = {"kind": "llvm"}


def _static_tensor_type(ty: object) -> tuple[tuple[int, ...], str] | None:
    """The shape and element type of a tensor type whose every dimension is known, else None."""
    if not isinstance(ty, relax.TensorType):
        return None
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(isinstance(d, tirx.IntImm) for d in values):
        return None
    return tuple(int(d) for d in values), str(ty.dtype)


@relax.expr_functor.mutator
class _Folder(relax.PyExprMutator):
    """One round: with ``lib`` None it only records the PrimFuncs of the foldable calls (``wanted``);
    with ``lib`` it replaces each foldable call whose function the library holds by its result."""

    def __init__(self, mod: tvm.IRModule, lib: tvm.runtime.Module | None, symbols: dict[str, str]):
        super().__init__(mod)
        self.mod = mod
        self.lib, self.symbols = lib, symbols
        self.wanted: dict[str, tirx.PrimFunc] = {}
        self.folded = 0
        self._functions: dict[str, object] = {}

    def _constant(self, expr: relax.Expr) -> tvm.ir.expr.Constant | None:
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if isinstance(bound, tvm.ir.expr.Constant):
                return bound
        return None

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.same_as(_CALL_TIR)) or len(call.args) != 2:
            return call
        gvar, args = call.args
        if not isinstance(gvar, relax.GlobalVar) or not isinstance(args, relax.Tuple) or len(call.ty_args) != 1:
            return call
        out = _static_tensor_type(call.ty_args[0])
        func = self.mod.functions.get(gvar)
        constants = [self._constant(a) for a in args.fields]
        if out is None or not isinstance(func, tirx.PrimFunc) or any(c is None for c in constants):
            return call
        if self.lib is None:
            self.wanted[gvar.name_hint] = func
            return call
        symbol = self.symbols.get(gvar.name_hint)
        if symbol is None:
            return call
        kernel = self._functions.get(symbol)
        if kernel is None:
            kernel = self._functions[symbol] = self.lib[symbol]
        shape, dtype = out
        result = tvm.runtime.tensor(np.empty(shape, dtype))
        kernel(*[c.value for c in constants], result)
        self.folded += 1
        return relax.const(result.numpy(), dtype)


def _build(wanted: dict[str, tirx.PrimFunc]) -> tuple[tvm.runtime.Module, dict[str, str]]:
    """One LLVM module holding each distinct function of ``wanted`` once; name -> its symbol there."""
    distinct: list[tuple[str, tirx.PrimFunc]] = []
    by_hash: dict[int, list[tuple[str, tirx.PrimFunc]]] = {}
    symbols: dict[str, str] = {}
    for name, func in wanted.items():
        bucket = by_hash.setdefault(tvm_ffi.structural_hash(func), [])
        same = next((s for s, f in bucket if tvm_ffi.structural_equal(f, func)), None)
        if same is None:
            same = f"nna_fold_{len(distinct)}"
            bucket.append((same, func))
            distinct.append((same, func))
        symbols[name] = same
    mod = tvm.IRModule({symbol: func.with_attr("global_symbol", symbol) for symbol, func in distinct})
    return tvm.tirx.build(mod, target=tvm.target.Target(_EVAL_TARGET)), symbols


def fold_constant_calls(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every ``call_tir`` on constants replaced by its result (see the module docstring).
    Kernels that call others, or that fail to build, are left to ``FoldConstant``."""
    while True:
        collector = _Folder(mod, None, {})
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                collector.visit_expr(func)
        if not collector.wanted:
            return mod
        try:
            lib, symbols = _build(collector.wanted)
        except Exception as err:  # FoldConstant, one kernel at a time, still runs after us
            log.debug("constant folding: the batched build failed (%s); leaving it to FoldConstant", err)
            return mod
        folder = _Folder(mod, lib, symbols)
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                updates[gvar] = folder.visit_expr(func)
        if not folder.folded:
            return mod
        # The kernels folded away stay in the module, as with FoldConstant: FuseTIR drops the uncalled.
        for gvar, func in updates.items():
            mod[gvar] = func


@tvm.transform.module_pass(opt_level=0, name="nna.FoldConstantCalls")
def FoldConstantCalls(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """The pass form of ``fold_constant_calls`` (before ``relax.transform.FoldConstant``)."""
    return fold_constant_calls(mod)
