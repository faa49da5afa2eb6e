"""NNAdapter enums and operand types, with the values of upstream ``nnadapter.h``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from enum import IntEnum

import numpy as np

# Re-exported: the operation table and the precisions live in modules of their own (types is their user).
from nnadapter_tvm.operations import STANDARD_OPERATIONS as STANDARD_OPERATIONS
from nnadapter_tvm.operations import OperationType as OperationType
from nnadapter_tvm.precision import Precision

VERSION = 1
UNKNOWN = -65535
MAX_SIZE_OF_DIMENSIONS = 8
MAX_SIZE_OF_DYNAMIC_DIMENSIONS = 8


class ResultCode(IntEnum):
    NO_ERROR = 0
    OUT_OF_MEMORY = 1
    INVALID_DIMENSIONS = 2
    INVALID_PARAMETER = 3
    DEVICE_NOT_FOUND = 4
    DEVICE_INTERNAL_ERROR = 5
    FEATURE_NOT_SUPPORTED = 6


class NNAdapterError(Exception):
    """Every failure of the Pythonic API; ``code`` is the spec's result code."""

    def __init__(self, code: ResultCode, message: str):
        super().__init__(message)
        self.code = ResultCode(code)

    def __str__(self) -> str:
        return f"[{self.code.name}] {self.args[0]}"


class Layout(IntEnum):
    NCHW = 0
    NHWC = 1
    HWCN = 2
    HWNC = 3


class Lifetime(IntEnum):
    TEMPORARY_VARIABLE = 0
    TEMPORARY_SHAPE = 1
    CONSTANT_COPY = 2
    CONSTANT_REFERENCE = 3
    MODEL_INPUT = 4
    MODEL_OUTPUT = 5


class FuseCode(IntEnum):
    NONE = 0
    RELU = 1
    RELU1 = 2
    RELU6 = 3


class AutoPad(IntEnum):
    NONE = 0
    SAME = 1
    VALID = 2


class DeviceType(IntEnum):
    CPU = 0
    GPU = 1
    ACCELERATOR = 2


class PadMode(IntEnum):
    NONE = 0
    CONSTANT = 1
    REFLECT = 2
    REPLICATE = 3
    EDGE = 4


class InterpolateMode(IntEnum):
    NONE = 0
    BILINEAR = 1
    NEAREST = 2


class RecurrentDirection(IntEnum):
    """``direction`` of the LSTM, GRU and RNN extension operations (ONNX's direction attribute)."""

    FORWARD = 0
    REVERSE = 1
    BIDIRECTIONAL = 2


class RecurrentActivation(IntEnum):
    """The activation codes of LSTM, GRU and RNN's ``activations`` operand (ONNX's activation names,
    with its alpha/beta: Affine alpha*x+beta, LeakyRelu, ThresholdedRelu x if x > alpha, ScaledTanh
    alpha*tanh(beta*x), HardSigmoid clip(alpha*x+beta, 0, 1), Elu)."""

    RELU = 0
    TANH = 1
    SIGMOID = 2
    AFFINE = 3
    LEAKY_RELU = 4
    THRESHOLDED_RELU = 5
    SCALED_TANH = 6
    HARD_SIGMOID = 7
    ELU = 8
    SOFTSIGN = 9
    SOFTPLUS = 10


_STORAGE_DTYPES = {
    Precision.BOOL8: "bool",
    Precision.INT8: "int8",
    Precision.UINT8: "uint8",
    Precision.INT16: "int16",
    Precision.UINT16: "uint16",
    Precision.INT32: "int32",
    Precision.UINT32: "uint32",
    Precision.INT64: "int64",
    Precision.UINT64: "uint64",
    Precision.FLOAT16: "float16",
    Precision.FLOAT32: "float32",
    Precision.FLOAT64: "float64",
    Precision.QUANT_INT8_SYMM_PER_LAYER: "int8",
    Precision.QUANT_INT8_SYMM_PER_CHANNEL: "int8",
    Precision.QUANT_UINT8_ASYMM_PER_LAYER: "uint8",
    Precision.QUANT_INT16_SYMM_PER_LAYER: "int16",
    Precision.QUANT_INT16_SYMM_PER_CHANNEL: "int16",
    Precision.QUANT_UINT16_ASYMM_PER_LAYER: "uint16",
    Precision.QUANT_INT32_SYMM_PER_LAYER: "int32",
    Precision.QUANT_INT32_SYMM_PER_CHANNEL: "int32",
    Precision.QUANT_UINT32_ASYMM_PER_LAYER: "uint32",
}

