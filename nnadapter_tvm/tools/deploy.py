"""``nnadapter-tvm deploy``: compile for ``arm`` (or reuse the cache), push the ``.nnc`` to a board
over ssh and, with ``verify``, run it there and compare with this host's ``llvm`` result.

Transport: the system ``ssh`` client, non-interactive (``BatchMode=yes``: keys only, never a
password prompt; nothing secret is ever put on a command line).  Host keys: with a
``known_hosts`` file the board's key must already be in it (``StrictHostKeyChecking=yes``; the
emulated board writes one); without, the user's own ``~/.ssh/known_hosts`` is used, still
strictly: a board never seen before is refused unless ``accept_new_host_key`` (the CLI's
``--accept-new-host-key``) says to trust it on first use (``StrictHostKeyChecking=accept-new``);
a board whose key changed is always refused.

On the board, ``python -m nnadapter_tvm.tools.remote`` does the work (see that module): the file is
streamed over ssh's stdin, checked (length, SHA-256, container) and written atomically, so a
cut connection or a full disk leaves no partial file; the runner loads it from the cache with
no model, compiles nothing and reports its outputs and latency.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence

import numpy as np

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.tools import builtin_model, remote
from nnadapter_tvm.types import NNAdapterError, Precision, ResultCode

#: Where the board runner keeps models (``~`` is the board user's home).
DEFAULT_REMOTE_DIR = "~/.cache/nnadapter-tvm"
#: The Python that ``scripts/make_arm_board.sh`` sets up; tried before ``python3``.
BOARD_PYTHON = "/opt/nnadapter-tvm/venv/bin/python"
#: Board vs. host tolerance: aarch64 and x86 LLVM code generation differ in FP contraction,
#: vectorized reductions and exp/log approximations.
RTOL, ATOL = 1e-4, 1e-5
#: Free space wanted on the board beyond the file itself.
SPACE_MARGIN = 1 << 20


class DeployError(NNAdapterError):
    """A deploy failure with a one-line message saying what went wrong and what to do."""

    def __init__(self, message: str, code: ResultCode = ResultCode.DEVICE_INTERNAL_ERROR):
        super().__init__(code, message)


# -- ssh ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Board:
    """How to reach a board over ssh and where things live on it."""

    host: str
    port: int | None = None
    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False  # trust a board seen for the first time (TOFU), only when asked
    remote_dir: str = DEFAULT_REMOTE_DIR
    python: str | None = None  # None: BOARD_PYTHON, then python3
    connect_timeout: int = 20
    command_timeout: float = 600.0

    def __post_init__(self) -> None:
        if not self.host or self.host.startswith("-") or any(c.isspace() for c in self.host):
            raise DeployError(f"--host {self.host!r} is not user@host", ResultCode.INVALID_PARAMETER)
        if self.port is not None and not 0 < int(self.port) < 65536:
            raise DeployError(f"--port {self.port} is not a TCP port", ResultCode.INVALID_PARAMETER)
        for what, path in (("--identity", self.identity), ("--known-hosts", self.known_hosts)):
            if path is not None and not os.path.isfile(path):
                raise DeployError(f"{what} {path}: no such file", ResultCode.INVALID_PARAMETER)
        if self.identity is not None:
            try:
                with open(self.identity, "rb"):
                    pass
            except OSError as err:
                raise DeployError(f"--identity {self.identity}: {err.strerror}", ResultCode.INVALID_PARAMETER) from None

    @property
    def where(self) -> str:
        return f"{self.host}" + (f" port {self.port}" if self.port else "")

    def ssh_argv(self, remote_command: str) -> list[str]:
        """The ssh command line; the remote command is one argument, already shell-quoted."""
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}"]
        argv += ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
        if self.port:
            argv += ["-p", str(int(self.port))]
        if self.identity:
            argv += ["-i", self.identity, "-o", "IdentitiesOnly=yes"]
        argv += ["-o", "StrictHostKeyChecking=" + ("accept-new" if self.accept_new_host_key else "yes")]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        return [*argv, "--", self.host, remote_command]

    def run(self, remote_command: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        """Run a command on the board; ssh-level failures (exit 255) raise a ``DeployError``."""
        if shutil.which("ssh") is None:
            raise DeployError("the ssh client is not installed here (Debian: apt-get install openssh-client)")
        try:
            proc = subprocess.run(
                self.ssh_argv(remote_command),
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=self.command_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DeployError(
                f"{self.where}: no answer within {self.command_timeout:.0f} s", ResultCode.DEVICE_NOT_FOUND
            ) from None
        if proc.returncode == 255:
            raise DeployError(
                self._explain_ssh_failure(proc.stderr.decode(errors="replace")), ResultCode.DEVICE_NOT_FOUND
            )
        return proc

    def _explain_ssh_failure(self, stderr: str) -> str:
        text = stderr.lower()
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("Warning: Permanently")]
        last = lines[-1] if lines else "ssh exited with status 255"
        port = self.port or 22
        host = self.host.rpartition("@")[2]
        if "connection refused" in text:
            return f"cannot reach {host} port {port}: connection refused (is sshd running there? --port?)"
        if "could not resolve hostname" in text or "name or service not known" in text:
            return f"cannot resolve the host name {host!r}"
        if "timed out" in text or "no route to host" in text or "network is unreachable" in text:
            return f"cannot reach {host} port {port}: {last}"
        if "unprotected private key" in text or "bad permissions" in text:
            return f"ssh ignores the key {self.identity}: its permissions are too open (chmod 600 it)"
        if "invalid format" in text or "error in libcrypto" in text or "load key" in text:
            return f"ssh cannot read the key {self.identity}: not a private key ({last})"
        if "host key verification failed" in text or "remote host identification has changed" in text:
            hosts = self.known_hosts or "~/.ssh/known_hosts"
            return (
                f"the host key of {host} port {port} is not in {hosts} (or differs from it): refusing to connect; "
                "give --known-hosts FILE holding the board's key, or --accept-new-host-key to trust a board "
                f"seen for the first time ({last})"
            )
        if "permission denied" in text:
            key = f"the key {self.identity}" if self.identity else "your ssh keys"
            return (
                f"{self.host} port {port} refused {key} (permission denied); "
                "check --identity and the board's authorized_keys"
            )
        return f"ssh to {self.where} failed: {last}"

    def remote(self, python: str, *args: str, stdin: bytes | None = None) -> dict:
        """Run ``python -m nnadapter_tvm.tools.remote ARGS`` on the board and return its JSON result."""
        command = " ".join(shlex.quote(a) for a in [python, "-m", "nnadapter_tvm.tools.remote", *args])
        proc = self.run(command, stdin)
        result = _parse_result(proc.stdout.decode(errors="replace"))
        if result is None:
            err = _last_line(proc.stderr.decode(errors="replace")) or f"exit status {proc.returncode}"
            raise DeployError(f"the board runner on {self.host} failed: {err}")
        if "error" in result:
            raise DeployError(f"on {self.host}: {result['error']}")
        return result


def remote_path_expr(path: str) -> str:
    """A board path as a shell word: quoted, with a leading ``~`` left to the board's ``$HOME``."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _parse_result(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(remote.MARKER):
            try:
                return json.loads(line[len(remote.MARKER) :])
            except ValueError:
                return None
    return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# -- the board's state ------------------------------------------------------------------------------
