"""Fourier transforms (nnadapter-tvm's built-in extensions, codes 2310-2319): DFT and STFT, signals real
([..., 1]) or complex ([..., 2]) as ONNX lays them out (op_converters/spectral.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.operations.schema import BOOL, F32, INT32_64, Arg
from nnadapter_tvm.operations.table import define


def _scalar(values: list, i: int, default):
    value = values[i] if i < len(values) else None
    return default if value is None or np.size(value) == 0 else np.reshape(value, -1)[0].item()


def _infer_dft(shapes: list, values: list) -> list:
    shape = list(shapes[0])
    axis = int(_scalar(values, 2, -2)) % len(shape)
    inverse, onesided = bool(_scalar(values, 3, False)), bool(_scalar(values, 4, False))
    length = shape[axis]
    n = _scalar(values, 1, None)
    if n is None and length is not None:
        n = 2 * (length - 1) if inverse and onesided else length
    shape[-1] = 1 if inverse and onesided else 2
    shape[axis] = None if n is None else (n // 2 + 1 if onesided and not inverse else n)
    return [tuple(shape)]


def _infer_stft(shapes: list, values: list) -> list:
    batch, length = shapes[0][:2]
    window = shapes[2] if len(shapes) > 2 and shapes[2] is not None and shapes[2] != (0,) else None
    n = _scalar(values, 3, None) or (window[0] if window else length)
    step = _scalar(values, 1, None)
    onesided = bool(_scalar(values, 4, True))
    frames = None if None in (length, n, step) else 1 + (length - n) // step
    bins = None if n is None else (n // 2 + 1 if onesided else n)
    return [(batch, frames, bins, 2)]


DFT = define(
    "DFT",
    2310,
    [
        Arg("input", F32),
        Arg("dft_length", INT32_64, optional=True),
        Arg("axis", INT32_64, optional=True),
        Arg("inverse", BOOL, optional=True),
        Arg("onesided", BOOL, optional=True),
    ],
    [Arg("output", F32)],
    infer=_infer_dft,
).operation_type
STFT = define(
    "STFT",
    2311,
    [
        Arg("signal", F32),
        Arg("frame_step", INT32_64),
        Arg("window", F32, optional=True),
        Arg("frame_length", INT32_64, optional=True),
        Arg("onesided", BOOL, optional=True),
    ],
    [Arg("output", F32)],
    infer=_infer_stft,
).operation_type
