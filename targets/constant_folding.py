"""Folding the kernels that read only constants (weight packing above all) with one LLVM build.

Relax's ``FoldConstant`` evaluates a ``call_tir`` whose arguments are all constants by building its
PrimFunc on its own: one ``tirx.build`` and one LLVM module per distinct function, about a quarter of a
second each on this machine.  After ``LegalizeOps`` with packed weights (``cpu.lowering``) every
convolution and dense layer has such a packing kernel, so ``FoldConstant`` took 13 of resnet50's 18 s
of compile time (53 packing kernels) and most of densenet121's.

``fold_constant_calls`` does the same evaluation at once: it collects every ``call_tir`` whose arguments
are constants or results of such calls (BatchNormalization's parameters go through chains of five:
reshape, add, rsqrt, multiply, transpose), builds the distinct PrimFuncs among them (``structural_equal``
ones once) into one LLVM module at opt-level 0, and runs the calls in binding order, each result put in
its call's place.  The weight packings of the CPU lowering (``cpu.compute.pack_*``), recognised by
rebuilding that compute for the call's shapes and comparing structurally, are done by numpy instead:
they only move numbers.  The module is structurally equal, constants included, to the one
``FoldConstant`` alone gives (checked on squeezenet, resnet50, densenet121; ``tests/test_compile_time``);
``FoldConstant`` still runs after it for anything else (tuples, shape values).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

log = logging.getLogger("nnadapter_tvm")

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
#: What ``FoldConstant`` evaluates with, the plain host target (no CPU model), at LLVM's opt-level 0: these
#: kernels run once, and LLVM optimizes them for longer than they run (densenet121: 0.8 s -> 0.2 s). Without
#: fast-math flags LLVM's optimizations keep every float result, so the constants are the same.
_EVAL_TARGET = {"kind": "llvm", "opt-level": 0}


def _static_tensor_type(ty: object) -> tuple[tuple[int, ...], str] | None:
    """The shape and element type of a tensor type whose every dimension is known, else None."""
    if not isinstance(ty, relax.TensorType):
        return None
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(isinstance(d, tirx.IntImm) for d in values):
        return None
    return tuple(int(d) for d in values), str(ty.dtype)


def _pack_conv(w: np.ndarray, out: tuple[int, ...]) -> np.ndarray:
    blocks, kh, kw, icg, ob = out
    padded = np.zeros((blocks * ob, icg, kh, kw), w.dtype)
    padded[: w.shape[0]] = w
    return padded.reshape(blocks, ob, icg, kh, kw).transpose(0, 3, 4, 2, 1)


def _pack_depthwise(w: np.ndarray, out: tuple[int, ...]) -> np.ndarray:
    return w[:, 0].transpose(1, 2, 0)


def _pack_dense(b: np.ndarray, out: tuple[int, ...]) -> np.ndarray:
    blocks, k, nb = out
    padded = np.zeros((k, blocks * nb), b.dtype)
    padded[:, : b.shape[1]] = b
    return padded.reshape(k, blocks, nb).transpose(1, 0, 2)


def _numpy_packing(func: tirx.PrimFunc, source: tuple[tuple[int, ...], str], out: tuple[int, ...]) -> Callable | None:
    """numpy's version of ``func`` when it is exactly one of the CPU lowering's weight-packing computes
    (``cpu.compute.pack_*``) for these shapes, checked by rebuilding that compute and comparing
    structurally; else None.  Packing only moves numbers, so numpy gives the same bits, without LLVM."""
    from nnadapter_tvm.targets.cpu import compute

    in_shape, dtype = source
    ranks = (len(in_shape), len(out))
    if ranks == (4, 5):
        make, pack = (lambda w: compute.pack_conv_weight(w, out[0] * out[4], out[4])), _pack_conv
    elif ranks == (4, 3):
        make, pack = compute.pack_depthwise_weight, _pack_depthwise
    elif ranks == (2, 3):
        make, pack = (lambda b: compute.pack_dense_weight(b, out[0] * out[2], out[2])), _pack_dense
    else:
        return None
    try:  # the compute as the lowering emits it (emit_te on a tensor of these shapes)
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(list(in_shape), dtype))
        with bb.function("f", [x]):
            bb.emit_func_output(bb.emit_te(make, x))
        reference = next(f for f in bb.get().functions.values() if isinstance(f, tirx.PrimFunc))
    except Exception:  # shapes the compute does not take: not that kernel
        return None
    for key, value in (func.attrs or {}).items():  # AnnotateTIROpPattern's op_pattern
        reference = reference.with_attr(key, value)
    return pack if tvm_ffi.structural_equal(reference, func) else None


def _foldable(call: object, is_constant: Callable[[relax.Expr], bool]) -> tuple[relax.GlobalVar, tuple] | None:
    """``call``'s function and output (shape, dtype) when it is a ``call_tir`` with a static tensor output
    whose every argument ``is_constant``; else None."""
    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op) or not call.op.same_as(_CALL_TIR):
        return None
    if len(call.args) != 2 or len(call.ty_args) != 1:
        return None
    gvar, args = call.args
    if not isinstance(gvar, relax.GlobalVar) or not isinstance(args, relax.Tuple):
        return None
    if not all(is_constant(a) for a in args.fields):
        return None
    out = _static_tensor_type(call.ty_args[0])
    return None if out is None else (gvar, out)


def _collect(mod: tvm.IRModule) -> tuple[dict[str, tirx.PrimFunc], dict[str, Callable]]:
    """The calls that fold (on constants, or on the results of calls that fold: a chain of them is evaluated
    in binding order, so one build serves it): the PrimFuncs to build, and the weight packings numpy does."""
    wanted: dict[str, tirx.PrimFunc] = {}
    packers: dict[str, Callable] = {}
    for func in mod.functions.values():
        body = func.body if isinstance(func, relax.Function) else None
        if not isinstance(body, relax.SeqExpr):
            continue
        pending: set = set()  # variables bound to constants or to calls that fold

        def is_constant(expr: relax.Expr, pending: set = pending) -> bool:
            return isinstance(expr, tvm.ir.expr.Constant) or (isinstance(expr, relax.Var) and expr in pending)

        for block in body.blocks:
            for binding in block.bindings:
                value = getattr(binding, "value", None)
                if isinstance(binding, relax.MatchCast) or value is None:
                    continue
                if isinstance(value, tvm.ir.expr.Constant):
                    pending.add(binding.var)
                    continue
                found = _foldable(value, is_constant)
                callee = None if found is None else mod.functions.get(found[0])
                if isinstance(callee, tirx.PrimFunc):
                    name = found[0].name_hint
                    if name not in wanted and name not in packers:
                        args = value.args[1].fields
                        shape = _static_tensor_type(args[0].ty) if len(args) == 1 else None
                        packer = _numpy_packing(callee, shape, found[1][0]) if shape else None
                        if packer is not None:
                            packers[name] = packer
                        else:
                            wanted[name] = callee
                    pending.add(binding.var)
    return wanted, packers


@relax.expr_functor.mutator
class _Folder(relax.PyExprMutator):
    """Replaces each call that folds (its function in ``lib``) by its result, in binding order."""

    def __init__(
        self, mod: tvm.IRModule, lib: tvm.runtime.Module | None, symbols: dict[str, str], packers: dict[str, Callable]
    ):
        super().__init__(mod)
        self.lib, self.symbols, self.packers = lib, symbols, packers
        self.folded = 0
        self._kernels: dict[str, object] = {}

    def _constant(self, expr: relax.Expr) -> tvm.ir.expr.Constant | None:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return expr if isinstance(expr, tvm.ir.expr.Constant) else None

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        found = _foldable(call, lambda a: self._constant(a) is not None)
        name = None if found is None else found[0].name_hint
        packer = self.packers.get(name)
        if packer is not None:
            self.folded += 1
            shape, dtype = found[1]
            packed = np.ascontiguousarray(packer(self._constant(call.args[1].fields[0]).value.numpy(), shape))
            return relax.const(packed, dtype)
        symbol = self.symbols.get(name)
        if symbol is None or self.lib is None:
            return call
        kernel = self._kernels.get(symbol)
        if kernel is None:
            kernel = self._kernels[symbol] = self.lib[symbol]
        shape, dtype = found[1]
        result = tvm.runtime.tensor(np.empty(shape, dtype))
        kernel(*[self._constant(a).value for a in call.args[1].fields], result)
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
    while True:  # one round folds every chain; another only where folding uncovered more
        wanted, packers = _collect(mod)
        if not wanted and not packers:
            return mod
        lib, symbols = None, {}
        if wanted:
            try:
                lib, symbols = _build(wanted)
            except Exception as err:  # FoldConstant, one kernel at a time, still runs after us
                log.debug("constant folding: the batched build failed (%s); leaving it to FoldConstant", err)
                if not packers:
                    return mod
        folder = _Folder(mod, lib, symbols, packers)
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
