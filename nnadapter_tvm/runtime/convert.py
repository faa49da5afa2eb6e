"""Model -> one Relax function through the ``op_converters`` registry."""

from __future__ import annotations

import collections
import math
import os
from collections.abc import Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

from nnadapter_tvm import op_converters
from nnadapter_tvm.errors import TVM_ERRORS, fail, tvm_error_text
from nnadapter_tvm.model import Model, Operand, Operation
from nnadapter_tvm.op_converters import shape_values
from nnadapter_tvm.op_converters.args import OpArgs, dequantize_array
from nnadapter_tvm.runtime.builder import ConvertBlockBuilder
from nnadapter_tvm.runtime.runtime_check import RuntimeCheck
from nnadapter_tvm.types import QUANT_PER_CHANNEL, UNKNOWN, OperandType, ResultCode, is_quantized

# How many values ``_computed_from`` looks through before it guards anyway (always correct): a graph of
# many parallel branches guarded alike would otherwise search the whole graph for each.
_GUARD_SEARCH_LIMIT = 4096


class ConvertContext:
    """The state of one conversion: the block builder and the expression of each operand."""

    def __init__(self, bb: ConvertBlockBuilder):
        self.bb = bb
        self._exprs: dict[int, relax.Expr] = {}
        self._dequantized: dict[int, relax.Expr] = {}
        self.checks: list[RuntimeCheck] = []
        # Values of small integer tensors known as expressions over symbolic dimensions (shape_values).
        self.known: dict[int, list[tirx.PrimExpr]] = {}
        # Each condition ``require`` guarded, with the guarded results (``_computed_from``).
        self._guarded: list[tuple[tirx.PrimExpr, list[relax.Var]]] = []

    def require(self, expr: relax.Expr, condition: tirx.PrimExpr, message: str) -> relax.Expr:
        """``expr`` (a tensor of known rank), guarded: the execution fails before anything that uses the
        result runs unless ``condition`` (over symbolic dimensions) holds.

        The guard is a match_cast (on the host, on every target) asserting that dimension 0 equals
        ``select(condition, d0, d0 + k)``, followed by a no-copy view back to the original type (a second
        match_cast there would bind d0 to the select, which holds d0: TVM 0.27's CanonicalizeBindings recurses
        without end on that, see runtime/builder.py).  ``k`` is the check's number (1, 2, ...): where the
        condition cannot be evaluated from the inputs' dimensions afterwards (a dimension read from data,
        like FILL's), TVM's "(d0 vs. d0 + k)" still says which check failed (``RuntimeCheck.numbered``).
        The caller decides what a condition already false at compile time means.
        """
        dims = list(expr.ty.shape.values)
        dtype = expr.ty.dtype
        if not dims:
            flat = self.bb.emit(relax.op.memory.view(expr, relax.ShapeExpr([1])))
            return self.bb.emit(relax.op.memory.view(self.require(flat, condition, message), relax.ShapeExpr([])))
        guarded = next((vs for c, vs in self._guarded if tvm_ffi.structural_equal(c, condition)), None)
        if guarded is not None and self._computed_from(expr, set(guarded)):
            return expr
        d0 = dims[0]
        guard = [tirx.Select(condition, d0, d0 + len(self.checks) + 1), *dims[1:]]
        checked = self.bb.match_cast(expr, relax.TensorType(guard, dtype))
        self.checks.append(RuntimeCheck(condition, message))
        result = self.bb.emit(relax.op.memory.view(checked, relax.ShapeExpr(dims)))
        if guarded is None:
            self._guarded.append((condition, [result]))
        else:
            guarded.append(result)
        return result

    def _computed_from(self, expr: relax.Expr, guarded: set[relax.Var]) -> bool:
        """Whether ``expr`` is computed from one of ``guarded``, results already guarded by the condition
        ``require`` asserts: that guard then runs before ``expr`` in every order of the bindings (data
        dependencies are kept), and fails first.  Each guard costs TVM's Relax passes about 3 ms
        (re-deriving its view's shape through the guard's select); a BERT's reshapes repeated the same
        three conditions 60 times in 80 guards."""
        seen: set[relax.Var] = set()
        todo = collections.deque([expr])  # breadth first: the latest guard is usually a few bindings up
        while todo and len(seen) < _GUARD_SEARCH_LIMIT:
            for var in relax.analysis.free_vars(todo.popleft()):
                if var in guarded:
                    return True
                if var not in seen:
                    seen.add(var)
                    bound = self.bb.bound_value(var)
                    if bound is not None:
                        todo.append(bound)
        return False

    def bind(self, operand: Operand, expr: relax.Expr) -> None:
        self._exprs[operand.index] = expr

    def expr(self, operand: Operand) -> relax.Expr:
        if operand.index not in self._exprs:
            if not operand.is_constant:
                fail(f"{operand.describe()} is used before it is defined")
            value = np.require(operand.value(), requirements="C")  # keeps rank 0 (ascontiguousarray does not)
            # Without an explicit dtype, relax.const narrows int64 to int32 and float64 to float32.
            self._exprs[operand.index] = relax.const(value, str(value.dtype))
        return self._exprs[operand.index]

    def dequantized(self, operand: Operand) -> relax.Expr:
        t = operand.type
        if not is_quantized(t.precision):
            return self.expr(operand)
        if operand.index not in self._dequantized:
            if operand.is_constant:
                expr = relax.const(dequantize_array(operand.value(), t))
            else:
                expr = self.bb.emit(_dequantize_expr(self.expr(operand), t))
            self._dequantized[operand.index] = expr
        return self._dequantized[operand.index]


