"""Compile time of ONNX models, cold and with the kernel cache warm, each compile in a fresh process.

    python scripts/compile_times.py MODEL.onnx [MODEL.onnx ...] [--properties "KEY=VALUE;..."]

For each model: a compile with an empty kernel cache of its own ("cold"), then the same model into a fresh
``cache_dir`` with that kernel cache ("warm"). Each compile runs in its own Python process, timed from before
``import nnadapter_tvm`` to the compiled ``Predictor``: wall seconds, the process's CPU seconds (its
children's, the linker's, included) and the kernels found in or built for the kernel cache. Nothing else
should run on the machine meanwhile; the CPU seconds are the steadier figure on a shared one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, os, resource, sys, tempfile, time
start = time.perf_counter()
from nnadapter_tvm.session.predictor import Predictor
predictor = Predictor(sys.argv[1], cache_dir=tempfile.mkdtemp(), context_properties=sys.argv[2])
wall = time.perf_counter() - start
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
stats = [s for c in predictor.compilations for s in c.kernel_stats]
print(json.dumps({"wall": wall, "cpu": cpu, "found": sum(s.hits for s in stats),
                  "built": sum(s.misses for s in stats)}))
"""


def compile_once(model: str, kernels: str, properties: str) -> dict:
    env = dict(os.environ, NNADAPTER_TVM_KERNEL_CACHE=kernels)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, model, properties], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{model}: the compile failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="ONNX files")
    parser.add_argument("--properties", default="", help="context properties of the builds")
    args = parser.parse_args(argv)
    print(f"{'model':<36}{'cold s':>8}{'CPU s':>8}{'warm s':>8}{'CPU s':>8}  kernels found / built (warm)")
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-kernels-") as kernels:
            cold = compile_once(model, kernels, args.properties)
            warm = compile_once(model, kernels, args.properties)
        name = os.path.basename(model)
        print(
            f"{name:<36}{cold['wall']:>8.1f}{cold['cpu']:>8.1f}{warm['wall']:>8.1f}{warm['cpu']:>8.1f}"
            f"  {warm['found']} / {warm['built']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
