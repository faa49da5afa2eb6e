"""The C-style layer: a model built and run only through ``nnadapter_tvm.capi``, and its error codes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import nnadapter_tvm as nna
from nnadapter_tvm import capi
from nnadapter_tvm.capi import (
    NNAdapter_getVersion,
    NNAdapterCompilation_create,
    NNAdapterCompilation_destroy,
    NNAdapterCompilation_finish,
    NNAdapterCompilation_queryInputsAndOutputs,
    NNAdapterContext_create,
    NNAdapterContext_destroy,
    NNAdapterDevice_acquire,
    NNAdapterDevice_getName,
    NNAdapterDevice_getType,
    NNAdapterDevice_getVendor,
    NNAdapterDevice_getVersion,
    NNAdapterDevice_release,
    NNAdapterExecution_compute,
    NNAdapterExecution_create,
    NNAdapterExecution_destroy,
    NNAdapterExecution_setInput,
    NNAdapterExecution_setOutput,
    NNAdapterModel_addOperand,
    NNAdapterModel_addOperation,
    NNAdapterModel_create,
    NNAdapterModel_destroy,
    NNAdapterModel_finish,
    NNAdapterModel_getOperandType,
    NNAdapterModel_identifyInputsAndOutputs,
    NNAdapterModel_setOperandValue,
)

OK = nna.ResultCode.NO_ERROR
INVALID = nna.ResultCode.INVALID_PARAMETER
P = nna.Precision
TOKEN = "0123456789abcdefABCDEF0123456789"


# -- the spec's Memory and access functions, transcribed ----------------------------------
@dataclasses.dataclass
class Memory:
    precision: nna.Precision
    dimensions: list[int]
    buffer: bytearray
    length: int


def access_input_memory(memory: Memory, type: nna.OperandType) -> bytearray:
    type.dimensions = list(memory.dimensions)  # return the dimensions and the host buffer
    return memory.buffer


def access_output_memory(memory: Memory, type: nna.OperandType) -> bytearray:
    request_length = type.byte_length()
    if request_length > memory.length:
        memory.buffer = bytearray(request_length)
        memory.length = request_length
    memory.dimensions = list(type.dimensions)  # tell the caller the output dimensions
    return memory.buffer


def input_memory(array: np.ndarray) -> Memory:
    return Memory(P.FLOAT32, list(array.shape), bytearray(array.tobytes()), array.nbytes)


def output_array(memory: Memory) -> np.ndarray:
    count = int(np.prod(memory.dimensions))
    return np.frombuffer(memory.buffer, "float32", count).reshape(memory.dimensions)


def ok(result):
    """Assert NO_ERROR and unwrap the out-values."""
    code, *outs = result if isinstance(result, tuple) else (result,)
    assert code == OK, f"{code!r}: {capi.last_error()}"
    return outs[0] if len(outs) == 1 else tuple(outs) or None


def add_model(batch: int = 2) -> tuple[nna.Model, list[nna.Operand]]:
    """ADD(x, y) with fuse_code RELU over [batch, 3] float32 inputs, built through the capi."""
    model = ok(NNAdapterModel_create())
    t = nna.OperandType(P.FLOAT32, [batch, 3])
    x, y = ok(NNAdapterModel_addOperand(model, t)), ok(NNAdapterModel_addOperand(model, t))
    fuse = ok(NNAdapterModel_addOperand(model, nna.OperandType(P.INT32, [1])))
    code = np.array([nna.FuseCode.RELU], "int32")
    ok(NNAdapterModel_setOperandValue(fuse, code.tobytes(), code.nbytes, True))
    out = ok(NNAdapterModel_addOperand(model, nna.OperandType(P.FLOAT32, [batch, 3])))
    ok(NNAdapterModel_addOperation(model, nna.OperationType.ADD, 3, [x, y, fuse], 1, [out]))
    ok(NNAdapterModel_identifyInputsAndOutputs(model, 2, [x, y], 1, [out]))
    return model, [x, y, fuse, out]


@pytest.fixture(scope="module")
def context():
    device = ok(NNAdapterDevice_acquire("llvm"))
    ctx = ok(NNAdapterContext_create([device], 1, ""))
    yield ctx
    assert NNAdapterContext_destroy(ctx) == OK
    assert NNAdapterDevice_release(device) == OK


@pytest.fixture(scope="module")
def compilation(context, tmp_path_factory):
    model, _ = add_model()
    ok(NNAdapterModel_finish(model))
    cache_dir = str(tmp_path_factory.mktemp("capi-cache"))
    comp = ok(NNAdapterCompilation_create(model, TOKEN, None, 0, cache_dir, context))
    ok(NNAdapterCompilation_finish(comp))
    comp.cache_dir_for_test = cache_dir
    yield comp
    assert NNAdapterCompilation_destroy(comp) == OK
    assert NNAdapterModel_destroy(model) == OK


def run(compilation, a: np.ndarray, b: np.ndarray, out: Memory) -> np.ndarray:
    execution = ok(NNAdapterExecution_create(compilation))
    ok(NNAdapterExecution_setInput(execution, 0, input_memory(a), access_input_memory))
    ok(NNAdapterExecution_setInput(execution, 1, input_memory(b), access_input_memory))
    ok(NNAdapterExecution_setOutput(execution, 0, out, access_output_memory))
    ok(NNAdapterExecution_compute(execution))
    assert NNAdapterExecution_destroy(execution) == OK
    return output_array(out)


# -- the happy path -----------------------------------------------------------------------
def test_version_and_device_queries():
    assert ok(NNAdapter_getVersion()) == nna.get_version()
    device = ok(NNAdapterDevice_acquire("llvm"))
    assert ok(NNAdapterDevice_getName(device)) == "llvm"
    assert isinstance(ok(NNAdapterDevice_getVendor(device)), str)
    assert ok(NNAdapterDevice_getType(device)) == nna.DeviceType.CPU
    assert isinstance(ok(NNAdapterDevice_getVersion(device)), int)
    assert NNAdapterDevice_release(device) == OK


def test_add_relu_end_to_end(compilation):
    n_in, in_types, n_out, out_types = ok(NNAdapterCompilation_queryInputsAndOutputs(compilation))
    assert (n_in, n_out) == (2, 1)
    assert [t.dimensions for t in in_types] == [[2, 3], [2, 3]]
    assert out_types[0].precision == P.FLOAT32 and out_types[0].dimensions == [2, 3]
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-2, 2, (2, 3)).astype("float32"), rng.uniform(-2, 2, (2, 3)).astype("float32")
    out = Memory(P.FLOAT32, [], bytearray(0), 0)  # empty: the access function must reallocate
    got = run(compilation, a, b, out)
    assert out.length == 24 and out.dimensions == [2, 3]
    np.testing.assert_array_equal(got, np.maximum(a + b, 0))
    # A second run reuses the now large enough buffer.
    buffer = out.buffer
    got = run(compilation, b, -a, out)
    assert out.buffer is buffer
    np.testing.assert_array_equal(got, np.maximum(b - a, 0))


def test_cache_dir_round_trip(compilation, context):
    comp = ok(NNAdapterCompilation_create(None, TOKEN, None, 0, compilation.cache_dir_for_test, context))
    ok(NNAdapterCompilation_finish(comp))
    assert comp.loaded_from_cache
    a, b = np.ones((2, 3), "float32"), np.full((2, 3), -3, "float32")
    np.testing.assert_array_equal(run(comp, a, b, Memory(P.FLOAT32, [], bytearray(0), 0)), np.zeros((2, 3)))
    assert NNAdapterCompilation_destroy(comp) == OK


def test_operand_type_and_constant_reference():
    model, (x, _, fuse, _) = add_model()
    t = ok(NNAdapterModel_getOperandType(x))
    assert t.precision == P.FLOAT32 and t.dimensions == [2, 3] and t.lifetime == nna.Lifetime.MODEL_INPUT
    assert ok(NNAdapterModel_getOperandType(fuse)).lifetime == nna.Lifetime.CONSTANT_COPY
    value = np.array([0], "int32")
    ok(NNAdapterModel_setOperandValue(fuse, value, 4, False))
    assert ok(NNAdapterModel_getOperandType(fuse)).lifetime == nna.Lifetime.CONSTANT_REFERENCE
    ok(NNAdapterModel_finish(model))


# -- error codes ----------------------------------------------------------------------------
def test_unknown_device():
    assert NNAdapterDevice_acquire("no-such-device") == (nna.ResultCode.DEVICE_NOT_FOUND, None)
    assert "no-such-device" in capi.last_error()


def test_context_count_and_properties():
    device = ok(NNAdapterDevice_acquire("llvm"))
    assert NNAdapterContext_create([device], 2, "") == (INVALID, None)
    assert NNAdapterContext_create([device], 1, "NO_SUCH_KEY=1") == (INVALID, None)
    assert "NO_SUCH_KEY" in capi.last_error()
    assert NNAdapterContext_create([device, "llvm"], 2, None) == (INVALID, None)
    ok(NNAdapterContext_create([device], 1, None))


def test_wrong_operand_count_names_the_operation():
    model, (x, y, _, out) = add_model()
    code, operation = NNAdapterModel_addOperation(model, nna.OperationType.SUB, 2, [x, y], 1, [out])
    assert (code, operation) == (INVALID, None)
    assert "SUB" in capi.last_error()
    # A count that disagrees with the array is also rejected.
    assert NNAdapterModel_addOperation(model, nna.OperationType.SUB, 3, [x, y], 1, [out])[0] == INVALID
    assert NNAdapterModel_addOperation(model, 9999, 0, None, 0, None)[0] == INVALID


def test_set_operand_value_wrong_length():
    model = ok(NNAdapterModel_create())
    operand = ok(NNAdapterModel_addOperand(model, nna.OperandType(P.FLOAT32, [2, 3])))
    value = np.zeros((2, 3), "float32")
    assert NNAdapterModel_setOperandValue(operand, value, 20, True) == INVALID
    assert "20" in capi.last_error()
    # length matches the buffer but not the operand's type: the model's own check.
    assert NNAdapterModel_setOperandValue(operand, b"\0" * 8, 8, True) == INVALID
    assert NNAdapterModel_setOperandValue(operand, None, 24, True) == INVALID
    assert NNAdapterModel_setOperandValue(operand, 42, 24, True) == INVALID
    assert NNAdapterModel_setOperandValue(operand, value, 24, True) == OK


def test_bad_cache_token(context):
    model, _ = add_model()
    ok(NNAdapterModel_finish(model))
    assert NNAdapterCompilation_create(model, "../x", None, 0, "/tmp", context) == (INVALID, None)
    assert "token" in capi.last_error()
    assert NNAdapterCompilation_create(model, TOKEN, b"abc", 2, None, context) == (INVALID, None)


def test_query_before_finish(context):
    model, _ = add_model()
    ok(NNAdapterModel_finish(model))
    comp = ok(NNAdapterCompilation_create(model, None, None, 0, None, context))
    assert NNAdapterCompilation_queryInputsAndOutputs(comp) == (INVALID, None, None, None, None)
    assert NNAdapterExecution_create(comp) == (INVALID, None)


def test_compile_unfinished_model(context):
    model, _ = add_model()
    comp = ok(NNAdapterCompilation_create(model, "", None, 0, "", context))
    assert NNAdapterCompilation_finish(comp) == INVALID
    assert "finish" in capi.last_error()


def test_execution_errors(compilation):
    execution = ok(NNAdapterExecution_create(compilation))
    memory = input_memory(np.zeros((2, 3), "float32"))
    assert NNAdapterExecution_setInput(execution, 2, memory, access_input_memory) == INVALID
    assert "out of range" in capi.last_error()
    assert NNAdapterExecution_setOutput(execution, -1, memory, access_output_memory) == INVALID
    assert NNAdapterExecution_setInput(execution, 0, memory, None) == INVALID

    def raising_access(memory, type):
        raise RuntimeError("boom")

    ok(NNAdapterExecution_setInput(execution, 0, memory, raising_access))
    ok(NNAdapterExecution_setInput(execution, 1, memory, access_input_memory))
    ok(NNAdapterExecution_setOutput(execution, 0, Memory(P.FLOAT32, [], bytearray(0), 0), access_output_memory))
    code = NNAdapterExecution_compute(execution)
    assert code != OK and isinstance(code, nna.ResultCode)
    assert "boom" in capi.last_error()
    # Wrong dimensions from the access function.
    ok(NNAdapterExecution_setInput(execution, 0, input_memory(np.zeros((3, 3), "float32")), access_input_memory))
    assert NNAdapterExecution_compute(execution) == nna.ResultCode.INVALID_DIMENSIONS
    # An output access function that returns no buffer.
    ok(NNAdapterExecution_setInput(execution, 0, memory, access_input_memory))
    ok(NNAdapterExecution_setOutput(execution, 0, None, lambda memory, type: None))
    assert NNAdapterExecution_compute(execution) == INVALID


@pytest.mark.parametrize(
    "call",
    [
        lambda: NNAdapterModel_finish("model"),
        lambda: NNAdapterModel_addOperand("model", nna.OperandType(P.FLOAT32, [1])),
        lambda: NNAdapterModel_addOperand(nna.Model(), "float32"),
        lambda: NNAdapterModel_getOperandType(None),
        lambda: NNAdapterModel_identifyInputsAndOutputs(nna.Model(), 1, ["x"], 0, None),
        lambda: NNAdapterModel_addOperation(nna.Model(), "ADD", 0, None, 0, None),
        lambda: NNAdapterDevice_getName(object()),
        lambda: NNAdapterDevice_acquire(None),
        lambda: NNAdapterDevice_release("llvm"),
        lambda: NNAdapterContext_create("llvm", 4, ""),
        lambda: NNAdapterContext_destroy(3),
        lambda: NNAdapterCompilation_create("model", None, None, 0, None, None),
        lambda: NNAdapterCompilation_finish([]),
        lambda: NNAdapterCompilation_queryInputsAndOutputs(None),
        lambda: NNAdapterExecution_create("compilation"),
        lambda: NNAdapterExecution_compute(1.5),
        lambda: NNAdapterExecution_destroy(None),
        lambda: NNAdapterModel_destroy({}),
        lambda: NNAdapterCompilation_destroy("c"),
    ],
)
def test_garbage_handles_are_invalid_parameter(call):
    result = call()
    code = result[0] if isinstance(result, tuple) else result
    assert code == INVALID, capi.last_error()
    if isinstance(result, tuple):
        assert all(v is None for v in result[1:])
    assert capi.last_error()


def test_unexpected_exception_becomes_internal_error(monkeypatch):
    def broken(self):
        raise RuntimeError("internal")

    monkeypatch.setattr(nna.Model, "finish", broken)
    assert NNAdapterModel_finish(nna.Model()) == nna.ResultCode.DEVICE_INTERNAL_ERROR
    assert "internal" in capi.last_error()


def test_last_error_is_per_thread():
    import threading

    NNAdapterDevice_acquire("no-such-device")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(capi.last_error()))
    thread.start()
    thread.join()
    assert seen == [""] and "no-such-device" in capi.last_error()


def test_exact_spec_names():
    names = [n for n in capi.__all__ if n.startswith("NNAdapter")]
    assert len(names) == 26
    for name in names:
        assert callable(getattr(capi, name))
