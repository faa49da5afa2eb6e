"""Matrix products."""

from __future__ import annotations

from tvm import relax, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import at_least_1d, fuse, where_empty
from nnadapter_tvm.op_converters.quant_integer import integer_fully_connected
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.op_converters.shape import reshape_checked
from nnadapter_tvm.types import OperationType as O


@converter(O.FULLY_CONNECTED)
def fully_connected(args: OpArgs) -> relax.Expr:
    """input, weight [num_units, input_size], bias, fuse_code -> [batch, num_units].

    An input of rank > 2 is flattened to [num_elements / input_size, input_size] (its element count
    must divide evenly: checked at execution where it is known only then).  With input_size 0 only a
    2-D input [batch, 0] has a batch (the output is the bias); any other is refused.

    Reference: the spec (batch_size = num_elements / input_size; the header's "at least rank 2").
    """
    w_shape = args.shape(args.raw_tensor("weight"))
    if len(w_shape) != 2:
        args.fail(f"must be 2-D [num_units, input_size], got {w_shape}", "weight")
    units, size = w_shape
    integer = None
    if isinstance(size, int) and size > 0:
        integer = integer_fully_connected(args, units, lambda x: _flattened(args, x, size))
    if integer is not None:
        return fuse(args, integer)
    x, w = _flattened(args, args.tensor("input"), size), args.tensor("weight")
    y = matmul_rounded_once(x, relax.op.permute_dims(w, [1, 0]), args.input_type("input").dtype)
    if not isinstance(size, int):  # input_size 0 at execution: a sum of nothing
        y = where_empty(args, y, size, 0)
    if args.has("bias"):
        b = args.tensor("bias")
        if args.shape(b) != [units]:
            args.fail(f"bias shape {args.shape(b)} must be [num_units] = [{units}]", "bias")
        y = relax.op.add(y, b)
    return fuse(args, y)


def _flattened(args: OpArgs, x: relax.Expr, size) -> relax.Expr:
    """FULLY_CONNECTED's input as ``[batch, input_size]``: an input of another shape flattened."""
    x_shape = args.shape(x)
    if len(x_shape) == 2 and _same_dim(x_shape[1], size):
        return x
    if isinstance(size, int) and size == 0:
        args.fail(
            f"input_size is 0: an input of shape {x_shape} has no batch size (num_elements / input_size); "
            "only a 2-D input [batch, 0] does",
            "input",
        )
    return reshape_checked(args, x, [-1, size], "input", f"shape {x_shape} flattened to [-1, input_size = {size}]")


def matmul_rounded_once(x: relax.Expr, y: relax.Expr, dtype: str) -> relax.Expr:
    """numpy.matmul(x, y) of operands of type ``dtype``; a float16 product accumulates in float32 and is
    rounded to float16 once at the end, as numpy's float16 matmul loop and float16 inference engines
    (onnxruntime's MLAS, cuBLAS) do: summing in float16 rounds after every term and drifts ulps from the
    reference over long K."""
    if dtype == "float16":
        return relax.op.astype(relax.op.matmul(x, y, out_dtype="float32"), "float16")
    return relax.op.matmul(x, y)


def _same_dim(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a.same_as(b)


@converter(O.MAT_MUL)
def mat_mul(args: OpArgs) -> relax.Expr:
    """x, y, transpose_x (false), transpose_y (false) -> numpy.matmul(x', y').

    A transpose swaps the last two dims; on a 1-D operand it is the identity (numpy semantics).  A 1-D
    x . 1-D y product has shape [1], not rank 0 (reduce.at_least_1d: Paddle-Lite's operation/mat_mul.cc).

    Reference: the spec; numpy.matmul for broadcasting and 1-D operands.
    """
    x, y = args.tensor("x"), args.tensor("y")
    xs, ys = args.shape(x), args.shape(y)
    if args.bool("transpose_x", False) and len(xs) >= 2:
        x, xs = _swap_last(x, xs)
    if args.bool("transpose_y", False) and len(ys) >= 2:
        y, ys = _swap_last(y, ys)
    k_x, k_y = xs[-1], ys[-2] if len(ys) >= 2 else ys[-1]
    if isinstance(k_x, int) and isinstance(k_y, int) and k_x != k_y:
        args.fail(f"x {xs} and y {ys} (after transposition) have reduction lengths {k_x} != {k_y}", "y")
    for a, b in zip(reversed(xs[:-2]), reversed(ys[:-2])):
        if isinstance(a, int) and isinstance(b, int) and 1 not in (a, b) and a != b:
            args.fail(f"batch dimensions of x {xs} and y {ys} do not broadcast", "y")
    if not _same_dim(k_x, k_y):  # one or both known only at execution: the product would read past one
        y = args.require(
            y,
            tirx.EQ(_prim(k_x), _prim(k_y)),
            f"the reduction lengths of x {_dims(xs)} and y {_dims(ys)} (after transposition) differ at execution",
            "y",
        )
    product = matmul_rounded_once(x, y, args.input_type("x").dtype)
    if not (isinstance(k_x, int) and isinstance(k_y, int)):  # K = 0 at execution: a sum of nothing
        product = where_empty(args, product, k_y if isinstance(k_x, int) else k_x, 0)
    return at_least_1d(product, 0) if len(xs) == len(ys) == 1 else product


def _prim(d):
    return tirx.const(d, "int64") if isinstance(d, int) else d


def _dims(shape: list) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"


def _swap_last(expr: relax.Expr, shape: list) -> tuple[relax.Expr, list]:
    axes = list(range(len(shape)))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return relax.op.permute_dims(expr, axes), [shape[a] for a in axes]
