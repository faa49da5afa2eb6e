"""nnadapter-tvm: Paddle Lite's NNAdapter API, with TVM generating the code."""

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device, list_devices
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.extensions import register_operation
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
from nnadapter_tvm.version import __version__ as __version__


def __getattr__(name: str) -> object:
    # The ONNX frontend imports onnx: load it only when asked for (boards install without onnx).
    if name == "Predictor":
        from nnadapter_tvm.session.predictor import Predictor

        return Predictor
    raise AttributeError(f"module 'nnadapter_tvm' has no attribute {name!r}")


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
    "Predictor",
    "ResultCode",
    "get_version",
    "list_devices",
    "register_operation",
]
