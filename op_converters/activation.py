"""Activations: one input, same shape out."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O

_UNARY = {
    O.RELU: relax.op.nn.relu,
    O.RELU6: relax.op.nn.relu6,
    O.SIGMOID: relax.op.sigmoid,
    O.TANH: relax.op.tanh,
}


@converter(*_UNARY)
def unary(args: OpArgs) -> relax.Expr:
    """input -> output = f(input)."""
    return _UNARY[args.type](args.tensor(0))


@converter(O.SOFTMAX)
def softmax(args: OpArgs) -> relax.Expr:
    """input, axis (default 1) -> exp(x) / sum(exp(x), axis)."""
    x = args.tensor(0)
    return relax.op.nn.softmax(x, args.axis(1, len(args.shape(x)), 1))
