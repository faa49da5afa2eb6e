"""``Execution``: inputs and outputs through the caller's access callbacks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import tvm_ffi

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.errors import TVM_ERRORS, check, fail, tvm_error_text
from nnadapter_tvm.types import UNKNOWN, NNAdapterError, OperandType, ResultCode

Access = Callable[[object, OperandType], object]
_HOST = tvm_ffi.DLDeviceType.kDLCPU


def _array_access(memory: object, operand_type: OperandType) -> object:
    """The shorthand: a plain numpy array is its own memory and access."""
    return memory


def check_shared_dimensions(
    names: Sequence[Sequence[str | None] | None], shapes: Sequence[Sequence[int]], labels: Sequence[str] | None = None
) -> None:
    """Inputs whose UNKNOWN dimensions bear one name (``OperandType.dimension_names``, one list per
    input) must be fed one size for it: the compiled code treats them as one variable."""
    seen: dict[str, tuple[int, int, int]] = {}  # name -> (input, axis, size) where first seen
    for i, (dim_names, shape) in enumerate(zip(names, shapes)):
        for axis, name in enumerate(dim_names or ()):
            if name is None:
                continue
            size = int(shape[axis])
            first = seen.setdefault(name, (i, axis, size))
            if first[2] != size:
                j, other_axis, other_size = first
                a = labels[j] if labels else f"input {j}"
                b = labels[i] if labels else f"input {i}"
                fail(
                    f"{a} dimension {other_axis} and {b} dimension {axis} are both the dimension '{name}', "
                    f"but were fed {other_size} and {size}",
                    ResultCode.INVALID_DIMENSIONS,
                )


def _call_access(access: Access, memory: object, operand_type: OperandType, where: str) -> object:
    """The caller's access callback; what it raises (other than NNAdapterError) fails naming ``where``."""
    try:
        return access(memory, operand_type)
    except NNAdapterError:
        raise
    except Exception as err:
        fail(f"{where}: the access callback raised {type(err).__name__}: {err}")


