"""Helpers the reduction tests share (test_reduce.py, test_reduce_arg_top_k.py): the operation codes,
exact comparison, the invalid-operand check and NNAdapter's shape-[1] result of a reduction to a
scalar."""

import numpy as np
from oputil import expect_error, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
EXACT = {"rtol": 0, "atol": 0}


def invalid(op, inputs, outputs, shapes, *words):
    """Compiling fails with INVALID_PARAMETER, naming the operation and ``words``."""
    expect_error(lambda: run_op(op, inputs, outputs, shapes), op.name, *words)


def at_least_1d(y: np.ndarray) -> np.ndarray:
    """NNAdapter has no rank-0 outputs: a reduction to a scalar has shape [1]."""
    return y.reshape(1) if y.ndim == 0 else y
