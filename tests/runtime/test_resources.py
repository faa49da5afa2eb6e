"""Resource bounds: tensors too big for any machine are refused before anything is allocated, and a
compile that fails part-way leaves no temporary file behind.

"Too big" here is far beyond any machine (a TiB and more), so the tests do not depend on the host's
memory; a model that merely is large (hundreds of MiB) must still compile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.targets import DRIVERS

P, OP, R = nna.Precision, nna.OperationType, nna.ResultCode
MEMORY_CODES = (R.OUT_OF_MEMORY, R.INVALID_DIMENSIONS)
HUGE = [65536, 65536, 64]  # 2^38 float32 elements: 1 TiB
TOKEN = "R" * 32


# -- helpers --------------------------------------------------------------------------------------
def context(devices=("llvm",), properties: str = "") -> nna.Context:
    return nna.Context([nna.Device.acquire(d) for d in devices], properties)


def const(model: nna.Model, value: np.ndarray, precision: nna.Precision) -> nna.Operand:
    operand = model.add_operand(nna.OperandType(precision, list(value.shape)))
    model.set_operand_value(operand, value)
    return operand


def error_up_to_compile(build) -> nna.NNAdapterError | None:
    """Build the model (``build(model)`` returns its inputs and outputs), finish it, compile it:
    the NNAdapterError raised on the way, or None when the compilation finished."""
    try:
        model = nna.Model()
        inputs, outputs = build(model)
        model.identify_inputs_and_outputs(inputs, outputs)
        model.finish()
        nna.Compilation(model, context()).finish()
    except nna.NNAdapterError as err:
        return err
    return None


def assert_refused_for_size(err: nna.NNAdapterError | None, what: str) -> None:
    assert err is not None, f"{what}: the compilation finished; it must fail with OUT_OF_MEMORY or INVALID_DIMENSIONS"
    assert err.code in MEMORY_CODES, f"{what}: failed with {err}, expected OUT_OF_MEMORY or INVALID_DIMENSIONS"


# -- tensors too big ------------------------------------------------------------------------------
def test_huge_input_is_refused_before_execution():
    """An input declared [65536, 65536, 64] float32 (1 TiB)."""

    def build(m):
        x = m.add_operand(nna.OperandType(P.FLOAT32, HUGE))
        y = m.add_operand(nna.OperandType(P.FLOAT32, HUGE))
        m.add_operation(OP.RELU, [x], [y])
        return [x], [y]

    assert_refused_for_size(error_up_to_compile(build), "a 1 TiB input")


def test_huge_output_from_constants_is_refused():
    """FILL with a constant shape of 1 TiB: nothing but constants, no input to feed."""

    def build(m):
        shape = const(m, np.array(HUGE, "int32"), P.INT32)
        value = const(m, np.array([1.0], "float32"), P.FLOAT32)
        y = m.add_operand(nna.OperandType(P.FLOAT32, HUGE))
        m.add_operation(OP.FILL, [shape, value], [y])
        x = m.add_operand(nna.OperandType(P.FLOAT32, [1]))
        x2 = m.add_operand(nna.OperandType(P.FLOAT32, [1]))
        m.add_operation(OP.RELU, [x], [x2])
        return [x], [y, x2]

    assert_refused_for_size(error_up_to_compile(build), "FILL of 1 TiB")


def test_huge_intermediate_from_a_small_input_is_refused():
    """[1, 3] tiled 2^20 x 2^20 times (12 TiB), reduced back to one value: the output is small,
    the intermediate is not. (Not executed: were it accepted, it would run for hours.)"""

    def build(m):
        x = m.add_operand(nna.OperandType(P.FLOAT32, [1, 3]))
        tiled = m.add_operand(nna.OperandType(P.FLOAT32, [1 << 20, 3 << 20]))
        m.add_operation(OP.TILE, [x, const(m, np.array([1 << 20, 1 << 20], "int32"), P.INT32)], [tiled])
        y = m.add_operand(nna.OperandType(P.FLOAT32, [1, 1]))
        axes = const(m, np.array([0, 1], "int32"), P.INT32)
        m.add_operation(OP.REDUCE_SUM, [tiled, axes, const(m, np.array([True]), P.BOOL8)], [y])
        return [x], [y]

    assert_refused_for_size(error_up_to_compile(build), "a 12 TiB intermediate")


def test_huge_constant_shape_operand_is_refused():
    """EXPAND of a one-element input to [2^20, 2^20, 2^10] (4 PiB of float32)."""

    def build(m):
        x = m.add_operand(nna.OperandType(P.FLOAT32, [1]))
        shape = const(m, np.array([1 << 20, 1 << 20, 1 << 10], "int64"), P.INT64)
        y = m.add_operand(nna.OperandType(P.FLOAT32, []))
        m.add_operation(OP.EXPAND, [x, shape], [y])
        return [x], [y]

    assert_refused_for_size(error_up_to_compile(build), "EXPAND to 4 PiB")


# A child with its address space capped at 4 GiB compiles ``dims`` through LOG_SOFTMAX along axis 1:
# before the size checks, TVM's lowering of a 2^30-iteration loop grew without bound and aborted the
# process (SIGABRT), so this runs outside the test process.
_HUGE_DIM_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import nnadapter_tvm as nna
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    P, OP = nna.Precision, nna.OperationType
    dims = json.loads(sys.argv[1])
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, dims))
    axis = m.add_operand(nna.OperandType(P.INT32, [1]))
    m.set_operand_value(axis, np.array([1], "int32"))
    y = m.add_operand(nna.OperandType(P.FLOAT32, dims))
    m.add_operation(getattr(OP, sys.argv[2]), [x, axis] if sys.argv[2] != "REDUCE_SUM" else [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    result = {"error": None}
    try:
        nna.Compilation(m, nna.Context([nna.Device.acquire("llvm")])).finish()
    except nna.NNAdapterError as err:
        result = {"error": str(err), "code": int(err.code)}
    print("RESULT " + json.dumps(result))
    """
)


