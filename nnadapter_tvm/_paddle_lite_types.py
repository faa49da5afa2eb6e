"""Paddle Lite's enums, places and predictor tensors for :mod:`nnadapter_tvm.paddle_lite`, and the error its calls
with no meaning here raise (``UnsupportedCall``, with the config calls it names and why).

Import them from :mod:`nnadapter_tvm.paddle_lite`, which re-exports them: this module is private.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from nnadapter_tvm.errors import check
from nnadapter_tvm.types import NNAdapterError, ResultCode


class UnsupportedCall(NNAdapterError, AttributeError):
    """A Paddle Lite call nnadapter-tvm does not implement (an ``AttributeError`` too, so ``hasattr`` says no)."""

    def __init__(self, message: str):
        super().__init__(ResultCode.INVALID_PARAMETER, message)


# ---------------------------------------------------------------- Paddle Lite's enums and places


class TargetType(enum.IntEnum):
    Unk = 0
    Host = 1
    X86 = 2
    CUDA = 3
    ARM = 4
    OpenCL = 5
    Any = 6
    FPGA = 7
    NPU = 8
    XPU = 9
    BM = 10
    MLU = 11
    RKNPU = 12
    APU = 13
    HUAWEI_ASCEND_NPU = 14
    IMAGINATION_NNA = 15
    INTEL_FPGA = 16
    Metal = 17
    NNAdapter = 18


class PrecisionType(enum.IntEnum):
    Unk = 0
    FP32 = 1
    INT8 = 2
    INT32 = 3
    Any = 4
    FP16 = 5
    BOOL = 6
    INT64 = 7
    INT16 = 8
    UINT8 = 9
    FP64 = 10


class DataLayoutType(enum.IntEnum):
    Unk = 0
    NCHW = 1
    Any = 2
    NHWC = 3


class PowerMode(enum.IntEnum):
    LITE_POWER_HIGH = 0
    LITE_POWER_LOW = 1
    LITE_POWER_FULL = 2
    LITE_POWER_NO_BIND = 3
    LITE_POWER_RAND_HIGH = 4
    LITE_POWER_RAND_LOW = 5


class Place:
    """Paddle Lite's ``Place(target, precision, layout, device)``: accepted by ``set_valid_places``, no effect."""

    def __init__(
        self,
        target: TargetType,
        percision: PrecisionType = PrecisionType.FP32,  # Paddle Lite's own spelling of the keyword
        layout: DataLayoutType = DataLayoutType.NCHW,
        device: int = 0,
    ):
        self.target, self.precision, self.layout, self.device = target, percision, layout, device

    def is_valid(self) -> bool:
        return self.target != TargetType.Unk

    def __repr__(self) -> str:
        return f"Place({self.target.name}, {self.precision.name}, {self.layout.name}, {self.device})"


_PRECISIONS = {
    np.dtype(np.float32): PrecisionType.FP32,
    np.dtype(np.float16): PrecisionType.FP16,
    np.dtype(np.float64): PrecisionType.FP64,
    np.dtype(np.int8): PrecisionType.INT8,
    np.dtype(np.uint8): PrecisionType.UINT8,
    np.dtype(np.int16): PrecisionType.INT16,
    np.dtype(np.int32): PrecisionType.INT32,
    np.dtype(np.int64): PrecisionType.INT64,
    np.dtype(np.bool_): PrecisionType.BOOL,
}

# Calls of Paddle Lite's configs that have no meaning here, with why.
_UNSUPPORTED_CONFIG_CALLS = {
    "set_opencl_binary_path_name": "OpenCL kernels are compiled by TVM into the model cache (.nnc)",
    "set_opencl_tune": "OpenCL tuning is MetaSchedule's (nnadapter-tvm tune)",
    "set_opencl_precision": "the opencl device computes in the model's precision",
    "set_metal_use_mps": "there is no Metal device",
    "set_metal_use_memory_reuse": "there is no Metal device",
    "set_metal_lib_path": "there is no Metal device",
    "set_nnadapter_mixed_precision_quantization_config_path": "mixed precision quantization is not implemented",
    "set_nnadapter_mixed_precision_quantization_config_buffer": "mixed precision quantization is not implemented",
    "set_passes_internal": "Paddle Lite's optimization passes do not exist here (TVM optimizes the subgraphs)",
    "add_discarded_pass": "Paddle Lite's optimization passes do not exist here (TVM optimizes the subgraphs)",
    "set_mlu_core_version": "there is no MLU device",
    "set_mlu_core_number": "there is no MLU device",
    "set_xpu_workspace_l3_size_per_thread": "there is no XPU device",
}


