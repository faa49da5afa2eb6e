"""QUANTIZE and DEQUANTIZE against numpy references written from the spec and docs/quantization.md:
symmetric int8 and asymmetric uint8 per layer, int8 per channel along an axis (negative axes too),
ranks 1-5, FLOAT32 and INT32 inputs, empty operands taking their defaults, saturation, and operands
that disagree with the output operand's type."""

import numpy as np
import pytest
from oputil import Const, In, Out, dequantize, expect_error, f32, i32, quantize, rand, run_model, run_op

import nnadapter_tvm as nna

OP = nna.OperationType
P = nna.Precision
# Quantized results may differ from the reference by one step: float32 evaluation order can move a
# value lying on a rounding boundary to its neighbour (docs/quantization.md).
LSB = 1


def assert_within_lsb(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert diff.max(initial=0) <= LSB, f"max difference {diff.max()} LSB\n{got}\n{expected}"


def run_single(op_type, inputs, feeds, out_type):
    """A one-operation model built directly: ``inputs`` are (OperandType, constant value or None for a
    model input) pairs; the harness's Out has no channel_dim, which per-channel outputs need."""
    model = nna.Model()
    operands, model_inputs = [], []
    for t, value in inputs:
        operand = model.add_operand(t)
        if value is None:
            model_inputs.append(operand)
        else:
            model.set_operand_value(operand, np.ascontiguousarray(value))
        operands.append(operand)
    out = model.add_operand(out_type)
    model.add_operation(op_type, operands, [out])
    model.identify_inputs_and_outputs(model_inputs, [out])
    model.finish()
    return run_model(model, feeds)[0]


# -- QUANTIZE -------------------------------------------------------------------------------------

SHAPES = [(7,), (3, 5), (2, 3, 4), (2, 3, 2, 3), (1, 2, 3, 2, 2)]


def quantize_inputs(x, axis, scale, zero_point, zero_point_precision=P.INT32):
    zp = Const(np.asarray(zero_point, "int32" if zero_point_precision == P.INT32 else "float32"), zero_point_precision)
    precision = P.INT32 if x.dtype == np.int32 else P.FLOAT32
    return [In(x, precision), i32([axis]) if axis is not None else Const(None, P.INT32), f32(np.atleast_1d(scale)), zp]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rank{len(s)}")
def test_quantize_int8_per_layer(shape):
    x = rand(*shape, seed=len(shape))
    scale = 0.02  # x in [-2, 2): 2 / 0.02 = 100 fits int8
    (got,) = run_op(
        OP.QUANTIZE,
        quantize_inputs(x, 1 % len(shape), scale, [0]),
        [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=scale)],
        [shape],
    )
    assert_within_lsb(got, quantize(x, scale))


def test_quantize_int8_saturates():
    x = np.array([-5.0, -2.57, -2.55, 0.0, 2.53, 2.55, 9.0], "float32")
    scale = 0.02  # -5 / 0.02 = -250 -> -128; 2.55 / 0.02 = 127.5 -> 128 (half to even) -> 127
    (got,) = run_op(
        OP.QUANTIZE, quantize_inputs(x, 0, scale, [0]), [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=scale)], [x.shape]
    )
    assert_within_lsb(got, quantize(x, scale))
    assert got[0] == -128 and got[-1] == 127


def test_quantize_rounds_half_to_even():
    scale = 0.5  # x / scale = -2.5, -1.5, -0.5, 0.5, 1.5, 2.5: exact halves, no float32 rounding ahead
    x = np.array([-1.25, -0.75, -0.25, 0.25, 0.75, 1.25], "float32")
    (got,) = run_op(
        OP.QUANTIZE, quantize_inputs(x, 0, scale, [0]), [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=scale)], [x.shape]
    )
    np.testing.assert_array_equal(got, np.array([-2, -2, 0, 0, 2, 2], "int8"))


@pytest.mark.parametrize("zero_point_precision", [P.INT32, P.FLOAT32], ids=["zp_int32", "zp_float32"])
def test_quantize_uint8_asymm(zero_point_precision):
    # The header types zero_point INT32, the spec FLOAT32: both are read.  Values past [0, 255] saturate.
    x = rand(2, 3, 4, seed=5, low=-1.5, high=3.0)
    scale, zero_point = 0.012, 100
    inputs = quantize_inputs(x, 1, scale, [zero_point], zero_point_precision)
    out = Out(P.QUANT_UINT8_ASYMM_PER_LAYER, scale=scale, zero_point=zero_point)
    (got,) = run_op(OP.QUANTIZE, inputs, [out], [x.shape])
    expected = quantize(x, scale, zero_point, "uint8")
    assert_within_lsb(got, expected)
    assert (expected == 0).any() and (expected == 255).any()


@pytest.mark.parametrize(
    "shape, axis", [((4, 3), 0), ((2, 3, 4), 1), ((2, 3, 2, 4), -1), ((2, 2, 3, 2, 2), -3)], ids=str
)
def test_quantize_int8_per_channel(shape, axis):
    x = rand(*shape, seed=6)
    channels = shape[axis]
    scales = np.linspace(0.01, 0.03, channels).astype("float32")
    dim = axis % len(shape)
    inputs = [
        (nna.OperandType(P.FLOAT32, shape), None),
        (nna.OperandType(P.INT32, [1]), np.array([axis], "int32")),
        (nna.OperandType(P.FLOAT32, [channels]), scales),
        (nna.OperandType(P.INT32, [channels]), np.zeros(channels, "int32")),
    ]
    out = nna.OperandType(P.QUANT_INT8_SYMM_PER_CHANNEL, shape, scale=scales.tolist(), channel_dim=dim)
    got = run_single(OP.QUANTIZE, inputs, [x], out)
    assert_within_lsb(got, quantize(x, scales, axis=dim))


