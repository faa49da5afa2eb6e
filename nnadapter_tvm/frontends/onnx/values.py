"""The values of an imported ONNX graph: tensors (``Value``, with their ``Quant``), the NNAdapter
operations a converter records on them (``OpRecord``) and each node after import (``Unit``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from nnadapter_tvm.errors import fail
from nnadapter_tvm.types import OperationType, Precision, ResultCode, is_quantized, storage_dtype

# The precision of each element type (the non-quantized precisions' storage types, one to one).
PRECISIONS = {np.dtype(storage_dtype(p)): p for p in Precision if not is_quantized(p)}

Shape = tuple  # of int | None (None: known only at execution)


@dataclasses.dataclass(frozen=True)
class Quant:
    """Quantization of a value that an NNAdapter operand carries (per layer or per channel)."""

    precision: Precision
    scale: float | tuple[float, ...]
    zero_point: int | None = None
    channel_dim: int | None = None


@dataclasses.dataclass(eq=False)
class Value:
    """A tensor of the imported graph: an ONNX value or one a converter made in between."""

    name: str
    dtype: np.dtype | None
    shape: Shape | None  # None: rank unknown
    const: np.ndarray | None = None
    quant: Quant | None = None
    # A small integer tensor's elements known at import (None: unknown until execution), e.g. a Shape's.
    elements: tuple | None = None
    # Graph inputs: the ONNX dim_param naming each dimension (None: unnamed), shared across inputs.
    dim_names: tuple | None = None
    # A float tensor cast from integers computed from dimensions: that integer tensor (the same values,
    # exactly), so that a float Range over a size (YOLO's anchor grid) is computed as an integer one.
    from_integer: Value | None = None
    # A float tensor that a DequantizeLinear made of a quantized one (a value with ``quant``, or such a
    # constant): that value, so that an operation on it can compute on the integers (a QDQ Conv).
    dequantized: Value | None = None
    # An int8 tensor with a zero point (what onnxruntime's quantize_static writes for int8 activations by
    # default), which no NNAdapter precision holds, stored as the uint8 ``q + 128`` with zero point ``z + 128``
    # (the same real values: QUANT_UINT8_ASYMM_PER_LAYER): 128 here, 0 for a value stored as ONNX types it.
    shifted: int = 0

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    def describe(self) -> str:
        dims = "?" if self.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
        return f"'{self.name}' ({self.dtype}, {dims})"


def precision_of(dtype: np.dtype, where: str) -> Precision:
    """The NNAdapter precision of element type ``dtype``; an unsupported feature (naming ``where``) if none."""
    precision = PRECISIONS.get(np.dtype(dtype)) if dtype is not None else None
    if precision is None:
        fail(f"{where}: element type {dtype} has no NNAdapter precision", ResultCode.FEATURE_NOT_SUPPORTED)
    return precision


@dataclasses.dataclass(eq=False)
class OpRecord:
    """One NNAdapter operation a converter asked for; ``None`` inputs are omitted optional operands."""

    type: OperationType
    inputs: list[Value]
    outputs: list[Value]


@dataclasses.dataclass(eq=False)
class Unit:
    """One ONNX node after import: its operations (``ops``) or, when ``host`` is set, why it runs on the host."""

    node: onnx.NodeProto
    index: int
    inputs: list[Value]
    outputs: list[Value]
    ops: list[OpRecord] = dataclasses.field(default_factory=list)
    host: str | None = None  # the reason it runs on the host
    folded: bool = False

    @property
    def label(self) -> str:
        return node_label(self.node, self.index)


def node_label(node: onnx.NodeProto, index: int) -> str:
    return f"node {index} {node.op_type}" + (f" '{node.name}'" if node.name else f" (output '{node.output[0]}')")