def _unsupported(owner: str, name: str) -> UnsupportedCall:
    why = _UNSUPPORTED_CONFIG_CALLS.get(name)
    if why is not None:
        return UnsupportedCall(f"{owner}.{name} is not supported by nnadapter-tvm: {why}")
    return UnsupportedCall(
        f"{owner}.{name}: no such call in nnadapter-tvm's Paddle Lite API (nnadapter_tvm.paddle_lite)"
    )


# ---------------------------------------------------------------- tensors


class Tensor:
    """A predictor's input or output: ``resize`` + ``set_float_data`` (or ``from_numpy``) before ``run``;
    ``numpy()`` / ``float_data()`` and ``shape()`` after."""

    def __init__(self, name: str, dtype: np.dtype | None, is_input: bool):
        self._name = name
        self._dtype = dtype
        self._is_input = is_input
        self._shape: list[int] = []
        self._data: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"<Tensor {self._name} {self.shape()} {self.precision().name}>"

    def name(self) -> str:
        return self._name

    def resize(self, shape: Sequence[int]) -> None:
        dims = [int(d) for d in shape]
        check(all(d >= 0 for d in dims), f"Tensor({self._name}).resize: shape {dims} has a negative dimension")
        if self._data is not None and list(self._data.shape) != dims:
            self._data = None  # the data no longer fits: set it again
        self._shape = dims

    def shape(self) -> list[int]:
        return list(self._shape)

    def from_numpy(self, array: Any, place: TargetType = TargetType.Host) -> None:
        """The data and shape of ``array`` (copied; converted to the input's element type if it differs)."""
        array = np.asarray(array)
        if self._dtype is not None and array.dtype != self._dtype:
            check(
                np.can_cast(array.dtype, self._dtype, casting="same_kind"),
                f"Tensor({self._name}).from_numpy: array of {array.dtype}, the model's input is {self._dtype}",
            )
            array = array.astype(self._dtype)
        self._data = np.array(array, order="C", copy=True)
        self._shape = list(self._data.shape)

    def numpy(self) -> np.ndarray:
        check(self._data is not None, f"Tensor({self._name}).numpy: the tensor holds no data yet (run the predictor)")
        return np.array(self._data, copy=True)

    def precision(self) -> PrecisionType:
        dtype = self._data.dtype if self._data is not None else self._dtype
        return _PRECISIONS.get(np.dtype(dtype), PrecisionType.Unk) if dtype is not None else PrecisionType.Unk

    def target(self) -> TargetType:
        return TargetType.Host

    def lod(self) -> list:
        return []

    def set_lod(self, lod: Sequence) -> None:
        if any(len(level) for level in lod):
            raise UnsupportedCall(f"Tensor({self._name}).set_lod: LoD (variable-length sequences) is not supported")

    def _set_data(self, data: Sequence, dtype: type, call: str) -> None:
        check(self._shape, f"Tensor({self._name}).{call}: call resize(shape) first")
        flat = np.asarray(data, dtype=dtype).ravel()
        count = int(np.prod(self._shape))
        check(
            flat.size == count,
            f"Tensor({self._name}).{call}: {flat.size} values given, shape {self._shape} holds {count}",
        )
        self.from_numpy(flat.reshape(self._shape))

    def _get_data(self, dtype: type, call: str) -> list:
        check(self._data is not None, f"Tensor({self._name}).{call}: the tensor holds no data yet")
        return np.asarray(self._data, dtype=dtype).ravel().tolist()

    def set_float_data(self, data: Sequence[float], type: TargetType = TargetType.Host) -> None:
        self._set_data(data, np.float32, "set_float_data")

    def float_data(self) -> list[float]:
        return self._get_data(np.float32, "float_data")

    def set_int32_data(self, data: Sequence[int], type: TargetType = TargetType.Host) -> None:
        self._set_data(data, np.int32, "set_int32_data")

    def int32_data(self) -> list[int]:
        return self._get_data(np.int32, "int32_data")

    def set_int8_data(self, data: Sequence[int], type: TargetType = TargetType.Host) -> None:
        self._set_data(data, np.int8, "set_int8_data")

    def int8_data(self) -> list[int]:
        return self._get_data(np.int8, "int8_data")

    def set_uint8_data(self, data: Sequence[int], type: TargetType = TargetType.Host) -> None:
        self._set_data(data, np.uint8, "set_uint8_data")

    def uint8_data(self) -> list[int]:
        return self._get_data(np.uint8, "uint8_data")

    def set_int64_data(self, data: Sequence[int], type: TargetType = TargetType.Host) -> None:
        self._set_data(data, np.int64, "set_int64_data")

    def int64_data(self) -> list[int]:
        return self._get_data(np.int64, "int64_data")
