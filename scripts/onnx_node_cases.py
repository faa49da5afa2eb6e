#!/usr/bin/env python3
"""onnx's node cases through one harness for any backend: how many pass, fail or error.

    python scripts/onnx_node_cases.py --backend onnxruntime     # onnxruntime.backend (its own prepare/run)
    python scripts/onnx_node_cases.py --backend nnadapter-tvm   # nnadapter_tvm.frontends.onnx.backend

The harness is onnx's own (``onnx.backend.test.BackendTest``: prepare the model, run it on the case's
inputs, compare with each case's tolerances), with no exclusions, so both backends meet every case; the
test suite (tests/frontends/test_onnx_backend.py) runs ours with its documented exclusions instead. Prints the
counts and, with ``--list``, the cases each backend fails. The issue-16 comparison: nnadapter-tvm must pass
more cases than onnxruntime here.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import unittest
import warnings

import onnx.backend.test

BACKENDS = {"onnxruntime": "onnxruntime.backend", "nnadapter-tvm": "nnadapter_tvm.frontends.onnx.backend"}


def run(backend_name: str) -> dict[str, list[str]]:
    backend = importlib.import_module(BACKENDS[backend_name])
    tests = onnx.backend.test.BackendTest(backend, __name__)
    tests.include(r"^test_.*_cpu$")
    suite = unittest.TestSuite()
    case = tests.test_cases["OnnxBackendNodeModelTest"]
    for name in sorted(n for n in vars(case) if n.startswith("test_") and n.endswith("_cpu")):
        suite.addTest(case(name))
    result = unittest.TestResult()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suite.run(result)
    failed = sorted(t.id().rsplit(".", 1)[-1] for t, _ in result.failures)
    errors = sorted(t.id().rsplit(".", 1)[-1] for t, _ in result.errors)
    skipped = sorted(t.id().rsplit(".", 1)[-1] for t, _ in result.skipped)
    passed = result.testsRun - len(failed) - len(errors) - len(skipped)
    return {"passed": passed, "failed": failed, "errors": errors, "skipped": skipped, "run": result.testsRun}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=list(BACKENDS), required=True)
    parser.add_argument("--list", action="store_true", help="list the cases that fail or error")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    result = run(args.backend)
    print(
        f"{args.backend}: {result['passed']} passed, {len(result['failed'])} failed, {len(result['errors'])} "
        f"errors, {len(result['skipped'])} skipped of {result['run']} node cases (onnx {onnx.__version__})"
    )
    if args.list:
        for name in result["failed"] + result["errors"]:
            print(" ", name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