@pytest.mark.parametrize(
    "dims,op",
    [
        ([2, 1 << 30, nna.UNKNOWN], "LOG_SOFTMAX"),  # an unknown dimension: the byte count cannot refuse it
        ([2, (1 << 31) - 1], "SOFTMAX"),
        ([1, 1 << 30], "SOFTMAX"),  # 4 GiB: fits this machine's memory, not TVM's loops
    ],
    ids=["2^30-with-unknown", "2^31-1", "2^30-4GiB"],
)
def test_dimension_beyond_tvm_loops_is_refused_before_compiling(dims, op):
    proc = subprocess.run(
        [sys.executable, "-c", _HUGE_DIM_CHILD, json.dumps(dims), op], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"the process died ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    result = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT ") :])
    assert result["error"] is not None and R(result["code"]) == R.INVALID_DIMENSIONS, result
    assert "1,073,741,823" in result["error"], result  # names the limit


def test_largest_dimension_still_compiles():
    """A softmax over 2^30 - 1 float32 values is compiled (not run; on a machine with less than 4 GiB
    it is refused as OUT_OF_MEMORY instead)."""

    def build(m):
        x = m.add_operand(nna.OperandType(P.FLOAT32, [1, (1 << 30) - 1]))
        y = m.add_operand(nna.OperandType(P.FLOAT32, [1, (1 << 30) - 1]))
        m.add_operation(OP.SOFTMAX, [x, const(m, np.array([1], "int32"), P.INT32)], [y])
        return [x], [y]

    err = error_up_to_compile(build)
    assert err is None or err.code == R.OUT_OF_MEMORY, err


def test_partly_unknown_tensor_beyond_memory_is_refused():
    """[?, 2^20, 2^20] float32: 4 TiB for every batch of one or more."""

    def build(m):
        x = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 1 << 20, 1 << 20]))
        y = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 1 << 20, 1 << 20]))
        m.add_operation(OP.RELU, [x], [y])
        return [x], [y]

    err = error_up_to_compile(build)
    assert err is not None and err.code == R.OUT_OF_MEMORY, err
    assert "each dimension unknown until execution counted as 1" in str(err)


def test_large_but_feasible_model_still_compiles():
    """No false alarm: 256 MiB in, 256 MiB out is a normal model (compiled, not run)."""

    def build(m):
        x = m.add_operand(nna.OperandType(P.FLOAT32, [64, 1024, 1024]))
        y = m.add_operand(nna.OperandType(P.FLOAT32, [64, 1024, 1024]))
        m.add_operation(OP.RELU, [x], [y])
        return [x], [y]

    assert error_up_to_compile(build) is None


