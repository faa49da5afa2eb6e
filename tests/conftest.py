"""Shared fixtures: small models compiled once per test module."""

from __future__ import annotations

import numpy as np
import pytest

import nnadapter_tvm as nna

P = nna.Precision


def build_add_relu(batch: int = nna.UNKNOWN) -> nna.Model:
    """out = relu(x + c) with x: [batch, 3] input, c: constant [3]."""
    model = nna.Model()
    x = model.add_operand(nna.OperandType(P.FLOAT32, [batch, 3]))
    c = model.add_operand(nna.OperandType(P.FLOAT32, [3]))
    model.set_operand_value(c, np.array([1.0, -2.0, 0.5], "float32"))
    code = model.add_operand(nna.OperandType(P.INT32, [1]))
    model.set_operand_value(code, np.array([nna.FuseCode.RELU], "int32"))
    out = model.add_operand(nna.OperandType(P.FLOAT32, [batch, 3]))
    model.add_operation(nna.OperationType.ADD, [x, c, code], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


def add_relu_ref(x: np.ndarray) -> np.ndarray:
    return np.maximum(x + np.array([1.0, -2.0, 0.5], "float32"), 0)


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