def _channel_axis(t: OperandType) -> int | None:
    """The axis a per-layer quantization parameter is spread along (``_per_layer_const``): the channels of
    an NCHW tensor, else the last axis; None where that size is unknown or 1."""
    dims = list(t.dimensions)
    axis = 1 if len(dims) == 4 else len(dims) - 1
    return axis if dims and dims[axis] != UNKNOWN and dims[axis] > 1 else None


def _per_layer_const(value: float, t: OperandType, dtype: str) -> relax.Expr:
    """A per-layer scale or zero point as a vector along ``_channel_axis``, not a scalar: Relax's
    legalization makes a scalar constant an immediate of the kernel, so every layer's requantization was a
    kernel of its own (ResNet-50 QDQ: 60 kernels built where the float model has 30); as a vector the
    kernel reads it, and layers of one shape share a kernel."""
    axis = _channel_axis(t)
    if axis is None:
        return relax.const(np.array(value, dtype), dtype)
    shape = [1] * len(t.dimensions)
    shape[axis] = t.dimensions[axis]
    return relax.const(np.full(shape, value, dtype), dtype)


def _scale_const(t: OperandType, rank: int, dtype: str = "float32") -> relax.Expr:
    scale = np.asarray(t.scale, "float32")
    if t.precision in QUANT_PER_CHANNEL:
        shape = [1] * rank
        shape[t.channel_dim] = -1
        return relax.const(scale.reshape(shape).astype(dtype), dtype)
    return _per_layer_const(float(scale), t, dtype)


def _dequantize_expr(x: relax.Expr, t: OperandType) -> relax.Expr:
    y = relax.op.astype(x, "float32")
    if t.zero_point:
        y = relax.op.subtract(y, _per_layer_const(float(t.zero_point), t, "float32"))
    return relax.op.multiply(y, _scale_const(t, len(t.dimensions)))


