"""Concatenations without a copy: each producer writes its slice of the concatenation's buffer.

A concatenation lowered as TOPI's ``concatenate`` is a kernel of its own that reads every input and
writes the output element by element through a chain of ``if_then_else`` (squeezenet's four spent 19% of
an inference in them, 10-15 GB/s on a copy).  The inputs are mostly the outputs of the convolutions just
before it (squeezenet's fire modules, inception's branches), used by nothing else.  So, between
``FuseOps`` and ``FuseTIR`` (``write_concat_in_place``), such a producer's fused function gets one more
stage, a copy of its result into the concatenation's buffer at the input's offset on the axis; ``FuseTIR``
makes it part of the producer's kernel, and the CPU schedules compute it on the producer's register tile
like any epilogue, so the producer's result goes straight to its place in the concatenation.  The first
producer (in program order) allocates the concatenation's buffer (``call_tir``); each later one writes
into it in place (``call_tir_inplace``).  An input that is not such a producer (a model input, a constant,
a tensor used elsewhere: densenet's running concatenation) is copied into its slice by a kernel of its own,
after the producers.  So is a Winograd convolution's result (``_calls_winograd``): its kernel takes 8x a
direct one's time to compile and is the same for every layer of one shape, but written into its slice it
becomes one kernel per offset (densenet121: 18 kernels instead of 2, 4 s of its compile, against copies of
[1, 28, 28, 32] that take microseconds).

Element-wise steps after a concatenation (a QDQ model's requantization of it) would fuse with it into a
kernel of its own: before legalization, ``elementwise_into_concat`` moves them onto its inputs.

Concatenations are recognized by the attribute ``CONCAT_AXIS`` that ``legalize_concat`` puts on the
kernel TVM's legalization makes; only static shapes are rewritten (the offsets are constants), and a
concatenation with no such producer among its inputs keeps TOPI's kernel.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.script import from_source

from nnadapter_tvm.targets.cpu.winograd import WINOGRAD
from nnadapter_tvm.targets.relax_passes import is_primitive, static_shape

#: PrimFunc attribute: the axis of a concatenation kernel (``legalize_concat``).
CONCAT_AXIS = "nna_concat_axis"


def legalize_concat(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """TVM's lowering of ``relax.concat``, its kernel marked with ``CONCAT_AXIS``."""
    lowered = tvm.ir.Op.get("relax.concat").get_attr("FLegalize")(bb, call)
    if isinstance(lowered, relax.Call) and lowered.op.same_as(tvm.ir.Op.get("relax.call_tir")):
        gvar = lowered.args[0]
        func = bb.get()[gvar]
        axis = int(call.attrs.axis)
        if axis < 0:
            axis += call.ty.ndim
        bb.update_func(gvar, func.with_attr(CONCAT_AXIS, axis))
    return lowered


def _write_slice(shape: list[int], big: list[int], axis: int, offset: int, dtype: str) -> tirx.PrimFunc:
    """``big[..., i + offset, ...] = a[..., i, ...]`` on ``axis``: a one-block copy the schedules treat as an
    element-wise stage."""

    def dims(values: list[int]) -> str:
        return "(" + ", ".join(f"T.int64({v})" for v in values) + ",)"

    names = [f"v{i}" for i in range(len(shape))]
    at = ", ".join(f"{n} + T.int64({offset})" if i == axis else n for i, n in enumerate(names))
    src = f"""
@T.prim_func(private=True, s_tir=True)
def nna_write_slice(a: T.Buffer({dims(shape)}, "{dtype}"), big: T.Buffer({dims(big)}, "{dtype}")):
    T.func_attr({{"tirx.noalias": True, "op_pattern": 0}})
    for {", ".join("i" + n for n in names)} in T.grid{dims(shape)}:
        with T.sblock("nna_write_slice"):
            {", ".join(names)} = T.axis.remap("{"S" * len(shape)}", [{", ".join("i" + n for n in names)}])
            T.reads(a[{", ".join(names)}])
            T.writes(big[{at}])
            big[{at}] = a[{", ".join(names)}]
"""
    return from_source(src)


