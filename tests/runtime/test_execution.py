"""Execution through the spec's access callbacks, dynamic batch, and bad callbacks."""

import numpy as np
import pytest
from conftest import add_relu_ref, build_add_relu
from oputil import expect_error as expect

import nnadapter_tvm as nna


class Memory:
    """The spec's example ``Memory``: dimensions plus a host buffer the callback may grow."""

    def __init__(self, array=None):
        self.dims = list(array.shape) if array is not None else []
        self.buffer = bytearray(array.tobytes()) if array is not None else bytearray()


def access_input(memory: Memory, operand_type: nna.OperandType):
    operand_type.dimensions = list(memory.dims)
    return memory.buffer


def access_output(memory: Memory, operand_type: nna.OperandType):
    length = int(np.prod(operand_type.dimensions)) * np.dtype(operand_type.dtype).itemsize
    if length > len(memory.buffer):
        memory.buffer = bytearray(length)
    memory.dims = list(operand_type.dimensions)
    return memory.buffer


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_spec_style_callbacks_with_dynamic_batch(add_relu_compilation, batch):
    x = np.random.default_rng(batch).normal(size=(batch, 3)).astype("float32")
    out = Memory()
    e = nna.Execution(add_relu_compilation)
    e.set_input(0, Memory(x), access_input)
    e.set_output(0, out, access_output)
    e.compute()
    assert out.dims == [batch, 3]
    y = np.frombuffer(out.buffer, "float32")[: batch * 3].reshape(batch, 3)
    np.testing.assert_array_equal(y, add_relu_ref(x))


def test_output_buffer_larger_than_needed_is_fine(add_relu_compilation):
    x = np.ones((2, 3), "float32")
    out = Memory()
    out.buffer = bytearray(1024)
    e = nna.Execution(add_relu_compilation)
    e.set_input(0, Memory(x), access_input)
    e.set_output(0, out, access_output)
    e.compute()
    np.testing.assert_array_equal(np.frombuffer(out.buffer[:24], "float32").reshape(2, 3), add_relu_ref(x))


def test_index_out_of_range(add_relu_compilation):
    e = nna.Execution(add_relu_compilation)
    expect(lambda: e.set_input(1, np.ones((1, 3), "float32")), "input index 1", "has 1 input")
    expect(lambda: e.set_output(-1, np.ones((1, 3), "float32")), "output index -1")


def test_unset_input(add_relu_compilation):
    e = nna.Execution(add_relu_compilation)
    e.set_output(0, np.empty((1, 3), "float32"))
    expect(e.compute, "inputs [0] were not set")


def test_input_buffer_of_wrong_size(add_relu_compilation):
    e = nna.Execution(add_relu_compilation)
    mem = Memory(np.ones((2, 3), "float32"))
    mem.buffer = mem.buffer[:-4]
    e.set_input(0, mem, access_input)
    e.set_output(0, Memory(), access_output)
    expect(e.compute, "input 0", "20 bytes", "need 24")


def test_input_dimension_left_unknown(add_relu_compilation):
    e = nna.Execution(add_relu_compilation)
    e.set_input(0, b"\0" * 12, lambda memory, t: memory)  # never sets the dynamic dimension
    e.set_output(0, Memory(), access_output)
    expect(e.compute, "dimension 0 is still unknown", code=nna.ResultCode.INVALID_DIMENSIONS)


def test_input_with_wrong_static_dimension(add_relu_compilation):
    e = nna.Execution(add_relu_compilation)
    e.set_input(0, np.ones((2, 4), "float32"))
    e.set_output(0, Memory(), access_output)
    expect(e.compute, "dimension 1 is 4, expected 3", code=nna.ResultCode.INVALID_DIMENSIONS)


def test_raising_callbacks_become_errors(add_relu_compilation):
    def boom(memory, t):
        raise RuntimeError("disk on fire")

    e = nna.Execution(add_relu_compilation)
    e.set_input(0, None, boom)
    e.set_output(0, Memory(), access_output)
    expect(e.compute, "input 0", "RuntimeError: disk on fire")
    e.set_input(0, np.ones((1, 3), "float32"))
    e.set_output(0, None, boom)
    expect(e.compute, "output 0", "disk on fire")


def test_output_buffer_too_small_or_readonly(add_relu_compilation):
    e = nna.Execution(add_relu_compilation)
    e.set_input(0, np.ones((2, 3), "float32"))
    e.set_output(0, None, lambda m, t: bytearray(8))
    expect(e.compute, "output 0", "8 bytes", "needs 24")
    e.set_output(0, None, lambda m, t: bytes(24))
    expect(e.compute, "read-only")
    e.set_output(0, None, lambda m, t: np.empty((2, 3), "int32"))
    expect(e.compute, "int32", "float32")


