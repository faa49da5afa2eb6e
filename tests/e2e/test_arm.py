"""The ``arm`` device, the board runner and ``deploy``.

Everything but the last section runs anywhere (the cross-compiling tests need Debian's
``g++-aarch64-linux-gnu`` or the ``ziglang`` wheel on non-aarch64 hosts).  The ``slow`` end-to-end
tests deploy to a real or emulated board described by ``$NNADAPTER_TVM_BOARD`` (a ``board.env`` as
written by ``scripts/make_arm_board.sh``) and skip when it is not set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from oputil import conv2d_ref

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.targets import DRIVERS, toolchain
from nnadapter_tvm.targets.arm import ArmDriver, elf_machine, host_is_aarch64
from nnadapter_tvm.tools import builtin_model, deploy, remote
from nnadapter_tvm.tools.cli import main

EM_AARCH64 = 183
ARM = DRIVERS["arm"]
HAS_ZIG = not host_is_aarch64() and toolchain.zig_executable() is not None
CAN_EXPORT = host_is_aarch64() or shutil.which("aarch64-linux-gnu-g++") is not None or HAS_ZIG
NO_CROSS = "needs an aarch64 cross compiler: apt-get install g++-aarch64-linux-gnu, or pip install ziglang"
needs_cross = pytest.mark.skipif(not CAN_EXPORT, reason=NO_CROSS)


def arm_context(properties: str = "") -> nna.Context:
    return nna.Context([nna.Device.acquire("arm")], properties)


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def module_blob(path) -> bytes:
    container = cache.unpack(cache.read_file(path), str(path))
    (sub,) = container.meta["subgraphs"]
    return bytes(container.blobs[sub["blob"]])


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


def softmax_model() -> nna.Model:
    """y = softmax(x, axis=1) with x: [N, 7]; reference ``softmax_reference``."""
    model = nna.Model()
    x = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    axis = model.add_operand(nna.OperandType(nna.Precision.INT32, [1]))
    model.set_operand_value(axis, np.array([1], "int32"))
    y = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    model.add_operation(nna.OperationType.SOFTMAX, [x, axis], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def log_model() -> nna.Model:
    """y = log(x) with x: [N, 7] (libm's logf: the CPU lowering has its own vectorized exp, not log)."""
    model = nna.Model()
    x = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    y = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [nna.UNKNOWN, 7]))
    model.add_operation(nna.OperationType.LOG, [x], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype("float64") - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype("float32")


# -- the board runner (runs here on llvm) ------------------------------------------------------
@pytest.fixture(scope="module")
def llvm_cache(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llvm-cache")
    model = builtin_model.build()
    context = nna.Context([nna.Device.acquire("llvm")])
    token = model_token(model, context)
    nna.Compilation(model, context, cache_token=token, cache_dir=directory).finish()
    return directory, token, cache.cache_path(directory, token)


def run_remote(*args: str, stdin: bytes = b"") -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "nnadapter_tvm.tools.remote", *args], input=stdin, capture_output=True, check=False
    )
    result = deploy._parse_result(proc.stdout.decode())
    assert result is not None, proc.stderr.decode()
    return proc.returncode, result


def test_remote_run_loads_from_the_cache_and_reports(llvm_cache):
    directory, token, _ = llvm_cache
    x = builtin_model.sample_input(2)
    rc, result = run_remote("run", "--dir", str(directory), "--token", token, "--iterations", "3",
                            stdin=remote.encode_inputs([x]))  # fmt: skip
    assert rc == 0, result
    assert result["devices"] == ["llvm"] and result["latency_ms"]["iterations"] == 3
    (y,) = [remote.decode_array(s) for s in result["outputs"]]
    assert y.shape == (2, builtin_model.CLASSES)
    np.testing.assert_allclose(y, deploy.host_reference(builtin_model.build(), [x], str(directory))[0], rtol=1e-6)


def test_remote_run_without_the_file_is_an_error(tmp_path):
    rc, result = run_remote("run", "--dir", str(tmp_path), "--token", "a" * 32)
    assert rc == remote.ERROR_EXIT and "push it first" in result["error"]