def test_quantize_int32_input():
    # An INT32 input is taken as real values.
    x = np.arange(-6, 6, dtype="int32").reshape(3, 4)
    (got,) = run_op(
        OP.QUANTIZE, quantize_inputs(x, 1, 0.25, [0]), [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.25)], [x.shape]
    )
    np.testing.assert_array_equal(got, (x * 4).astype("int8"))


def test_quantize_empty_axis_and_zero_point_take_defaults():
    # axis defaults to 1 (unused per layer), zero_point to 0 (the header's default).
    x = rand(2, 5, seed=7)
    inputs = [In(x), Const(None, P.INT32), f32([0.02]), Const(None, P.INT32)]
    (got,) = run_op(OP.QUANTIZE, inputs, [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.02)], [x.shape])
    assert_within_lsb(got, quantize(x, 0.02))


@pytest.mark.parametrize(
    "index, value, out, operand",
    [
        (2, f32([0.03]), Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.02), "scale"),
        (2, f32([0.02, 0.02]), Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.02), "scale"),
        (3, i32([3]), Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.02), "zero_point"),  # symmetric: 0
        (3, i32([3]), Out(P.QUANT_UINT8_ASYMM_PER_LAYER, scale=0.02, zero_point=4), "zero_point"),
        (3, f32([0.5]), Out(P.QUANT_UINT8_ASYMM_PER_LAYER, scale=0.02, zero_point=0), "zero_point"),
        (3, i32([0, 0]), Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.02), "zero_point"),
    ],
    ids=["scale_differs", "scale_count", "zp_not_symmetric", "zp_differs", "zp_fraction", "zp_count"],
)
def test_quantize_operands_disagree_with_output(index, value, out, operand):
    x = rand(2, 5, seed=8)
    inputs = quantize_inputs(x, 1, 0.02, [0])
    inputs[index] = value
    expect_error(lambda: run_op(OP.QUANTIZE, inputs, [out], [x.shape]), "QUANTIZE", f"'{operand}'")


@pytest.mark.parametrize(
    "axis, scales, operand",
    [(0, [0.1, 0.2, 0.3], "axis"), (5, [0.1, 0.2, 0.3], "axis"), (1, [0.1, 0.2], "scale")],
    ids=["axis_not_channel_dim", "axis_out_of_range", "scale_count"],
)
def test_quantize_per_channel_invalid(axis, scales, operand):
    shape, channels = (2, 3, 4), 3
    inputs = [
        (nna.OperandType(P.FLOAT32, shape), None),
        (nna.OperandType(P.INT32, [1]), np.array([axis], "int32")),
        (nna.OperandType(P.FLOAT32, [len(scales)]), np.asarray(scales, "float32")),
        (nna.OperandType(P.INT32, [1]), np.zeros(1, "int32")),
    ]
    out = nna.OperandType(P.QUANT_INT8_SYMM_PER_CHANNEL, shape, scale=[0.1, 0.2, 0.3][:channels], channel_dim=1)
    run = lambda: run_single(OP.QUANTIZE, inputs, [rand(*shape)], out)  # noqa: E731
    expect_error(run, "QUANTIZE", f"'{operand}'")


# -- DEQUANTIZE -----------------------------------------------------------------------------------
# (q - zero_point) * scale is one float32 subtraction of small integers (exact) and one product, the
# same rounding numpy does: the results are compared exactly.


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rank{len(s)}")
def test_dequantize_int8_per_layer(shape):
    q = np.random.default_rng(9).integers(-128, 128, shape).astype("int8")
    (got,) = run_op(OP.DEQUANTIZE, [In(q, P.QUANT_INT8_SYMM_PER_LAYER, scale=0.037)], [Out()], [shape])
    np.testing.assert_array_equal(got, dequantize(q, 0.037))


def test_dequantize_uint8_asymm():
    q = np.random.default_rng(10).integers(0, 256, (2, 3, 4)).astype("uint8")
    inp = In(q, P.QUANT_UINT8_ASYMM_PER_LAYER, scale=0.05, zero_point=131)
    (got,) = run_op(OP.DEQUANTIZE, [inp], [Out()], [q.shape])
    np.testing.assert_array_equal(got, dequantize(q, 0.05, 131))


@pytest.mark.parametrize("shape, channel_dim", [((5, 3), 0), ((2, 3, 4), 1), ((2, 3, 2, 4), 3)], ids=str)
def test_dequantize_int8_per_channel(shape, channel_dim):
    q = np.random.default_rng(11).integers(-128, 128, shape).astype("int8")
    scales = np.linspace(0.01, 0.05, shape[channel_dim]).astype("float32")
    t = nna.OperandType(P.QUANT_INT8_SYMM_PER_CHANNEL, shape, scale=scales.tolist(), channel_dim=channel_dim)
    got = run_single(OP.DEQUANTIZE, [(t, None)], [q], nna.OperandType(P.FLOAT32, shape))
    np.testing.assert_array_equal(got, dequantize(q, scales, axis=channel_dim))


def test_dequantize_constant_input():
    q = np.array([[-128, -1, 0], [1, 64, 127]], "int8")
    got = run_single(
        OP.DEQUANTIZE,
        [(nna.OperandType(P.QUANT_INT8_SYMM_PER_LAYER, q.shape, scale=0.5), q)],
        [],
        nna.OperandType(P.FLOAT32, q.shape),
    )
    np.testing.assert_array_equal(got, q.astype("float32") * 0.5)
