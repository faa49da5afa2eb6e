"""The spec's C-style API (``NNAdapter_getVersion`` ... ``NNAdapterExecution_compute``).

A thin layer over the Pythonic classes, for callers that port C code line by line:

- Every function has the spec's exact name and its C parameters in order, minus the
  out-pointers. The handles (``NNAdapterDevice*``, ``NNAdapterModel*``, ...) are the Pythonic
  objects (``Device``, ``Model``, ``Operand``, ``Operation``, ``Context``, ``Compilation``,
  ``Execution``); an ``NNAdapterOperandType`` is an ``OperandType``; a ``void*`` buffer is
  anything with the buffer protocol (bytes, bytearray, numpy array); a count/array pair is
  a count plus a sequence, and the two must agree.
- The return value is the ``ResultCode``. Where C also writes out-pointers, the return value
  is a tuple ``(code, out_1, ...)`` in the order of those pointers, with ``None`` for each
  out-value on failure: ``code, model = NNAdapterModel_create()``. Functions that are
  ``void`` in C return ``NO_ERROR`` (or an error code for an invalid handle).
- Nothing raises: ``NNAdapterError`` becomes its code; ``TypeError``/``ValueError`` and the
  like (a wrong argument) become ``INVALID_PARAMETER``, ``MemoryError`` ``OUT_OF_MEMORY`` and
  anything else ``DEVICE_INTERNAL_ERROR``. The message of the latest failure on the calling
  thread is ``last_error()`` (not part of the spec; it is left as is by successful calls).
- ``access(memory, operand_type)`` is the spec's callback. For an input it may set
  ``operand_type.dimensions`` and returns the data; for an output it is told the real
  dimensions and returns a writable buffer of at least ``operand_type.byte_length()`` bytes.
- C's "not set" (``NULL`` or ``""``) is ``None`` or ``""`` for ``cache_token``, ``cache_dir``
  and ``properties``; ``cache_buffer=None`` goes with ``cache_length=0``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device
from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.model import Model, Operand, Operation
from nnadapter_tvm.types import VERSION, DeviceType, NNAdapterError, OperandType, OperationType, ResultCode

log = logging.getLogger("nnadapter_tvm.capi")

Access = Callable[[Any, OperandType], Any]
_F = TypeVar("_F", bound=Callable[..., Any])
_ARGUMENT_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError)
_state = threading.local()


def last_error() -> str:
    """The message of the latest failed call on this thread ("" if none failed yet)."""
    return getattr(_state, "message", "")


def _failed(code: ResultCode, message: str, outs: int) -> ResultCode | tuple:
    _state.message = message
    log.debug("%s: %s", code.name, message)
    return code if outs == 0 else (code, *([None] * outs))


def _api(outs: int = 0) -> Callable[[_F], _F]:
    """Turn every exception of the wrapped function into a result code (plus ``outs`` Nones)."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except NNAdapterError as err:
                return _failed(err.code, f"{fn.__name__}: {err.args[0]}", outs)
            except MemoryError as err:
                return _failed(ResultCode.OUT_OF_MEMORY, f"{fn.__name__}: out of memory ({err})", outs)
            except _ARGUMENT_ERRORS as err:
                message = f"{fn.__name__}: invalid argument ({type(err).__name__}: {err})"
                return _failed(ResultCode.INVALID_PARAMETER, message, outs)
            except Exception as err:
                message = f"{fn.__name__}: internal error ({type(err).__name__}: {err})"
                return _failed(ResultCode.DEVICE_INTERNAL_ERROR, message, outs)

        return call  # type: ignore[return-value]

    return wrap


_OK = ResultCode.NO_ERROR


def _handle(obj: object, cls: type, what: str) -> Any:
    check(isinstance(obj, cls), f"{what} must be an {cls.__name__} handle, got {type(obj).__name__} {obj!r:.60}")
    return obj


def _count(value: object, what: str) -> int:
    check(
        isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0,
        f"{what} must be a non-negative integer, got {value!r:.60}",
    )
    return int(value)


def _array(count: object, items: Sequence | None, what: str) -> list:
    """A C count + array pair as a list; ``items`` may be None only when the count is 0."""
    n = _count(count, f"{what} count")
    if items is None:
        check(n == 0, f"{what} is None but its count is {n}")
        return []
    check(not isinstance(items, (str, bytes)), f"{what} must be a sequence, got {type(items).__name__}")
    items = list(items)
    check(len(items) == n, f"{what} count is {n} but {len(items)} were given")
    return items


def _text(value: object, what: str) -> str | None:
    """C's ``const char*``: None and "" both mean not set."""
    check(value is None or isinstance(value, str), f"{what} must be a str or None, got {value!r:.60}")
    return value or None


