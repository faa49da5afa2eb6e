"""Relax passes of our own that every pipeline we build runs (CPU with and without schedules, GPU, tuning).

``legalize_ops`` is ``LegalizeOps`` with this project's rules (``legalize_map``) passed in its customize
map, never registered on TVM's operators: TVM's ``FLegalize`` attributes stay as TVM ships them, so
another user of TVM in the same process sees TVM's own lowering.  A converter module that needs an op
lowered its own way registers a rule in ``runtime.lowering_rules``.  ``default_pipeline`` is ``tvm.compile``'s
default Relax pipeline with that legalization run first (``CPU_SCHEDULES=0``, drivers without a
pipeline of their own).

``split_fused_shape_params`` works around a ``FuseTIR`` failure of TVM 0.27 (see its docstring); the
CPU and GPU pipelines run it between ``FuseOps`` and ``FuseTIR``.  ``order_symbolic_definitions``, run
after ``FuseTIR``, puts a binding that ``FuseOps`` moved before the ``match_cast`` defining a symbolic
variable it uses back after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import tvm
from tvm import relax, topi

from nnadapter_tvm.errors import TVM_ERRORS
from nnadapter_tvm.runtime import lowering_rules, weights

LegalizeFunc = Callable[[relax.BlockBuilder, relax.Call], relax.Expr]

# -- legalization that keeps a float zero constant a tensor -------------------------------------

# A float zero that becomes a TIR immediate is folded away by TVM's constant folding, which does not
# follow IEEE: ``x * 0.0`` and ``0.0 * x`` fold to 0 (NaN and +-inf give 0, not NaN), ``0.0 / x`` to 0
# (0 / 0 and NaN give 0), ``x + 0.0`` to x (-0 stays -0), and ``x / 0.0`` stops the build ("Divide by
# zero").  Relax's legalization of a binary op turns a rank-0 constant operand into such an immediate
# (legalize_ops/binary.py, ``_try_convert_to_scalar_const``), so every converter that multiplies by,
# adds or divides by a constant that may be 0 (LEAKY_RELU's alpha, PRELU's slope, MUL by a model
# constant, Gemm's alpha, LRN's alpha ...) was exposed.  These rules keep a float zero constant a
# rank-0 tensor the kernel reads (no fold is possible on a load); any other constant still becomes an
# immediate, through TVM's own rule.
ZERO_KEEPING_OPS = {
    "relax.add": topi.add,
    "relax.subtract": topi.subtract,
    "relax.multiply": topi.multiply,
    "relax.divide": topi.divide,
    "relax.floor_divide": topi.floor_divide,
    "relax.mod": topi.mod,
    "relax.floor_mod": topi.floor_mod,
}


def is_float_zero_scalar(expr: relax.Expr) -> bool:
    """Whether ``expr`` is a rank-0 floating-point constant equal to 0 (either sign)."""
    if not isinstance(expr, tvm.ir.GenericConst) or not isinstance(expr.value, tvm.runtime.Tensor):
        return False
    value = expr.value.numpy()
    return value.ndim == 0 and value.dtype.kind == "f" and float(value) == 0.0


def _keeping_float_zero(te_func: Callable) -> Callable[[LegalizeFunc], LegalizeFunc]:
    """A rule over ``default`` (TVM's): ``default`` unless an operand is a float zero constant, which then
    stays a tensor of the kernel (see ``ZERO_KEEPING_OPS``)."""

    def wrap(default: LegalizeFunc) -> LegalizeFunc:
        def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
            if not any(is_float_zero_scalar(arg) for arg in call.args):
                return default(bb, call)
            return bb.call_te(te_func, *call.args)

        return legalize

    return wrap


#: The rules of this module: a float zero stays a tensor (applied before the converters' rules).
_ZERO_RULES: dict[str, Callable[[LegalizeFunc], LegalizeFunc]] = {
    name: _keeping_float_zero(fn) for name, fn in ZERO_KEEPING_OPS.items()
}


def legalize_map(extra: Mapping[str, LegalizeFunc] | None = None) -> dict[str, LegalizeFunc]:
    """This project's ``LegalizeOps`` rules (the float-zero ones, then those converters registered in
    ``runtime.lowering_rules``), each over TVM's own rule as the operator carries it now, with a
    pipeline's own ``extra`` rules (the CPU's packed conv2d/matmul) on top; an op in both takes
    ``extra``'s."""
    chains: dict[str, list] = {name: [rule] for name, rule in _ZERO_RULES.items()}
    for name, wraps in lowering_rules.registered().items():
        chains.setdefault(name, []).extend(wraps)
    rules: dict[str, LegalizeFunc] = {}
    for name, wraps in chains.items():
        rule = tvm.ir.Op.get(name).get_attr("FLegalize")
        for wrap in wraps:
            rule = wrap(rule)
        rules[name] = rule
    rules.update(extra or {})
    return rules


