"""Fourier transforms as extensions (codes 2310-2319): DFT and STFT, each a direct O(n^2) TE compute.

Signals are real ([..., 1]) or complex ([..., 2], real and imaginary parts), as ONNX lays them out.
The twiddle angle is reduced exactly in integers (2 pi ((k t) mod n) / n) and the sums run in float64,
then cast to float32: numpy's FFT gives near-zero values (a real signal's Nyquist term) to ~1e-14,
and ONNX's cases compare with an absolute tolerance of 1e-7.
"""

from __future__ import annotations

import math

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O

F64 = "float64"


def _twiddle(k, t, n: int) -> tuple[tirx.PrimExpr, tirx.PrimExpr]:
    """cos and sin of 2 pi (k t mod n) / n, in float64."""
    r = tirx.floormod(k.astype("int64") * t.astype("int64"), tirx.const(n, "int64"))
    angle = r.astype(F64) * tirx.const(2 * math.pi / n, F64)
    return tirx.cos(angle), tirx.sin(angle)


def _static(args: OpArgs, dim, what: str, name: str) -> int:
    if not isinstance(dim, int):
        args.fail(f"needs a static {what} (the transform length is fixed at compile time), got {dim}", name)
    return dim


@converter(O.DFT)
def dft(args: OpArgs) -> relax.Expr:
    """input [..., 1 or 2] (real, or complex as [real, imaginary]), dft_length (optional: the signal's
    length; 2 (L - 1) for a one-sided inverse), axis (default -2; never the last), inverse (default
    false), onesided (default false) -> output [..., 2], or [..., 1] for a one-sided inverse.

    Forward: y[f] = sum_t x[t] exp(-2 pi i f t / n) over the signal zero-padded or cut to n =
    dft_length along axis; onesided keeps the n // 2 + 1 first frequencies.  Inverse: (1 / n) sum_k
    x[k] exp(2 pi i k t / n); a one-sided inverse reads the input as the first half of a Hermitian
    spectrum and gives the real signal (numpy.fft.irfft).  The lengths must be static.

    Reference: ONNX DFT (opset 17 and 20; onnx.reference's op_dft, numpy.fft).
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        args.fail(f"must have shape [..., 1] (real) or [..., 2] (complex), got {shape}", "input")
    axis = args.int("axis", -2)
    if not -rank <= axis < rank:
        args.fail(f"axis {axis} is out of range [-{rank}, {rank - 1}) for a rank-{rank} input", "axis")
    axis %= rank
    if axis == rank - 1:
        args.fail(f"axis {axis} is the last axis, which holds the real and imaginary parts", "axis")
    inverse, onesided = args.bool("inverse", False), args.bool("onesided", False)
    length = _static(args, shape[axis], "signal length", "input")
    n = args.int("dft_length") if args.has("dft_length") else (2 * (length - 1) if inverse and onesided else length)
    if n < 1:
        args.fail(f"must be positive, got {n}", "dft_length")
    complex_in = shape[-1] == 2
    scale = tirx.const(1.0 / n if inverse else 1.0, F64)

    def compute(t: te.Tensor) -> te.Tensor:
        def part(index, k, p):
            at = list(index[:-1])
            at[axis] = k
            return t(*at, p).astype(F64) if (p == 0 or complex_in) else tirx.const(0.0, F64)

        if inverse and onesided:
            half = n // 2  # the Hermitian spectrum's stored half: k <= n // 2 (when the input has them)
            k = te.reduce_axis((0, n), "k")

            def real_signal(*index):
                c, s = _twiddle(k, index[axis], n)
                mirror = tirx.Select(k <= half, k, n - k)
                inside = mirror < length
                at = tirx.Select(inside, mirror, 0)
                re, im = part(index, at, 0), part(index, at, 1)
                sign = tirx.Select(k <= half, tirx.const(1.0, F64), tirx.const(-1.0, F64))
                term = tirx.Select(inside, re * c - sign * im * s, tirx.const(0.0, F64))
                return te.sum(term, axis=k)

            out_shape = [*shape[:-1], 1]
            out_shape[axis] = n
            y = te.compute(out_shape, real_signal, name="irdft")
        else:
            k = te.reduce_axis((0, min(n, length)), "k")
            sign = 1.0 if inverse else -1.0

            def spectrum(*index):
                c, s = _twiddle(k, index[axis], n)
                re, im = part(index, k, 0), part(index, k, 1)
                # x e^{sign i a}: real re c - sign im s, imaginary im c + sign re s.
                real = re * c - tirx.const(sign, F64) * im * s
                imag = im * c + tirx.const(sign, F64) * re * s
                return te.sum(tirx.Select(index[-1] == 0, real, imag), axis=k)

            out_shape = [*shape[:-1], 2]
            out_shape[axis] = n // 2 + 1 if onesided else n
            y = te.compute(out_shape, spectrum, name="dft")
        return te.compute(y.shape, lambda *i: (y(*i) * scale).astype("float32"), name="dft_cast")

    return args.emit_te(compute, x)


@converter(O.STFT)
def stft(args: OpArgs) -> relax.Expr:
    """signal [B, L, 1 or 2], frame_step, window (optional [W]), frame_length (optional: W, else L),
    onesided (default true; only for a real signal) -> output [B, F, bins, 2] with F = 1 + (L - n) //
    frame_step frames of n = frame_length samples and bins = n // 2 + 1 (onesided) or n.

    output[b, f, k] = sum_t signal[b, f * frame_step + t] window[t] exp(-2 pi i k t / n) (window: ones
    when absent).  The lengths must be static.

    Reference: ONNX STFT (onnx.reference's op_stft).
    """
    x = args.tensor("signal")
    shape = args.shape(x)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        args.fail(f"must have shape [B, L, 1] (real) or [B, L, 2] (complex), got {shape}", "signal")
    length = _static(args, shape[1], "signal length", "signal")
    step = args.int("frame_step")
    if step < 1:
        args.fail(f"must be positive, got {step}", "frame_step")
    window = args.tensor("window") if args.has("window") else None
    window_length = None
    if window is not None:
        wshape = args.shape(window)
        if len(wshape) != 1:
            args.fail(f"must be 1-D, got shape {wshape}", "window")
        window_length = _static(args, wshape[0], "window length", "window")
    n = args.int("frame_length") if args.has("frame_length") else (window_length or length)
    if window_length is not None and window_length != n:
        args.fail(f"has {window_length} elements; frame_length is {n}", "window")
    if not 1 <= n <= length:
        args.fail(f"must be in [1, {length}] (the signal's length), got {n}", "frame_length")
    complex_in = shape[-1] == 2
    onesided = args.bool("onesided", True)
    if onesided and complex_in:
        args.fail("is true but the signal is complex (ONNX allows onesided only for real signals)", "onesided")
    frames = 1 + (length - n) // step
    bins = n // 2 + 1 if onesided else n

    def compute(t: te.Tensor, *w: te.Tensor) -> te.Tensor:
        k = te.reduce_axis((0, n), "k")

        def spectrum(b, f, freq, p):
            c, s = _twiddle(freq, k, n)
            at = f * step + k
            weight = w[0][k].astype(F64) if w else tirx.const(1.0, F64)
            re = t[b, at, 0].astype(F64) * weight
            im = t[b, at, 1].astype(F64) * weight if complex_in else tirx.const(0.0, F64)
            return te.sum(tirx.Select(p == 0, re * c + im * s, im * c - re * s), axis=k)

        y = te.compute((shape[0], frames, bins, 2), spectrum, name="stft")
        return te.compute(y.shape, lambda *i: y(*i).astype("float32"), name="stft_cast")

    return args.emit_te(compute, x, *([window] if window is not None else []))