@dataclasses.dataclass
class BoardInfo:
    """What ``preflight`` found: the Python that runs the board side, and ``remote info``'s answer."""

    python: str
    machine: str
    library: dict
    directory: str
    free_bytes: int
    emulated: bool = False


_PREFLIGHT = r"""dir={dir}
last=; err=
for py in {pythons}; do
  command -v "$py" >/dev/null 2>&1 || continue
  out=$("$py" -m nnadapter_tvm.tools.remote info --dir "$dir" 2>&1); rc=$?
  case "$out" in *NNADAPTER_TVM_RESULT*) echo "NNA_PYTHON=$py"; printf '%s\n' "$out"; exit $rc;; esac
  last=$py; err=$out
done
if [ -z "$last" ]; then echo NNA_NO_PYTHON; exit 20; fi
echo "NNA_NO_PACKAGE=$last"; printf '%s\n' "$err"; exit 21
"""


def preflight(board: Board) -> BoardInfo:
    """Check the board before anything is sent: reachable, a Python that imports nnadapter_tvm,
    the remote directory (created if missing) and its free space."""
    pythons = [board.python] if board.python else [BOARD_PYTHON, "python3"]
    script = _PREFLIGHT.format(dir=remote_path_expr(board.remote_dir), pythons=" ".join(map(shlex.quote, pythons)))
    proc = board.run(script)
    out = proc.stdout.decode(errors="replace")
    if "NNA_NO_PYTHON" in out:
        raise DeployError(
            f"no Python on {board.host}: none of {', '.join(pythons)} is there; install python3 with nnadapter-tvm "
            "and the TVM runtime on the board (scripts/make_arm_board.sh shows how) or pass --remote-python"
        )
    if "NNA_NO_PACKAGE=" in out:
        py = out.split("NNA_NO_PACKAGE=", 1)[1].splitlines()[0]
        why = _last_line(out.split("NNA_NO_PACKAGE=", 1)[1].partition("\n")[2]) or "it fails"
        raise DeployError(
            f"{py} on {board.host} cannot run nnadapter_tvm ({why}); install nnadapter-tvm "
            f"(pip install --no-deps) with apache-tvm=={_host_versions()['tvm']} there, or pass --remote-python"
        )
    result = _parse_result(out)
    if result is None:
        why = _last_line(proc.stderr.decode(errors="replace")) or _last_line(out) or f"exit status {proc.returncode}"
        raise DeployError(f"unexpected answer from {board.host}: {why}")
    if "error" in result:
        raise DeployError(f"on {board.host}: {result['error']}")
    python = next(ln.split("=", 1)[1] for ln in out.splitlines() if ln.startswith("NNA_PYTHON="))
    info = BoardInfo(
        python,
        result["machine"],
        result["library"],
        result["dir"],
        int(result["free_bytes"]),
        bool(result.get("emulated")),
    )
    if info.machine.lower() not in ("aarch64", "arm64"):
        raise DeployError(f"{board.host} is a {info.machine} machine; the arm device builds for aarch64")
    if info.library != _host_versions():
        raise DeployError(
            f"{board.host} has {_fmt_versions(info.library)}, this host {_fmt_versions(_host_versions())}: "
            "a cached module loads only with the same versions; install the same ones on the board"
        )
    if not result.get("writable", True):
        raise DeployError(f"{info.directory} on {board.host} is not writable; choose another --remote-dir")
    return info


