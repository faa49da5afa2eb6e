"""Matrix products."""

from __future__ import annotations

import math

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import at_least_1d, fuse
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O


@converter(O.FULLY_CONNECTED)
def fully_connected(args: OpArgs) -> relax.Expr:
    """input, weight [num_units, input_size], bias, fuse_code -> [batch, num_units].

    An input of rank > 2 is flattened to [num_elements / input_size, input_size].

    Reference: the spec (batch_size = num_elements / input_size; the header's "at least rank 2").
    """
    x, w = args.tensor(0), args.tensor(1)
    w_shape = args.shape(w)
    if len(w_shape) != 2:
        args.fail(f"must be 2-D [num_units, input_size], got {w_shape}", 1)
    units, size = w_shape
    x_shape = args.shape(x)
    if all(isinstance(d, int) for d in x_shape) and math.prod(x_shape) % size:
        args.fail(f"shape {x_shape} cannot be flattened to [-1, input_size = {size}]", 0)
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
    """x, y, transpose_x (false), transpose_y (false) -> numpy.matmul(x', y').

    A transpose swaps the last two dims; on a 1-D operand it is the identity (numpy semantics).  A 1-D
    x . 1-D y product has shape [1], not rank 0 (reduce.at_least_1d: Paddle-Lite's operation/mat_mul.cc).

    Reference: the spec; numpy.matmul for broadcasting and 1-D operands.
    """
    x, y = args.tensor(0), args.tensor(1)
    xs, ys = args.shape(x), args.shape(y)
    if args.bool(2, False) and len(xs) >= 2:
        x, xs = _swap_last(x, xs)
    if args.bool(3, False) and len(ys) >= 2:
        y, ys = _swap_last(y, ys)
    k_x, k_y = xs[-1], ys[-2] if len(ys) >= 2 else ys[-1]
    if isinstance(k_x, int) and isinstance(k_y, int) and k_x != k_y:
        args.fail(f"x {xs} and y {ys} (after transposition) have reduction lengths {k_x} != {k_y}", 1)
    for a, b in zip(reversed(xs[:-2]), reversed(ys[:-2])):
        if isinstance(a, int) and isinstance(b, int) and 1 not in (a, b) and a != b:
            args.fail(f"batch dimensions of x {xs} and y {ys} do not broadcast", 1)
    product = relax.op.matmul(x, y)
    return at_least_1d(product, 0) if len(xs) == len(ys) == 1 else product


def _swap_last(expr: relax.Expr, shape: list) -> tuple[relax.Expr, list]:
    axes = list(range(len(shape)))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return relax.op.permute_dims(expr, axes), [shape[a] for a in axes]
