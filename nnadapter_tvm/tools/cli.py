"""``nnadapter-tvm``: list devices, run the built-in model (compile, cache, load, execute),
deploy a model to an ARM board over ssh."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.compilation import Compilation
from nnadapter_tvm.context import Context, known_properties
from nnadapter_tvm.device import Device
from nnadapter_tvm.execution import Execution
from nnadapter_tvm.runtime import cache
from nnadapter_tvm.runtime.cache import default_cache_dir
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.targets import DRIVERS
from nnadapter_tvm.tools import builtin_model
from nnadapter_tvm.tools.benchmark import add_shape_option, parse_shapes
from nnadapter_tvm.types import NNAdapterError, ResultCode


def cmd_devices(args: argparse.Namespace) -> int:
    width = max(len("vendor"), *(len(d.vendor) for d in DRIVERS.values()))
    print(f"{'name':<8} {'vendor':<{width}} {'type':<12} {'version':<8} runs here")
    for name, driver in DRIVERS.items():
        ok, why = driver.can_run_here()
        state = f"{'yes' if ok else 'no'} ({why})"
        print(f"{name:<8} {driver.vendor:<{width}} {driver.type.name:<12} {driver.version:<8} {state}")
    print("\ncontext properties (KEY=VALUE;):")
    for prop in known_properties().values():
        print(f"  {prop.key:<18} {prop.description}")
    return 0


def _timed_compilation(model, context, token, cache_dir) -> tuple[Compilation, float]:
    start = time.perf_counter()
    compilation = Compilation(model, context, cache_token=token, cache_dir=cache_dir)
    compilation.finish()
    return compilation, time.perf_counter() - start


def _execute(compilation: Compilation, x: np.ndarray) -> tuple[np.ndarray, float]:
    execution = Execution(compilation)
    outputs = execution.use_arrays([x])
    start = time.perf_counter()
    execution.compute()
    return outputs[0], time.perf_counter() - start


def _paddle_to_onnx(args: argparse.Namespace) -> None:
    """A Paddle inference model (a directory, MODEL.json or MODEL.pdmodel) becomes its ONNX export (cached), and a
    partition config naming Paddle op types the ONNX rules for it; anything else is left as it is."""
    from nnadapter_tvm.frontends import paddle

    if args.model.lower().endswith(".onnx") or not paddle.is_paddle_model(args.model):
        return
    source = args.model
    args.model = paddle.export_to_file(source, getattr(args, "cache_dir", None))
    print(f"paddle model: {source} (exported to ONNX by paddle2onnx: {args.model})")
    if getattr(args, "partition_config", None):
        import onnx

        text = args.partition_config  # a file, or the config's text
        if os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        model = onnx.load(args.model, load_external_data=False)
        args.partition_config = paddle.translate_partition_config(text, model).rstrip("\n") + "\n"


def cmd_run(args: argparse.Namespace) -> int:
    if not getattr(args, "verbose", False):
        return _run(args)
    from nnadapter_tvm.runtime import phases

    # The time before the first compile phase is the import (ONNX graph, partitioning, Python modules).
    # Printed whether or not the run succeeds: a compile that fails later is still timed.
    with phases.recording(lead=phases.IMPORT if args.model != "builtin" else None) as times:
        try:
            return _run(args)
        finally:
            if times.seconds:
                print(times.format())
            else:
                print("no compile phases: every subgraph was loaded from the cache (an empty --cache-dir compiles)")


def _run(args: argparse.Namespace) -> int:
    if args.model != "builtin":
        _paddle_to_onnx(args)
        if not args.model.lower().endswith(".onnx"):
            raise NNAdapterError(
                ResultCode.INVALID_PARAMETER,
                f"MODEL must be 'builtin', an .onnx file or a Paddle inference model (a directory, MODEL.json or "
                f"MODEL.pdmodel), got {args.model!r}",
            )
        from nnadapter_tvm.tools import onnx_commands as onnx_cli

        args.shapes = parse_shapes(args.shape)
        return onnx_cli.cmd_run(args)
    device = (args.device or ["llvm"])[0]
    context = Context([Device.acquire(device)], args.properties)
    model = builtin_model.build()
    token = model_token(model, context)
    path = cache.cache_path(args.cache_dir, token)
    if args.fresh and os.path.exists(path):
        os.unlink(path)
    print(f"model: built-in CNN, {len(model.operations)} operations, input [N, 3, 32, 32] (N={args.batch})")
    print(f"device: {device}   cache: {path}")
    print(f"token: {token}")
    state = "found in the cache" if os.path.exists(path) else "compiling"
    print(f"{state} ...", flush=True)
    first, first_s = _timed_compilation(model, context, token, args.cache_dir)
    # A second compilation with no model at all: it can only load from the cache.
    loaded, load_s = _timed_compilation(None, context, token, args.cache_dir)
    x = builtin_model.sample_input(args.batch)
    y, run_s = _execute(loaded, x)
    y_first, _ = _execute(first, x)
    if not np.array_equal(y, y_first):
        print("error: the cached module's output differs from the freshly compiled one", file=sys.stderr)
        return 1
    compile_s = first.compile_seconds or first_s
    how = "this run" if not first.loaded_from_cache else "recorded when the cache was written"
    sums = ", ".join(f"{s:.5f}" for s in y.sum(axis=1))
    print(f"output: shape {list(y.shape)}, dtype {y.dtype}, softmax row sums [{sums}]")
    for n, row in enumerate(y[:4]):
        top = np.argsort(row)[::-1][:3]
        print(f"  sample {n}: top classes " + ", ".join(f"{c} (p={row[c]:.4f})" for c in top))
    print(f"compile:     {compile_s * 1000:9.1f} ms ({how})")
    print(f"cached load: {load_s * 1000:9.1f} ms  -> {compile_s / load_s:.0f}x faster than compiling")
    print(f"inference:   {run_s * 1000:9.1f} ms (batch {args.batch})")
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from nnadapter_tvm.tools import deploy

    board = deploy.Board(
        host=args.host,
        port=args.port,
        identity=args.identity,
        known_hosts=args.known_hosts,
        accept_new_host_key=args.accept_new_host_key,
        remote_dir=args.remote_dir,
        python=args.remote_python,
        connect_timeout=args.connect_timeout,
    )
    if args.model not in ("", "builtin"):
        _paddle_to_onnx(args)  # a Paddle model directory deploys as its ONNX export
    source = deploy.load_model(args.model, args.batch)
    deploy.deploy(
        source,
        board,
        properties=args.properties,
        cache_dir=args.cache_dir,
        verify=args.verify,
        iterations=args.iterations,
        warmup=args.warmup,
        log=lambda line: print(line, flush=True),
    )
    return 0


def _add_deploy_parser(sub: argparse._SubParsersAction) -> None:
    from nnadapter_tvm.tools.deploy import BOARD_PYTHON, DEFAULT_REMOTE_DIR

    deploy = sub.add_parser(
        "deploy",
        help="compile for arm (or reuse the cache), push the .nnc to a board over ssh, optionally verify there",
        description="Compile MODEL for the arm device into the local cache (or reuse it), push the .nnc to the "
        "board over ssh (keys only: BatchMode) and, with --verify, run it there and compare with this host's "
        "llvm result. Host keys: --known-hosts FILE (or ~/.ssh/known_hosts) must already hold the board's "
        "key, unless --accept-new-host-key trusts a board seen for the first time.",
    )
    deploy.add_argument(
        "model", nargs="?", default="builtin", help="'builtin' (default), an .onnx file or a Paddle model (MODEL_DIR)"
    )
    deploy.add_argument("--host", required=True, help="user@board")
    deploy.add_argument("--port", type=int, help="ssh port (default: ssh's)")
    deploy.add_argument("--identity", metavar="KEY", help="ssh private key")
    deploy.add_argument("--known-hosts", metavar="FILE", help="known_hosts file that must hold the board's host key")
    deploy.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="trust and remember the host key of a board never seen before (trust on first use)",
    )
    deploy.add_argument("--remote-dir", default=DEFAULT_REMOTE_DIR, help="cache directory on the board (%(default)s)")
    deploy.add_argument(
        "--remote-python", metavar="PYTHON", help=f"Python on the board (default: {BOARD_PYTHON}, else python3)"
    )
    deploy.add_argument("--verify", action="store_true", help="run on the board, compare with llvm here, time it")
    deploy.add_argument("--properties", default="", help="context properties for arm, e.g. ARM_MCPU=cortex-a72;")
    deploy.add_argument("--cache-dir", default=default_cache_dir(), help="local cache, default: %(default)s")
    deploy.add_argument("--batch", type=int, default=1, help="batch of the verification input")
    deploy.add_argument("--iterations", type=int, default=10, help="timed runs on the board (--verify)")
    deploy.add_argument("--warmup", type=int, default=1, help="untimed runs before them")
    deploy.add_argument("--connect-timeout", type=int, default=20, help="ssh ConnectTimeout in seconds")
    deploy.set_defaults(func=cmd_deploy)


def _add_onnx_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--partition-config", metavar="FILE_OR_TEXT", help="Paddle Lite partition config: ONNX nodes kept on the host"
    )
    parser.add_argument("--host-fallback", action="store_true", help="run ONNX nodes no device supports on the host")


def cmd_kernels(args: argparse.Namespace) -> int:
    from nnadapter_tvm.runtime import kernel_cache

    directory = kernel_cache.default_dir()
    if directory is None:
        print(f"the kernel cache is off (${kernel_cache.ENV})")
        return 0
    if args.clear:
        print(f"{kernel_cache.clear(directory)} kernel(s) deleted from {directory}")
        return 0
    entries = kernel_cache.entries(directory)
    size = sum(os.path.getsize(path) for path in entries)
    print(f"{directory}: {len(entries)} kernel(s), {size / 1e6:.1f} MB")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from nnadapter_tvm.tools import benchmark

    return benchmark.main(args.rest)


def cmd_profile(args: argparse.Namespace) -> int:
    from nnadapter_tvm.tools import profile

    return profile.main(args.rest)


def cmd_tune(args: argparse.Namespace) -> int:
    from nnadapter_tvm.tools import tune_command

    return tune_command.main(args.rest)


def cmd_info(args: argparse.Namespace) -> int:
    from nnadapter_tvm.tools import onnx_commands as onnx_cli

    _paddle_to_onnx(args)

    return onnx_cli.cmd_info(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnadapter-tvm", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("devices", help="list devices and context properties").set_defaults(func=cmd_devices)
    run = sub.add_parser("run", help="compile (or load from the cache) and run the built-in CNN or an ONNX model")
    run.add_argument(
        "model", nargs="?", default="builtin", help="'builtin' (default), MODEL.onnx or a Paddle model (MODEL_DIR)"
    )
    run.add_argument(
        "--device", action="append", choices=list(DRIVERS), help="device (repeat for several; default llvm)"
    )
    run.add_argument("--cache-dir", default=default_cache_dir(), help="default: %(default)s")
    run.add_argument("--properties", default="", help="context properties, KEY=VALUE;...")
    run.add_argument("--batch", type=int, default=1, help="batch of the built-in model's input")
    run.add_argument("--fresh", action="store_true", help="delete the built-in model's cache file first")
    run.add_argument(
        "--input", action="append", metavar="NAME=FILE.npy", help="an ONNX model's input (default: random inputs)"
    )
    add_shape_option(run)
    run.add_argument("--repeat", type=int, default=10, help="timed runs of an ONNX model (%(default)s)")
    run.add_argument(
        "-v", "--verbose", action="store_true", help="print the compile's time per phase (wall and CPU seconds)"
    )
    _add_onnx_model_options(run)
    run.set_defaults(func=cmd_run)
    info = sub.add_parser("info", help="how an ONNX model is partitioned: subgraphs, host nodes, DOT graph")
    info.add_argument("model", help="MODEL.onnx or a Paddle inference model (MODEL_DIR, MODEL.json, MODEL.pdmodel)")
    info.add_argument("--dot", action="store_true", help="print a DOT graph coloured by subgraph")
    _add_onnx_model_options(info)
    info.set_defaults(func=cmd_info)
    kernels = sub.add_parser("kernels", help="where the kernel cache is, its size; --clear empties it")
    kernels.add_argument("--clear", action="store_true", help="delete every compiled kernel it holds")
    kernels.set_defaults(func=cmd_kernels)
    _add_deploy_parser(sub)
    bench = sub.add_parser(
        "bench", help="latency of ONNX models vs onnxruntime and TVM's ONNX frontend", add_help=False
    )
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)
    profile = sub.add_parser(
        "profile", help="each fused kernel's time, share, FLOPs and GFLOP/s against the peak", add_help=False
    )
    profile.add_argument("rest", nargs=argparse.REMAINDER)
    profile.set_defaults(func=cmd_profile)
    tune = sub.add_parser("tune", help="auto-tune a model's kernels with MetaSchedule into a database", add_help=False)
    tune.add_argument("rest", nargs=argparse.REMAINDER)
    tune.set_defaults(func=cmd_tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own_options = {"bench": cmd_bench, "profile": cmd_profile, "tune": cmd_tune}
    if argv and argv[0] in own_options:
        # These parse their own options (the scripts/ entry points share them).
        return own_options[argv[0]](argparse.Namespace(rest=argv[1:]))
    args = build_parser().parse_args(argv)
    if args.command is None:
        args = build_parser().parse_args(["run", *(argv or [])])
    try:
        return args.func(args)
    except NNAdapterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
