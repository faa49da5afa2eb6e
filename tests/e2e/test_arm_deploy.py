"""The board runner (``nnadapter_tvm.tools.remote``, run here on llvm) and ``deploy``: its arguments and how
it explains ssh failures. Runs anywhere, no board needed; ``deploy`` on a board is tested in
test_arm_board.py.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
from armutil import arm_context, free_port

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.tools import builtin_model, deploy, remote
from nnadapter_tvm.tools.cli import main


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
