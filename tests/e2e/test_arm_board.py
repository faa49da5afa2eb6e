"""End to end on an aarch64 board (slow): ``deploy`` and ``deploy --verify``, modules linked by each
toolchain, Winograd and int8 kernels, ssh refusals, a full disk, and ``tune --device arm --rpc``.

The tests deploy to a real or emulated board described by ``$NNADAPTER_TVM_BOARD`` (a ``board.env`` as
written by ``scripts/make_arm_board.sh``) and skip when it is not set: build and start the emulated one with
``sudo scripts/make_arm_board.sh`` and set ``NNADAPTER_TVM_BOARD=.board/board.env`` (or point it at a
``board.env`` for a real board). Building for the board needs Debian's ``g++-aarch64-linux-gnu`` or the
``ziglang`` wheel on non-aarch64 hosts. What runs without a board is in test_arm_build.py and
test_arm_deploy.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from armutil import (
    EM_AARCH64,
    HAS_ZIG,
    free_port,
    module_blob,
    needs_cross,
    softmax_model,
    softmax_reference,
)
from oputil import conv2d_ref

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.targets import toolchain
from nnadapter_tvm.targets.arm import elf_machine, host_is_aarch64
from nnadapter_tvm.tools import builtin_model, deploy


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
