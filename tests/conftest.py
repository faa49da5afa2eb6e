"""Shared fixtures: small models compiled once per test module."""

from __future__ import annotations

import pytest

import nnadapter_tvm as nna
from nnadapter_tvm.tools import builtin_model

P = nna.Precision


# out = relu(x + c) with x: [batch, 3] input, c: constant [3].
build_add_relu = builtin_model.build_tiny
add_relu_ref = builtin_model.tiny_reference


@pytest.fixture
def llvm_context() -> nna.Context:
    return nna.Context([nna.Device.acquire("llvm")])


@pytest.fixture(scope="module")
def add_relu_compilation() -> nna.Compilation:
    compilation = nna.Compilation(build_add_relu(), nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    return compilation


def pytest_terminal_summary(terminalreporter) -> None:
    """The ONNX backend suite's counts, as issue 4 asks: passed, failed, excluded."""
    stats = terminalreporter.stats

    def count(outcome: str) -> int:
        return sum(
            1
            for r in stats.get(outcome, [])
            if "OnnxBackendNodeModelTest" in getattr(r, "nodeid", "")
            and getattr(r, "when", "call") in ("call", "setup")
        )

    passed, failed, excluded = count("passed"), count("failed") + count("error"), count("skipped")
    if passed or failed or excluded:
        terminalreporter.write_sep("-", "onnx backend node cases")
        terminalreporter.write_line(
            f"{passed} passed, {failed} failed, {excluded} excluded (tests/onnx/excludes*.txt, each with its reason)"
        )
