"""The bitwise extensions BITWISE_AND/OR/XOR/NOT, BIT_SHIFT and BITCAST (op_converters/bitwise.py) against
references written from ONNX's definitions (BitwiseAnd/Or/Xor/Not, BitShift, BitCast).

Every result is an integer (or the same bytes), so every comparison is exact. The shift reference works on
Python integers, bit by bit as the ONNX operator's text says, not with numpy's shifts.
"""

import numpy as np
import pytest
from oputil import PRECISION, UNKNOWN, In, Out, expect_error, i32, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.bitwise import BIT_SHIFT, BITCAST, BITWISE_AND, BITWISE_NOT, BITWISE_OR, BITWISE_XOR

P = nna.Precision
INTEGERS = [d for d in PRECISION if np.dtype(d).kind in "iu"]


def _integers(shape, dtype: str, seed: int) -> np.ndarray:
    """Values over the whole range of ``dtype``, the extremes included."""
    info = np.iinfo(dtype)
    v = np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    flat = v.reshape(-1)
    flat[: min(2, flat.size)] = [info.min, info.max][: min(2, flat.size)]
    return v


def _run(op, inputs, dtype, shape) -> np.ndarray:
    return run_op(op, inputs, [Out(PRECISION[dtype])], [shape])[0]


BINARY = {BITWISE_AND: np.bitwise_and, BITWISE_OR: np.bitwise_or, BITWISE_XOR: np.bitwise_xor}
PY_BINARY = {BITWISE_AND: lambda x, y: x & y, BITWISE_OR: lambda x, y: x | y, BITWISE_XOR: lambda x, y: x ^ y}