class Execution:
    """``NNAdapterExecution``: ``set_input``/``set_output`` then ``compute()``.

    An input's ``access(memory, type)`` may fill ``type.dimensions`` (dynamic shapes) and
    returns the data; an output's ``access`` is told the real dimensions and returns a
    writable buffer of at least that size, which the runtime fills.
    """

    def __init__(self, compilation: Compilation):
        check(isinstance(compilation, Compilation), f"Execution needs a Compilation, got {compilation!r}")
        check(compilation.finished, "execution before Compilation.finish()")
        self.compilation = compilation
        self._inputs: dict[int, tuple[object, Access]] = {}
        self._outputs: dict[int, tuple[object, Access]] = {}

    def _check_index(self, index: int, count: int, what: str) -> None:
        check(
            isinstance(index, (int, np.integer)) and not isinstance(index, bool) and 0 <= index < count,
            f"{what} index {index!r} is out of range: the model has {count} {what}s",
        )

    def set_input(self, index: int, memory: object, access: Access | None = None) -> None:
        self._check_index(index, len(self.compilation.input_types), "input")
        self._inputs[int(index)] = (memory, access or _array_access)

    def set_output(self, index: int, memory: object, access: Access | None = None) -> None:
        self._check_index(index, len(self.compilation.output_types), "output")
        self._outputs[int(index)] = (memory, access or _array_access)

    def use_arrays(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray | None]:
        """Feed ``inputs`` (numpy arrays, in order) and collect every output into a new array of its
        real shape; the returned list is filled by each ``compute()``."""
        check(
            len(inputs) == len(self.compilation.input_types),
            f"{len(inputs)} inputs given, the model has {len(self.compilation.input_types)}",
        )
        outputs: list[np.ndarray | None] = [None] * len(self.compilation.output_types)

        def collect(index: int) -> Access:
            def access(memory: object, operand_type: OperandType) -> np.ndarray:
                outputs[index] = np.empty(operand_type.dimensions, operand_type.dtype)
                return outputs[index]

            return access

        for i, x in enumerate(inputs):
            self.set_input(i, x)
        for i in range(len(outputs)):
            self.set_output(i, None, collect(i))
        return outputs

    def compute(self) -> None:
        input_types = self.compilation.input_types
        output_types = self.compilation.output_types
        if len(self._inputs) != len(input_types):
            missing = [i for i in range(len(input_types)) if i not in self._inputs]
            check(not missing, f"inputs {missing} were not set (set_input)")
        if len(self._outputs) != len(output_types):
            missing = [i for i in range(len(output_types)) if i not in self._outputs]
            check(not missing, f"outputs {missing} were not set (set_output)")
        arrays = [self._read_input(i, t) for i, t in enumerate(input_types)]
        if self.compilation.named_dimensions:
            check_shared_dimensions([t.dimension_names for t in input_types], [a.shape for a in arrays])
        results = _run(self.compilation, arrays)
        for i, t in enumerate(output_types):
            try:
                self._write_output(i, t, results[i])
            except MemoryError:
                fail(f"output {i} ({t.describe()}): out of memory copying it out", ResultCode.OUT_OF_MEMORY)

    def _read_input(self, index: int, declared: OperandType) -> np.ndarray:
        memory, access = self._inputs[index]
        if access is _array_access:
            data, dims = memory, list(declared.dimensions)  # the shorthand reads nothing from the type
        else:
            t = declared.copy()
            data = _call_access(access, memory, t, _where(index, declared))
            dims = list(t.dimensions)
        want_dims = declared.dimensions
        is_array = isinstance(data, np.ndarray)
        if is_array and (not dims or UNKNOWN in dims) and data.ndim == len(want_dims):
            dims = list(data.shape)  # the array itself says the dimensions
        if len(dims) != len(want_dims):
            fail(f"{_where(index, declared)}: got rank {len(dims)}, expected {len(want_dims)}")
        for axis, (want, got) in enumerate(zip(want_dims, dims)):
            if got == UNKNOWN or got < 0:
                fail(
                    f"{_where(index, declared)}: dimension {axis} is still unknown; the access callback must set it",
                    ResultCode.INVALID_DIMENSIONS,
                )
            if want != UNKNOWN and want != got:
                fail(
                    f"{_where(index, declared)}: dimension {axis} is {got}, expected {want}",
                    ResultCode.INVALID_DIMENSIONS,
                )
        dtype = np.dtype(declared.dtype)
        if is_array:
            if data.dtype != dtype:
                fail(f"{_where(index, declared)}: data has dtype {data.dtype}, expected {dtype}")
            if data.shape == tuple(dims):
                return data if data.flags.c_contiguous else np.ascontiguousarray(data)
            count = math.prod(dims)
            if data.size != count:
                fail(f"{_where(index, declared)}: data has {data.size} elements, dimensions {dims} need {count}")
            return np.ascontiguousarray(data).reshape(dims)
        try:
            view = memoryview(data)
        except TypeError:
            fail(
                f"{_where(index, declared)}: the access callback returned {type(data).__name__}, "
                "expected a buffer (numpy array, bytes)"
            )
        count = math.prod(dims)
        if view.nbytes != count * dtype.itemsize:
            fail(
                f"{_where(index, declared)}: buffer is {view.nbytes} bytes, dimensions {dims} of {dtype} "
                f"need {count * dtype.itemsize}"
            )
        return np.frombuffer(view.cast("B"), dtype=dtype).reshape(dims)

    def _write_output(self, index: int, declared: OperandType, result: tvm_ffi.Tensor) -> None:
        memory, access = self._outputs[index]
        value = host_view(result)  # no copy on the host: the one copy is into the caller's buffer
        t = declared.copy()
        t.dimensions = list(value.shape)
        buffer = _call_access(access, memory, t, f"output {index} ({t.describe()})")
        if isinstance(buffer, np.ndarray):
            if buffer.dtype != value.dtype or buffer.size < value.size or not buffer.flags.writeable:
                fail(
                    f"output {index} ({t.describe()}): the access callback returned a {buffer.dtype} array of "
                    f"{buffer.size} elements (writeable={buffer.flags.writeable}), expected a writeable "
                    f"{value.dtype} array of {value.size}"
                )
            if buffer.shape == value.shape:
                np.copyto(buffer, value)
                return
        where = f"output {index} ({t.describe()})"
        try:
            view = memoryview(buffer)
        except TypeError:
            fail(f"{where}: the access callback returned {type(buffer).__name__}, expected a writable buffer")
        if view.readonly or not view.c_contiguous:
            fail(f"{where}: the buffer returned by the access callback is read-only or not contiguous")
        nbytes = value.nbytes
        if view.nbytes < nbytes:
            fail(f"{where}: buffer is {view.nbytes} bytes, the output needs {nbytes}")
        view.cast("B")[:nbytes] = np.ascontiguousarray(value).reshape(-1).view(np.uint8)

    def destroy(self) -> None:
        self._inputs.clear()
        self._outputs.clear()

    def __enter__(self) -> Execution:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def _where(index: int, declared: OperandType) -> str:
    """How an input is named in errors (made only when one is raised: describe() is not free)."""
    return f"input {index} ({declared.describe()})"


