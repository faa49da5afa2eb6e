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