@pytest.mark.parametrize("op", list(BINARY), ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_binary(op, dtype):
    a, b = _integers((2, 3, 4), dtype, 1), _integers((3, 1), dtype, 2)
    got = _run(op, [In(a, PRECISION[dtype]), In(b, PRECISION[dtype])], dtype, (2, 3, 4))
    # Python's & | ^ act on two's complement of unbounded width; % 2^bits keeps the type's bits.
    bits = np.dtype(dtype).itemsize * 8
    pairs = zip(*(v.ravel() for v in np.broadcast_arrays(a, b)))
    expected = np.array([PY_BINARY[op](int(x), int(y)) % 2**bits for x, y in pairs], f"uint{bits}").view(dtype)
    np.testing.assert_array_equal(got.ravel(), expected)
    assert got.dtype == np.dtype(dtype)


@pytest.mark.parametrize("op", list(BINARY), ids=lambda o: o.name)
def test_bitwise_binary_symbolic(op):
    a, b = _integers((3, 4), "int32", 3), _integers((4,), "int32", 4)
    p = P.INT32
    got = run_op(op, [In(a, p, dims=[UNKNOWN, 4]), In(b, p)], [Out(p, dims=[UNKNOWN, 4])], [(3, 4)])[0]
    np.testing.assert_array_equal(got, BINARY[op](a, b))


@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_not(dtype):
    x = _integers((2, 5), dtype, 5)
    got = _run(BITWISE_NOT, [In(x, PRECISION[dtype])], dtype, x.shape)
    bits = np.dtype(dtype).itemsize * 8
    # ~x flips every bit: for the unsigned value u, (2^bits - 1) - u; read back as the type.
    unsigned = [int(v) % 2**bits for v in x.ravel()]
    expected = np.array([(2**bits - 1) - u for u in unsigned], dtype=f"uint{bits}").view(dtype)
    np.testing.assert_array_equal(got.ravel(), expected)


def _shift_reference(x: np.ndarray, s: np.ndarray, left: bool) -> np.ndarray:
    """ONNX BitShift on Python integers: shifts in [0, bits) move the two's-complement bits (left drops those
    past the width; right of a signed value is arithmetic); others give 0, or -1 right of a negative value."""
    dtype = x.dtype
    bits = dtype.itemsize * 8
    out = []
    for v, n in zip(*(a.ravel() for a in np.broadcast_arrays(x, s))):
        v, n = int(v), int(n)
        full_width = 0 if left or v >= 0 else -1
        shifted = (v << n if left else v >> n) if 0 <= n < bits else full_width  # Python's >> is arithmetic
        out.append(shifted % 2**bits)
    return np.array(out, dtype=f"uint{bits}").view(dtype).reshape(np.broadcast_shapes(x.shape, s.shape))


@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("dtype", INTEGERS)
def test_bit_shift(left, dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = _integers((3, 6), dtype, 6)
    shifts = [0, 1, bits - 1, bits, bits + 3, 2]  # in range, at the width and past it
    if np.dtype(dtype).kind == "i":
        shifts[-1] = -1  # negative shifts are out of range too
    s = np.array(shifts, dtype=dtype)
    p = PRECISION[dtype]
    got = _run(BIT_SHIFT, [In(x, p), In(s, p), i32([0 if left else 1])], dtype, x.shape)
    np.testing.assert_array_equal(got, _shift_reference(x, s, left))


def test_bit_shift_symbolic_broadcast():
    x = np.array([[-8, 5, 127], [-128, 1, -1]], "int8")
    s = np.array([1, 7, 9], "int8")
    p = P.INT8
    inputs = [In(x, p, dims=[UNKNOWN, 3]), In(s, p), i32([1])]
    got = run_op(BIT_SHIFT, inputs, [Out(p, dims=[UNKNOWN, 3])], [(2, 3)])[0]
    np.testing.assert_array_equal(got, _shift_reference(x, s, False))


def test_bit_shift_bad_direction():
    x = np.array([1, 2], "uint8")
    expect_error(
        lambda: _run(BIT_SHIFT, [In(x, P.UINT8), In(x, P.UINT8), i32([2])], "uint8", x.shape),
        "BIT_SHIFT",
        "direction",
        "2",
    )


BITCASTS = [
    ("float32", "int32"),
    ("int32", "float32"),
    ("float64", "int64"),
    ("uint64", "float64"),
    ("uint32", "int32"),
    ("int16", "float16"),
    ("float16", "uint16"),
    ("int8", "uint8"),
    ("bool", "uint8"),
    ("int8", "bool"),
]


@pytest.mark.parametrize("source,target", BITCASTS, ids=lambda v: v)
def test_bitcast(source, target):
    if source == "bool":
        x = np.array([[True, False, True], [False, False, True]])
    elif np.dtype(source).kind == "f":
        x = np.array([[1.5, -0.0, np.inf], [-2.25, np.nan, 3e-5]], source)
    else:
        x = _integers((2, 3), source, 7)
    got = _run(BITCAST, [In(x, PRECISION[source]), i32([int(PRECISION[target])])], target, x.shape)
    # numpy's view reads the same bytes; a byte read as bool is true when non-zero.
    expected = x.view(target) if target != "bool" else x.view("uint8") != 0
    np.testing.assert_array_equal(
        got.view("uint8") if target != "bool" else got, expected.view("uint8") if target != "bool" else expected
    )


def test_bitcast_symbolic():
    x = np.array([[1.0, -3.5]], "float32")
    got = run_op(BITCAST, [In(x, dims=[UNKNOWN, 2]), i32([int(P.INT32)])], [Out(P.INT32, dims=[UNKNOWN, 2])], [(1, 2)])[
        0
    ]
    np.testing.assert_array_equal(got, x.view("int32"))


def test_bitcast_size_mismatch():
    x = np.array([1.0], "float32")
    expect_error(
        lambda: _run(BITCAST, [In(x), i32([int(P.INT64)])], "int64", x.shape),
        "BITCAST",
        "dtype",
        "INT64",
        "element size",
    )


def test_bitcast_quantized_code_rejected():
    x = np.array([1, 2], "int8")
    code = int(P.QUANT_INT8_SYMM_PER_LAYER)
    expect_error(lambda: _run(BITCAST, [In(x, P.INT8), i32([code])], "int8", x.shape), "BITCAST", "dtype", str(code))


def test_operation_codes():
    """The operations are reached by their codes (2000-2005), as a model file names them."""
    assert [nna.OperationType(c) for c in range(2000, 2006)] == [
        BITWISE_AND,
        BITWISE_OR,
        BITWISE_XOR,
        BITWISE_NOT,
        BIT_SHIFT,
        BITCAST,
    ]