def _run(compilation: Compilation, arrays: Sequence[np.ndarray | tvm_ffi.Tensor]) -> list[tvm_ffi.Tensor]:
    """``compilation.run`` with the failures it leaves to its caller shaped into NNAdapterErrors."""
    try:
        return compilation.run(arrays)
        # A failure of the compiled code (an assertion on the inputs' dimensions, an allocation) comes
        # back from Compilation.run as an NNAdapterError naming it; these catch what is left.
    except MemoryError as err:
        fail(f"execution ran out of memory: {err or 'MemoryError'}", ResultCode.OUT_OF_MEMORY)
    except TVM_ERRORS as err:
        fail(f"execution failed: {tvm_error_text(err)}", ResultCode.INVALID_DIMENSIONS)


def host_view(value: np.ndarray | tvm_ffi.Tensor) -> np.ndarray:
    """``value`` as a numpy array: a tensor in host memory is viewed (DLPack, no copy), one on a
    device is copied to the host."""
    if isinstance(value, tvm_ffi.Tensor):
        return np.from_dlpack(value) if value.__dlpack_device__()[0] == _HOST else value.numpy()
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def host_copy(value: np.ndarray | tvm_ffi.Tensor) -> np.ndarray:
    """A tensor's value in a new numpy array the caller owns: one copy (from a device: its copy to the
    host); a numpy array as it is."""
    if isinstance(value, tvm_ffi.Tensor):
        return np.array(np.from_dlpack(value)) if value.__dlpack_device__()[0] == _HOST else value.numpy()
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def run_arrays(
    compilation: Compilation,
    arrays: Sequence[np.ndarray | tvm_ffi.Tensor],
    on_device: bool = False,
    checked: bool = False,
) -> list:
    """One inference without access callbacks, for the runtime's own callers (the ONNX Predictor and
    its plan): the outputs in order, each copied once into a new numpy array, or with ``on_device``
    left as the tensors the compiled code returned (a next subgraph on the same device reads them
    without a copy). Numpy ``arrays`` whose element type and dimensions match the compilation's
    inputs run at once (``checked``: the caller checked them at its boundary); any other input takes
    the path of ``Execution.compute``, whose checks name what is wrong (or which reshapes it).
    Safe from several threads: the state it reuses (the VM and its ``main``) is per thread."""
    if not checked and not _fits(compilation, arrays):
        execution = Execution(compilation)
        outputs = execution.use_arrays([host_view(a) for a in arrays])
        execution.compute()
        return outputs
    results = _run(compilation, arrays)
    if on_device:
        return results
    try:
        return [host_copy(r) for r in results]
    except MemoryError:
        fail("out of memory copying the outputs out", ResultCode.OUT_OF_MEMORY)


def _fits(compilation: Compilation, arrays: Sequence[np.ndarray | tvm_ffi.Tensor]) -> bool:
    """Whether ``arrays`` are what the compilation takes (a tensor: the compiled code checks it)."""
    signature = compilation.input_signature
    if len(arrays) != len(signature):
        return False
    for a, (dtype, static, dims) in zip(arrays, signature):
        if isinstance(a, np.ndarray):
            if a.dtype != dtype or not a.flags.c_contiguous:
                return False
        elif not isinstance(a, tvm_ffi.Tensor):
            return False
        # A tensor's element type is the compiled code's to check (reading it costs 1 us); its dimensions
        # are checked here: a previous subgraph may give [1] where this one takes a scalar (reshaped below).
        shape = a.shape
        if static is not None:
            if shape != static:
                return False
        elif len(shape) != len(dims) or any(want != UNKNOWN and want != got for want, got in zip(dims, shape)):
            return False
    if compilation.named_dimensions:
        check_shared_dimensions([t.dimension_names for t in compilation.input_types], [a.shape for a in arrays])
    return True