def _host_versions() -> dict:
    return cache.library_versions()


def _fmt_versions(library: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(library.items()))


def push(board: Board, info: BoardInfo, token: str, data: bytes) -> dict:
    """Send an ``.nnc`` to ``<remote dir>/<token>.nnc``: streamed to a temporary file that is
    checked and renamed into place by the board runner; nothing partial is ever left."""
    cache.validate_token(token)
    if info.free_bytes < len(data) + SPACE_MARGIN:
        raise DeployError(
            f"not enough space on {board.host} in {info.directory}: {_size(info.free_bytes)} free, "
            f"the model needs {_size(len(data))}",
            ResultCode.OUT_OF_MEMORY,
        )
    args = ["push", "--dir", info.directory, "--token", token, "--size", str(len(data))]
    return board.remote(info.python, *args, "--sha256", hashlib.sha256(data).hexdigest(), stdin=data)


def run_on_board(
    board: Board, info: BoardInfo, token: str, inputs: Sequence[np.ndarray], iterations: int = 10, warmup: int = 1
) -> tuple[list[np.ndarray], dict]:
    """Run the pushed model on the board: (outputs, the runner's report with ``latency_ms``)."""
    args = ["run", "--dir", info.directory, "--token", token]
    args += ["--iterations", str(int(iterations)), "--warmup", str(int(warmup))]
    result = board.remote(info.python, *args, stdin=remote.encode_inputs(inputs))
    return [remote.decode_array(y) for y in result.pop("outputs")], result