def quantize_expr(x: relax.Expr, t: OperandType) -> relax.Expr:
    """A real-valued result -> the storage of ``t``: round half to even, add the zero point, saturate.

    ``x`` is normally float32 (converters compute on dequantized values); an operation that only moves
    integers (GATHER, WHERE, PAD of INT32 data into a quantized output, as the operand table allows)
    gives an integer or boolean result, whose values are the real numbers to quantize: those are
    computed in float64, where every int32 is exact (float32 would round above 2^24).
    """
    info = np.iinfo(t.dtype)
    compute = "float32"
    if x.ty.dtype != "float32":
        compute = "float64" if np.dtype(str(x.ty.dtype)).kind in "iub" else "float32"
        x = relax.op.astype(x, compute)
    scale = _scale_const(t, len(t.dimensions))
    if compute != "float32":
        scale = relax.op.astype(scale, compute)
    y = relax.op.round(relax.op.divide(x, scale))
    if t.zero_point:
        y = relax.op.add(y, _per_layer_const(float(t.zero_point), t, compute))
    # NaN saturates to the type's minimum, as onnxruntime's quantizers give (its saturating conversion;
    # the cast of NaN is undefined).  TVM computes maximum(a, b) as ``a > b ? a : b``: with y first, a NaN
    # fails the comparison and becomes the bound (helpers.clamp puts the bound first to keep NaN).  No
    # clip and no where: ConvertLayout leaves both in NCHW (clip's bounds, where's scalar), which put two
    # transposes around every quantization after an NHWC convolution.
    lo, hi = (relax.const(np.array(b, compute), compute) for b in (info.min, info.max))
    y = relax.op.minimum(relax.op.maximum(y, lo), hi)
    return relax.op.astype(y, t.dtype)


def input_var(operand: Operand, position: int, named: dict[str, tirx.Var] | None = None) -> relax.Var:
    """A function parameter; unknown dimensions become symbolic int64 variables, one per dimension name
    (``OperandType.dimension_names``) shared through ``named`` by every input that uses it."""
    t = operand.type
    named = {} if named is None else named
    dims = []
    for axis, d in enumerate(t.dimensions):
        if d != UNKNOWN:
            dims.append(d)
            continue
        name = t.dimension_name(axis)
        if name is None:
            dims.append(tirx.Var(f"in{position}_d{axis}", "int64"))
        else:
            dims.append(named.setdefault(name, tirx.Var(_var_name(name), "int64")))
    return relax.Var(f"input{position}", relax.TensorType(dims, t.dtype))


def _var_name(name: str) -> str:
    """A dimension name as a TIR variable name (it ends up in generated C and kernel names)."""
    clean = "".join(c if c.isalnum() else "_" for c in name)
    return f"sym_{clean}"


def _static_dims(expr: relax.Expr) -> list[int | None]:
    return [int(d.value) if isinstance(d, tirx.IntImm) else None for d in expr.ty.shape.values]