def _ends_in_result(group: relax.Function) -> bool:
    """Whether ``group`` is one dataflow block whose last binding is its result (what FuseOps makes)."""
    if len(group.body.blocks) != 1 or not isinstance(group.body.blocks[0], relax.DataflowBlock):
        return False
    bindings = group.body.blocks[0].bindings
    return len(bindings) > 0 and bindings[-1].var.same_as(group.body.body)


def _calls_winograd(group: relax.Function) -> bool:
    """Whether a fused function calls a Winograd convolution's kernel (``winograd.conv_nhwc``)."""
    found = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and any(
            isinstance(a, tvm.ir.GlobalVar) and a.name_hint.startswith(WINOGRAD) for a in expr.args
        ):
            found.append(expr)

    relax.analysis.post_order_visit(group.body, visit)
    return bool(found)


def _uses(func: relax.Function) -> dict[relax.Var, int]:
    """How many times each variable is read in ``func``."""
    counts: dict[relax.Var, int] = {}

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    relax.analysis.post_order_visit(func.body, visit)
    return counts


class _Rewriter:
    """The concatenations of one module's functions (see the module docstring)."""

    def __init__(self, mod: tvm.IRModule):
        self.mod = mod
        self.bb = relax.BlockBuilder(mod)
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.writes: dict[tuple, tvm.ir.GlobalVar] = {}

    def write(self, shape: list[int], big: list[int], axis: int, offset: int, dtype: str) -> tvm.ir.GlobalVar:
        key = (tuple(shape), tuple(big), axis, offset, dtype)
        if key not in self.writes:
            self.writes[key] = self.bb.add_func(_write_slice(shape, big, axis, offset, dtype), "nna_write_slice")
        return self.writes[key]

    def concat_axis(self, value: relax.Expr) -> int | None:
        if not isinstance(value, relax.Call) or not value.op.same_as(self.call_tir):
            return None
        func = self.mod[value.args[0]]
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None or CONCAT_AXIS not in func.attrs:
            return None
        return int(func.attrs[CONCAT_AXIS])

    def producer(self, value: relax.Expr) -> tuple[relax.Function, list[relax.Expr], str] | None:
        """What ``value`` computes as a fused function (``_ends_in_result``), the arguments to call it with
        and its name: the fused function it calls, or one made for a lone kernel's ``call_tir`` (a pool);
        None for anything else, a concatenation included."""
        if not isinstance(value, relax.Call):
            return None
        if isinstance(value.op, tvm.ir.GlobalVar):
            func = self.mod[value.op]
            if not is_primitive(func) or not _ends_in_result(func) or _calls_winograd(func):
                return None
            return func, list(value.args), value.op.name_hint
        if not value.op.same_as(self.call_tir) or len(value.args) != 2 or self.concat_axis(value) is not None:
            return None  # (a third argument: symbolic sizes)
        if value.args[0].name_hint.startswith(WINOGRAD):
            return None
        args = list(value.args[1].fields)
        if not all(isinstance(arg.ty, relax.TensorType) for arg in args):
            return None
        params = [relax.Var(f"p{i}", arg.ty) for i, arg in enumerate(args)]
        result = relax.Var("gv", value.ty)
        block = relax.DataflowBlock(
            [relax.VarBinding(result, relax.call_tir(value.args[0], relax.Tuple(params), value.ty))]
        )
        func = relax.Function(
            params, relax.SeqExpr([block], result), value.ty, True, tvm.ir.make_node("ir.DictAttrs", Primitive=True)
        )
        return func, args, value.args[0].name_hint

    def into_slice(self, producer: tuple, write: tvm.ir.GlobalVar, big_ty, into: relax.Var | None) -> relax.Call:
        """A ``producer`` as a call of a fused function that also writes its result into the
        concatenation: into a new buffer (``into`` None) or in place into ``into``."""
        group, args, name = producer
        group = relax.utils.copy_with_new_vars(group)
        bindings = list(group.body.blocks[0].bindings)
        result = relax.DataflowVar("nna_slice", bindings[-1].var.ty)
        out = relax.Var("nna_concat", big_ty)
        params = list(group.params)
        if into is None:
            copy = relax.call_tir(write, relax.Tuple([result]), big_ty)
        else:
            params.append(relax.Var("nna_concat_in", big_ty))
            copy = relax.op.call_tir_inplace(write, relax.Tuple([result, params[-1]]), [1], big_ty)
        bindings[-1] = relax.VarBinding(result, bindings[-1].value)
        bindings.append(relax.VarBinding(out, copy))
        func = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(bindings)], out), big_ty, True, group.attrs)
        gvar = self.bb.add_func(func, name + "_into_concat")
        return relax.Call(gvar, [*args, *([] if into is None else [into])])

    def block(self, block: relax.DataflowBlock, uses: dict) -> relax.DataflowBlock:
        bindings = list(block.bindings)
        position = {b.var: i for i, b in enumerate(bindings)}
        replaced: dict[int, list[relax.Binding]] = {}  # binding index -> what replaces it
        for at, binding in enumerate(bindings):
            axis = self.concat_axis(binding.value)
            big = static_shape(binding.var.ty)
            inputs = binding.value.args[1].fields if axis is not None else []
            shapes = [static_shape(x.ty) for x in inputs]
            if axis is None or big is None or len(inputs) < 2 or None in shapes:
                continue
            offsets = [sum(s[axis] for s in shapes[:i]) for i in range(len(inputs))]
            producers = {
                i: self.producer(bindings[position[x]].value)
                for i, x in enumerate(inputs)
                if isinstance(x, relax.Var) and x in position and position[x] not in replaced and uses.get(x, 0) == 1
            }
            fused = [i for i, found in producers.items() if found is not None]
            if not fused:
                continue
            dtype = binding.var.ty.dtype
            writes = [self.write(shapes[i], big, axis, offsets[i], dtype) for i in range(len(inputs))]
            steps = sorted(fused, key=lambda i: position[inputs[i]]) + [i for i in range(len(inputs)) if i not in fused]
            chain: relax.Var | None = None
            plan: dict[int, list[relax.Binding]] = {}
            for n, i in enumerate(steps):
                out = binding.var if n == len(steps) - 1 else relax.DataflowVar("nna_concat", binding.var.ty)
                if i in fused:
                    where = position[inputs[i]]
                    call = self.into_slice(producers[i], writes[i], binding.var.ty, chain)
                else:
                    where = at
                    call = relax.op.call_tir_inplace(writes[i], relax.Tuple([inputs[i], chain]), [1], binding.var.ty)
                plan.setdefault(where, []).append(relax.VarBinding(out, call))
                chain = out
            replaced.update(plan)
            replaced.setdefault(at, [])
        if not replaced:
            return block
        rewritten = []
        for i, b in enumerate(bindings):
            rewritten += replaced.get(i, [b])
        return relax.DataflowBlock(rewritten)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.WriteConcatInPlace")
