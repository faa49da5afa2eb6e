"""NNAdapter enums and operand types, with the values of upstream ``nnadapter.h``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from enum import IntEnum

import numpy as np

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


class Precision(IntEnum):
    BOOL8 = 0
    INT8 = 1
    UINT8 = 2
    INT16 = 3
    UINT16 = 4
    INT32 = 5
    UINT32 = 6
    INT64 = 7
    UINT64 = 8
    FLOAT16 = 9
    FLOAT32 = 10
    FLOAT64 = 11
    QUANT_INT8_SYMM_PER_LAYER = 24
    QUANT_INT8_SYMM_PER_CHANNEL = 25
    QUANT_UINT8_ASYMM_PER_LAYER = 26
    QUANT_INT16_SYMM_PER_LAYER = 27
    QUANT_INT16_SYMM_PER_CHANNEL = 28
    QUANT_UINT16_ASYMM_PER_LAYER = 29
    QUANT_INT32_SYMM_PER_LAYER = 30
    QUANT_INT32_SYMM_PER_CHANNEL = 31
    QUANT_UINT32_ASYMM_PER_LAYER = 32


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


class OperationType(IntEnum):
    """Operation codes in upstream order (the enum's values are positional there)."""

    ABS = 0
    ADAPTIVE_AVERAGE_POOL_2D = 1
    ADAPTIVE_MAX_POOL_2D = 2
    ADD = 3
    AND = 4
    ARG_MAX = 5
    ARG_MIN = 6
    ASSIGN = 7
    AVERAGE_POOL_2D = 8
    BATCH_NORMALIZATION = 9
    CAST = 10
    CHANNEL_SHUFFLE = 11
    CLIP = 12
    CONCAT = 13
    CONV_2D = 14
    CONV_2D_TRANSPOSE = 15
    COS = 16
    CUM_SUM = 17
    DEFORMABLE_CONV_2D = 18
    DEQUANTIZE = 19
    DIV = 20
    EQUAL = 21
    EXP = 22
    EXPAND = 23
    FILL = 24
    FILL_LIKE = 25
    FLATTEN = 26
    FLOOR = 27
    FLOOR_DIV = 28
    FULLY_CONNECTED = 29
    GATHER = 30
    GELU = 31
    GREATER = 32
    GREATER_EQUAL = 33
    GRID_SAMPLE = 34
    GROUP_NORMALIZATION = 35
    HARD_SIGMOID = 36
    HARD_SWISH = 37
    INSTANCE_NORMALIZATION = 38
    LAYER_NORMALIZATION = 39
    LEAKY_RELU = 40
    LESS = 41
    LESS_EQUAL = 42
    LOG = 43
    LOG_SOFTMAX = 44
    LP_NORMALIZATION = 45
    LRN = 46
    MAT_MUL = 47
    MAX = 48
    MAX_POOL_2D = 49
    MESHGRID = 50
    MIN = 51
    MUL = 52
    NOT = 53
    NOT_EQUAL = 54
    OR = 55
    PAD = 56
    POW = 57
    PRIOR_BOX = 58
    PRELU = 59
    QUANTIZE = 60
    RANGE = 61
    REDUCE_MEAN = 62
    REDUCE_MAX = 63
    REDUCE_SUM = 64
    RELU = 65
    RELU6 = 66
    RESHAPE = 67
    RESIZE_NEAREST = 68
    RESIZE_LINEAR = 69
    ROI_ALIGN = 70
    ROLL = 71
    RSQRT = 72
    SHAPE = 73
    SIGMOID = 74
    SIN = 75
    SLICE = 76
    SOFTMAX = 77
    SOFTPLUS = 78
    SPLIT = 79
    SQUARE = 80
    SQUEEZE = 81
    STACK = 82
    SUB = 83
    SUM = 84
    SWISH = 85
    TANH = 86
    TILE = 87
    TOP_K = 88
    TRANSPOSE = 89
    UNSQUEEZE = 90
    UNSTACK = 91
    WHERE = 92
    XOR = 93
    NON_MAX_SUPPRESSION = 94
    YOLO_BOX = 95
    # Extension operations (nnadapter-tvm's own, codes above upstream's): 1010-1012 dynamic quantization,
    # zero points that are run-time tensors and exact int32 accumulation (docs/quantization.md).
    DYNAMIC_QUANTIZE_LINEAR = 1010
    CONV_2D_INTEGER = 1011
    MAT_MUL_INTEGER = 1012
    # nnadapter-tvm's built-in extension operations (1000-9999; upstream's codes stay below 1000, user
    # custom operations get 10000+).  Recurrent layers are one operation each, not a host-driven loop of
    # standard operations (one VM call per time step): the whole recurrence runs in one kernel.
    LSTM = 1001
    GRU = 1002
    RNN = 1003

    @classmethod
    def _missing_(cls, value: object) -> OperationType | None:
        # A code registered beyond the enum (nnadapter_tvm.extensions): its member, made at registration;
        # registrations that packages declare as entry points are loaded on the first unknown code.
        if isinstance(value, int) and not isinstance(value, bool):
            if value not in _EXTENSION_TYPES and _EXTENSION_LOADER is not None:
                _EXTENSION_LOADER()
            return _EXTENSION_TYPES.get(value)
        return None


# Operation types registered beyond the enum (code -> member), and the hook that loads the registrations
# packages declare as entry points (set by nnadapter_tvm.extensions).
_EXTENSION_TYPES: dict[int, OperationType] = {}
_EXTENSION_LOADER: Callable[[], None] | None = None


def add_operation_type(name: str, code: int) -> OperationType:
    """A member of ``OperationType`` for an operation registered beyond the enum (``name``, ``code``):
    ``OperationType(code)`` gives it, ``.name`` is ``name``; iterating the enum still lists only its own
    members.  Called by ``nnadapter_tvm.extensions.register_operation``, which checks name and code."""
    member = int.__new__(OperationType, code)
    member._name_ = name
    member._value_ = code
    OperationType._value2member_map_[code] = member
    _EXTENSION_TYPES[code] = member
    return member


def set_extension_loader(loader: Callable[[], None]) -> None:
    global _EXTENSION_LOADER
    _EXTENSION_LOADER = loader


# The 93 operations of the spec's appendix ("NNAdapter 标准算子"); the enum above also has
# upstream's UNSTACK, XOR and NON_MAX_SUPPRESSION, which the spec does not list.
STANDARD_OPERATIONS = frozenset(
    {
        OperationType.ABS,
        OperationType.ADAPTIVE_AVERAGE_POOL_2D,
        OperationType.ADAPTIVE_MAX_POOL_2D,
        OperationType.ADD,
        OperationType.AND,
        OperationType.ARG_MAX,
        OperationType.ARG_MIN,
        OperationType.ASSIGN,
        OperationType.AVERAGE_POOL_2D,
        OperationType.BATCH_NORMALIZATION,
        OperationType.CAST,
        OperationType.CHANNEL_SHUFFLE,
        OperationType.CLIP,
        OperationType.CONCAT,
        OperationType.CONV_2D,
        OperationType.CONV_2D_TRANSPOSE,
        OperationType.COS,
        OperationType.CUM_SUM,
        OperationType.DEFORMABLE_CONV_2D,
        OperationType.DEQUANTIZE,
        OperationType.DIV,
        OperationType.EQUAL,
        OperationType.EXP,
        OperationType.EXPAND,
        OperationType.FILL,
        OperationType.FILL_LIKE,
        OperationType.FLATTEN,
        OperationType.FLOOR,
        OperationType.FLOOR_DIV,
        OperationType.FULLY_CONNECTED,
        OperationType.GATHER,
        OperationType.GELU,
        OperationType.GREATER,
        OperationType.GREATER_EQUAL,
        OperationType.GRID_SAMPLE,
        OperationType.GROUP_NORMALIZATION,
        OperationType.HARD_SIGMOID,
        OperationType.HARD_SWISH,
        OperationType.INSTANCE_NORMALIZATION,
        OperationType.LAYER_NORMALIZATION,
        OperationType.LEAKY_RELU,
        OperationType.LESS,
        OperationType.LESS_EQUAL,
        OperationType.LOG,
        OperationType.LOG_SOFTMAX,
        OperationType.LP_NORMALIZATION,
        OperationType.LRN,
        OperationType.MAT_MUL,
        OperationType.MAX,
        OperationType.MAX_POOL_2D,
        OperationType.MESHGRID,
        OperationType.MIN,
        OperationType.MUL,
        OperationType.NOT,
        OperationType.NOT_EQUAL,
        OperationType.OR,
        OperationType.PAD,
        OperationType.POW,
        OperationType.PRELU,
        OperationType.PRIOR_BOX,
        OperationType.QUANTIZE,
        OperationType.RANGE,
        OperationType.REDUCE_MAX,
        OperationType.REDUCE_MEAN,
        OperationType.REDUCE_SUM,
        OperationType.RELU,
        OperationType.RELU6,
        OperationType.RESHAPE,
        OperationType.RESIZE_LINEAR,
        OperationType.RESIZE_NEAREST,
        OperationType.ROI_ALIGN,
        OperationType.ROLL,
        OperationType.RSQRT,
        OperationType.SHAPE,
        OperationType.SIGMOID,
        OperationType.SIN,
        OperationType.SLICE,
        OperationType.SOFTMAX,
        OperationType.SOFTPLUS,
        OperationType.SPLIT,
        OperationType.SQUARE,
        OperationType.SQUEEZE,
        OperationType.STACK,
        OperationType.SUB,
        OperationType.SUM,
        OperationType.SWISH,
        OperationType.TANH,
        OperationType.TILE,
        OperationType.TOP_K,
        OperationType.TRANSPOSE,
        OperationType.UNSQUEEZE,
        OperationType.WHERE,
        OperationType.YOLO_BOX,
    }
)


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