def _bind_outputs(ctx: ConvertContext, op: Operation, result: object) -> None:
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(results) != len(op.outputs):
        fail(f"{op.describe()}: converter produced {len(results)} outputs, the operation has {len(op.outputs)}")
    for i, (operand, expr) in enumerate(zip(op.outputs, results)):
        t = operand.type
        expr = ctx.bb.emit(expr) if not isinstance(expr, relax.Var) else expr
        if is_quantized(t.precision) and expr.ty.dtype != t.dtype:
            expr = ctx.bb.emit(quantize_expr(expr, t))
        where = f"{op.describe()} output {i}: {operand.describe()}"
        if getattr(expr.ty, "shape", None) is None:
            fail(
                f"{where}: its shape cannot be derived at compile time (e.g. broadcasting two dimensions "
                "that are both unknown until execution); declare those dimensions",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        if expr.ty.dtype != t.dtype:
            fail(f"{where} is declared {t.dtype}, the operation produces {expr.ty.dtype}")
        inferred = _static_dims(expr)
        declared = list(t.dimensions)
        if declared and len(declared) != len(inferred):
            fail(f"{where} is declared rank {len(declared)}, the operation produces rank {len(inferred)} {inferred}")
        for axis, (want, got) in enumerate(zip(declared, inferred)):
            if want != UNKNOWN and got is not None and want != got:
                fail(f"{where} dimension {axis} is declared {want}, the operation produces {got} (all: {inferred})")
        check_fits_in_memory(where, inferred, t.dtype)
        ctx.bind(operand, expr)


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: no bound


# The largest static dimension handed to TVM.  TVM 0.27's TIR lowering mishandles loops of 2^30
# iterations and more (UnrollLoop exhausts memory on a reduction over 2^30 .. 2^31 - 1 elements and
# aborts the process; 2^31 trips an int32 narrowing check), and NNAdapter dimensions are int32 anyway.
MAX_DIMENSION = (1 << 30) - 1


def check_fits_in_memory(where: str, dims: Sequence[int | None], dtype: str) -> None:
    """Fail before anything is compiled or allocated when one tensor alone exceeds the machine's memory
    (counting each dimension unknown until execution as 1: any non-empty tensor of that shape would),
    or when one of its static dimensions exceeds ``MAX_DIMENSION``."""
    static = [d for d in dims if d is not None and d != UNKNOWN]
    for axis, d in enumerate(dims):
        if d is not None and d != UNKNOWN and d > MAX_DIMENSION:
            fail(
                f"{where}: dimension {axis} is {d:,} (dimensions {_shown(dims)}); the largest this "
                f"implementation compiles is {MAX_DIMENSION:,} (2^30 - 1: TVM's code generation fails on "
                "longer loops)",
                ResultCode.INVALID_DIMENSIONS,
            )
    size = math.prod(static) * np.dtype(dtype).itemsize
    limit = physical_memory()
    if size > limit:
        unknown = " (each dimension unknown until execution counted as 1)" if len(static) < len(dims) else ""
        fail(
            f"{where} would need {size:,} bytes for dimensions {_shown(dims)}{unknown}, more than this "
            f"machine's {limit:,} bytes of memory",
            ResultCode.OUT_OF_MEMORY,
        )


def _shown(dims: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None or d == UNKNOWN else str(d) for d in dims) + "]"


def convert_model(model: Model, checks: list[RuntimeCheck] | None = None) -> tuple[tvm.IRModule, list[list[int]]]:
    """The whole model as one function (a single-device compilation)."""
    return convert_subgraph(model.inputs, model.outputs, model.operations, checks)


def convert_subgraph(
    inputs: Sequence[Operand],
    outputs: Sequence[Operand],
    operations: Sequence[Operation],
    checks: list[RuntimeCheck] | None = None,
) -> tuple[tvm.IRModule, list[list[int]]]:
    """Build ``main(inputs...) -> (outputs...)`` from ``operations`` (topologically ordered).

    Returns the module and the inferred dimensions of each output (UNKNOWN where symbolic); the
    conditions the module asserts at execution are appended to ``checks``.
    Every unsupported operation is reported in one error.
    """
    unsupported = sorted({op.type.name for op in operations if op_converters.get_converter(op.type) is None})
    if unsupported:
        fail(
            f"no converter for {len(unsupported)} operation type(s): {', '.join(unsupported)}",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    for i, operand in enumerate(inputs):
        check_fits_in_memory(f"input {i}: {operand.describe()}", operand.type.dimensions, operand.type.dtype)
    # Its match_cast stages a cast that would bind a symbolic variable to an expression (TVM 0.27 crashes).
    bb = ConvertBlockBuilder()
    named: dict[str, tirx.Var] = {}
    params = [input_var(o, i, named) for i, o in enumerate(inputs)]
    ctx = ConvertContext(bb)
    bb.checks = ctx.checks
    with bb.function("main", params):
        with bb.dataflow():
            for operand, var in zip(inputs, params):
                ctx.bind(operand, var)
            for op in operations:
                convert_fn = op_converters.get_converter(op.type)
                bb.operation_checks_from = len(ctx.checks)
                try:
                    args = OpArgs(op, ctx)
                    _bind_outputs(ctx, op, convert_fn(args))
                    shape_values.propagate(args, ctx.known)
                except TVM_ERRORS as err:
                    fail(f"{op.describe()}: TVM rejected the operation: {tvm_error_text(err)}")
            exprs = []
            for operand in outputs:
                expr = ctx.expr(operand)
                exprs.append(expr if isinstance(expr, relax.Var) else bb.emit(expr))
            result = bb.emit_output(relax.Tuple(exprs))
        bb.emit_func_output(result)
    dims = [[d if d is not None else UNKNOWN for d in _static_dims(o)] for o in exprs]
    if checks is not None:
        checks.extend(ctx.checks)
    return bb.finalize(), dims
