"""NHWC for the CPU: ``ConvertLayout`` moves convolutions (and with them the element-wise ops, pools,
concatenations and reductions around them) to NHWC, so that the channel axis is the contiguous one for
any channel count; the graph's NCHW inputs and outputs get one transpose each."""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from nnadapter_tvm.targets.relax_passes import legalize_ops

log = logging.getLogger("nnadapter_tvm")

#: Ops whose layout inference ``ConvertLayout`` handles on the graphs seen so far.  Others can trip it
#: (a channel shuffle's rank-5 reshape/stack: "can't find S in source layout"), and it then fails for
#: the whole module; on a retry they are lowered to TIR first, so that ``ConvertLayout`` treats them as
#: layout-unaware and hands them their original layout.
LAYOUT_SAFE_OPS = frozenset(
    "relax." + name
    for name in [
        "nn.conv2d",
        "nn.max_pool2d",
        "nn.avg_pool2d",
        "nn.adaptive_avg_pool2d",
        "nn.batch_norm",
        "concat",
        "nn.relu",
        "clip",
        "sigmoid",
        "tanh",
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
    ]
)


#: Broadcasting element-wise ops whose operands ``align_ranks`` gives one rank.
_BROADCAST_OPS = frozenset(
    "relax." + name for name in ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power"]
)


def _one_element_constant(expr: relax.Expr) -> bool:
    return (
        isinstance(expr, tvm.ir.GenericConst)
        and isinstance(expr.value, tvm.runtime.Tensor)
        and expr.ty.ndim >= 1
        and expr.value.numpy().size == 1
    )


def _scalar(expr: tvm.ir.GenericConst) -> relax.Expr:
    value = expr.value.numpy()
    return relax.const(value.reshape(()), value.dtype)


@relax.expr_functor.mutator
class _AlignRanks(relax.PyExprMutator):
    """A broadcasting op's lower-rank operand with leading axes of 1 (constants reshaped here), a
    one-element constant as a scalar."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _BROADCAST_OPS:
            return call
        ranks = [getattr(arg.ty, "ndim", -1) for arg in call.args]
        if len(ranks) != 2 or min(ranks) < 0:
            return call  # unknown ranks
        # A one-element constant of no higher rank than the other operand becomes a scalar: it has no
        # layout, and as the first operand (PaddleOCR's Mul(scale[1], x)) it kept the op in NCHW.
        args = [
            _scalar(arg) if _one_element_constant(arg) and ranks[i] <= ranks[1 - i] else arg
            for i, arg in enumerate(call.args)
        ]
        ranks = [arg.ty.ndim for arg in args]
        if min(ranks) >= 1 and ranks[0] != ranks[1]:
            args = [self._with_rank(arg, max(ranks)) for arg in args]
        if all(new.same_as(old) for new, old in zip(args, call.args)):
            return call
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    def _with_rank(self, arg: relax.Expr, rank: int) -> relax.Expr:
        missing = rank - arg.ty.ndim
        if missing == 0:
            return arg
        if isinstance(arg, tvm.ir.GenericConst) and isinstance(arg.value, tvm.runtime.Tensor):
            value = arg.value.numpy()
            return relax.const(value.reshape((1,) * missing + value.shape), value.dtype)
        return self.builder_.emit(relax.op.expand_dims(arg, list(range(missing))))


@relax.transform.function_pass(opt_level=0, name="nnadapter_tvm.AlignRanks")
def align_ranks(func: relax.Function, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Broadcast operands of one rank: ``ConvertLayout`` keeps a binary op with a lower-rank operand (a
    per-channel ``[C, 1, 1]`` scale, as ONNX files unsqueeze it) in its original layout, transposing the
    whole tensor to NCHW and back around it; with ``[1, C, 1, 1]`` the op moves to NHWC like the rest."""
    return _AlignRanks(mod).visit_expr(func)


def _has_conv2d(mod: tvm.IRModule) -> bool:
    found = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def to_nhwc(mod: tvm.IRModule) -> tvm.IRModule:
    """Convolutions (and the layout-agnostic ops around them) in NHWC; ``mod`` unchanged on failure (the
    convolutions then convert their own input and output, see ``lowering.Lowering``)."""
    if not _has_conv2d(mod):
        return mod
    mod = align_ranks(mod)
    convert = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OIHW"]})
    try:
        return convert(mod)
    except Exception as err:  # retried below
        log.debug("cpu schedules: ConvertLayout failed (%s); retrying with fewer ops", err)
    try:
        return convert(legalize_ops(skip_ops=sorted(LAYOUT_SAFE_OPS))(mod))
    except Exception as err:  # keep NCHW rather than fail
        log.debug("cpu schedules: ConvertLayout failed again, keeping NCHW: %s", err)
        return mod