def legalize_ops(
    extra: Mapping[str, LegalizeFunc] | None = None, skip_ops: list[str] | None = None
) -> tvm.transform.Pass:
    """``relax.transform.LegalizeOps`` with ``legalize_map(extra)``: what every pipeline of ours runs
    in place of TVM's plain ``LegalizeOps()``."""
    return relax.transform.LegalizeOps(customize_legalize_map=legalize_map(extra), skip_ops=skip_ops)


# -- RewriteDataflowReshape and kernels whose reshape analysis raises ------------------------------


def _reshape_analysis_raises(func: tvm.tirx.PrimFunc) -> bool:
    try:
        relax.analysis.has_reshape_pattern(func)
    except TVM_ERRORS:  # TVM's InternalError is a RuntimeError
        return True
    return False


@relax.expr_functor.mutator
class _OutOfReshapeAnalysis(relax.PyExprMutator):
    """Dataflow bindings of calls to ``raising`` kernels bound to non-dataflow variables."""

    def __init__(self, mod: tvm.IRModule, raising: set):
        super().__init__(mod)
        self.raising = raising

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if (
            isinstance(binding.var, relax.DataflowVar)
            and isinstance(value, relax.Call)
            and value.op.same_as(tvm.ir.Op.get("relax.call_tir"))
            and value.args[0] in self.raising
        ):
            var = relax.Var(binding.var.name, binding.var.ty)
            self.builder_.emit_normalized(relax.VarBinding(var, self.visit_expr(value)))
            self.set_var_remap(binding.var, var)
            return
        super().visit_var_binding_(binding)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.GuardReshapeAnalysis")