def _describe_target(target: str) -> str:
    """``{"kind": "llvm", "mtriple": ..., ...}`` -> ``aarch64-linux-gnu, mcpu cortex-a72, mattr +neon``."""
    try:
        attrs = json.loads(target)
    except ValueError:
        return target
    parts = [str(attrs.get("mtriple", attrs.get("kind", "?")))]
    parts.append(f"mcpu {attrs.get('mcpu') or 'generic'}")
    if attrs.get("mattr"):
        parts.append("mattr " + ",".join(attrs["mattr"]))
    return ", ".join(parts)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# -- models -----------------------------------------------------------------------------------------
@dataclasses.dataclass
class ModelSource:
    """A model to deploy and the sample inputs ``verify`` runs on both sides."""

    name: str
    model: Model
    inputs: list[np.ndarray]


def load_model(spec: str, batch: int = 1) -> ModelSource:
    """``builtin`` (the built-in CNN) or a path to an ``.onnx`` file."""
    if spec in ("", "builtin"):
        model = builtin_model.build()
        name = f"built-in CNN, {len(model.operations)} operations, input [{batch}, 3, 32, 32]"
        return ModelSource(name, model, [builtin_model.sample_input(batch)])
    if spec.lower().endswith(".onnx"):
        return _load_onnx(spec, batch)
    raise DeployError(f"MODEL must be 'builtin' or an .onnx file, got {spec!r}", ResultCode.INVALID_PARAMETER)


