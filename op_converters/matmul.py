"""Matrix products."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import fuse
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O


@converter(O.FULLY_CONNECTED)
def fully_connected(args: OpArgs) -> relax.Expr:
    """input, weight [num_units, input_size], bias, fuse_code -> [batch, num_units].

    An input of rank > 2 is flattened to [num_elements / input_size, input_size].
    """
    x, w = args.tensor(0), args.tensor(1)
    w_shape = args.shape(w)
    if len(w_shape) != 2:
        args.fail(f"must be 2-D [num_units, input_size], got {w_shape}", 1)
    units, size = w_shape
    x_shape = args.shape(x)
    if len(x_shape) != 2 or x_shape[1] != size:
        x = relax.op.reshape(x, [-1, size])
    y = relax.op.matmul(x, relax.op.permute_dims(w, [1, 0]))
    if args.has(2):
        b = args.tensor(2)
        if args.shape(b) != [units]:
            args.fail(f"bias shape {args.shape(b)} must be [num_units] = [{units}]", 2)
        y = relax.op.add(y, b)
    return fuse(args, y, 3)


@converter(O.MAT_MUL)
def mat_mul(args: OpArgs) -> relax.Expr:
    """x, y, transpose_x, transpose_y -> numpy.matmul(x', y')."""
    x, y = args.tensor(0), args.tensor(1)
    if args.bool(2, False):
        x = _swap_last(args, x, 0)
    if args.bool(3, False):
        y = _swap_last(args, y, 1)
    return relax.op.matmul(x, y)


def _swap_last(args: OpArgs, expr: relax.Expr, i: int) -> relax.Expr:
    rank = len(args.shape(expr))
    if rank < 2:
        return expr  # numpy semantics: transposing a vector is the identity
    axes = list(range(rank))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return relax.op.permute_dims(expr, axes)
