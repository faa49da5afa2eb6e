"""The ``cuda`` and ``opencl`` devices: scheduling, compiling, exporting, and proving the kernels real.

Here (no GPU, a TVM wheel without an OpenCL runtime) both devices compile and export; the CUDA C
of each module is compiled with ``nvcc`` and the OpenCL C with a real OpenCL compiler (pocl's, via
pyopencl).  Tests that run kernels need a visible GPU and skip, saying why, without one.

Also a pytest plugin: ``NNADAPTER_TVM_GPU_SWEEP=cuda,opencl pytest -p test_gpu_targets tests/ops``
builds every model the operator tests run for those devices as well, and fails the operator test
whose model does not build (see docs/targets-gpu.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import tvm
from oputil import Const, In, Out, b8, build_model, f32, fuse, i32, rand, run_model
from tvm import te

import nnadapter_tvm as nna
from nnadapter_tvm.runtime.convert import convert_model
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.targets import DRIVERS, gpu, toolchain
from nnadapter_tvm.tools import builtin_model

OP = nna.OperationType
P = nna.Precision
PAD = nna.AutoPad
SWEEP_ENV = "NNADAPTER_TVM_GPU_SWEEP"

CUDA, OPENCL = DRIVERS["cuda"], DRIVERS["opencl"]
CUDA_OK, CUDA_WHY = CUDA.can_run_here()
needs_gpu = pytest.mark.skipif(not CUDA_OK, reason=f"needs a CUDA GPU: {CUDA_WHY}")
NVCC = shutil.which("nvcc")


# -- representative one-operation models --------------------------------------------------


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return rand(*shape, seed=seed)


def _cases() -> dict[str, tuple]:
    """name -> (operation, inputs, outputs (Out), output shapes); small shapes keep builds fast."""
    x = _x(1, 4, 8, 8)
    conv = [In(x), f32(_x(8, 4, 3, 3, seed=1)), f32(_x(8, seed=2)), i32([int(PAD.SAME)]), i32([0, 0, 0, 0])]
    conv += [i32([1, 1]), i32([1]), i32([1, 1]), fuse(nna.FuseCode.RELU)]
    pool = [i32([int(PAD.NONE)]), i32([0, 0, 0, 0]), i32([2, 2]), i32([2, 2]), b8([False])]
    return {
        "CONV_2D": (OP.CONV_2D, conv, [Out()], [(1, 8, 8, 8)]),
        "FULLY_CONNECTED": (
            OP.FULLY_CONNECTED,
            [In(_x(2, 16)), f32(_x(10, 16)), f32(_x(10)), fuse(0)],
            [Out()],
            [(2, 10)],
        ),
        "MAT_MUL": (
            OP.MAT_MUL,
            [In(_x(2, 8, 16)), In(_x(2, 16, 4, seed=3)), b8([False]), b8([False])],
            [Out()],
            [(2, 8, 4)],
        ),
        "SOFTMAX": (OP.SOFTMAX, [In(_x(4, 33)), i32([1])], [Out()], [(4, 33)]),
        "AVERAGE_POOL_2D": (OP.AVERAGE_POOL_2D, [In(x), *pool, b8([False]), fuse(0)], [Out()], [(1, 4, 4, 4)]),
        "MAX_POOL_2D": (
            OP.MAX_POOL_2D,
            [In(x), *pool, b8([False]), i32([int(P.INT32)]), fuse(0)],
            [Out()],
            [(1, 4, 4, 4)],
        ),
        "BATCH_NORMALIZATION": (
            OP.BATCH_NORMALIZATION,
            [In(x), f32(_x(4)), f32(_x(4, seed=1)), f32(_x(4, seed=2)), f32(np.abs(_x(4, seed=3)) + 0.5), f32([1e-5])],
            [Out()],
            [(1, 4, 8, 8)],
        ),
        "CONCAT": (OP.CONCAT, [In(_x(2, 3)), In(_x(2, 5, seed=1)), i32([1])], [Out()], [(2, 8)]),
        "RESHAPE": (OP.RESHAPE, [In(_x(2, 3, 4)), i32([4, -1])], [Out()], [(4, 6)]),
        "TRANSPOSE": (OP.TRANSPOSE, [In(_x(2, 3, 4)), i32([2, 0, 1])], [Out()], [(4, 2, 3)]),
        "REDUCE_MEAN": (OP.REDUCE_MEAN, [In(_x(3, 40)), i32([1]), b8([True])], [Out()], [(3, 1)]),
        "TOP_K": (
            OP.TOP_K,
            [In(_x(3, 10)), i32([4]), i32([1]), b8([True]), b8([True]), i32([int(P.INT32)])],
            [Out(), Out(P.INT32)],
            [(3, 4), (3, 4)],
        ),
        "RESIZE_LINEAR": (
            OP.RESIZE_LINEAR,
            [In(x), i32([12, 10]), Const(np.zeros([0], "float32")), b8([False]), i32([1])],
            [Out()],
            [(1, 4, 12, 10)],
        ),
    }


CASES = _cases()
MODEL_NAMES = [*CASES, "builtin_cnn"]


def _model(name: str) -> tuple[nna.Model, list[np.ndarray]]:
    if name == "builtin_cnn":
        return builtin_model.build(), [_x(2, *builtin_model.INPUT_SHAPE, seed=9)]
    op, inputs, outputs, shapes = CASES[name]
    return build_model(op, inputs, outputs, shapes), [a.value for a in inputs if isinstance(a, In)]


def _build(driver, name: str, props: str = "") -> tuple[object, gpu.ScheduleReport]:
    model, _ = _model(name)
    mod, _ = convert_model(model)
    context = nna.Context([nna.Device.acquire(driver.name)], props)
    return gpu.build(mod, driver.tvm_target(context.properties))


def _export(driver, executable, tmp_path) -> bytes:
    path = os.path.join(tmp_path, "module.so")
    driver.export(executable, path)
    with open(path, "rb") as f:
        return f.read()


def _elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF", "not an ELF shared library"
    return int.from_bytes(data[18:20], "little")


# -- the devices ---------------------------------------------------------------------------


def test_devices_are_listed_with_identity():
    for name, vendor in (("cuda", "NVIDIA"), ("opencl", "OpenCL")):
        assert name in nna.list_devices()
        with nna.Device.acquire(name) as device:
            assert device.type == nna.DeviceType.GPU
            assert vendor in device.vendor


def test_properties_select_the_targets():
    props = nna.Context([nna.Device.acquire("cuda")]).properties
    assert CUDA.tvm_target(props).attrs["arch"] == "sm_80"  # the documented default
    props = nna.Context([nna.Device.acquire("cuda")], "CUDA_ARCH=sm_90").properties
    target = CUDA.tvm_target(props)
    assert target.kind.name == "cuda" and target.attrs["arch"] == "sm_90" and target.host.kind.name == "llvm"
    props = nna.Context([nna.Device.acquire("opencl")], "OPENCL_HOST=aarch64").properties
    target = OPENCL.tvm_target(props)
    assert target.kind.name == "opencl" and target.host.attrs["mtriple"] == "aarch64-linux-gnu"


@pytest.mark.parametrize("text,key", [("CUDA_ARCH=80", "CUDA_ARCH"), ("OPENCL_HOST=riscv64", "OPENCL_HOST")])
def test_bad_properties_are_rejected(text, key):
    with pytest.raises(nna.NNAdapterError) as err:
        nna.Context([nna.Device.acquire("cuda")], text)
    assert err.value.code == nna.ResultCode.INVALID_PARAMETER and key in str(err.value)


def test_opencl_cannot_run_with_this_wheel():
    ok, why = OPENCL.can_run_here()
    if tvm.runtime.enabled("opencl"):
        pytest.skip("this TVM runtime has OpenCL")
    assert not ok and "OpenCL" in why


# -- scheduling ----------------------------------------------------------------------------


def _cuda_target() -> tvm.target.Target:
    return CUDA.tvm_target({})


def test_unscheduled_gpu_code_is_detected():
    # TVM 0.27 silently compiles an unbound GPU PrimFunc as host code; the scheduler must not let one through.
    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * 2.0, name="b")
    func = te.create_prim_func([a, b])
    assert gpu.unbound_accesses(func) == 2
    scheduled, strategy = gpu.schedule_prim_func(func, _cuda_target())
    assert strategy == "Fallback" and gpu.unbound_accesses(scheduled) == 0


def test_sequential_kernels_fall_back_to_one_thread():
    # An IR-builder kernel (like NON_MAX_SUPPRESSION's) that no dlight rule can normalize.
    def prefix_sum(ins, outs):
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        with IRBuilder() as ib, T.serial(0, 1):
            src, dst = T.buffer_proxy(ins[0]), T.buffer_proxy(outs[0])
            dst[0] = src[0]
            with T.serial(1, 16) as i:
                dst[i] = dst[i - 1] + src[i]
        return ib.get()

    a = te.placeholder((16,), name="a")
    b = te.extern([(16,)], [a], lambda ins, outs: prefix_sum(ins, outs), dtype="float32", name="scan")
    func = te.create_prim_func([a, b])
    scheduled, strategy = gpu.schedule_prim_func(func, _cuda_target())
    assert strategy == "serial" and gpu.unbound_accesses(scheduled) == 0


def test_zero_sized_tensors_get_a_schedule():
    a = te.placeholder((3, 4), name="a")
    b = te.compute((3, 0), lambda i, j: a[i, j], name="b")
    scheduled, strategy = gpu.schedule_prim_func(te.create_prim_func([a, b]), _cuda_target())
    assert gpu.unbound_accesses(scheduled) == 0, strategy


# -- CUDA: compile, export, and compile the CUDA C with nvcc ------------------------------


def _nvcc(source: str, arch: str, tmp_path) -> None:
    src = os.path.join(tmp_path, "kernels.cu")
    with open(src, "w") as f:
        f.write(source)
    # --ptx runs the whole CUDA front end and NVVM; ptxas (--cubin) adds only register allocation.
    cmd = [NVCC, "--ptx", f"-arch={arch.replace('sm_', 'compute_')}", "-w", "-o", src + ".ptx", src]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"nvcc rejected the generated CUDA C:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_cuda_builds_exports_and_nvcc_compiles(name, tmp_path):
    executable, report = _build(CUDA, name)
    assert report.strategies, "no PrimFunc was scheduled"
    data = _export(CUDA, executable, tmp_path)
    assert _elf_machine(data) == {"x86_64": 62, "aarch64": 183}.get(gpu.host_machine(), _elf_machine(data))
    (source,) = gpu.kernel_sources(executable, "cuda")
    assert source.count("__global__") >= len(report.strategies)
    assert source.encode() in data, "the exported library does not carry the CUDA C"
    if name in ("CONV_2D", "FULLY_CONNECTED", "MAT_MUL", "builtin_cnn"):
        # The real schedules, not a fallback: matmul-like work goes through dlight's Matmul/GEMV.
        assert {"Matmul", "GEMV"} & set(report.strategies.values()), report.strategies
    assert not report.of("serial"), report.strategies
    if NVCC is None:
        pytest.skip("nvcc is not on PATH: the CUDA C was not compiled (CI installs the CUDA toolkit)")
    _nvcc(source, "sm_80", tmp_path)


def test_cuda_arch_reaches_the_target_token_and_nvcc(tmp_path):
    """What CUDA_ARCH changes: the TVM target the kernels are scheduled for, and so the model token (a
    cache built for one architecture is not loaded for another); nvcc compiles the CUDA C for it. The
    CUDA C itself came out the same for sm_61, sm_75 and sm_90 on every model here (dlight reads the
    target's limits, which TVM's cuda kind gives alike for every architecture): not asserted either way."""
    model, _ = _model("SOFTMAX")
    tokens = {}
    for arch in ("sm_75", "sm_90"):
        context = nna.Context([nna.Device.acquire("cuda")], f"CUDA_ARCH={arch}")
        assert str(CUDA.tvm_target(context.properties).arch) == arch
        tokens[arch] = model_token(model, context)
    assert tokens["sm_75"] != tokens["sm_90"]
    executable, _ = _build(CUDA, "SOFTMAX", "CUDA_ARCH=sm_90")
    (source,) = gpu.kernel_sources(executable, "cuda")
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    _nvcc(source, "sm_90", tmp_path)
    assert ".target sm_90" in (tmp_path / "kernels.cu.ptx").read_text()


# -- OpenCL: compile, export, and build the OpenCL C with a real OpenCL compiler ----------


def _opencl_context():
    cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (CI: pip install pyopencl)")
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:  # no ICD at all
        pytest.skip(f"no OpenCL platform (CI: apt-get install pocl-opencl-icd ocl-icd-libopencl1): {err}")
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        pytest.skip("no OpenCL device (CI: apt-get install pocl-opencl-icd)")
    return cl, cl.Context([devices[0]])


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_opencl_builds_exports_and_kernels_compile(name, tmp_path):
    executable, report = _build(OPENCL, name)
    data = _export(OPENCL, executable, tmp_path)
    (source,) = gpu.kernel_sources(executable, "opencl")
    assert source.count("__kernel void") >= len(report.strategies)
    assert source.encode() in data, "the exported library does not carry the OpenCL C"
    assert not report.of("serial"), report.strategies
    cl, context = _opencl_context()
    program = cl.Program(context, source).build()
    built = {k.function_name for k in program.all_kernels()}
    declared = {line.split("(")[0].split()[-1] for line in source.splitlines() if line.startswith("__kernel void")}
    assert declared <= built, f"kernels missing from the OpenCL build: {declared - built}"


def _skip_without_aarch64_linker() -> None:
    if shutil.which("aarch64-linux-gnu-g++") is None and toolchain.zig_executable() is None:
        pytest.skip("no aarch64 linker: neither aarch64-linux-gnu-g++ on PATH nor the ziglang package")


def test_opencl_host_code_cross_compiles_for_aarch64(tmp_path):
    _skip_without_aarch64_linker()
    executable, _ = _build(OPENCL, "SOFTMAX", "OPENCL_HOST=aarch64")
    assert gpu.host_of(executable) == "aarch64"
    assert _elf_machine(_export(OPENCL, executable, tmp_path)) == 183  # EM_AARCH64


# -- through the public API: compile-only here, clear errors where a module cannot run ---


def _compile_to_cache(device: str, props: str, cache_dir) -> tuple[nna.Compilation, nna.Context]:
    model, _ = _model("SOFTMAX")
    context = nna.Context([nna.Device.acquire(device)], props)
    compilation = nna.Compilation(model, context, cache_token="G" * 32, cache_dir=cache_dir)
    compilation.finish()
    return compilation, context


@pytest.mark.parametrize("props", ["", "OPENCL_HOST=aarch64"])
def test_opencl_compiles_to_the_cache_here_and_says_why_it_cannot_run(props, tmp_path):
    if tvm.runtime.enabled("opencl"):
        pytest.skip("this TVM runtime has OpenCL")
    if "aarch64" in props:
        _skip_without_aarch64_linker()
    _, context = _compile_to_cache("opencl", props, tmp_path)
    assert os.path.isfile(tmp_path / ("G" * 32 + ".nnc"))
    # A board that never compiles loads the cache without the model.
    again = nna.Compilation(None, context, cache_token="G" * 32, cache_dir=tmp_path)
    again.finish()
    assert again.loaded_from_cache
    execution = nna.Execution(again)
    execution.set_input(0, _x(4, 33))
    execution.set_output(0, np.empty((4, 33), "float32"))
    with pytest.raises(nna.NNAdapterError) as err:
        execution.compute()
    assert err.value.code == nna.ResultCode.DEVICE_NOT_FOUND and "OpenCL" in str(err.value)


@pytest.mark.parametrize("props", ["", "OPENCL_HOST=aarch64"])
def test_opencl_load_explains_what_is_missing(props, tmp_path):
    if tvm.runtime.enabled("opencl") and not props:
        pytest.skip("this TVM runtime has OpenCL")
    if "aarch64" in props:
        _skip_without_aarch64_linker()
    context = nna.Context([nna.Device.acquire("opencl")], props)
    executable, _ = _build(OPENCL, "RESHAPE", props)
    path = os.path.join(tmp_path, "module.so")
    OPENCL.export(executable, path)
    with pytest.raises(nna.NNAdapterError) as err:
        OPENCL.load(path, context.properties)
    assert err.value.code == nna.ResultCode.FEATURE_NOT_SUPPORTED
    assert ("aarch64" if props else "no OpenCL support") in str(err.value)


def test_cuda_compiles_to_the_cache_without_a_gpu(tmp_path):
    if CUDA_OK:
        pytest.skip(f"a GPU is visible ({CUDA_WHY})")
    compilation, _ = _compile_to_cache("cuda", "", tmp_path)
    assert compilation.serialize()
    executable, _ = _build(CUDA, "RESHAPE")
    path = os.path.join(tmp_path, "module.so")
    CUDA.export(executable, path)
    with pytest.raises(nna.NNAdapterError) as err:
        CUDA.load(path, {})
    assert err.value.code == nna.ResultCode.DEVICE_NOT_FOUND and "CUDA" in str(err.value)


# -- CUDA on a GPU -------------------------------------------------------------------------

RUN_ON_GPU = ["builtin_cnn", "CONV_2D", "SOFTMAX", "REDUCE_MEAN", "TOP_K", "RESIZE_LINEAR", "MAT_MUL"]


@needs_gpu
@pytest.mark.parametrize("name", RUN_ON_GPU)
def test_cuda_matches_llvm(name):
    model, feeds = _model(name)
    expected = run_model(model, feeds, device="llvm")
    got = run_model(_model(name)[0], feeds, device="cuda")
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@needs_gpu
def test_cuda_cache_exported_here_loads_and_runs(tmp_path):
    model, feeds = _model("builtin_cnn")
    context = nna.Context([nna.Device.acquire("cuda")])
    compilation = nna.Compilation(model, context, cache_token="C" * 32, cache_dir=tmp_path)
    compilation.finish()
    loaded = nna.Compilation(None, context, cache_token="C" * 32, cache_dir=tmp_path)
    loaded.finish()
    assert loaded.loaded_from_cache
    execution = nna.Execution(loaded)
    execution.set_input(0, feeds[0])
    out = np.empty((2, builtin_model.CLASSES), "float32")
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_allclose(out, run_model(model, feeds, device="llvm")[0], rtol=1e-4, atol=1e-5)


# -- the operator-suite sweep (a plugin: pytest -p test_gpu_targets tests/ops) -------------


def pytest_configure(config: pytest.Config) -> None:
    """With ``NNADAPTER_TVM_GPU_SWEEP=cuda[,opencl]``, every model an operator test runs is also
    built for those devices (scheduled and compiled, not run); a model that does not build fails
    its test.  Only active when this module is loaded as a plugin (``-p test_gpu_targets``)."""
    kinds = [k.strip() for k in os.environ.get(SWEEP_ENV, "").split(",") if k.strip()]
    if not kinds:
        return
    known = [name for name, driver in DRIVERS.items() if isinstance(driver, gpu.GpuDriver)]
    if set(kinds) - set(known):
        raise pytest.UsageError(f"{SWEEP_ENV}={','.join(kinds)}: the GPU devices are {', '.join(known)}")
    import oputil

    run = oputil.run_model

    def run_and_build(model: nna.Model, feeds, device: str = "llvm"):
        results = run(model, feeds, device)  # invalid models fail here first, as the test expects
        mod, _ = convert_model(model)
        for kind in kinds:
            driver = DRIVERS[kind]
            executable, report = gpu.build(mod, driver.tvm_target({}))
            with tempfile.TemporaryDirectory() as tmp:
                driver.export(executable, os.path.join(tmp, "module.so"))
            serial = report.of("serial")
            if serial and os.environ.get(SWEEP_ENV + "_STRICT"):
                raise AssertionError(f"{kind}: kernels on one GPU thread: {serial}")
        return results

    oputil.run_model = run_and_build
