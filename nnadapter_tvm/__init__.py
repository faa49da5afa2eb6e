"""nnadapter-tvm: Paddle Lite's NNAdapter API, with TVM generating the code."""

__version__ = "0.1.0"

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device, list_devices
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.model import Model, Operand, Operation
from nnadapter_tvm.types import (
    UNKNOWN,
    AutoPad,
    DeviceType,
    FuseCode,
    InterpolateMode,
    Layout,
    Lifetime,
    NNAdapterError,
    OperandType,
    OperationType,
    PadMode,
    Precision,
    ResultCode,
)


def get_version() -> int:
    """The NNAdapter API version this library implements."""
    from nnadapter_tvm.types import VERSION

    return VERSION


__all__ = [
    "UNKNOWN",
    "AutoPad",
    "Compilation",
    "Context",
    "Device",
    "DeviceType",
    "Execution",
    "FuseCode",
    "InterpolateMode",
    "Layout",
    "Lifetime",
    "Model",
    "NNAdapterError",
    "Operand",
    "OperandType",
    "Operation",
    "OperationType",
    "PadMode",
    "Precision",
    "ResultCode",
    "get_version",
    "list_devices",
]