def _load_onnx(path: str, batch: int) -> ModelSource:
    # The ONNX importer turns the file into one Model; the token and the sample inputs follow from it.
    if not os.path.isfile(path):
        raise DeployError(f"no such file: {path}", ResultCode.INVALID_PARAMETER)
    try:
        from nnadapter_tvm.frontends import onnx as frontend  # type: ignore[attr-defined]
    except ImportError:
        frontend = None
    convert: Callable[[str], Model] | None = getattr(frontend, "import_model", None)
    if convert is None:
        raise DeployError(
            "ONNX models are not supported by deploy yet (the ONNX importer is not part of this build); "
            "use MODEL=builtin",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    model = convert(path)
    return ModelSource(os.path.basename(path), model, sample_inputs(model, batch))


def sample_inputs(model: Model, batch: int = 1, seed: int = 7) -> list[np.ndarray]:
    """Deterministic inputs for a model's declared input types (unknown dimensions: ``batch``
    for the first, 1 for the others)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for operand in model.inputs:
        t = operand.type
        dims = [(batch if i == 0 else 1) if d < 0 else d for i, d in enumerate(t.dimensions)]
        dtype = np.dtype(t.dtype)
        if t.precision == Precision.BOOL8:
            arrays.append(rng.integers(0, 2, dims).astype(bool))
        elif dtype.kind == "f":
            arrays.append(rng.uniform(0, 1, dims).astype(dtype))
        else:
            arrays.append(rng.integers(0, 10, dims).astype(dtype))
    return arrays


# -- the whole flow -------------------------------------------------------------------------------
@dataclasses.dataclass
class DeployResult:
    """What ``deploy`` did."""

    token: str
    local_path: str
    remote_path: str
    compiled: bool
    board: BoardInfo
    verified: bool = False
    max_abs_diff: float | None = None
    latency_ms: dict | None = None
    board_report: dict | None = None


def compile_for_arm(model: Model, properties: str, cache_dir: str) -> tuple[Compilation, str, str]:
    """Compile ``model`` for ``arm`` into ``cache_dir`` (or find it there): (compilation, token, path)."""
    context = Context([Device.acquire("arm")], properties)
    token = model_token(model, context)
    compilation = Compilation(model, context, cache_token=token, cache_dir=cache_dir)
    compilation.finish()
    return compilation, token, cache.cache_path(cache_dir, token)


def host_reference(model: Model, inputs: Sequence[np.ndarray], cache_dir: str) -> list[np.ndarray]:
    """The model's outputs on this host's ``llvm`` device (compiled into, or loaded from, ``cache_dir``)."""
    context = Context([Device.acquire("llvm")])
    compilation = Compilation(model, context, cache_token=model_token(model, context), cache_dir=cache_dir)
    compilation.finish()
    execution = Execution(compilation)
    outputs = execution.use_arrays(inputs)
    execution.compute()
    return outputs  # type: ignore[return-value]


def compare(board_outputs: Sequence[np.ndarray], host_outputs: Sequence[np.ndarray]) -> float:
    """Max absolute difference; a ``DeployError`` if shapes differ or any value is out of tolerance."""
    if len(board_outputs) != len(host_outputs):
        raise DeployError(f"the board returned {len(board_outputs)} outputs, the host computed {len(host_outputs)}")
    worst = 0.0
    for i, (b, h) in enumerate(zip(board_outputs, host_outputs)):
        if b.shape != h.shape or b.dtype != h.dtype:
            raise DeployError(f"output {i}: board {b.dtype}{list(b.shape)} vs host {h.dtype}{list(h.shape)}")
        if b.size:
            diff = np.abs(b.astype("float64") - h.astype("float64"))
            worst = max(worst, float(diff.max()))
        if not np.allclose(b, h, rtol=RTOL, atol=ATOL, equal_nan=True):
            raise DeployError(
                f"output {i} on the board differs from the host's llvm result: max abs diff {worst:.3g} "
                f"(tolerance rtol {RTOL:g}, atol {ATOL:g})"
            )
    return worst


def deploy(
    source: ModelSource,
    board: Board,
    *,
    properties: str = "",
    cache_dir: str,
    verify: bool = False,
    iterations: int = 10,
    warmup: int = 1,
    log: Callable[[str], None] = print,
) -> DeployResult:
    """Check the board, compile for ``arm`` (or reuse the cache), push the ``.nnc`` and, with
    ``verify``, run it on the board and compare with this host's ``llvm`` result."""
    if iterations < 1 or warmup < 0:
        raise DeployError("--iterations must be >= 1 and --warmup >= 0", ResultCode.INVALID_PARAMETER)
    log(f"board: {board.where} ...")
    t0 = time.perf_counter()
    info = preflight(board)
    log(
        f"board: {info.machine}{' (emulated by qemu)' if info.emulated else ''}, {info.python} "
        f"({_fmt_versions(info.library)}), "
        f"{_size(info.free_bytes)} free in {info.directory} ({time.perf_counter() - t0:.1f} s)"
    )
    log(f"model: {source.name}")
    compilation, token, path = compile_for_arm(source.model, properties, cache_dir)
    sub = cache.Manifest.from_json(cache.unpack(cache.read_file(path), path).meta, path).subgraphs[0]
    how = "found in the cache" if compilation.loaded_from_cache else f"compiled in {compilation.compile_seconds:.1f} s"
    log(f"token: {token}")
    log(f"arm target: {_describe_target(sub.target)}")
    log(f"cache: {path} ({how})")
    data = cache.read_file(path)
    t0 = time.perf_counter()
    pushed = push(board, info, token, data)
    seconds = time.perf_counter() - t0
    log(f"pushed: {_size(len(data))} -> {board.host}:{pushed['path']} (SHA-256 checked, {seconds:.1f} s)")
    result = DeployResult(token, path, pushed["path"], not compilation.loaded_from_cache, info)
    if not verify:
        return result
    expected = host_reference(source.model, source.inputs, cache_dir)
    t0 = time.perf_counter()
    outputs, report = run_on_board(board, info, token, source.inputs, iterations, warmup)
    result.max_abs_diff = compare(outputs, expected)
    result.verified = True
    result.latency_ms = report["latency_ms"]
    result.board_report = report
    lat = report["latency_ms"]
    shapes = ", ".join(f"{y.dtype}{list(y.shape)}" for y in outputs)
    log(
        f"verify: {len(outputs)} output(s) {shapes} match the host's llvm result "
        f"(max abs diff {result.max_abs_diff:.2e}; rtol {RTOL:g}, atol {ATOL:g}) ({time.perf_counter() - t0:.1f} s)"
    )
    log(f"board load from cache: {report['load_ms']:.1f} ms")
    log(
        f"board latency: median {lat['median']:.2f} ms, min {lat['min']:.2f} ms, mean {lat['mean']:.2f} ms "
        f"over {lat['iterations']} runs (after {lat['warmup']} warm-up)"
        + (" -- emulated board: not a performance figure" if report.get("emulated") else "")
    )
    return result
