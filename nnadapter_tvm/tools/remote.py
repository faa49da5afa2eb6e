"""The board side of ``nnadapter-tvm deploy``: run as ``python -m nnadapter_tvm.tools.remote ...`` over ssh.

It never compiles anything: it needs this package, numpy and the TVM runtime only.

``info --dir DIR``
    Create ``DIR`` (mode 0700) if needed and report the machine, the library versions and the
    free space there.
``push --dir DIR --token TOKEN --size N --sha256 HEX``
    Read an ``.nnc`` from stdin; check its length, its SHA-256 and that it parses as a cache
    container; then write it atomically to ``DIR/TOKEN.nnc`` (a temporary file beside it, then a
    rename; the temporary file is removed on any failure, a full disk included).  Nothing is
    written unless all of it arrived intact.
``run --dir DIR --token TOKEN [--iterations N] [--warmup W] [--threads T] [--properties P]``
    Load ``DIR/TOKEN.nnc`` with ``Compilation(None, Context([Device.acquire("arm")]), TOKEN, DIR)``
    (the devices and the codegen properties are those recorded in the file, plus ``P``, e.g. a
    ``CACHE_KEY_FILE`` on the board so that only signed files load), read the inputs
    as an ``.npz`` (``input0``, ``input1``, ...) from stdin, run ``W`` warm-up and ``N`` timed
    iterations and report the latency and the outputs (``.npy`` bytes, base64).

Every command prints one line ``NNADAPTER_TVM_RESULT <json>`` on stdout, the last thing it
prints; on failure the JSON has ``"error"`` and the exit status is 3.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context
from nnadapter_tvm.device import Device
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.types import NNAdapterError

MARKER = "NNADAPTER_TVM_RESULT "
ERROR_EXIT = 3


def encode_array(array: np.ndarray) -> str:
    """An array as base64 of its ``.npy`` bytes (dtype and shape included)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_array(text: str) -> np.ndarray:
    """The inverse of ``encode_array``."""
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def encode_inputs(arrays: Sequence[np.ndarray]) -> bytes:
    """Inputs as the ``.npz`` bytes ``run`` reads from stdin."""
    buf = io.BytesIO()
    np.savez(buf, **{f"input{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)})
    return buf.getvalue()


def decode_inputs(data: bytes) -> list[np.ndarray]:
    """The inverse of ``encode_inputs``."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return [npz[f"input{i}"] for i in range(len(npz.files))]


def properties_text(codegen_properties: dict) -> str:
    """The ``KEY=VALUE;`` string of the codegen properties recorded in an ``.nnc``."""
    items = []
    for key, value in sorted(codegen_properties.items()):
        text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
        items.append(f"{key}={text};")
    return "".join(items)


def _versions() -> dict:
    return cache.library_versions()


def emulated() -> bool:
    """Whether this "aarch64" machine is really qemu-user on another CPU (its /proc/cpuinfo is the host's)."""
    if platform.machine().lower() not in ("aarch64", "arm64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return False
    return "vendor_id" in text and "CPU implementer" not in text


def cmd_info(args: argparse.Namespace) -> dict:
    directory = os.path.expanduser(args.dir)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    usage = shutil.disk_usage(directory)
    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "library": _versions(),
        "dir": os.path.abspath(directory),
        "free_bytes": usage.free,
        "writable": os.access(directory, os.W_OK),
        "emulated": emulated(),
    }


def cmd_push(args: argparse.Namespace) -> dict:
    directory = os.path.expanduser(args.dir)
    path = cache.cache_path(directory, args.token)  # validates the token before touching anything
    data = sys.stdin.buffer.read()
    if len(data) != args.size:
        raise _Failure(f"received {len(data)} of {args.size} bytes (the transfer was cut); nothing was written")
    digest = hashlib.sha256(data).hexdigest()
    if digest != args.sha256:
        raise _Failure(f"SHA-256 of the received file is {digest}, expected {args.sha256}; nothing was written")
    meta = cache.unpack(data, f"received {args.token}{cache.SUFFIX}").meta
    held = meta.get("token")
    if held and held != args.token:
        raise _Failure(f"the received file holds the model of token {held}, not {args.token}; nothing was written")
    try:
        cache.write_atomic(path, data)
    except OSError as err:
        raise _Failure(f"cannot write {path}: {err.strerror or err} (no partial file was left)") from None
    return {"path": os.path.abspath(path), "bytes": len(data), "sha256": digest}


def cmd_run(args: argparse.Namespace) -> dict:
    if args.iterations < 1 or args.warmup < 0:
        raise _Failure("--iterations must be >= 1 and --warmup >= 0")
    directory = os.path.expanduser(args.dir)
    path = cache.cache_path(directory, args.token)
    if not os.path.isfile(path):
        raise _Failure(f"no model {args.token} on this board ({path} does not exist); push it first")
    meta = cache.unpack(cache.read_file(path), path).meta
    try:
        subgraphs = cache.Manifest.from_json(meta, path).subgraphs
        devices = list(dict.fromkeys(s.device for s in subgraphs))
        recorded = dict(subgraphs[0].properties)
        targets = [s.target for s in subgraphs]
    except (cache.CacheError, IndexError):
        raise _Failure(f"{path}: malformed metadata") from None
    # The codegen properties the file was built with make the same targets here. The DEVICE_<i>_*
    # placement keys only steered the partition at compile time, and TUNING_DATABASE's records are
    # compiled into the module (the file records their fingerprint, not a directory this board has).
    compile_only = re.compile(r"DEVICE_\d+_|TUNING_DATABASE$")
    props = properties_text({k: v for k, v in recorded.items() if not compile_only.match(k)})
    if args.threads:
        props += f"TVM_NUM_THREADS={args.threads};"
    props += args.properties  # the board's own non-codegen keys, e.g. CACHE_KEY_FILE=<a path there>;
    context = Context([Device.acquire(name) for name in devices], props)
    start = time.perf_counter()
    compilation = Compilation(None, context, cache_token=args.token, cache_dir=directory)
    compilation.finish()
    load_seconds = time.perf_counter() - start
    inputs = decode_inputs(sys.stdin.buffer.read())
    n_in = len(compilation.input_types)
    if len(inputs) != n_in:
        raise _Failure(f"the model has {n_in} inputs, {len(inputs)} were sent")
    execution = Execution(compilation)
    outputs = execution.use_arrays(inputs)
    times = []
    for n in range(args.warmup + args.iterations):
        t0 = time.perf_counter()
        execution.compute()
        if n >= args.warmup:
            times.append(time.perf_counter() - t0)
    ms = [t * 1000 for t in times]
    return {
        "machine": platform.machine(),
        "emulated": emulated(),
        "devices": devices,
        "targets": targets,
        "load_ms": load_seconds * 1000,
        "latency_ms": {
            "iterations": len(ms),
            "warmup": args.warmup,
            "min": min(ms),
            "median": statistics.median(ms),
            "mean": statistics.fmean(ms),
            "max": max(ms),
        },
        "outputs": [encode_array(y) for y in outputs],
    }


class _Failure(Exception):
    """A board-side failure reported as ``{"error": ...}``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nnadapter_tvm.tools.remote", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="machine, versions and free space of DIR")
    info.add_argument("--dir", required=True)
    info.set_defaults(func=cmd_info)
    push = sub.add_parser("push", help="receive an .nnc on stdin and store it atomically")
    push.add_argument("--dir", required=True)
    push.add_argument("--token", required=True)
    push.add_argument("--size", type=int, required=True)
    push.add_argument("--sha256", required=True)
    push.set_defaults(func=cmd_push)
    run = sub.add_parser("run", help="load DIR/TOKEN.nnc, run the .npz inputs from stdin, report")
    run.add_argument("--dir", required=True)
    run.add_argument("--token", required=True)
    run.add_argument("--iterations", type=int, default=10)
    run.add_argument("--warmup", type=int, default=1)
    run.add_argument("--threads", type=int, default=0)
    run.add_argument("--properties", default="", help="extra context properties on the board, KEY=VALUE;...")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
        status = 0
    except (_Failure, NNAdapterError, OSError) as err:
        result, status = {"error": str(err)}, ERROR_EXIT
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
