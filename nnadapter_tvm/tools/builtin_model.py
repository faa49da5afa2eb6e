"""A small CNN built through the Model API with deterministic weights (the CLI's default model)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.model import Model, Operand
from nnadapter_tvm.types import UNKNOWN, AutoPad, FuseCode, OperandType
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P

INPUT_SHAPE = (3, 32, 32)
CLASSES = 10


class _Builder:
    def __init__(self, seed: int, batch: int = UNKNOWN):
        self.model = Model()
        self.rng = np.random.default_rng(seed)
        self.batch = batch

    def const(self, value: np.ndarray, precision: P) -> Operand:
        operand = self.model.add_operand(OperandType(precision, list(value.shape)))
        self.model.set_operand_value(operand, np.ascontiguousarray(value))
        return operand

    def i32(self, *values: int) -> Operand:
        return self.const(np.asarray(values, "int32"), P.INT32)

    def weights(self, *shape: int) -> Operand:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return self.const(self.rng.normal(0, (2.0 / fan_in) ** 0.5, shape).astype("float32"), P.FLOAT32)

    def tensor(self, dims: list[int]) -> Operand:
        return self.model.add_operand(OperandType(P.FLOAT32, dims))

    def op(self, op_type: O, inputs: list[Operand], dims: list[int]) -> Operand:
        out = self.tensor(dims)
        self.model.add_operation(op_type, inputs, [out])
        return out

    def conv(self, x: Operand, c_in: int, c_out: int, k: int, hw: int, group: int, fuse: FuseCode) -> Operand:
        w = self.weights(c_out, c_in // group, k, k)
        b = self.const(self.rng.normal(0, 0.1, c_out).astype("float32"), P.FLOAT32)
        args = [x, w, b, self.i32(AutoPad.SAME), self.i32(0, 0, 0, 0), self.i32(1, 1), self.i32(group)]
        return self.op(O.CONV_2D, [*args, self.i32(1, 1), self.i32(fuse)], [self.batch, c_out, hw, hw])


TINY_BIAS = np.array([1.0, -2.0, 0.5], "float32")


def build_tiny(batch: int = UNKNOWN) -> Model:
    """The smallest model (tests, the soak): out = relu(x + TINY_BIAS) with x: [batch, 3]."""
    b = _Builder(0)
    x = b.tensor([batch, 3])
    out = b.op(O.ADD, [x, b.const(TINY_BIAS, P.FLOAT32), b.i32(FuseCode.RELU)], [batch, 3])
    b.model.identify_inputs_and_outputs([x], [out])
    b.model.finish()
    return b.model


def tiny_reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x + TINY_BIAS, 0)


def build(seed: int = 2024, batch: int = UNKNOWN) -> Model:
    """conv-relu, max pool, depthwise conv-relu6, 1x1 conv, batch norm, relu, avg pool,
    adaptive avg pool, flatten, fully connected, softmax; input [N, 3, 32, 32], N = ``batch`` (unknown
    by default)."""
    b = _Builder(seed, batch)
    x = b.tensor([batch, *INPUT_SHAPE])
    y = b.conv(x, 3, 16, 3, 32, 1, FuseCode.RELU)
    pool = [b.i32(AutoPad.NONE), b.i32(0, 0, 0, 0), b.i32(2, 2), b.i32(2, 2), b.const(np.array([False]), P.BOOL8)]
    y = b.op(
        O.MAX_POOL_2D, [y, *pool, b.const(np.array([False]), P.BOOL8), b.i32(P.INT32), b.i32(0)], [batch, 16, 16, 16]
    )
    y = b.conv(y, 16, 16, 3, 16, 16, FuseCode.RELU6)
    y = b.conv(y, 16, 32, 1, 16, 1, FuseCode.NONE)
    stats = [
        np.abs(b.rng.normal(1, 0.1, 32)),
        b.rng.normal(0, 0.1, 32),
        b.rng.normal(0, 0.1, 32),
        np.abs(b.rng.normal(1, 0.1, 32)),
    ]
    bn = [b.const(s.astype("float32"), P.FLOAT32) for s in stats]
    y = b.op(O.BATCH_NORMALIZATION, [y, *bn, b.const(np.array([1e-5], "float32"), P.FLOAT32)], [batch, 32, 16, 16])
    y = b.op(O.RELU, [y], [batch, 32, 16, 16])
    avg = [b.const(np.array([False]), P.BOOL8), b.const(np.array([False]), P.BOOL8), b.i32(FuseCode.NONE)]
    y = b.op(O.AVERAGE_POOL_2D, [y, *pool[:4], *avg], [batch, 32, 8, 8])
    y = b.op(O.ADAPTIVE_AVERAGE_POOL_2D, [y, b.i32(1, 1)], [batch, 32, 1, 1])
    y = b.op(O.FLATTEN, [y, b.i32(1), b.i32(3)], [batch, 32])
    y = b.op(O.FULLY_CONNECTED, [y, b.weights(CLASSES, 32), b.weights(CLASSES), b.i32(FuseCode.NONE)], [batch, CLASSES])
    y = b.op(O.SOFTMAX, [y, b.i32(1)], [batch, CLASSES])
    b.model.identify_inputs_and_outputs([x], [y])
    b.model.finish()
    return b.model


def sample_input(batch: int = 1, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (batch, *INPUT_SHAPE)).astype("float32")
