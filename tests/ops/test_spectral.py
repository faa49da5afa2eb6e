"""DFT and STFT (extensions 2310, 2311) against numpy.fft in complex128, as ONNX's DFT and STFT define them
(onnx.reference's op_dft / op_stft call numpy.fft the same way).  The kernels sum in float64 and round
to float32 once, so the tolerance is float32 rounding of the result: rtol 1e-5 plus an absolute 1e-5 of
the largest output (terms that cancel to ~0 carry the rounding of the large ones)."""

from __future__ import annotations

import numpy as np
import pytest
from oputil import UNKNOWN, In, Out, P, b8, expect_error, f32, i64, rand, run_op

from nnadapter_tvm.operations.spectral import DFT, STFT


def to_complex(x: np.ndarray) -> np.ndarray:
    x = x.astype("float64")
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def parts(y: np.ndarray) -> np.ndarray:
    return np.stack([y.real, y.imag], axis=-1)


def dft_ref(x: np.ndarray, n: int | None, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT: axis counts the trailing parts axis; n defaults as onnx.reference says."""
    signal = to_complex(x)
    axis %= x.ndim
    if n is None:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if inverse and onesided:
        return np.fft.irfft(signal, n=n, axis=axis)[..., None]
    if inverse:
        return parts(np.fft.ifft(signal, n=n, axis=axis))
    y = np.fft.fft(signal, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return parts(y)


def check(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(np.abs(expected).max(), 1.0))


def run_dft(x, n, axis, inverse, onesided, expected_shape):
    operands = [In(x), i64(np.zeros([0], "int64") if n is None else n), i64(axis), b8(inverse), b8(onesided)]
    return run_op(DFT, operands, [Out(P.FLOAT32)], [expected_shape])[0]


@pytest.mark.parametrize(
    "shape, axis, n, inverse, onesided",
    [
        ((2, 6, 1), 1, None, False, False),  # real, forward
        ((2, 7, 1), -2, None, False, True),  # real, one-sided (odd length)
        ((3, 5, 2), 1, None, False, False),  # complex, forward
        ((4, 3, 2), 0, None, False, False),  # the first axis
        ((1, 3, 5, 2), 2, None, True, False),  # complex inverse on a middle axis of a 4-D input
        ((2, 5, 2), 1, 8, False, False),  # dft_length pads with zeros
        ((2, 6, 1), 1, 4, False, True),  # dft_length cuts
        ((2, 4, 2), 1, None, True, True),  # one-sided inverse: real output of length 2 (4 - 1)
        ((2, 4, 2), 1, 7, True, True),  # one-sided inverse of odd length
        ((2, 6, 2), 1, 5, True, True),  # one-sided inverse reading fewer bins than it has
    ],
)
def test_dft(shape, axis, n, inverse, onesided) -> None:
    x = rand(*shape, seed=sum(shape))
    expected = dft_ref(x, n, axis, inverse, onesided)
    check(run_dft(x, n, axis, inverse, onesided, expected.shape), expected)


@pytest.mark.parametrize(
    "axis, n, fragments",
    [
        (2, None, ["axis 2 is the last axis"]),
        (-4, None, ["axis -4 is out of range"]),
        (1, 0, ["dft_length", "must be positive, got 0"]),
    ],
)
def test_dft_bad_operands(axis, n, fragments) -> None:
    x = rand(2, 4, 2)
    expect_error(lambda: run_dft(x, n, axis, False, False, (2, 4, 2)), "DFT", *fragments)


def test_dft_bad_input_shape() -> None:
    expect_error(lambda: run_dft(rand(2, 4, 3), None, 1, False, False, (2, 4, 2)), "DFT", "input", "[..., 2]")


# -- STFT -----------------------------------------------------------------------------------


def stft_ref(x: np.ndarray, step: int, window: np.ndarray | None, length: int | None, onesided: bool) -> np.ndarray:
    signal = to_complex(x)
    n = length if length is not None else (len(window) if window is not None else x.shape[1])
    w = np.ones(n) if window is None else window.astype("float64")
    frames = 1 + (x.shape[1] - n) // step
    bins = n // 2 + 1 if onesided else n
    out = np.stack([np.fft.fft(signal[:, f * step : f * step + n] * w, axis=1)[:, :bins] for f in range(frames)], 1)
    return parts(out)


@pytest.mark.parametrize(
    "shape, step, window_len, length, onesided",
    [
        ((1, 32, 1), 8, None, 16, True),
        ((2, 30, 1), 5, 12, None, True),  # a window gives the frame length
        ((2, 20, 1), 4, 8, 8, False),  # both, two-sided
        ((1, 18, 2), 3, 6, None, False),  # complex signal
        ((1, 9, 1), 2, None, None, True),  # neither: one frame of the whole signal
    ],
)
def test_stft(shape, step, window_len, length, onesided) -> None:
    x = rand(*shape, seed=3)
    window = None if window_len is None else (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window_len) / window_len))
    window = None if window is None else window.astype("float32")
    expected = stft_ref(x, step, window, length, onesided)
    operands = [
        In(x),
        i64(step),
        In(window) if window is not None else f32(np.zeros([0], "float32")),  # empty: absent, a window of ones
        i64(np.zeros([0], "int64") if length is None else length),
        b8(onesided),
    ]
    check(run_op(STFT, operands, [Out(P.FLOAT32)], [expected.shape])[0], expected)


def test_stft_bad_operands() -> None:
    x = rand(1, 16, 1)

    def run(step, window_len, length, onesided=True, signal=x):
        window = In(np.ones(window_len, "float32"))
        operands = [In(signal), i64(step), window, i64(length), b8(onesided)]
        return run_op(STFT, operands, [Out(P.FLOAT32)], [(1, 1, 1, 2)])

    expect_error(lambda: run(4, 6, 8), "STFT", "window", "has 6 elements; frame_length is 8")
    expect_error(lambda: run(0, 8, 8), "STFT", "frame_step", "must be positive")
    expect_error(lambda: run(4, 20, 20), "STFT", "frame_length", "must be in [1, 16]")
    expect_error(lambda: run(4, 8, 8, True, rand(1, 16, 2)), "STFT", "onesided", "signal is complex")


def test_dft_and_stft_with_a_symbolic_batch() -> None:
    # Only the transformed length must be static; the batch is known at execution.
    x = rand(3, 8, 2, seed=11)
    expected = dft_ref(x, None, 1, False, False)
    operands = [In(x, dims=[UNKNOWN, 8, 2]), i64(np.zeros([0], "int64")), i64(1), b8(False), b8(False)]
    check(run_op(DFT, operands, [Out(P.FLOAT32, dims=[UNKNOWN, 8, 2])], [expected.shape])[0], expected)
    signal = rand(2, 12, 1, seed=12)
    expected = stft_ref(signal, 4, None, 4, True)
    operands = [In(signal, dims=[UNKNOWN, 12, 1]), i64(4), f32(np.zeros([0], "float32")), i64(4), b8(True)]
    check(run_op(STFT, operands, [Out(P.FLOAT32, dims=[UNKNOWN, 3, 3, 2])], [expected.shape])[0], expected)


def test_dft_of_a_symbolic_signal_length_fails() -> None:
    x = rand(2, 8, 1)
    operands = [In(x, dims=[2, UNKNOWN, 1]), i64(np.zeros([0], "int64")), i64(1), b8(False), b8(False)]
    expect_error(lambda: run_op(DFT, operands, [Out(P.FLOAT32)], [(2, 8, 2)]), "DFT", "input", "static signal length")


@pytest.mark.parametrize(
    "shape, axis, n, inverse, onesided",
    [((2, 7, 1), -2, None, False, True), ((2, 4, 2), 1, 7, True, True), ((1, 3, 5, 2), 2, None, True, False)],
)
def test_dft_shape_inference(shape, axis, n, inverse, onesided) -> None:
    """The extension's shape inference (asked by importers) gives the reference's shape."""
    from nnadapter_tvm import operations

    expected = dft_ref(rand(*shape), n, axis, inverse, onesided).shape
    values = [None, None if n is None else np.array(n), np.array(axis), np.array(inverse), np.array(onesided)]
    assert operations.lookup(DFT).infer([shape, None, (), (), ()], values) == [expected]


def test_stft_shape_inference() -> None:
    from nnadapter_tvm import operations

    expected = stft_ref(rand(2, 30, 1), 5, np.ones(12), None, True).shape
    values = [None, np.array(5), None, None, np.array(True)]
    infer = operations.lookup(STFT).infer
    assert infer([(2, 30, 1), (), (12,), None, ()], values) == [expected]
    assert infer([(None, 30, 1), (), None, (), ()], [None, np.array(5), None, np.array(10), None])[0] == (
        None,
        5,
        6,
        2,
    )
