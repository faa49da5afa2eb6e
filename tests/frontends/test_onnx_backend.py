"""onnx's own backend test suite (the node cases) against nnadapter-tvm's TVM path alone.

Every case whose operator maps onto NNAdapter's standard operations must pass; the rest are listed
in tests/onnx/excludes*.txt, each with the reason.  The pass and exclude counts are printed
at the end of the run (conftest.py)."""

from __future__ import annotations

import os
import re
import unittest

import onnx.backend.test

from nnadapter_tvm.frontends.onnx import backend

EXCLUDES_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "onnx")


def read_excludes(directory: str = EXCLUDES_DIR) -> list[tuple[str, str]]:
    """``(pattern, reason)`` per line ``pattern  # reason`` of every ``excludes*.txt``; a line without
    a reason is an error."""
    entries = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("excludes") and name.endswith(".txt"):
            entries += _read_excludes_file(os.path.join(directory, name))
    return entries


def _read_excludes_file(path: str) -> list[tuple[str, str]]:
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            pattern, sep, reason = text.partition("#")
            if not sep or not reason.strip():
                raise ValueError(f"{path}:{number}: every exclude says why ('pattern  # reason'): {text!r}")
            entries.append((pattern.strip(), reason.strip()))
    return entries


EXCLUDES = read_excludes()
_backend_test = onnx.backend.test.BackendTest(backend, __name__)
for _pattern, _reason in EXCLUDES:
    _backend_test.exclude(_pattern)
# Node cases only: the 'real' models need downloads, and the light models have their own test.
_backend_test.include(r"^test_.*_cpu$")
_cases = _backend_test.test_cases
OnnxBackendNodeModelTest: type[unittest.TestCase] = _cases["OnnxBackendNodeModelTest"]
for _name in [n for n in vars(OnnxBackendNodeModelTest) if n.startswith("test_") and not n.endswith("_cpu")]:
    delattr(OnnxBackendNodeModelTest, _name)  # the backend's one device is the CPU (llvm)


def excluded_node_cases() -> list[str]:
    names = [n for n in dir(OnnxBackendNodeModelTest) if n.startswith("test_")]
    return [n for n in names if getattr(OnnxBackendNodeModelTest, n).__dict__.get("__unittest_skip__")]


def test_every_exclude_matches_a_case() -> None:
    """A stale exclude would hide a case that now exists under another name."""
    names = [n for n in dir(OnnxBackendNodeModelTest) if n.startswith("test_")]
    stale = [p for p, _ in EXCLUDES if not any(re.search(p, n) for n in names)]
    assert not stale, f"excludes that match no node case: {stale}"