def write_concat_in_place(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Between ``FuseOps`` and ``FuseTIR``: producers of a concatenation write their slices of its buffer
    (the module docstring)."""
    rewriter = _Rewriter(mod)
    changed = False
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function) or is_primitive(func):
            continue
        uses = _uses(func)
        blocks = [rewriter.block(b, uses) if isinstance(b, relax.DataflowBlock) else b for b in func.body.blocks]
        if any(not new.same_as(old) for new, old in zip(blocks, func.body.blocks)):
            body = relax.SeqExpr(blocks, func.body.body)
            rewriter.bb.update_func(gvar, relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs))
            changed = True
    if not changed:
        return mod
    mod = rewriter.bb.get()
    called = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: called.add(e) if isinstance(e, tvm.ir.GlobalVar) else None)
    # The producers' fused functions that only the rewritten calls used.
    kept = {g: f for g, f in mod.functions_items() if g in called or not is_primitive(f)}
    return tvm.IRModule(kept, attrs=mod.attrs, global_infos=mod.global_infos)


# Element-wise operations that commute with a concatenation: unary ones, and binary ones by a constant of one
# value (a per-tensor requantization's scale, zero point and bounds).
_UNARY = ("relax.round", "relax.astype", "relax.nn.relu", "relax.floor", "relax.ceil", "relax.abs")
_BY_SCALAR = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum")


def _uniform(expr: relax.Expr, lookup) -> relax.Expr | None:
    """``expr`` as a rank-0 constant where it is a constant whose elements are all equal (a per-tensor
    scale the converter spread along the channels), also one that the layout change transposed
    (``lookup``: a variable's bound value); else None."""
    if isinstance(expr, relax.Var):
        bound = lookup(expr)
        if not isinstance(bound, relax.Call) or getattr(bound.op, "name", "") != "relax.permute_dims":
            return None
        expr = bound.args[0]
    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    value = expr.value.numpy()
    if value.size == 0 or not np.all(value == value.reshape(-1)[0]):
        return None
    return relax.const(value.reshape(-1)[0], str(value.dtype))


def _moved_args(call: relax.Expr, lookup) -> list | None:
    """The arguments after the first of an element-wise ``call`` that is the same applied to each part of a
    concatenation (as rank-0 constants), or None where it is not one."""
    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op) or not call.args:
        return None
    name = call.op.name
    if name in _UNARY and len(call.args) == 1:
        return []
    if name in _BY_SCALAR and len(call.args) == 2:
        scalar = _uniform(call.args[1], lookup)
        return None if scalar is None else [scalar]
    return None


@relax.expr_functor.mutator
class _IntoConcat(relax.PyExprMutator):
    """``f(concat(a, b))`` -> ``concat(f(a), f(b))`` for the element-wise ``f`` above, where the concatenation
    is read by ``f`` alone."""

    def __init__(self, mod: tvm.IRModule, uses: dict) -> None:
        super().__init__(mod)
        self.uses = uses
        self.parts: dict[relax.Var, tuple[list[relax.Expr], object]] = {}

    def _bound(self, var: relax.Var) -> relax.Expr | None:
        return self.lookup_binding(self.visit_expr(var))

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        concat = tvm.ir.Op.get("relax.concat")
        if isinstance(value, relax.Call) and value.op.same_as(concat) and isinstance(value.args[0], relax.Tuple):
            self.parts[binding.var] = ([self.visit_expr(f) for f in value.args[0].fields], value.attrs)
        elif (
            isinstance(value, relax.Call)
            and value.args
            and value.args[0] in self.parts
            and self.uses.get(value.args[0], 0) == 1
            and (rest := _moved_args(value, self._bound)) is not None
        ):
            fields, attrs = self.parts[value.args[0]]
            moved = [self.builder_.emit(relax.Call(value.op, [f, *rest], value.attrs, value.ty_args)) for f in fields]
            self.parts[binding.var] = (moved, attrs)
            combined = relax.Call(concat, [relax.Tuple(moved)], attrs)
            self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(combined)))
            return
        super().visit_var_binding_(binding)


@tvm.transform.module_pass(opt_level=0, name="nnadapter_tvm.ElementwiseIntoConcat")
def elementwise_into_concat(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Before legalization: element-wise operations after a concatenation moved onto its inputs.  A QDQ model
    requantizes every concatenation's result (squeezenet's fire modules, inception's branches), which fused
    the concatenation with its requantization into a kernel of its own; moved onto the inputs, each
    requantization joins the epilogue of the convolution that made the input, and the concatenation, a
    plain copy again, is written in place by them (``write_concat_in_place``).  The same values: each part
    goes through the same element-wise steps."""
    for gvar, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function) or is_primitive(func):
            continue
        uses = _uses(func)
        if not any(
            isinstance(b.value, relax.Call) and b.value.op.same_as(tvm.ir.Op.get("relax.concat"))
            for block in func.body.blocks
            for b in block.bindings
        ):
            continue
        rewritten = _IntoConcat(mod, uses).visit_expr(func)
        if not rewritten.same_as(func):
            mod[gvar] = relax.analysis.remove_all_unused(rewritten)
    return mod