def guard_reshape_analysis(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Run before ``RewriteDataflowReshape`` (in every pipeline that builds a VM): that pass asks of every
    kernel a dataflow variable is bound to whether it is a reshape, and TVM 0.27's analysis raises instead
    of answering no for some of them (a transpose of [1, 8, w, 8] with only ``w`` known at execution: "The
    padding factor (w - 2) * 8 is not divisible by w - 2"), failing the whole build.  The pass leaves
    bindings of non-dataflow variables alone, so such a kernel's calls are bound to those here; the
    kernel stays a kernel (it is no reshape to rewrite)."""
    raising = {g for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and _reshape_analysis_raises(f)}
    if not raising:
        return mod
    updated = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            updated[gvar] = _OutOfReshapeAnalysis(mod, raising).visit_expr(func)
    return tvm.IRModule({**dict(mod.functions_items()), **updated}, attrs=mod.attrs, global_infos=mod.global_infos)


@relax.expr_functor.mutator
class _ViewGuardedValues(relax.PyExprMutator):
    """``match_cast(v)`` of an operation's result ``v`` -> ``match_cast(memory.view(v))``."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.produced: set = set()

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        is_view = isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.memory.view"))
        if isinstance(value, (relax.Call, relax.TupleGetItem)) and not is_view:
            self.produced.add(binding.var)
        super().visit_var_binding_(binding)

    def visit_match_cast_(self, binding: relax.MatchCast) -> None:
        value = binding.value
        ty = value.ty if isinstance(value, relax.Var) else None
        if value in self.produced and isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
            view = self.builder_.emit(relax.op.memory.view(self.visit_expr(value), ty.shape))
            binding = relax.MatchCast(binding.var, view, binding.ty)
        super().visit_match_cast_(binding)


@relax.transform.function_pass(opt_level=0, name="nnadapter_tvm.ViewGuardedValues")
def view_guarded_values(func: relax.Function, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Run right before ``FuseOps``: a tensor guard (a ``match_cast``: ``OpArgs.require``,
    ``OpArgs.match_cast``) of an operation's result reads it through a no-copy view.

    TVM 0.27's FuseOps does not count a ``match_cast`` as a reader of its value. A CAST whose result
    TOP_K guarded (k at most an axis known only at execution) and a CONCAT also read was fused into the
    CONCAT's kernel, and the guard then read a variable defined nowhere: the build failed ("Var lv1 is
    not defined"); an item of a multi-output kernel (LSTM's Y_h) read by a guard and by a fusible op
    became an output of that op's fused function, which FuseTIR refused ("There must be an in-place
    index specified for each output"). The view is an opaque reader FuseOps does see, so the value stays
    a result of its kernel. It is added after the layout pass: ``ConvertLayout`` has no layout rule for a
    view and would put a guarded NHWC tensor back into NCHW around it (three more transposes in PP-OCRv4
    det)."""
    return _ViewGuardedValues(mod).visit_expr(func)


def default_pipeline() -> tvm.transform.Pass:
    """``tvm.compile``'s default Relax pipeline for a CPU target (``relax.get_pipeline("default")``),
    after our legalization: the dispatch passes TVM runs first, then ``legalize_ops()``; the default
    pipeline's own ``LegalizeOps`` then finds nothing left to lower."""
    return tvm.transform.Sequential(
        [
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            legalize_ops(),
            view_guarded_values,
            guard_reshape_analysis,
            relax.get_pipeline("default"),
        ]
    )


# -- FuseTIR and fused functions with scalar parameters of two kinds ---------------------------


def is_primitive(func: object) -> bool:
    """Whether ``func`` is a fused function of ``FuseOps`` (attribute ``Primitive``)."""
    return isinstance(func, relax.Function) and bool(func.attrs) and bool(func.attrs.get("Primitive", False))


def static_shape(ty: object) -> list[int] | None:
    """The dims of a tensor type whose every dimension is known, else None."""
    values = getattr(getattr(ty, "shape", None), "values", None)
    if values is None or not all(isinstance(d, tvm.tirx.IntImm) for d in values):
        return None
    return [int(d) for d in values]


def _shape_vars(ty: object) -> list | None:
    """The values of a ``ShapeType`` when each is a single TIR variable, else None."""
    if not isinstance(ty, relax.ShapeType) or ty.values is None:
        return None
    values = list(ty.values)
    return values if all(isinstance(v, tvm.tirx.Var) for v in values) else None


def _is_scalar(ty: object) -> bool:
    return isinstance(ty, tvm.ir.PrimType)


def _mixed(func: relax.Function) -> bool:
    """A fused function with a scalar (``PrimType``) parameter and exactly one ``Shape`` one whose values
    are variables (FuseOps' ``tir_vars``)."""
    tys = [p.ty for p in func.params]
    shapes = [t for t in tys if isinstance(t, relax.ShapeType)]
    return any(_is_scalar(t) for t in tys) and len(shapes) == 1 and _shape_vars(shapes[0]) is not None


@relax.expr_functor.visitor
class _ScalarArgs(relax.PyExprVisitor):
    """Which of ``mixed``'s functions are called with a single TIR variable for every scalar parameter."""

    def __init__(self, mixed: dict[str, relax.Function]):
        super().__init__()
        self.mixed = mixed
        self.rejected: set[str] = set()

    def visit_call_(self, call: relax.Call) -> None:
        super().visit_call_(call)
        name = call.op.name_hint if isinstance(call.op, tvm.ir.GlobalVar) else None
        if name in self.mixed:
            for param, arg in zip(self.mixed[name].params, call.args):
                # A variable of the caller's shapes (a dataflow variable bound to a value is not one).
                if _is_scalar(param.ty) and (not isinstance(arg, tvm.tirx.Var) or isinstance(arg, relax.DataflowVar)):
                    self.rejected.add(name)


@relax.expr_functor.mutator
class _CallSites(relax.PyExprMutator):
    """Calls of a rewritten fused function: its scalar arguments (variables) join its ``Shape`` argument."""

    def __init__(self, mod: tvm.IRModule, rewritten: dict[str, tuple[tvm.ir.GlobalVar, relax.Function]]):
        super().__init__(mod)
        self.rewritten = rewritten

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        visited = super().visit_call_(call)
        name = call.op.name_hint if isinstance(call.op, tvm.ir.GlobalVar) else None
        if name not in self.rewritten:
            return visited
        gvar, old = self.rewritten[name]
        kept, scalars, shape = [], [], None
        for param, arg in zip(old.params, visited.args):
            if _is_scalar(param.ty):
                scalars.append(arg)
            elif isinstance(param.ty, relax.ShapeType):
                shape = list(arg.values) if isinstance(arg, relax.ShapeExpr) else list(arg.ty.values)
                kept.append(None)  # its place
            else:
                kept.append(arg)
        args = [relax.ShapeExpr([*shape, *scalars]) if a is None else a for a in kept]
        return relax.Call(gvar, args)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.SplitFusedShapeParams")
def split_fused_shape_params(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Run between ``FuseOps`` and ``FuseTIR``: a fused function that takes both scalar (``PrimType``)
    parameters and a ``Shape`` one takes the scalars in its ``Shape`` parameter instead.

    ``FuseOps`` passes a symbolic size a kernel reads as a scalar parameter when no tensor parameter
    carries it (the element count a reduction's ``helpers.where_empty`` tests for 0, say ``tile_r0`` of
    a TILE fed its repeats) and in its ``Shape`` parameter (``tir_vars``) when it appears in a tensor
    parameter's shape only inside an expression (``3 * tile_r1``).  With both kinds in one fused
    function, TVM 0.27's ``FuseTIR`` fails in ``RenewDefs`` ("Check failed: (VarRemapGet(source) ==
    nullptr)": a TIR variable defined twice); either kind alone fuses.  The scalars move into the
    ``Shape`` parameter, as the same variables; calls pass them in the shape.  (Turning the shape into
    scalars instead also fuses, but Relax derives no symbolic output size from scalar parameters, so a
    call re-normalized later loses its output shape.)  A function called with a scalar that is not a
    single variable (emit_te passes variables) is left as it is."""
    functions = dict(mod.functions_items())
    mixed = {g.name_hint: f for g, f in functions.items() if is_primitive(f) and _mixed(f)}
    if not mixed:
        return mod
    callers = _ScalarArgs(mixed)
    for func in functions.values():
        if isinstance(func, relax.Function) and not is_primitive(func):
            callers.visit_expr(func)
    rewritten: dict[tvm.ir.GlobalVar, relax.Function] = {}
    for gvar, func in functions.items():
        if gvar.name_hint not in mixed or gvar.name_hint in callers.rejected:
            continue
        scalars = [p for p in func.params if _is_scalar(p.ty)]
        params = []
        for param in func.params:
            if isinstance(param.ty, relax.ShapeType):
                params.append(relax.Var(param.name, relax.ShapeType([*param.ty.values, *scalars])))
            elif not _is_scalar(param.ty):
                params.append(param)
        rewritten[gvar] = relax.Function(params, func.body, func.ret_ty, func.is_pure, func.attrs, func.span)
    if not rewritten:
        return mod
    # The new functions keep the old names (fused kernels are named after them), on new GlobalVars that
    # carry the new signatures.
    kept = {g: f for g, f in functions.items() if g not in rewritten}
    bb = relax.BlockBuilder(tvm.IRModule(kept, attrs=mod.attrs, global_infos=mod.global_infos))
    renamed = {g.name_hint: (bb.add_func(f, g.name_hint), functions[g]) for g, f in rewritten.items()}
    out = bb.get()
    sites = _CallSites(out, renamed)
    for gvar, func in list(out.functions_items()):
        if isinstance(func, relax.Function) and not is_primitive(func):
            out[gvar] = sites.visit_expr(func)
    return out


# -- dataflow bindings after a symbolic variable's definition -----------------------------------


def _collect_vars(expr: relax.Expr) -> list:
    found: list = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, tvm.ir.expr.Var) else None)
    return found


def _sorted_block(block: relax.DataflowBlock, defined_outside: set) -> relax.DataflowBlock:
    """``block``'s bindings in their order, except that each comes after the bindings whose variables it
    reads and after a ``match_cast`` that defines a symbolic variable it uses; ``block`` itself where
    nothing moves (or the dependencies form a cycle: then nothing valid is known to us).

    A variable may be defined by several ``match_cast`` bindings (the ``Shape`` one that reads it from a
    tensor, and a guard that names it bare in its tensor's shape): any one of them placed before a use
    will do.  Taking the first in the current order as the only definer made a cycle of an EXPAND guard
    (a guard defining ``expand_d1`` after kernels that use it), and the block stayed unsorted."""
    bindings = list(block.bindings)
    index = {b.var: i for i, b in enumerate(bindings)}
    definers: dict = {}
    defines: list[set] = []
    for i, b in enumerate(bindings):
        own = set()
        if isinstance(b, relax.MatchCast):
            own = {v for v in relax.analysis.definable_tir_vars_in_type(b.ty) if v not in defined_outside}
            for v in own:
                definers.setdefault(v, []).append(i)
        defines.append(own)
    reads: list[set[int]] = []
    needs: list[set] = []
    for i, b in enumerate(bindings):
        used: set[int] = set()
        symbols = set(relax.analysis.tir_vars_in_type(b.var.ty))
        if isinstance(b, relax.MatchCast):
            symbols |= set(relax.analysis.tir_vars_in_type(b.ty))
        for e in _collect_vars(b.value):
            if e in index:
                used.add(index[e])
            elif isinstance(e.ty, tvm.ir.PrimType):  # a symbolic variable passed as a scalar
                symbols.add(e)
            symbols |= set(relax.analysis.tir_vars_in_type(e.ty))
        used.discard(i)
        reads.append(used)
        needs.append({v for v in symbols if v in definers and v not in defines[i]})

    def ready(i: int, placed: set[int]) -> bool:
        return reads[i] <= placed and all(any(d in placed for d in definers[v]) for v in needs[i])

    placed: set[int] = set()
    if all(ready(i, set(range(i))) for i in range(len(bindings))):
        return block  # already valid (the common case: nothing to sort)
    order: list[int] = []
    while len(order) < len(bindings):
        nxt = next((i for i in range(len(bindings)) if i not in placed and ready(i, placed)), None)
        if nxt is None:
            return block
        order.append(nxt)
        placed.add(nxt)
    if order == list(range(len(bindings))):
        return block
    return relax.DataflowBlock([bindings[i] for i in order], block.span)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.OrderSymbolicDefinitions")
def order_symbolic_definitions(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Run after ``FuseOps``/``FuseTIR``: in every dataflow block, a binding that uses a symbolic variable
    moves after the ``match_cast`` that defines it.

    ``FuseOps`` re-emits a block's bindings in the order of their tensor dependencies and ignores the
    symbolic ones: a run-time guard ``match_cast(x, Tensor((select(tile_r0 > 0, n, n + 1),)))`` (TILE's
    check of repeats fed at execution) or a kernel taking ``tile_r0`` can land before
    ``match_cast(shape, Shape([tile_r0]))``, whose operand was fused elsewhere, and the build then fails in
    ``VMShapeLower`` ("PrimExpr ... is not computed").  A stable sort over both kinds of dependencies puts
    them back in a valid order (the first valid binding each time, so nothing else moves)."""
    changed = False
    out = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function) or is_primitive(func) or not isinstance(func.body, relax.SeqExpr):
            continue
        outside: set = set()
        for param in func.params:
            outside |= set(relax.analysis.definable_tir_vars_in_type(param.ty))
        blocks = []
        for block in func.body.blocks:
            new = _sorted_block(block, outside) if isinstance(block, relax.DataflowBlock) else block
            changed |= not new.same_as(block)
            blocks.append(new)
            for b in block.bindings:  # what this block defines is defined for the blocks after it
                if isinstance(b, relax.MatchCast):
                    outside |= set(relax.analysis.definable_tir_vars_in_type(b.ty))
        if any(not n.same_as(o) for n, o in zip(blocks, func.body.blocks)):
            body = relax.SeqExpr(blocks, func.body.body, func.body.span)
            out[gvar] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    if not changed:
        return mod
    mod = mod.clone()
    for gvar, func in out.items():
        mod[gvar] = func
    return mod


# -- weights out of the module ------------------------------------------------------------------


@relax.expr_functor.mutator
class _LiftConstants(relax.PyExprMutator):
    """Each liftable constant -> a variable bound (by the caller) to an item of the weights tuple."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.arrays: list[np.ndarray] = []
        self.vars: list[relax.Var] = []
        self.index: dict = {}  # constant -> its position (a constant object used twice is lifted once)

    def visit_generic_const_(self, const: tvm.ir.GenericConst) -> relax.Expr:
        if const in self.index:
            return self.vars[self.index[const]]
        value = const.value
        if not isinstance(value, tvm.runtime.Tensor) or not isinstance(const.ty, relax.TensorType):
            return const
        if not weights.liftable(str(value.dtype), value.shape):
            return const
        self.index[const] = len(self.arrays)
        self.arrays.append(np.from_dlpack(value))  # a view: the blob (runtime.weights.pack) copies it once
        self.vars.append(relax.Var(f"weight{len(self.vars)}", const.ty))
        return self.vars[-1]


def lift_weights(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """``mod`` with every constant of ``main`` that ``runtime.weights.liftable`` accepts taken out: ``main``
    gets one more, last, parameter, a tuple of them, and binds its items first; and the arrays, in the
    tuple's order. Run on the lowered module, right before the VM's code generation (after
    ``VMShapeLower``): the tuple then gets no check of its types per call, which its fixed contents
    (the compiled model's own weights, ``Program``) do not need."""
    func = mod["main"]
    lifter = _LiftConstants(mod)
    body = lifter.visit_expr(func.body)
    if not lifter.arrays:
        return mod, []
    tuple_var = relax.Var("weights", relax.TupleType([v.ty for v in lifter.vars]))
    bindings = [relax.VarBinding(v, relax.TupleGetItem(tuple_var, k)) for k, v in enumerate(lifter.vars)]
    body = relax.SeqExpr([relax.BindingBlock(bindings), *body.blocks], body.body)
    lifted = relax.Function([*func.params, tuple_var], body, func.ret_ty, func.is_pure, func.attrs, func.span)
    out = tvm.IRModule({**dict(mod.functions_items())}, attrs=mod.attrs, global_infos=mod.global_infos)
    out[mod.get_global_var("main")] = lifted
    return out, lifter.arrays