QUANT_PER_CHANNEL = frozenset(
    {
        Precision.QUANT_INT8_SYMM_PER_CHANNEL,
        Precision.QUANT_INT16_SYMM_PER_CHANNEL,
        Precision.QUANT_INT32_SYMM_PER_CHANNEL,
    }
)
QUANT_ASYMM = frozenset(
    {
        Precision.QUANT_UINT8_ASYMM_PER_LAYER,
        Precision.QUANT_UINT16_ASYMM_PER_LAYER,
        Precision.QUANT_UINT32_ASYMM_PER_LAYER,
    }
)


def storage_dtype(precision: Precision) -> str:
    """The numpy/TVM dtype that holds one element of ``precision``."""
    return _STORAGE_DTYPES[Precision(precision)]


def is_quantized(precision: Precision) -> bool:
    return int(precision) >= int(Precision.QUANT_INT8_SYMM_PER_LAYER)


def _is_unknown(dim: int) -> bool:
    return dim in (UNKNOWN, -1)


@dataclasses.dataclass
class OperandType:
    """Type of an operand: precision, dimensions, layout, lifetime and quantization.

    ``scale`` is a float for per-layer quantization and a sequence for per-channel;
    a dimension of ``UNKNOWN`` (or -1) is only known at execution time.

    ``dimension_names`` (an extension of nnadapter-tvm, empty by default) names UNKNOWN dimensions, one
    entry per dimension (None for an unnamed one): every UNKNOWN dimension of the model's inputs that
    bears the same name is one symbolic size (an ONNX ``dim_param`` such as ``batch``), so the compiled
    code may rely on their equality, and an execution fed different sizes for them fails before running.
    ``dynamic_dimensions`` (upstream's candidate shapes) is recorded but not used by the compiler.
    """

    precision: Precision
    dimensions: Sequence[int] = ()
    layout: Layout = Layout.NCHW
    lifetime: Lifetime = Lifetime.TEMPORARY_VARIABLE
    scale: float | Sequence[float] | None = None
    zero_point: int | None = None
    channel_dim: int | None = None
    dynamic_dimensions: Sequence[Sequence[int]] = ()
    dimension_names: Sequence[str | None] = ()

    def __post_init__(self) -> None:
        try:
            self.precision = Precision(self.precision)
            self.layout = Layout(self.layout)
            self.lifetime = Lifetime(self.lifetime)
        except ValueError as err:
            raise NNAdapterError(ResultCode.INVALID_PARAMETER, f"invalid operand type: {err}") from None
        self.dimensions = [UNKNOWN if _is_unknown(int(d)) else int(d) for d in self.dimensions]
        self.dynamic_dimensions = [[int(d) for d in dims] for dims in self.dynamic_dimensions]
        self.dimension_names = self._checked_names()
        if len(self.dimensions) > MAX_SIZE_OF_DIMENSIONS:
            raise NNAdapterError(
                ResultCode.INVALID_DIMENSIONS,
                f"rank {len(self.dimensions)} exceeds the maximum of {MAX_SIZE_OF_DIMENSIONS}",
            )
        for d in self.dimensions:
            if d < 0 and d != UNKNOWN:
                raise NNAdapterError(
                    ResultCode.INVALID_DIMENSIONS,
                    f"dimension {d} in {self.dimensions} is negative; use nna.UNKNOWN for unknown",
                )
        self._check_quant_params()

    def _checked_names(self) -> list[str | None]:
        names = [None if n is None else str(n) for n in self.dimension_names]
        if not any(names):
            return []
        if len(names) != len(self.dimensions):
            raise NNAdapterError(
                ResultCode.INVALID_PARAMETER,
                f"dimension_names {names} must name each of the {len(self.dimensions)} dimensions (None: unnamed)",
            )
        for axis, (name, d) in enumerate(zip(names, self.dimensions)):
            if name is not None and (d != UNKNOWN or not name):
                raise NNAdapterError(
                    ResultCode.INVALID_PARAMETER,
                    f"dimension {axis} is named {name!r}: only UNKNOWN dimensions take a (non-empty) name",
                )
        return names

    def dimension_name(self, axis: int) -> str | None:
        return self.dimension_names[axis] if self.dimension_names else None

    def _check_quant_params(self) -> None:
        if not is_quantized(self.precision):
            return
        name = self.precision.name
        if self.precision in QUANT_PER_CHANNEL:
            scales = np.atleast_1d(np.asarray(self.scale if self.scale is not None else [], "float32"))
            if scales.size == 0 or self.channel_dim is None:
                raise NNAdapterError(
                    ResultCode.INVALID_PARAMETER, f"{name} needs per-channel 'scale' values and 'channel_dim'"
                )
            self.scale = [float(s) for s in scales]
            self.channel_dim = int(self.channel_dim)
            rank = len(self.dimensions)
            if not 0 <= self.channel_dim < max(rank, 1):
                raise NNAdapterError(
                    ResultCode.INVALID_PARAMETER, f"{name} channel_dim {self.channel_dim} is outside the rank {rank}"
                )
            channels = self.dimensions[self.channel_dim] if rank else UNKNOWN
            if channels != UNKNOWN and channels != len(self.scale):
                raise NNAdapterError(
                    ResultCode.INVALID_PARAMETER,
                    f"{name} has {len(self.scale)} scales for {channels} channels (dimension {self.channel_dim})",
                )
        else:
            if self.scale is None or np.ndim(self.scale) != 0:
                raise NNAdapterError(ResultCode.INVALID_PARAMETER, f"{name} needs one float 'scale'")
            self.scale = float(self.scale)
        if not all(s > 0 and np.isfinite(s) for s in np.atleast_1d(self.scale)):
            raise NNAdapterError(ResultCode.INVALID_PARAMETER, f"{name} scale must be finite and > 0, got {self.scale}")
        if self.precision in QUANT_ASYMM:
            self.zero_point = int(self.zero_point or 0)

    @property
    def dtype(self) -> str:
        return storage_dtype(self.precision)

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    def is_static(self) -> bool:
        return all(d != UNKNOWN for d in self.dimensions)

    def element_count(self) -> int:
        if not self.is_static():
            raise NNAdapterError(ResultCode.INVALID_DIMENSIONS, f"dimensions {self.dimensions} are not all known")
        return math.prod(self.dimensions)  # exact: numpy's int64 product would wrap around

    def byte_length(self) -> int:
        return self.element_count() * np.dtype(self.dtype).itemsize

    def copy(self, **changes) -> OperandType:
        """An independent copy (its lists are new), with ``changes`` applied and validated. Without
        changes the fields are taken as they are (this type was validated when made): an execution
        copies each declared type per call, and ``dataclasses.asdict`` (a deep copy) cost ~100 us."""
        if changes:
            fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
            fields.update(changes)
            return OperandType(**fields)
        new = object.__new__(OperandType)
        new.__dict__.update(self.__dict__)
        new.dimensions = list(self.dimensions)
        new.dynamic_dimensions = [list(d) for d in self.dynamic_dimensions]
        new.dimension_names = list(self.dimension_names)
        if isinstance(self.scale, list):
            new.scale = list(self.scale)
        return new

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for key in ("precision", "layout", "lifetime"):
            d[key] = int(d[key])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> OperandType:
        return cls(**d)

    def describe(self) -> str:
        dims = "x".join("?" if d == UNKNOWN else str(d) for d in self.dimensions) or "scalar"
        quant = f", scale={self.scale}" if self.scale is not None else ""
        return f"{self.precision.name}[{dims}]{quant}"