def test_remote_push_is_atomic_and_checked(llvm_cache, tmp_path):
    _, token, path = llvm_cache
    data = cache.read_file(path)
    digest = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "board"
    base = ["push", "--dir", str(dest), "--token", token, "--size", str(len(data)), "--sha256", digest]
    rc, result = run_remote(*base, stdin=data[:1000])
    assert rc == remote.ERROR_EXIT and "transfer was cut" in result["error"]
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    rc, result = run_remote(*base, stdin=bytes(corrupt))
    assert rc == remote.ERROR_EXIT and "SHA-256" in result["error"]
    garbage = b"x" * len(data)
    rc, result = run_remote(*base[:-1], hashlib.sha256(garbage).hexdigest(), stdin=garbage)
    assert rc == remote.ERROR_EXIT and "not an nnadapter-tvm cache" in result["error"]
    assert not dest.exists() or not os.listdir(dest)
    rc, result = run_remote(*base, stdin=data)
    assert rc == 0 and os.listdir(dest) == [token + ".nnc"]
    assert cache.read_file(str(dest / (token + ".nnc"))) == data
    rc, result = run_remote("push", "--dir", str(dest), "--token", "../../etc/x", "--size", "1", "--sha256", "0")
    assert rc == remote.ERROR_EXIT and "32 characters" in result["error"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount a small tmpfs")
def test_remote_push_on_a_full_disk_leaves_nothing(llvm_cache, tmp_path):
    _, token, path = llvm_cache
    data = cache.read_file(path)
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        args = ["push", "--dir", str(full), "--token", token, "--size", str(len(data))]
        rc, result = run_remote(*args, "--sha256", hashlib.sha256(data).hexdigest(), stdin=data)
        assert rc == remote.ERROR_EXIT
        assert "No space left on device" in result["error"] and "no partial file" in result["error"]
        assert os.listdir(full) == []
    finally:
        subprocess.run(["umount", str(full)], check=False)


def test_properties_text_round_trips():
    props = arm_context("ARM_MCPU=cortex-a72;ARM_MATTR=+neon,+crc;TVM_OPT_LEVEL=2;").codegen_properties()
    text = remote.properties_text({k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in props.items()})
    assert arm_context(text).codegen_properties() == props


# -- deploy: arguments and ssh failures ---------------------------------------------------------
def test_remote_path_quoting():
    assert deploy.remote_path_expr("~/.cache/nnadapter-tvm") == '"$HOME"/.cache/nnadapter-tvm'
    assert deploy.remote_path_expr("/data/my models") == "'/data/my models'"
    assert deploy.remote_path_expr("~/x; rm -rf /") == "\"$HOME\"/'x; rm -rf /'"
    assert shlex.split(deploy.remote_path_expr("/a'b")) == ["/a'b"]


def test_ssh_command_line_is_non_interactive(tmp_path):
    key = tmp_path / "key"
    key.write_text("not a key")
    known = tmp_path / "known_hosts"
    known.write_text("")
    board = deploy.Board("me@board", port=2200, identity=str(key), known_hosts=str(known))
    argv = board.ssh_argv("true")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "me@board", "true"]
    joined = " ".join(argv)
    for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", f"UserKnownHostsFile={known}", "-p 2200"):
        assert option in joined
    # Without a known_hosts file the user's is used, still strictly; first-use trust only when asked.
    assert "StrictHostKeyChecking=yes" in " ".join(deploy.Board("me@board").ssh_argv("true"))
    tofu = deploy.Board("me@board", accept_new_host_key=True).ssh_argv("true")
    assert "StrictHostKeyChecking=accept-new" in " ".join(tofu)


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "me@bo ard", ""])
def test_bad_host_is_rejected(host):
    with pytest.raises(nna.NNAdapterError, match="is not user@host"):
        deploy.Board(host)


