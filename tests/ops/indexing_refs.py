"""Helpers the indexing tests share (test_indexing.py, test_indexing_split_stack.py,
test_indexing_rearrange.py): the operation codes, exact comparison, the quantized cases' scale, the
invalid-operand check and integer inputs."""

import numpy as np
from oputil import Out, expect_error, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
EXACT = {"rtol": 0, "atol": 0}
SCALE = 0.02  # input and output scale of the quantized cases: equal, so results are exact


def expect_invalid(op, inputs, out_shapes, *words):
    """Compilation fails with INVALID_PARAMETER, the message naming the operation and ``words``."""
    outs = [Out() for _ in out_shapes]
    expect_error(lambda: run_op(op, inputs, outs, out_shapes), op.name, *words)


def ints(shape, high, seed, dtype):
    return np.random.default_rng(seed).integers(-high, high, shape).astype(dtype)
