"""The ``arm`` device without a board: the driver and its properties, cross export for aarch64 and the
cache, and the aarch64 linker (the system's cross compiler, else zig from the ziglang wheel).

Runs anywhere; the cross-compiling tests need Debian's ``g++-aarch64-linux-gnu`` or the ``ziglang`` wheel on
non-aarch64 hosts. The board runner and ``deploy`` are tested in test_arm_deploy.py, the end-to-end tests on
a board in test_arm_board.py; what they share is in armutil.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest
from armutil import (
    CAN_EXPORT,
    EM_AARCH64,
    HAS_ZIG,
    NO_CROSS,
    arm_context,
    module_blob,
    needs_cross,
    softmax_model,
)

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.targets import DRIVERS, toolchain
from nnadapter_tvm.targets.arm import ArmDriver, elf_machine, host_is_aarch64
from nnadapter_tvm.tools import builtin_model

ARM = DRIVERS["arm"]


@pytest.fixture(scope="module")
def arm_cache(tmp_path_factory):
    """The built-in CNN compiled for arm (cortex-a72) into a cache directory: (dir, token, path)."""
    if not CAN_EXPORT:
        pytest.skip(NO_CROSS)
    directory = tmp_path_factory.mktemp("arm-cache")
    model = builtin_model.build()
    context = arm_context("ARM_MCPU=cortex-a72;")
    token = model_token(model, context)
    compilation = nna.Compilation(model, context, cache_token=token, cache_dir=directory)
    compilation.finish()
    assert not compilation.loaded_from_cache
    return directory, token, cache.cache_path(directory, token)


# -- the driver ----------------------------------------------------------------------------------
def test_driver_identity_and_properties():
    assert isinstance(ARM, ArmDriver)
    assert ARM.name == "arm" and ARM.type == nna.DeviceType.CPU
    keys = {p.key for p in ARM.properties}
    assert keys == {"ARM_MCPU", "ARM_MATTR", "ARM_MTRIPLE"}
    for name, driver in DRIVERS.items():
        if name != "arm":
            assert not keys & {p.key for p in driver.properties}, name
    assert nna.Device.check("arm")
    ok, why = ARM.can_run_here()
    assert ok == host_is_aarch64() and why


def test_target_defaults_and_board_cpu():
    default = ARM.tvm_target(arm_context().properties)
    assert str(default.attrs["mtriple"]) == "aarch64-linux-gnu"
    assert list(default.attrs["mattr"]) == ["+neon"]
    assert "arm_cpu" in [str(k) for k in default.keys]
    board = ARM.tvm_target(arm_context("ARM_MCPU=cortex-a72;ARM_MATTR=+neon,+crc;").properties)
    assert str(board.attrs["mcpu"]) == "cortex-a72"
    assert list(board.attrs["mattr"]) == ["+neon", "+crc"]


def test_board_cpu_enters_the_token():
    model = builtin_model.build()
    tokens = {model_token(model, arm_context(p)) for p in ("", "ARM_MCPU=cortex-a72;", "ARM_MCPU=cortex-a53;")}
    assert len(tokens) == 3
    assert model_token(model, arm_context()) != model_token(model, nna.Context([nna.Device.acquire("llvm")]))


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ("ARM_MTRIPLE=x86_64-linux-gnu;", "64-bit ARM triple"),
        ("ARM_MATTR=neon;", r"\+neon or -sve"),
        ("ARM_MCPU=cortex a72;", "one LLVM CPU name"),
    ],
)
def test_bad_properties_are_rejected(properties, message):
    with pytest.raises(nna.NNAdapterError, match=message) as err:
        arm_context(properties)
    assert err.value.code == nna.ResultCode.INVALID_PARAMETER


def test_unknown_cpu_is_rejected_by_name():
    with pytest.raises(nna.NNAdapterError, match=r"ARM_MCPU='cortex-a999' is not an LLVM CPU.*cortex|a64fx"):
        ARM.tvm_target(arm_context("ARM_MCPU=cortex-a999;").properties)


# -- cross export and the cache ----------------------------------------------------------------
@needs_cross
def test_cross_export_is_aarch64_elf(arm_cache):
    _, _, path = arm_cache
    container = cache.unpack(cache.read_file(path), path)
    (sub,) = container.meta["subgraphs"]
    assert sub["device"] == "arm"
    assert '"mcpu":"cortex-a72"' in sub["target"] and "aarch64-linux-gnu" in sub["target"]
    blob = container.blobs[sub["blob"]]
    assert blob[:4] == b"\x7fELF" and blob[4] == 2  # 64-bit
    assert elf_machine(blob) == EM_AARCH64


@needs_cross
def test_nnc_round_trips_without_a_model(arm_cache):
    directory, token, path = arm_cache
    mtime = os.stat(path).st_mtime_ns
    loaded = nna.Compilation(None, arm_context("ARM_MCPU=cortex-a72;"), cache_token=token, cache_dir=directory)
    loaded.finish()
    assert loaded.loaded_from_cache
    assert loaded.serialize() == cache.read_file(path)
    assert os.stat(path).st_mtime_ns == mtime  # nothing rewritten
    inputs, outputs = loaded.query_inputs_and_outputs()
    assert [t.precision for t in inputs] == [nna.Precision.FLOAT32]
    assert outputs[0].dimensions[1] == builtin_model.CLASSES
    again = nna.Compilation(None, arm_context("ARM_MCPU=cortex-a72;"), cache_buffer=loaded.serialize())
    again.finish()
    assert again.loaded_from_cache


@needs_cross
def test_cache_for_another_board_cpu_is_refused_without_a_model(arm_cache):
    directory, token, _ = arm_cache
    other = nna.Compilation(None, arm_context("ARM_MCPU=cortex-a53;"), cache_token=token, cache_dir=directory)
    with pytest.raises(nna.NNAdapterError, match="built for target"):
        other.finish()


@needs_cross
@pytest.mark.skipif(host_is_aarch64(), reason="on aarch64 the arm module runs here")
def test_running_arm_code_on_this_host_is_a_clear_error(arm_cache):
    directory, token, _ = arm_cache
    loaded = nna.Compilation(None, arm_context("ARM_MCPU=cortex-a72;"), cache_token=token, cache_dir=directory)
    loaded.finish()
    execution = nna.Execution(loaded)
    execution.set_input(0, builtin_model.sample_input(1))
    execution.set_output(0, np.empty((1, builtin_model.CLASSES), "float32"))
    with pytest.raises(nna.NNAdapterError, match="cannot run in this process") as err:
        execution.compute()
    assert "deploy" in str(err.value)


@pytest.mark.skipif(host_is_aarch64(), reason="no cross compiler needed on aarch64")
def test_missing_cross_compiler_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("NNADAPTER_TVM_ARM_CXX", "no-such-aarch64-g++")
    compilation = nna.Compilation(builtin_model.build(), arm_context())
    with pytest.raises(nna.NNAdapterError, match="apt-get install g\\+\\+-aarch64-linux-gnu") as err:
        compilation.finish()
    assert "no-such-aarch64-g++" in str(err.value)


@pytest.mark.skipif(host_is_aarch64(), reason="no cross compiler needed on aarch64")
def test_cross_compiler_follows_the_triple(monkeypatch):
    monkeypatch.setattr(toolchain, "zig_executable", lambda: None)  # zig would link musl too
    compilation = nna.Compilation(builtin_model.build(), arm_context("ARM_MTRIPLE=aarch64-unknown-linux-musl;"))
    if shutil.which("aarch64-unknown-linux-musl-g++"):
        pytest.skip("this host has a musl cross compiler")
    with pytest.raises(nna.NNAdapterError, match="aarch64-unknown-linux-musl-g\\+\\+"):
        compilation.finish()


# -- the aarch64 linker: the system's cross compiler, else zig from the ziglang wheel ----------------
needs_zig = pytest.mark.skipif(not HAS_ZIG, reason="needs the ziglang wheel on a non-aarch64 host: pip install ziglang")
FAKE_ZIG = "/opt/fake/ziglang/zig"


def fake_compiler(directory, name: str, script: str = "exit 0") -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """PATH holding only an empty tmp_path/bin and no $NNADAPTER_TVM_ARM_CXX: a test decides which
    compilers exist (``fake_compiler``) and whether the ziglang wheel does (``toolchain.zig_executable``)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv(toolchain.CXX_ENV, raising=False)
    return bin_dir