def _nbytes(buffer: object, what: str) -> int:
    try:
        return memoryview(buffer).nbytes
    except TypeError:
        fail(f"{what} must support the buffer protocol (bytes, numpy array), got {type(buffer).__name__}")


# -- NNAdapter ----------------------------------------------------------------------------
@_api(outs=1)
def NNAdapter_getVersion() -> tuple[ResultCode, int | None]:
    return _OK, VERSION


# -- NNAdapterDevice ----------------------------------------------------------------------
@_api(outs=1)
def NNAdapterDevice_acquire(name: str) -> tuple[ResultCode, Device | None]:
    check(isinstance(name, str), f"device name must be a str, got {name!r:.60}")
    return _OK, Device.acquire(name)


@_api()
def NNAdapterDevice_release(device: Device) -> ResultCode:
    _handle(device, Device, "device").release()
    return _OK


@_api(outs=1)
def NNAdapterDevice_getName(device: Device) -> tuple[ResultCode, str | None]:
    return _OK, _handle(device, Device, "device").name


@_api(outs=1)
def NNAdapterDevice_getVendor(device: Device) -> tuple[ResultCode, str | None]:
    return _OK, _handle(device, Device, "device").vendor


@_api(outs=1)
def NNAdapterDevice_getType(device: Device) -> tuple[ResultCode, DeviceType | None]:
    return _OK, DeviceType(_handle(device, Device, "device").type)


@_api(outs=1)
def NNAdapterDevice_getVersion(device: Device) -> tuple[ResultCode, int | None]:
    return _OK, int(_handle(device, Device, "device").version)


# -- NNAdapterContext ---------------------------------------------------------------------
@_api(outs=1)
def NNAdapterContext_create(
    devices: Sequence[Device], num_devices: int, properties: str | None
) -> tuple[ResultCode, Context | None]:
    devices = _array(num_devices, devices, "devices")
    for i, device in enumerate(devices):
        _handle(device, Device, f"devices[{i}]")
    return _OK, Context(devices, _text(properties, "properties") or "")


@_api()
def NNAdapterContext_destroy(context: Context) -> ResultCode:
    _handle(context, Context, "context").destroy()
    return _OK


# -- NNAdapterModel -----------------------------------------------------------------------
@_api(outs=1)
def NNAdapterModel_create() -> tuple[ResultCode, Model | None]:
    return _OK, Model()


@_api()
def NNAdapterModel_destroy(model: Model) -> ResultCode:
    _handle(model, Model, "model").destroy()
    return _OK


@_api()
def NNAdapterModel_finish(model: Model) -> ResultCode:
    _handle(model, Model, "model").finish()
    return _OK


@_api(outs=1)
def NNAdapterModel_addOperand(model: Model, type: OperandType) -> tuple[ResultCode, Operand | None]:
    _handle(type, OperandType, "type")
    return _OK, _handle(model, Model, "model").add_operand(type)


@_api()
def NNAdapterModel_setOperandValue(operand: Operand, buffer: Any, length: int, copy: bool) -> ResultCode:
    _handle(operand, Operand, "operand")
    length = _count(length, "length")
    if buffer is None:
        check(length == 0, f"buffer is None but length is {length}")
        buffer = b""
    nbytes = _nbytes(buffer, "buffer")
    check(nbytes == length, f"{operand.describe()}: length is {length} but the buffer holds {nbytes} bytes")
    check(isinstance(copy, (bool, np.bool_, int)), f"copy must be a bool, got {copy!r:.60}")
    operand.model.set_operand_value(operand, buffer, copy=bool(copy))
    return _OK


@_api(outs=1)
def NNAdapterModel_getOperandType(operand: Operand) -> tuple[ResultCode, OperandType | None]:
    _handle(operand, Operand, "operand")
    return _OK, operand.model.get_operand_type(operand)


@_api(outs=1)
def NNAdapterModel_addOperation(
    model: Model,
    type: OperationType,
    input_count: int,
    input_operands: Sequence[Operand] | None,
    output_count: int,
    output_operands: Sequence[Operand] | None,
) -> tuple[ResultCode, Operation | None]:
    _handle(model, Model, "model")
    check(
        isinstance(type, (int, np.integer)) and not isinstance(type, bool),
        f"operation type must be an OperationType, got {type!r:.60}",
    )
    name = OperationType(type).name if int(type) in OperationType._value2member_map_ else f"operation {type}"
    inputs = _array(input_count, input_operands, f"{name} input_operands")
    outputs = _array(output_count, output_operands, f"{name} output_operands")
    return _OK, model.add_operation(type, inputs, outputs)