# Run in a child with its address space capped at 8 GiB: whatever the library does, this machine
# never commits more than that to the test.
_DYNAMIC_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import nnadapter_tvm as nna
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    P, OP = nna.Precision, nna.OperationType
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 3]))
    reps = m.add_operand(nna.OperandType(P.INT32, [2]))
    m.set_operand_value(reps, np.array([1 << 20, 1 << 16], "int32"))
    y = m.add_operand(nna.OperandType(P.FLOAT32, [nna.UNKNOWN, 3 << 16]))
    m.add_operation(OP.TILE, [x, reps], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    c = nna.Compilation(m, nna.Context([nna.Device.acquire("llvm")]))
    c.finish()
    e = nna.Execution(c)
    e.set_input(0, np.ones((1, 3), "float32"))
    e.set_output(0, None, lambda memory, t: np.empty(t.dimensions, t.dtype))
    result = {"error": None}
    try:
        e.compute()
    except nna.NNAdapterError as err:
        result = {"error": str(err), "code": int(err.code)}
    # VmHWM is this process's own peak: ru_maxrss survives execve, so it would report the parent's peak.
    with open("/proc/self/status") as f:
        result["maxrss_kib"] = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print("RESULT " + json.dumps(result))
    """
)


def test_huge_tensor_known_only_at_execution_fails_cleanly():
    """[N, 3] tiled 2^20 x 2^16 times: with N=1 at execution the output is 768 GiB. The size is
    known only at execution; compute() must fail with OUT_OF_MEMORY (it was INVALID_DIMENSIONS with
    TVM's "std::bad_alloc"), the process must survive, and no large amount of memory may have been
    touched."""
    proc = subprocess.run([sys.executable, "-c", _DYNAMIC_CHILD], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the process died ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    assert result["error"] is not None, "a 768 GiB output was computed?"
    assert R(result["code"]) == R.OUT_OF_MEMORY, result
    assert "ran out of memory" in result["error"] and "[[1, 3]]" in result["error"], result
    assert result["maxrss_kib"] < 2 << 20, f"peak RSS {result['maxrss_kib']} KiB: memory was touched"


# -- temporary files ------------------------------------------------------------------------------
@pytest.fixture
def fresh_tmpdir(tmp_path, monkeypatch):
    """TMPDIR (and tempfile's cached default) pointed at an empty directory of its own."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def left_behind(directory) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, name), directory) for root, dirs, files in os.walk(directory)
                  for name in dirs + files)  # fmt: skip


def add_relu_model() -> nna.Model:
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    c = const(m, np.array([1.0, -2.0, 0.5], "float32"), P.FLOAT32)
    y = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    m.add_operation(OP.ADD, [x, c, const(m, np.array([1], "int32"), P.INT32)], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def chain_model() -> nna.Model:
    """relu -> sigmoid -> tanh on [2, 3]: split over two devices it makes three subgraphs."""
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    operand = x
    for op in (OP.RELU, OP.SIGMOID, OP.TANH):
        out = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
        m.add_operation(op, [operand], [out])
        operand = out
    m.identify_inputs_and_outputs([x], [operand])
    m.finish()
    return m


def test_a_successful_compile_leaves_no_temporary_files(fresh_tmpdir, tmp_path):
    nna.Compilation(add_relu_model(), context(), cache_token=TOKEN, cache_dir=tmp_path / "cache").finish()
    assert left_behind(fresh_tmpdir) == []
    assert os.listdir(tmp_path / "cache") == [TOKEN + ".nnc"]


def test_converter_failure_after_others_leaves_nothing(fresh_tmpdir, tmp_path):
    """relu converts, then RESHAPE's constant shape [4, 2] cannot hold the 6 elements: refused."""
    m = nna.Model()
    x = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    y = m.add_operand(nna.OperandType(P.FLOAT32, [2, 3]))
    m.add_operation(OP.RELU, [x], [y])
    shape = m.add_operand(nna.OperandType(P.INT32, [2]))
    m.set_operand_value(shape, np.array([4, 2], "int32"))
    z = m.add_operand(nna.OperandType(P.FLOAT32, [4, 2]))
    m.add_operation(OP.RESHAPE, [y, shape], [z])
    m.identify_inputs_and_outputs([x], [z])
    m.finish()
    with pytest.raises(nna.NNAdapterError):
        nna.Compilation(m, context(), cache_token=TOKEN, cache_dir=tmp_path / "cache").finish()
    assert left_behind(fresh_tmpdir) == []
    assert not (tmp_path / "cache").exists() or left_behind(tmp_path / "cache") == []


def test_build_failure_of_a_later_subgraph_leaves_nothing(fresh_tmpdir, tmp_path, monkeypatch):
    """Three subgraphs; the first is built and exported, the second's build fails."""
    driver = DRIVERS["llvm"]
    real_build, calls = driver.build, []

    def build(mod, props, kernels=None):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected: TVM failed on the second subgraph")
        return real_build(mod, props, kernels)

    monkeypatch.setattr(driver, "build", build)
    ctx = context(("llvm", "llvm"), "DEVICE_0_UNSUPPORTED_OPERATIONS=SIGMOID")
    with pytest.raises(nna.NNAdapterError, match="injected"):
        nna.Compilation(chain_model(), ctx, cache_token=TOKEN, cache_dir=tmp_path / "cache").finish()
    assert len(calls) == 2
    assert left_behind(fresh_tmpdir) == []
    assert not (tmp_path / "cache").exists() or left_behind(tmp_path / "cache") == []


def _failing_export(monkeypatch) -> list[int]:
    """The llvm driver's export writes its file, then fails (a full disk, say)."""
    driver = DRIVERS["llvm"]
    real_export, calls = driver.export, []

    def export(executable, path):
        calls.append(1)
        real_export(executable, path)
        raise RuntimeError("injected: no space left on device")

    monkeypatch.setattr(driver, "export", export)
    return calls


def test_export_failure_leaves_no_temporary_files(fresh_tmpdir, tmp_path, monkeypatch):
    calls = _failing_export(monkeypatch)
    with pytest.raises(Exception, match="injected"):  # any type: the next test checks it
        nna.Compilation(add_relu_model(), context(), cache_token=TOKEN, cache_dir=tmp_path / "cache").finish()
    assert calls
    assert left_behind(fresh_tmpdir) == []
    assert not (tmp_path / "cache").exists() or left_behind(tmp_path / "cache") == []


def test_export_failure_is_an_nnadapter_error(fresh_tmpdir, monkeypatch):
    _failing_export(monkeypatch)
    with pytest.raises(nna.NNAdapterError, match="injected"):
        nna.Compilation(add_relu_model(), context()).finish()


def test_linker_failure_leaves_no_temporary_files(fresh_tmpdir, monkeypatch):
    """The real thing fails mid-way: TVM's export runs the C++ linker, which fails. Checked while
    the caller still holds the error (its traceback must not keep a temporary directory alive)."""
    monkeypatch.setenv("CXX", "false")
    monkeypatch.setenv("CC", "false")
    with pytest.raises(Exception) as excinfo:  # any type: the next test checks it
        nna.Compilation(add_relu_model(), context()).finish()
    assert excinfo.value is not None
    assert left_behind(fresh_tmpdir) == []


def test_linker_failure_is_an_nnadapter_error(fresh_tmpdir, monkeypatch):
    monkeypatch.setenv("CXX", "false")
    monkeypatch.setenv("CC", "false")
    with pytest.raises(nna.NNAdapterError) as excinfo:
        nna.Compilation(add_relu_model(), context()).finish()
    assert excinfo.value.code == R.DEVICE_INTERNAL_ERROR


def _failing_fsync(monkeypatch) -> None:
    def fsync(fd):
        raise OSError(28, "injected: no space left on device")

    monkeypatch.setattr(cache.os, "fsync", fsync)


def test_cache_write_failure_leaves_no_files(fresh_tmpdir, tmp_path, monkeypatch):
    """The module is compiled, the .nnc is half written when the disk fills up."""
    _failing_fsync(monkeypatch)
    with pytest.raises(Exception, match="injected"):  # any type: the next test checks it
        nna.Compilation(add_relu_model(), context(), cache_token=TOKEN, cache_dir=tmp_path / "cache").finish()
    assert left_behind(fresh_tmpdir) == []
    assert left_behind(tmp_path / "cache") == []


def test_cache_write_failure_is_an_nnadapter_error(fresh_tmpdir, tmp_path, monkeypatch):
    _failing_fsync(monkeypatch)
    with pytest.raises(nna.NNAdapterError, match="injected"):
        nna.Compilation(add_relu_model(), context(), cache_token=TOKEN, cache_dir=tmp_path / "cache").finish()


def test_module_that_does_not_load_leaves_no_temporary_files(fresh_tmpdir):
    """A cache whose checksum is right but whose module is garbage: refused, nothing left."""
    good = nna.Compilation(add_relu_model(), context())
    good.finish()
    container = cache.unpack(good.serialize(), "buffer")
    bad = cache.pack(container.meta, [b"\x7fELF garbage" * 100 for _ in container.blobs])
    with pytest.raises(nna.NNAdapterError):
        nna.Compilation(None, context(), cache_buffer=bad).finish()
    assert left_behind(fresh_tmpdir) == []