def test_execution_before_finish(llvm_context):
    c = nna.Compilation(build_add_relu(), llvm_context)
    expect(lambda: nna.Execution(c), "before Compilation.finish()")
    expect(c.query_inputs_and_outputs, "finish()")
    expect(c.serialize, "finish()")


def test_context_properties(llvm_context):
    expect(lambda: nna.Context([nna.Device.acquire("llvm")], "NOPE=1"), "unknown context property 'NOPE'")
    expect(lambda: nna.Context([nna.Device.acquire("llvm")], "TVM_OPT_LEVEL=7"), "TVM_OPT_LEVEL", "0..3")
    expect(lambda: nna.Context([nna.Device.acquire("llvm")], "TVM_OPT_LEVEL"), "not KEY=VALUE")
    ctx = nna.Context([nna.Device.acquire("llvm")], " TVM_OPT_LEVEL = 2 ; LLVM_MATTR=+avx2,+fma;")
    assert ctx.properties["TVM_OPT_LEVEL"] == 2 and ctx.properties["LLVM_MATTR"] == ["+avx2", "+fma"]


def test_devices():
    assert "llvm" in nna.list_devices()
    with nna.Device.acquire("llvm") as d:
        assert (d.name, d.type, d.version) == ("llvm", nna.DeviceType.CPU, 1) and d.vendor
    assert nna.Device.check("llvm") and not nna.Device.check("tpu")
    expect(lambda: nna.Device.acquire("tpu"), "no device named 'tpu'", code=nna.ResultCode.DEVICE_NOT_FOUND)


def _reshape_to_4(context) -> nna.Compilation:
    """RESHAPE of x [2, ?] to [4]: the element count can only be checked at execution."""
    m = nna.Model()
    x = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [2, nna.UNKNOWN]))
    shape = m.add_operand(nna.OperandType(nna.Precision.INT32, [1]))
    m.set_operand_value(shape, np.array([4], "int32"))
    y = m.add_operand(nna.OperandType(nna.Precision.FLOAT32, [4]))
    m.add_operation(nna.OperationType.RESHAPE, [x, shape], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    c = nna.Compilation(m, context)
    c.finish()
    return c


@pytest.mark.parametrize("reloaded", [False, True], ids=["compiled", "from_cache_buffer"])
def test_a_failed_runtime_check_names_the_operation(llvm_context, reloaded):
    """The compiled code asserts what only execution can know; its failure is INVALID_DIMENSIONS with
    the operation's own message (kept in the cache too), not TVM's match_cast text."""
    c = _reshape_to_4(llvm_context)
    if reloaded:
        c = nna.Compilation(None, llvm_context, cache_buffer=c.serialize())
        c.finish()
    e = nna.Execution(c)
    out = e.use_arrays([np.arange(4, dtype="float32").reshape(2, 2)])
    e.compute()
    np.testing.assert_array_equal(out[0], np.arange(4, dtype="float32"))
    for bad in (np.zeros((2, 0), "float32"), np.zeros((2, 3), "float32")):
        e.use_arrays([bad])
        err = expect(e.compute, "RESHAPE (operation #0)", "'shape'", "needs 4 elements", str([list(bad.shape)]),
                     code=nna.ResultCode.INVALID_DIMENSIONS)  # fmt: skip
        assert "match_cast" not in str(err)


def test_a_function_the_runtime_lacks_is_a_device_error_not_the_inputs():
    """A compiled model calling a packed function the loaded TVM runtime does not provide (as a cached load
    did before it loaded libtvm_runtime_extra) fails with DEVICE_INTERNAL_ERROR, naming the function, not
    with INVALID_DIMENSIONS as though the inputs' sizes were wrong."""
    from nnadapter_tvm.runtime.steps import Step
    from nnadapter_tvm.targets import DRIVERS

    step = Step(DRIVERS["llvm"], [0], [1], b"")
    text = "Cannot find function tvm.contrib.sort.argsort in the imported modules or global registry."
    err = step.execution_error([np.zeros([2, 3], "float32")], RuntimeError(text))
    assert err.code == nna.ResultCode.DEVICE_INTERNAL_ERROR
    assert "tvm.contrib.sort.argsort" in str(err) and "does not provide" in str(err)
    other = step.execution_error([np.zeros([2, 3], "float32")], RuntimeError("Check failed: n == 4"))
    assert other.code == nna.ResultCode.INVALID_DIMENSIONS