@_api()
def NNAdapterModel_identifyInputsAndOutputs(
    model: Model,
    input_count: int,
    input_operands: Sequence[Operand] | None,
    output_count: int,
    output_operands: Sequence[Operand] | None,
) -> ResultCode:
    _handle(model, Model, "model")
    inputs = _array(input_count, input_operands, "input_operands")
    outputs = _array(output_count, output_operands, "output_operands")
    model.identify_inputs_and_outputs(inputs, outputs)
    return _OK


# -- NNAdapterCompilation -----------------------------------------------------------------
@_api(outs=1)
def NNAdapterCompilation_create(
    model: Model | None,
    cache_token: str | None,
    cache_buffer: Any,
    cache_length: int,
    cache_dir: str | None,
    context: Context,
) -> tuple[ResultCode, Compilation | None]:
    if model is not None:
        _handle(model, Model, "model")
    _handle(context, Context, "context")
    cache_length = _count(cache_length, "cache_length")
    if cache_buffer is None:
        check(cache_length == 0, f"cache_buffer is None but cache_length is {cache_length}")
    else:
        nbytes = _nbytes(cache_buffer, "cache_buffer")
        check(nbytes == cache_length, f"cache_length is {cache_length} but cache_buffer holds {nbytes} bytes")
        cache_buffer = cache_buffer if nbytes else None
    compilation = Compilation(
        model,
        context,
        cache_token=_text(cache_token, "cache_token"),
        cache_buffer=cache_buffer,
        cache_dir=_text(cache_dir, "cache_dir"),
    )
    return _OK, compilation


@_api()
def NNAdapterCompilation_destroy(compilation: Compilation) -> ResultCode:
    _handle(compilation, Compilation, "compilation").destroy()
    return _OK


@_api()
def NNAdapterCompilation_finish(compilation: Compilation) -> ResultCode:
    _handle(compilation, Compilation, "compilation").finish()
    return _OK


@_api(outs=4)
def NNAdapterCompilation_queryInputsAndOutputs(
    compilation: Compilation,
) -> tuple[ResultCode, int | None, list[OperandType] | None, int | None, list[OperandType] | None]:
    inputs, outputs = _handle(compilation, Compilation, "compilation").query_inputs_and_outputs()
    return _OK, len(inputs), inputs, len(outputs), outputs


# -- NNAdapterExecution -------------------------------------------------------------------
@_api(outs=1)
def NNAdapterExecution_create(compilation: Compilation) -> tuple[ResultCode, Execution | None]:
    return _OK, Execution(_handle(compilation, Compilation, "compilation"))


@_api()
def NNAdapterExecution_destroy(execution: Execution) -> ResultCode:
    _handle(execution, Execution, "execution").destroy()
    return _OK


def _check_io(execution: Execution, index: int, access: Access, what: str) -> Execution:
    _handle(execution, Execution, "execution")
    check(
        isinstance(index, (int, np.integer)) and not isinstance(index, bool),
        f"{what} index must be an integer, got {index!r:.60}",
    )
    check(callable(access), f"{what} {index}: access must be a callable access(memory, type), got {access!r:.60}")
    return execution


@_api()
def NNAdapterExecution_setInput(execution: Execution, index: int, memory: Any, access: Access) -> ResultCode:
    _check_io(execution, index, access, "input").set_input(index, memory, access)
    return _OK


@_api()
def NNAdapterExecution_setOutput(execution: Execution, index: int, memory: Any, access: Access) -> ResultCode:
    _check_io(execution, index, access, "output").set_output(index, memory, access)
    return _OK


@_api()
def NNAdapterExecution_compute(execution: Execution) -> ResultCode:
    _handle(execution, Execution, "execution").compute()
    return _OK


__all__ = [
    "NNAdapterCompilation_create",
    "NNAdapterCompilation_destroy",
    "NNAdapterCompilation_finish",
    "NNAdapterCompilation_queryInputsAndOutputs",
    "NNAdapterContext_create",
    "NNAdapterContext_destroy",
    "NNAdapterDevice_acquire",
    "NNAdapterDevice_getName",
    "NNAdapterDevice_getType",
    "NNAdapterDevice_getVendor",
    "NNAdapterDevice_getVersion",
    "NNAdapterDevice_release",
    "NNAdapterExecution_compute",
    "NNAdapterExecution_create",
    "NNAdapterExecution_destroy",
    "NNAdapterExecution_setInput",
    "NNAdapterExecution_setOutput",
    "NNAdapterModel_addOperand",
    "NNAdapterModel_addOperation",
    "NNAdapterModel_create",
    "NNAdapterModel_destroy",
    "NNAdapterModel_finish",
    "NNAdapterModel_getOperandType",
    "NNAdapterModel_identifyInputsAndOutputs",
    "NNAdapterModel_setOperandValue",
    "NNAdapter_getVersion",
    "last_error",
]