def test_system_cross_compiler_is_preferred_to_zig(bare_path, monkeypatch):
    fake_compiler(bare_path, "aarch64-linux-gnu-g++")
    monkeypatch.setattr(toolchain, "zig_executable", lambda: FAKE_ZIG)
    linker = ARM.cross_compiler({})
    assert linker.argv == ("aarch64-linux-gnu-g++",) and linker.origin == "system"


def test_zig_links_when_it_is_the_only_toolchain(bare_path, monkeypatch):
    monkeypatch.setattr(toolchain, "zig_executable", lambda: FAKE_ZIG)
    linker = ARM.cross_compiler({})
    assert linker.argv == (FAKE_ZIG, "cc", "-target", f"aarch64-linux-gnu.{toolchain.ZIG_GLIBC}")
    assert linker.origin == "zig"
    musl = ARM.cross_compiler({"ARM_MTRIPLE": "aarch64-unknown-linux-musl"})
    assert musl.argv[-1] == "aarch64-linux-musl"


def test_no_toolchain_names_both_ways_out(bare_path, monkeypatch):
    monkeypatch.setattr(toolchain, "zig_executable", lambda: None)
    with pytest.raises(nna.NNAdapterError) as err:
        ARM.cross_compiler({})
    message = str(err.value)
    assert err.value.code == nna.ResultCode.DEVICE_INTERNAL_ERROR
    assert "'aarch64-linux-gnu-g++'" in message and "apt-get install g++-aarch64-linux-gnu" in message
    assert "pip install ziglang" in message and toolchain.CXX_ENV in message
    # Through the API: the model compiles, then exporting it fails with the same message.
    if not host_is_aarch64():
        with pytest.raises(nna.NNAdapterError, match="pip install ziglang"):
            nna.Compilation(builtin_model.build_tiny(), arm_context()).finish()