@pytest.mark.skipif(not shutil.which("ssh"), reason="needs the ssh client")
def test_deploy_refused_port_is_one_clear_line(tmp_path, capsys):
    port = free_port()
    rc = main(["deploy", "--host", "nobody@127.0.0.1", "--port", str(port), "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert f"cannot reach 127.0.0.1 port {port}: connection refused" in err
    assert os.listdir(tmp_path) == []  # nothing compiled before the board answered


def test_deploy_missing_key_is_a_clear_error(tmp_path, capsys):
    rc = main(["deploy", "--host", "me@127.0.0.1", "--identity", str(tmp_path / "nope")])
    assert rc == 2 and "--identity" in capsys.readouterr().err


def test_deploy_explains_ssh_failures():
    board = deploy.Board("me@board", port=2222, identity=None)
    cases = {
        "ssh: connect to host board port 2222: Connection refused": "connection refused",
        "me@board: Permission denied (publickey).": "refused your ssh keys (permission denied)",
        "Host key verification failed.": "host key",
        "ssh: Could not resolve hostname board: Name or service not known": "cannot resolve",
        "ssh: connect to host board port 2222: Connection timed out": "cannot reach board port 2222",
        'Load key "/k": invalid format\nme@board: Permission denied (publickey).': "not a private key",
        "kex_exchange_identification: read: Connection reset by peer": "failed: kex_exchange",
    }
    for stderr, expected in cases.items():
        assert expected in board._explain_ssh_failure(stderr), stderr


def test_deploy_model_argument(tmp_path, capsys):
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"")
    with pytest.raises(nna.NNAdapterError, match=r"not supported by deploy yet|ONNX"):
        deploy.load_model(str(onnx_file))
    with pytest.raises(nna.NNAdapterError, match=r"'builtin' or an \.onnx file"):
        deploy.load_model("resnet")
    assert main(["deploy", "resnet", "--host", "me@127.0.0.1", "--port", "1"]) == 2
    assert "'builtin' or an .onnx file" in capsys.readouterr().err


def test_compare_tolerance():
    a = np.array([[0.5, 0.25]], "float32")
    assert deploy.compare([a], [a + 1e-7]) < 1e-6
    with pytest.raises(nna.NNAdapterError, match="differs from the host's llvm result"):
        deploy.compare([a], [a + 1e-2])
    with pytest.raises(nna.NNAdapterError, match="board float32"):
        deploy.compare([a], [a[0]])


# -- end to end on a board (slow) ---------------------------------------------------------------
def board_facts() -> dict[str, str]:
    path = os.environ.get("NNADAPTER_TVM_BOARD")
    if not path:
        pytest.skip(
            "no board: build the emulated one with `sudo scripts/make_arm_board.sh` and set "
            "NNADAPTER_TVM_BOARD=.board/board.env (or point it at a board.env for a real board)"
        )
    facts = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                facts[key] = value
    return facts


def deploy_argv(facts: dict[str, str], *extra: str) -> list[str]:
    argv = ["deploy", "builtin", "--host", facts["BOARD_HOST"], "--port", facts["BOARD_PORT"]]
    argv += ["--identity", facts["BOARD_KEY"]]
    if facts.get("BOARD_KNOWN_HOSTS"):
        argv += ["--known-hosts", facts["BOARD_KNOWN_HOSTS"]]
    if facts.get("BOARD_PYTHON"):
        argv += ["--remote-python", facts["BOARD_PYTHON"]]
    return [*argv, *extra]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnadapter_tvm.tools.cli", *argv], capture_output=True, text=True)


@pytest.fixture(scope="module")
def board():
    return board_facts()


@pytest.mark.slow
@needs_cross
def test_e2e_deploy_and_verify_on_the_board(board, tmp_path):
    remote_dir = f"~/nnadapter-e2e-{os.getpid()}"
    try:
        deploy_and_verify(board, tmp_path, remote_dir)
    finally:
        with contextlib.suppress(Exception):
            ssh_board(board, f"rm -rf {deploy.remote_path_expr(remote_dir)}")


@pytest.mark.slow
@pytest.mark.parametrize("linker", ["system", "zig"])
def test_e2e_module_linked_by_each_toolchain_runs_on_the_board(board, tmp_path, monkeypatch, linker):
    """Modules linked by Debian's g++ and by the ziglang wheel's zig load and run on the board: the
    softmax (its exp is libm's expf, bound when the board loads the module) and the tiny model against
    numpy, the CNN against this host's llvm result (as ``deploy --verify``)."""
    if host_is_aarch64():
        pytest.skip("an aarch64 host links natively")
    if linker == "system":
        if not shutil.which("aarch64-linux-gnu-g++"):
            pytest.skip("no aarch64-linux-gnu-g++ here (apt-get install g++-aarch64-linux-gnu)")
        monkeypatch.setenv(toolchain.CXX_ENV, "aarch64-linux-gnu-g++")
    else:
        if not HAS_ZIG:
            pytest.skip("no ziglang wheel here (pip install ziglang)")
        monkeypatch.setenv(toolchain.CXX_ENV, "zig")
    remote_dir = f"~/nna-{linker}-{os.getpid()}"
    b = board_client(board, remote_dir)
    rng = np.random.default_rng(11)
    cases = [
        (softmax_model(), [rng.normal(0, 3, (4, 7)).astype("float32")], softmax_reference),
        (builtin_model.build_tiny(), [rng.normal(0, 2, (5, 3)).astype("float32")], builtin_model.tiny_reference),
        (builtin_model.build(), [builtin_model.sample_input(2)], None),
    ]
    try:
        info = deploy.preflight(b)
        for model, inputs, reference in cases:
            _, token, path = deploy.compile_for_arm(model, "ARM_MCPU=cortex-a72;", str(tmp_path))
            blob = module_blob(path)
            assert elf_machine(blob) == EM_AARCH64
            # The .comment section names who linked it: LLD for zig, GCC's crt files for g++.
            assert (b"Linker: LLD" if linker == "zig" else b"GCC: (") in blob
            deploy.push(b, info, token, cache.read_file(path))
            outputs, report = deploy.run_on_board(b, info, token, inputs, iterations=1, warmup=0)
            assert report["latency_ms"]
            if reference is not None:
                np.testing.assert_allclose(outputs[0], reference(*inputs), rtol=1e-5, atol=1e-6)
            else:
                deploy.compare(outputs, deploy.host_reference(model, inputs, str(tmp_path)))
    finally:
        with contextlib.suppress(Exception):
            ssh_board(board, f"rm -rf {deploy.remote_path_expr(remote_dir)}")


def winograd_model():
    """Two 3x3 convolutions large enough for Winograd F(4x4, 3x3) (``targets/cpu/winograd.py``), batch 2,
    sizes that leave partial tiles, asymmetric pads; and its float64 numpy reference."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(12)
    w1 = (rng.standard_normal((64, 64, 3, 3)) / 24).astype("float32")
    b1 = rng.standard_normal(64).astype("float32")
    w2 = (rng.standard_normal((32, 64, 3, 3)) / 24).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[0, 1, 1, 0]),
    ]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")]
    graph = helper.make_graph(
        nodes,
        "winograd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 23, 30])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )

    def reference(x):
        # oputil.conv2d_ref's pads: top, bottom, left, right; np.maximum keeps NaN, as Relu does.
        r1 = np.maximum(conv2d_ref(x, w1, b1, [1, 1, 1, 1], [1, 1], [1, 1], 1), 0)
        return conv2d_ref(r1, w2, None, [0, 1, 1, 0], [1, 1], [1, 1], 1)

    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), reference


@pytest.mark.slow
@needs_cross
def test_e2e_winograd_runs_on_the_board(board, tmp_path):
    """Winograd kernels built for NEON (4 lanes: 8-channel blocks) run on the board: the numbers of a
    float64 numpy reference, and a NaN pixel reaching exactly the outputs the direct convolutions give it."""
    from nnadapter_tvm.frontends.onnx import import_model

    onnx_model, reference = winograd_model()
    model = import_model(onnx_model)
    x = np.random.default_rng(13).standard_normal((2, 64, 23, 30)).astype("float32")
    x[1, 7, 11, 13] = np.nan
    remote_dir = f"~/nna-winograd-{os.getpid()}"
    b = board_client(board, remote_dir)
    try:
        info = deploy.preflight(b)
        _, token, path = deploy.compile_for_arm(model, "ARM_MCPU=cortex-a72;", str(tmp_path))
        assert b"nna_winograd_conv2d_nhwc" in cache.read_file(path)
        deploy.push(b, info, token, cache.read_file(path))
        outputs, _ = deploy.run_on_board(b, info, token, [x], iterations=1, warmup=0)
        want = reference(x)
        np.testing.assert_array_equal(np.isnan(outputs[0]), np.isnan(want))
        finite = np.isfinite(want)
        assert (~finite).sum() == 5 * 5 * 32  # one pixel through two 3x3 convolutions, every output channel
        np.testing.assert_allclose(outputs[0][finite], want[finite], rtol=0, atol=2e-5 * np.abs(want[finite]).max())
    finally:
        with contextlib.suppress(Exception):
            ssh_board(board, f"rm -rf {deploy.remote_path_expr(remote_dir)}")


def deploy_and_verify(board: dict[str, str], tmp_path, remote_dir: str) -> None:
    argv = deploy_argv(board, "--cache-dir", str(tmp_path), "--remote-dir", remote_dir)
    first = cli(*argv, "--verify", "--properties", "ARM_MCPU=cortex-a72;", "--iterations", "3")
    print(first.stdout, first.stderr)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    token = re.search(r"token: ([0-9a-f]{32})", out).group(1)
    assert "compiled in" in out and "aarch64" in out
    assert re.search(r"verify: 1 output\(s\) float32\[1, 10\] match the host's llvm result", out)
    assert re.search(r"board latency: median [\d.]+ ms", out)
    assert sorted(os.listdir(tmp_path)) == sorted([f"{token}.nnc", f"{model_token_llvm()}.nnc"])
    # Again: the local cache is reused and the board gets the same file, replacing the first.
    second = cli(*argv, "--properties", "ARM_MCPU=cortex-a72;")
    assert second.returncode == 0, second.stderr
    assert "found in the cache" in second.stdout and f"token: {token}" in second.stdout
    listing = ssh_board(board, f"ls -a {deploy.remote_path_expr(remote_dir)}")
    assert sorted(listing.split()) == [".", "..", f"{token}.nnc"]  # no temporary file left


def model_token_llvm() -> str:
    return model_token(builtin_model.build(), nna.Context([nna.Device.acquire("llvm")]))


def board_client(facts: dict[str, str], remote_dir: str = deploy.DEFAULT_REMOTE_DIR) -> deploy.Board:
    """The board of ``facts`` (``board_facts``), its cache in ``remote_dir``."""
    return deploy.Board(
        facts["BOARD_HOST"],
        port=int(facts["BOARD_PORT"]),
        identity=facts["BOARD_KEY"],
        known_hosts=facts.get("BOARD_KNOWN_HOSTS") or None,
        remote_dir=remote_dir,
        python=facts.get("BOARD_PYTHON") or None,
    )


def ssh_board(facts: dict[str, str], command: str) -> str:
    proc = board_client(facts).run(command)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


@pytest.mark.slow
def test_e2e_bad_key_is_refused(board, tmp_path):
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    argv = deploy_argv(board, "--cache-dir", str(tmp_path / "cache"))
    argv[argv.index("--identity") + 1] = str(key)
    proc = cli(*argv)
    assert proc.returncode == 2
    assert "refused the key" in proc.stderr and "permission denied" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_e2e_unknown_host_key_is_refused(board, tmp_path):
    if not board.get("BOARD_KNOWN_HOSTS"):
        pytest.skip("the board facts name no known_hosts file")
    other = tmp_path / "known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    pub = (tmp_path / "k.pub").read_text().split()[:2]
    other.write_text(f"[127.0.0.1]:{board['BOARD_PORT']} {' '.join(pub)}\n")
    argv = deploy_argv(board, "--cache-dir", str(tmp_path / "cache"))
    argv[argv.index("--known-hosts") + 1] = str(other)
    proc = cli(*argv)
    assert proc.returncode == 2 and "host key" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_e2e_board_without_python_or_package(board, tmp_path):
    argv = deploy_argv(board, "--cache-dir", str(tmp_path))
    at = argv.index("--remote-python") + 1 if "--remote-python" in argv else None
    argv = [*argv[: at - 1], *argv[at + 1 :]] if at else argv
    proc = cli(*argv, "--remote-python", "/no/such/python3")
    assert proc.returncode == 2 and "no Python on" in proc.stderr, proc.stderr
    proc = cli(*argv, "--remote-python", "/usr/bin/python3")  # the board's system Python: no nnadapter_tvm
    assert proc.returncode == 2 and "cannot run nnadapter_tvm" in proc.stderr, proc.stderr
    assert "No module named" in proc.stderr


@pytest.mark.slow
@needs_cross
def test_e2e_full_disk_leaves_no_partial_file(board, tmp_path):
    root = board.get("BOARD_ROOT")
    if not root or os.geteuid() != 0:
        pytest.skip("needs the emulated board's root and root here to mount a small file system in it")
    full = os.path.join(root, "home", "board", f"full-{os.getpid()}")
    os.makedirs(full)
    try:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0777", "tmpfs", full], check=False).returncode:
            pytest.skip("cannot mount a tmpfs here")
        remote_dir = "~/" + os.path.basename(full)
        proc = cli(*deploy_argv(board, "--cache-dir", str(tmp_path), "--remote-dir", remote_dir))
        assert proc.returncode == 2 and "not enough space" in proc.stderr, proc.stderr
        # Past the free-space check (as if it raced with another writer): the board itself runs out.
        facts = deploy_argv(board)
        b = deploy.Board(
            facts[facts.index("--host") + 1],
            port=int(board["BOARD_PORT"]),
            identity=board["BOARD_KEY"],
            known_hosts=board.get("BOARD_KNOWN_HOSTS") or None,
            remote_dir=remote_dir,
            python=board.get("BOARD_PYTHON") or None,
        )
        info = deploy.preflight(b)
        info.free_bytes = 1 << 40
        _, token, path = deploy.compile_for_arm(builtin_model.build(), "", str(tmp_path))
        with pytest.raises(nna.NNAdapterError, match=r"No space left on device.*no partial file"):
            deploy.push(b, info, token, cache.read_file(path))
        assert os.listdir(full) == []
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["umount", full], check=False)
            os.rmdir(full)


def wait_for_rpc_key(tracker_port: int, key: str, seconds: float, watched: dict) -> None:
    """Poll the tracker until a server has registered ``key`` (the board imports TVM under emulation: slow);
    fail at once if the tracker or the server (``watched``: process -> its log file) has exited."""
    query = [sys.executable, "-m", "tvm.exec.query_rpc_tracker", "--host=127.0.0.1", f"--port={tracker_port}"]
    deadline = time.monotonic() + seconds
    out = ""
    while time.monotonic() < deadline:
        for proc, log in watched.items():
            if proc.poll() is not None:
                with open(log, errors="replace") as f:
                    pytest.fail(f"{proc.args[:4]} exited with {proc.returncode}:\n{f.read()[-2000:]}")
        out = subprocess.run(query, capture_output=True, text=True).stdout
        if re.search(rf"^\s*{key}\s+1\b", out, re.M):
            return
        time.sleep(5)
    pytest.fail(f"the board's RPC server did not register with the tracker within {seconds:.0f} s:\n{out}")


@pytest.mark.slow
@needs_cross
def test_e2e_tune_for_the_board_over_rpc(board, tmp_path):
    """``tune --device arm --rpc``: candidates are cross-linked here and measured on the board through a TVM
    RPC tracker, the selection keeps what beats the default schedules there, and the tuned model deploys
    and matches the host. The emulated board shares this machine's network, so it reaches the tracker
    directly; a real one reaches it through the ssh forwards of docs/performance.md."""
    tracker_port, server_port = free_port(), free_port()
    tracker = subprocess.Popen(
        [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host=127.0.0.1", f"--port={tracker_port}",
         f"--port-end={tracker_port + 1}"],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "tracker.log", "wb"),  # noqa: SIM115 (the process holds it)
    )  # fmt: skip
    b = deploy.Board(
        board["BOARD_HOST"],
        port=int(board["BOARD_PORT"]),
        identity=board["BOARD_KEY"],
        known_hosts=board.get("BOARD_KNOWN_HOSTS") or None,
    )
    python = board.get("BOARD_PYTHON") or "python3"
    # Killing the ssh client does not stop the remote server (no tty, no SIGHUP) and a minbase board has
    # no pkill: the server records its pid for the cleanup, and `timeout` bounds it whatever happens.
    pidfile = f"~/nna-rpc-{os.getpid()}.pid"
    serve = (
        f"echo $$ > {pidfile}; exec timeout 1800 {python} -m tvm.exec.rpc_server "
        f"--tracker=127.0.0.1:{tracker_port} --key=nna-test --host=127.0.0.1 --port={server_port} "
        f"--port-end={server_port + 1}"
    )
    server = subprocess.Popen(
        b.ssh_argv(serve),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "server.log", "wb"),  # noqa: SIM115
    )
    work = str(tmp_path / "db")
    try:
        logs = {tracker: tmp_path / "tracker.log", server: tmp_path / "server.log"}
        wait_for_rpc_key(tracker_port, "nna-test", seconds=300, watched=logs)
        rpc = f"127.0.0.1:{tracker_port}:nna-test"
        props = "ARM_MCPU=cortex-a72;"
        tuned = cli("tune", "builtin", "--device", "arm", "--rpc", rpc, "--trials", "8", "--work-dir", work,
                    "--properties", props, "--num-cores", "1")  # fmt: skip
        print(tuned.stdout, tuned.stderr)
        assert tuned.returncode == 0, tuned.stderr
        assert re.search(r"(\d+) of (\d+) tuned kernels beat their default schedule", tuned.stdout)
        with open(os.path.join(work, "database_tuning_record.json")) as f:
            measured = [json.loads(line)[1][1] for line in f if line.strip()]
        assert any(secs and max(secs) < 1e9 for secs in measured), "no candidate ran on the board"
        argv = deploy_argv(board, "--cache-dir", str(tmp_path / "cache"), "--remote-dir", f"~/nna-tune-{os.getpid()}")
        deployed = cli(*argv, "--verify", "--properties", f"{props}TUNING_DATABASE={work};", "--iterations", "1")
        print(deployed.stdout, deployed.stderr)
        assert deployed.returncode == 0, deployed.stderr
        assert re.search(r"verify: 1 output\(s\) float32\[1, 10\] match the host's llvm result", deployed.stdout)
    finally:
        server.terminate()
        tracker.terminate()
        with contextlib.suppress(Exception):
            ssh_board(board, f"kill $(cat {pidfile}) 2>/dev/null; rm -rf {pidfile} ~/nna-tune-*")


@pytest.mark.slow
@needs_cross
@pytest.mark.parametrize("mattr", ["+neon,+dotprod", "+neon"], ids=["dotprod", "neon"])
def test_e2e_int8_kernels_run_on_the_board(board, tmp_path, mattr):
    """A QDQ model (uint8 activations: a 3x3 and a 1x1 convolution, a Gemm) built for the board: with
    ``+dotprod`` its integer kernels run on sdot (the uint8 input shifted to int8 and corrected), without it
    on the float route; both within one quantization step of onnxruntime's int8 on this host."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from nnadapter_tvm.frontends.onnx import import_model

    rng = np.random.default_rng(14)
    s_x, s_y = 0.02, 0.05
    inits = [
        numpy_helper.from_array(np.array(s_x, "float32"), "sx"),
        numpy_helper.from_array(np.array(128, "uint8"), "zx"),
        numpy_helper.from_array(np.array(s_y, "float32"), "sy"),
        numpy_helper.from_array(np.array(3, "uint8"), "zy"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x0"]),
    ]
    last = "x0"
    for i, (shape, op) in enumerate([((32, 16, 3, 3), "Conv"), ((24, 32, 1, 1), "Conv"), ((10, 24 * 6 * 6), "Gemm")]):
        w = rng.integers(-127, 128, shape).astype("int8")
        scale = rng.uniform(0.002, 0.01, shape[0]).astype("float32")
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(scale, f"ws{i}"),
            numpy_helper.from_array(np.zeros(shape[0], "int8"), f"wz{i}"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wd{i}"], axis=0))
        if op == "Gemm":
            nodes.append(helper.make_node("Flatten", [last], [f"f{i}"]))
            nodes.append(helper.make_node("Gemm", [f"f{i}", f"wd{i}"], [f"p{i}"], transB=1))
        else:
            nodes.append(helper.make_node("Conv", [last, f"wd{i}"], [f"p{i}"], pads=[1, 1, 1, 1] if i == 0 else None))
        nodes += [
            helper.make_node("Relu", [f"p{i}"], [f"r{i}"]),
            helper.make_node("QuantizeLinear", [f"r{i}", "sy", "zy"], [f"q{i}"]),
            helper.make_node("DequantizeLinear", [f"q{i}", "sy", "zy"], [f"d{i}"]),
        ]
        last = f"d{i}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.uniform(-2.5, 2.5, (1, 16, 6, 6)).astype("float32")
    (want,) = ort.InferenceSession(onnx_model.SerializeToString()).run(None, {"x": x})
    remote_dir = f"~/nna-int8-{os.getpid()}"
    b = board_client(board, remote_dir)
    try:
        info = deploy.preflight(b)
        _, token, path = deploy.compile_for_arm(import_model(onnx_model), f"ARM_MATTR={mattr};", str(tmp_path))
        assert (b"nna_conv2d_nhwc_int8" in cache.read_file(path)) == ("dotprod" in mattr)
        deploy.push(b, info, token, cache.read_file(path))
        outputs, _ = deploy.run_on_board(b, info, token, [x], iterations=1, warmup=0)
        # One step where a value lies within float32 rounding of a tie; three layers may carry it on.
        assert np.abs(outputs[0] - want).max() <= 3 * s_y + 1e-6
        assert np.mean(np.abs(outputs[0] - want) > s_y / 2) < 0.1
    finally:
        with contextlib.suppress(Exception):
            ssh_board(board, f"rm -rf {deploy.remote_path_expr(remote_dir)}")
