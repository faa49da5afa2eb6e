"""Element-wise binary arithmetic with numpy broadcasting and ``fuse_code``."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import fuse
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O

_BINARY = {
    O.ADD: relax.op.add,
    O.SUB: relax.op.subtract,
    O.MUL: relax.op.multiply,
    O.DIV: relax.op.divide,
    O.MAX: relax.op.maximum,
    O.MIN: relax.op.minimum,
}


@converter(*_BINARY)
def binary(args: OpArgs) -> relax.Expr:
    """input0, input1, fuse_code -> output (numpy broadcasting)."""
    x, y = args.tensor(0), args.tensor(1)
    return fuse(args, _BINARY[args.type](x, y), 2)