def test_zig_setting_forces_zig(bare_path, monkeypatch):
    fake_compiler(bare_path, "aarch64-linux-gnu-g++")
    monkeypatch.setenv(toolchain.CXX_ENV, "zig")
    monkeypatch.setattr(toolchain, "zig_executable", lambda: FAKE_ZIG)
    assert ARM.cross_compiler({}).argv[:2] == (FAKE_ZIG, "cc")
    monkeypatch.setattr(toolchain, "zig_executable", lambda: None)
    with pytest.raises(nna.NNAdapterError, match=f"{toolchain.CXX_ENV}=zig .*pip install ziglang"):
        ARM.cross_compiler({})


def test_cxx_setting_is_a_command_line(bare_path, tmp_path, monkeypatch):
    fake = fake_compiler(bare_path, "my-cc")
    monkeypatch.setenv(toolchain.CXX_ENV, f"{fake} cc -target aarch64-linux-gnu.2.17")
    linker = ARM.cross_compiler({})
    assert linker.argv == (fake, "cc", "-target", "aarch64-linux-gnu.2.17") and linker.origin == toolchain.CXX_ENV
    spaced = fake_compiler(tmp_path / "my tools", "g++")  # a path with a space is one word
    monkeypatch.setenv(toolchain.CXX_ENV, spaced)
    assert ARM.cross_compiler({}).argv == (spaced,)


