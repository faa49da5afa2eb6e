"""Folding the kernels that read only constants (weight packing above all) at once, mostly by numpy.

Relax's ``FoldConstant`` evaluates a ``call_tir`` whose arguments are all constants by building its
PrimFunc on its own: one ``tirx.build`` and one LLVM module per distinct function, about a quarter of a
second each on this machine.  After ``LegalizeOps`` with packed weights (``cpu.lowering``) every
convolution and dense layer has such a packing kernel, so ``FoldConstant`` took 13 of resnet50's 18 s
of compile time (53 packing kernels) and most of densenet121's.

``fold_constant_calls`` does the same evaluation at once: it collects every ``call_tir`` whose arguments
are constants or results of such calls (BatchNormalization's parameters go through chains of five:
reshape, add, rsqrt, multiply, transpose) and runs them in binding order, each result put in its call's
place.  Most never reach LLVM:

- the weight packings of the CPU lowering (``cpu.compute.pack_*``), recognised by rebuilding that
  compute for the call's shapes and comparing structurally, are done by numpy's reshape and transpose;
- a kernel that is one spatial block storing ``out[v0, ..., vn] = expr``, where ``expr`` holds only loads
  at integer indices, IEEE arithmetic (+, -, *, /, sqrt, rsqrt as 1 / sqrt), comparisons, selects and
  casts, is evaluated by numpy over the index grid: those operations round the same in numpy and in
  LLVM without fast-math (``exp`` and the like are left out: libm and numpy may differ in the last bit);
- the rest are built, the distinct ones (``structural_equal``) once, into one LLVM module at opt-level 0.

The module is structurally equal, constants included (a one-ulp difference breaks that), to the one
``FoldConstant`` alone gives: checked on squeezenet, resnet50 and densenet121, and in
``tests/test_compile_time``.  ``FoldConstant`` still runs after it for anything left (tuples, shape values).
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


# -- numpy for one-block element-wise kernels (BatchNormalization's parameters, reshapes, transposes) --------

_FLOATS = ("float32", "float64")
# IEEE operations: numpy and LLVM (no fast-math) round each the same way. exp, log, ... are not here:
# numpy's and libm's implementations may differ in the last bit.
_FLOAT_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
_INT_BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "FloorDiv": np.floor_divide,
    "FloorMod": np.mod,
    "Min": np.minimum,
    "Max": np.maximum,
}
_COMPARE = {
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
    "EQ": np.equal,
    "NE": np.not_equal,
}


class _Unsupported(Exception):
    """A kernel the numpy evaluator does not take (LLVM folds it instead)."""


def _elementwise_parts(func: tirx.PrimFunc) -> tuple[list, list[int], object] | None:
    """A kernel that is one spatial block over a plain loop nest, storing ``out[v0, ..., vn] = expr``: its
    iteration variables, their extents and the store; else None."""
    root = func.body
    if not hasattr(root, "block") or root.block.name_hint != "root" or list(root.block.alloc_buffers):
        return None
    loops, node = [], root.block.body
    while isinstance(node, tirx.For):
        if not (isinstance(node.min, tirx.IntImm) and node.min.value == 0 and isinstance(node.extent, tirx.IntImm)):
            return None
        loops.append(node)
        node = node.body
    if not hasattr(node, "block") or not hasattr(node, "iter_values"):
        return None
    block = node.block
    predicate = node.predicate
    if block.init is not None or list(block.alloc_buffers) or list(block.match_buffers):
        return None
    if not (isinstance(predicate, tirx.IntImm) and predicate.value == 1) or len(node.iter_values) != len(loops):
        return None
    if any(not value.same_as(loop.loop_var) for value, loop in zip(node.iter_values, loops)):
        return None
    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return None
    variables = [iv.var for iv in block.iter_vars]
    if any(str(iv.iter_type) not in ("0", "DataPar") for iv in block.iter_vars):
        return None
    if len(store.indices) != len(variables) or any(not i.same_as(v) for i, v in zip(store.indices, variables)):
        return None
    return variables, [int(loop.extent.value) for loop in loops], store


def _evaluate(expr: object, env: dict, buffers: dict) -> object:
    kind = type(expr).__name__
    ty = getattr(expr, "ty", None)
    dtype = str(getattr(ty, "dtype", ty))
    if kind == "Var":
        if expr in env:
            return env[expr]
        raise _Unsupported(f"free variable {expr}")
    if kind in ("IntImm", "FloatImm"):
        return np.array(expr.value, dtype)
    if kind == "TensorLoad":
        array = buffers.get(expr.source)
        if array is None:
            raise _Unsupported("a load from a buffer that is not a parameter")
        index = tuple(np.asarray(_evaluate(i, env, buffers)) for i in expr.indices)
        if any(i.dtype.kind not in "iu" for i in index):
            raise _Unsupported("a non-integer index")
        return array[index]
    if kind == "Cast":
        value = np.asarray(_evaluate(expr.value, env, buffers))
        if value.dtype.kind == "f" and dtype not in _FLOATS:
            raise _Unsupported("a float to integer cast")
        return value.astype(dtype)
    if kind == "Select":
        condition = _evaluate(expr.condition, env, buffers)
        return np.where(condition, _evaluate(expr.true_value, env, buffers), _evaluate(expr.false_value, env, buffers))
    if kind in _COMPARE:
        return _COMPARE[kind](_evaluate(expr.a, env, buffers), _evaluate(expr.b, env, buffers))
    if kind in _FLOAT_BINARY or kind in _INT_BINARY:
        table = _FLOAT_BINARY if dtype in _FLOATS else _INT_BINARY if dtype.startswith(("int", "uint")) else {}
        if kind not in table:
            raise _Unsupported(f"{kind} on {dtype}")
        a, b = _evaluate(expr.a, env, buffers), _evaluate(expr.b, env, buffers)
        return np.asarray(table[kind](a, b)).astype(dtype, copy=False)
    if kind == "Call" and dtype in _FLOATS:
        name = str(expr.op.name) if hasattr(expr.op, "name") else ""
        if name == "tirx.sqrt":
            return np.sqrt(_evaluate(expr.args[0], env, buffers))
        if name == "tirx.rsqrt":
            x = np.asarray(_evaluate(expr.args[0], env, buffers))
            return (np.array(1, x.dtype) / np.sqrt(x)).astype(dtype, copy=False)
    raise _Unsupported(kind)


def _check(expr: object, variables: set, inputs: set) -> None:
    """Raises ``_Unsupported`` unless ``_evaluate`` takes every node of ``expr`` (checked before building, so
    that a kernel numpy cannot run goes to LLVM with the rest)."""
    kind = type(expr).__name__
    ty = getattr(expr, "ty", None)
    dtype = str(getattr(ty, "dtype", ty))
    children: list = []
    if kind == "Var":
        if expr not in variables:
            raise _Unsupported(f"free variable {expr}")
    elif kind in ("IntImm", "FloatImm"):
        pass
    elif kind == "TensorLoad":
        if expr.source not in inputs:
            raise _Unsupported("a load from a buffer that is not a parameter")
        children = list(expr.indices)
    elif kind == "Cast":
        source = getattr(expr.value.ty, "dtype", expr.value.ty)
        if str(source) in _FLOATS and dtype not in _FLOATS:
            raise _Unsupported("a float to integer cast")
        children = [expr.value]
    elif kind == "Select":
        children = [expr.condition, expr.true_value, expr.false_value]
    elif kind in _COMPARE:
        children = [expr.a, expr.b]
    elif kind in _FLOAT_BINARY or kind in _INT_BINARY:
        table = _FLOAT_BINARY if dtype in _FLOATS else _INT_BINARY if dtype.startswith(("int", "uint")) else {}
        if kind not in table:
            raise _Unsupported(f"{kind} on {dtype}")
        children = [expr.a, expr.b]
    elif kind == "Call" and dtype in _FLOATS and str(getattr(expr.op, "name", "")) in ("tirx.sqrt", "tirx.rsqrt"):
        children = list(expr.args)
    else:
        raise _Unsupported(kind)
    for child in children:
        _check(child, variables, inputs)


def _numpy_elementwise(func: tirx.PrimFunc) -> Callable | None:
    """numpy's evaluation of a one-block element-wise kernel (``_elementwise_parts``) built only of IEEE
    arithmetic, comparisons, selects, casts and loads at integer indices; None for any other kernel."""
    parts = _elementwise_parts(func)
    if parts is None or not func.params:
        return None
    variables, extents, store = parts
    *inputs, output = list(func.params)
    if not store.buffer.same_as(output) or str(output.dtype) not in (*_FLOATS, "bool"):
        return None
    try:
        _check(store.value, set(variables), set(inputs))
    except _Unsupported:
        return None

    def run(*arrays: np.ndarray) -> np.ndarray:
        grids = np.indices(extents, dtype="int64", sparse=True) if extents else ()
        env = dict(zip(variables, grids))
        buffers = dict(zip(inputs, arrays))
        value = np.asarray(_evaluate(store.value, env, buffers))
        if value.dtype != np.dtype(str(output.dtype)):
            raise _Unsupported(f"a {value.dtype} value stored as {output.dtype}")
        return np.ascontiguousarray(np.broadcast_to(value, extents))

    return run


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


def _numpy_kernel(func: tirx.PrimFunc, args: list, out: tuple[int, ...]) -> Callable | None:
    """``evaluate(arrays, out_shape)`` by numpy for a weight packing or a one-block element-wise kernel;
    None where LLVM must build it."""
    if len(args) == 1:
        source = _static_tensor_type(args[0].ty)
        pack = _numpy_packing(func, source, out) if source else None
        if pack is not None:
            return lambda arrays, shape, pack=pack: pack(arrays[0], shape)
    run = _numpy_elementwise(func)
    return None if run is None else (lambda arrays, shape, run=run: run(*arrays))


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
                        evaluate = _numpy_kernel(callee, value.args[1].fields, found[1][0])
                        if evaluate is not None:
                            packers[name] = evaluate
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
        evaluate = self.packers.get(name)
        if evaluate is not None:
            shape, dtype = found[1]
            arrays = [self._constant(a).value.numpy() for a in call.args[1].fields]
            try:
                result = np.ascontiguousarray(evaluate(arrays, shape))
            except (_Unsupported, IndexError, ValueError, TypeError) as err:  # FoldConstant folds it after us
                log.debug("constant folding: numpy left %s to FoldConstant (%s)", name, err)
                return call
            if result.shape != tuple(shape) or result.dtype != np.dtype(dtype):
                return call
            self.folded += 1
            return relax.const(result, dtype)
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