@pytest.mark.parametrize(
    "triple, target",
    [
        ("aarch64-linux-gnu", f"aarch64-linux-gnu.{toolchain.ZIG_GLIBC}"),
        ("aarch64-unknown-linux-gnu", f"aarch64-linux-gnu.{toolchain.ZIG_GLIBC}"),
        ("arm64-linux-gnu", f"aarch64-linux-gnu.{toolchain.ZIG_GLIBC}"),
        ("aarch64-unknown-linux-musl", "aarch64-linux-musl"),
        ("aarch64-none-elf", None),  # bare metal: no C library, no zig
        ("aarch64-linux-android", None),
    ],
)
def test_zig_target_of_a_triple(triple, target):
    assert toolchain.zig_target(triple) == target


def test_linker_runs_its_command_as_tvm_links(tmp_path):
    log = tmp_path / "argv"
    fake = fake_compiler(tmp_path, "cc", f'printf "%s\\n" "$@" > {shlex.quote(str(log))}')
    toolchain.Linker((fake, "cc", "-target", "t"))("out.so", ["a.o", "b.o"], options=["-O2"])
    assert log.read_text().split() == ["cc", "-target", "t", "-shared", "-fPIC", "-o", "out.so", "-O2", "a.o", "b.o"]
    broken = fake_compiler(tmp_path, "broken", "echo 'ld: cannot find -lfoo'; exit 1")
    with pytest.raises(RuntimeError, match=r"(?s)cannot find -lfoo.*Command line: .*broken -shared"):
        toolchain.Linker((broken,))("out.so", "a.o")


@needs_zig
def test_zig_links_an_aarch64_module_needing_only_the_c_library(tmp_path, monkeypatch):
    """What a board needs from the zig-linked module: aarch64 code, libc and libm only (no libstdc++ or
    libc++: TVM's objects reference C symbols alone), symbol versions no newer than glibc 2.28."""
    monkeypatch.setenv(toolchain.CXX_ENV, "zig")
    model = log_model()  # its log is logf from libm
    context = arm_context("ARM_MCPU=cortex-a72;")
    nna.Compilation(model, context, cache_token="Z" * 32, cache_dir=tmp_path).finish()
    blob = module_blob(cache.cache_path(tmp_path, "Z" * 32))
    assert elf_machine(blob) == EM_AARCH64
    assert b"libm.so.6" in blob and b"libstdc++" not in blob and b"libc++" not in blob
    versions = {tuple(map(int, v)) for v in re.findall(rb"GLIBC_(\d+)\.(\d+)", blob)}
    assert versions and max(versions) <= (2, 28), versions
    if shutil.which("readelf"):
        (tmp_path / "module.so").write_bytes(blob)
        dynamic = subprocess.run(["readelf", "-d", str(tmp_path / "module.so")], capture_output=True, text=True)
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic.stdout))
        assert "libm.so.6" in needed and needed <= {"libc.so.6", "libm.so.6"}, dynamic.stdout + dynamic.stderr


@needs_zig
def test_opencl_aarch64_host_links_with_zig(tmp_path, monkeypatch):
    monkeypatch.setenv(toolchain.CXX_ENV, "zig")
    context = nna.Context([nna.Device.acquire("opencl")], "OPENCL_HOST=aarch64;")
    nna.Compilation(softmax_model(), context, cache_token="C" * 32, cache_dir=tmp_path).finish()
    blob = module_blob(cache.cache_path(tmp_path, "C" * 32))
    assert elf_machine(blob) == EM_AARCH64 and b"__kernel" in blob  # host code for the board, OpenCL C inside


def log_model() -> nna.Model:
    """y = log(x) with x: [N, 7] (libm's logf: the CPU lowering has its own vectorized exp, not log)."""
    model = nna.Model()
    x = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    y = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    model.add_operation(nna.OperationType.LOG, [x], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model
