"""RESIZE_ONNX (extension 2200): ONNX's Resize in every mode and coordinate transformation.

NNAdapter's RESIZE_NEAREST / RESIZE_LINEAR follow Paddle's interpolate and compute only some of ONNX's
configurations (the ONNX importer keeps mapping those onto them, frontends/onnx/ops/resize.py).  This
operation computes the rest as ONNX's reference does it: resizing is separable, so each resized axis in
turn is one gather-and-weigh pass over a few neighbouring input positions.  Which positions and which
weights depend only on the sizes, the scale and the attributes, never on the data, so the converter
computes them at compile time in float64 (the reference's own arithmetic, so ties of nearest rounding
and the extrapolated positions of tf_crop_and_resize fall exactly where ONNX's fall), and the kernel
is a TE compute of ``sum_k w[o, k] * x[..., idx[o, k], ...]`` per axis in float32.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.extensions import register_builtin
from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import f32
from nnadapter_tvm.op_schema import BOOL, FLOAT_SCALAR, INT32, Arg
from nnadapter_tvm.types import Precision as P
from nnadapter_tvm.types import ResultCode

# The integer codes of the string attributes, in ONNX's spelling.
MODES = ("nearest", "linear", "cubic")
COORDINATE_TRANSFORMATION_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

# A pass sums its taps unrolled up to this many, with a reduction axis beyond (antialiased downsampling
# by a small scale weighs many input positions).
_UNROLL = 8


def _nearest_coeffs(ratio: np.ndarray, nearest_mode: str) -> np.ndarray:
    """[out, 2] weights of the two neighbours; ``ratio`` in (0, 1], 1 at an integer position."""
    if nearest_mode == "round_prefer_floor":
        right = ratio > 0.5
    elif nearest_mode == "round_prefer_ceil":
        right = ratio >= 0.5
    elif nearest_mode == "floor":
        right = np.zeros_like(ratio, bool)
    else:
        right = np.ones_like(ratio, bool)
    right = right | (ratio == 1.0)  # an integer position is the right neighbour itself
    return np.stack([~right, right], axis=-1).astype(np.float64)


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a``."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _coeffs(ratio: np.ndarray, scale: float, mode: str, nearest_mode: str, a: float, antialias: bool) -> np.ndarray:
    """[out, n] weights of the n neighbours of each output position (ONNX's get_coeffs)."""
    if mode == "nearest":
        return _nearest_coeffs(ratio, nearest_mode)
    r = ratio[:, None]
    if not antialias:
        if mode == "linear":
            return np.concatenate([1 - r, r], axis=1)
        return _cubic_kernel(np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1), a)
    # Antialiasing stretches the kernel by 1 / scale when downsampling, and normalizes its weights.
    s = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        taps = np.arange(start, 2 - start, dtype=np.float64)
        w = np.clip(1 - np.abs((taps[None, :] - r) * s), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        taps = np.arange(start, 2 - start, dtype=np.float64)
        w = _cubic_kernel(s * (taps[None, :] - r), a)
    return w / w.sum(axis=1, keepdims=True)


def _source_positions(
    ctm: str, in_size: int, out_size: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each output index's position in the input, and (tf_crop_and_resize) which fall outside it."""
    y = np.arange(out_size, dtype=np.float64)
    out_width = scale * in_size  # ONNX's "length_resized" before truncation
    outside = None
    if ctm == "align_corners":
        x = np.zeros(out_size) if out_width == 1 else y * (in_size - 1) / (out_width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if out_width == 1:
            x = np.full(out_size, (end - start) * (in_size - 1) / 2)
        else:
            x = y * (end - start) * (in_size - 1) / (out_width - 1)
        x = x + start * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric: the centre of the output maps to the centre of the input
        offset = in_size / 2 * (1 - out_size / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, outside


def axis_taps(
    in_size: int,
    out_size: int,
    scale: float,
    *,
    mode: str,
    coordinate_transformation_mode: str,
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    antialias: bool = False,
    roi: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The input indices [out, n] (clamped: edge padding), their float64 weights [out, n], and the
    output positions to extrapolate ([out] bool, tf_crop_and_resize only) of one resized axis."""
    x, outside = _source_positions(coordinate_transformation_mode, in_size, out_size, scale, roi)
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)  # (0, 1]: the left neighbour is preferred
    coeffs = _coeffs(ratio, scale, mode, nearest_mode, cubic_coeff_a, antialias)
    n = coeffs.shape[1]
    # The n indices nearest to x, ties to the smaller (ONNX's _get_neighbor_idxes): even n centres the
    # window on floor(x) + 0.5 (on x - 0.5 at an integer x), odd n on the nearest integer.
    if n % 2 == 0:
        first = floor - n // 2 + np.where(x == floor, 0, 1)
    else:
        first = np.where(x - floor <= 0.5, floor, floor + 1) - (n - 1) // 2
    idx = first.astype(np.int64)[:, None] + np.arange(n)[None, :]
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    idx = np.clip(idx, 0, in_size - 1)
    if mode == "nearest":  # one tap: the neighbour of weight 1 (no 0 * inf from the other)
        pick = np.argmax(coeffs, axis=1)[:, None]
        idx, coeffs = np.take_along_axis(idx, pick, 1), np.ones((out_size, 1))
    return idx, coeffs, outside


def _identity(in_size, out_size: int, scale: float, roi: tuple[float, float] | None) -> bool:
    """ONNX skips an axis of scale 1 keeping its size (and the whole roi)."""
    return (
        math.isclose(scale, 1.0)
        and (out_size < 0 or out_size == in_size)
        and (roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0)))
    )


def _choice(args: OpArgs, name: str, names: tuple[str, ...], default: int) -> str:
    code = args.int(name, default)
    if not 0 <= code < len(names):
        args.fail(f"must be one of {', '.join(f'{i}={n}' for i, n in enumerate(names))}, got {code}", name)
    return names[code]


def _resize_onnx(args: OpArgs) -> relax.Expr:
    """input [d0, ..., d(r-1)] (float32), sizes [r] (int32: the output shape; -1 keeps an axis of scale
    1), scales [r] (float32 or float64: ONNX's scale of each axis, output / input size where ONNX's
    sizes were given), roi [2r] (optional: starts then ends, tf_crop_and_resize only), mode (0 nearest,
    1 linear, 2 cubic), coordinate_transformation_mode (0 half_pixel, 1 half_pixel_symmetric, 2
    pytorch_half_pixel, 3 align_corners, 4 asymmetric, 5 tf_crop_and_resize), nearest_mode (0
    round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil), cubic_coeff_a, exclude_outside,
    extrapolation_value, antialias -> output [sizes]: ONNX's Resize.

    Each axis whose scale is not 1 (or whose size or roi changes) is resized in turn, in axis order:
    output position y maps to a source position x by the coordinate transformation, and the output is
    the weighted sum of the input at the n positions nearest x (clamped into the input: edge padding),
    weighted by the mode's kernel (nearest: 1 on the neighbour nearest_mode picks; linear: the hat;
    cubic: Keys' kernel with a = cubic_coeff_a; antialias: the kernel stretched by 1 / scale when
    downsampling, weights normalized); exclude_outside zeroes the weights of positions outside the input
    and renormalizes; tf_crop_and_resize gives extrapolation_value where x falls outside the input.
    The input's sizes along resized axes must be known at compile time.

    Reference: ONNX Resize (opset 19), onnx.reference.ops.op_resize.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    sizes = args.ints("sizes")
    if len(sizes) != rank or any(s < -1 or s == 0 for s in sizes):
        args.fail(f"must hold {rank} positive sizes (-1: keep the input's), got {sizes}", "sizes")
    scales = [float(s) for s in np.reshape(args.value("scales"), -1)]
    if len(scales) != rank or not all(s > 0 for s in scales):
        args.fail(f"must hold {rank} positive scales, got {scales}", "scales")
    roi_values = np.reshape(args.value("roi"), -1).astype(np.float64) if args.has("roi") else None
    if roi_values is not None and roi_values.size != 2 * rank:
        args.fail(f"must hold {2 * rank} values (starts, then ends), got {roi_values.size}", "roi")
    mode = _choice(args, "mode", MODES, 0)
    ctm = _choice(args, "coordinate_transformation_mode", COORDINATE_TRANSFORMATION_MODES, 0)
    nearest_mode = _choice(args, "nearest_mode", NEAREST_MODES, 0)
    antialias = args.bool("antialias", False)
    if antialias and mode == "nearest":
        args.fail("antialias applies to modes linear and cubic, not nearest", "antialias")
    a = args.float("cubic_coeff_a", -0.75)
    exclude_outside = args.bool("exclude_outside", False)
    extrapolation = args.float("extrapolation_value", 0.0)
    if ctm != "tf_crop_and_resize":
        roi_values = None
    for axis in range(rank):
        roi = None if roi_values is None else (float(roi_values[axis]), float(roi_values[axis + rank]))
        if _identity(shape[axis], sizes[axis], scales[axis], roi):
            continue
        if sizes[axis] < 0:
            args.fail(f"size -1 (keep) at axis {axis} whose scale {scales[axis]} or roi changes it", "sizes")
        if not isinstance(shape[axis], int):
            args.fail(
                f"axis {axis} is resized: its size must be known at compile time, got {shape[axis]}",
                "input",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        idx, weights, outside = axis_taps(
            shape[axis],
            sizes[axis],
            scales[axis],
            mode=mode,
            coordinate_transformation_mode=ctm,
            nearest_mode=nearest_mode,
            cubic_coeff_a=a,
            exclude_outside=exclude_outside,
            antialias=antialias,
            roi=roi,
        )
        x = _resize_axis(args, x, axis, idx, weights, outside, extrapolation)
    return x


def _resize_axis(args: OpArgs, x, axis: int, idx, weights, outside, extrapolation: float) -> relax.Expr:
    """One pass: out[..., o, ...] = sum_k weights[o, k] * x[..., idx[o, k], ...] (extrapolation where
    ``outside[o]``)."""
    out_size, n = idx.shape
    tables = [relax.const(idx.astype("int32")), relax.const(weights.astype(np.float32))]
    if outside is not None and outside.any():
        tables.append(relax.const(outside.astype("int32")))

    def compute(data: te.Tensor, index: te.Tensor, weight: te.Tensor, *mask: te.Tensor) -> te.Tensor:
        out_shape = list(data.shape)
        out_shape[axis] = out_size

        def at(ix, k):
            src = list(ix)
            src[axis] = index[ix[axis], k]
            return data[tuple(src)]

        def body(*ix):
            o = ix[axis]
            if n == 1:
                value = at(ix, 0)
            elif n <= _UNROLL:
                value = weight[o, 0] * at(ix, 0)
                for k in range(1, n):
                    value = value + weight[o, k] * at(ix, k)
            else:
                k = te.reduce_axis((0, n), name="k")
                value = te.sum(weight[o, k] * at(ix, k), axis=k)
            if mask and n <= _UNROLL:
                value = tirx.Select(mask[0][o] != 0, f32(extrapolation), value)
            return value

        return te.compute(out_shape, body, name="resize_onnx")

    if n > _UNROLL and len(tables) == 3:
        # A reduction must be a TE compute's whole body: extrapolate in a second step.
        summed = args.emit_te(compute, x, *tables[:2])
        mask_shape = [1] * len(args.shape(x))
        mask_shape[axis] = out_size
        mask = relax.const(outside.reshape(mask_shape))
        return args.emit(relax.op.where(mask, relax.const(np.float32(extrapolation)), summed))
    return args.emit_te(compute, x, *tables)


def _infer(shapes: list, values: list) -> list:
    """Output shape: ``sizes``, where -1 keeps the input's size."""
    sizes = values[1]
    if sizes is None or shapes[0] is None:
        return [None]
    return [tuple(d if s < 0 else int(s) for d, s in zip(shapes[0], np.reshape(sizes, -1)))]


RESIZE_ONNX = register_builtin(
    "RESIZE_ONNX",
    2200,
    [
        Arg("input", (P.FLOAT32,)),
        Arg("sizes", INT32),
        Arg("scales", (P.FLOAT32, P.FLOAT64)),
        Arg("roi", (P.FLOAT32, P.FLOAT64), optional=True),
        Arg("mode", INT32, optional=True),
        Arg("coordinate_transformation_mode", INT32, optional=True),
        Arg("nearest_mode", INT32, optional=True),
        Arg("cubic_coeff_a", FLOAT_SCALAR, optional=True),
        Arg("exclude_outside", BOOL, optional=True),
        Arg("extrapolation_value", FLOAT_SCALAR, optional=True),
        Arg("antialias", BOOL, optional=True),
    ],
    [Arg("output", (P.FLOAT32,))],
    _resize_onnx,
    infer=_infer,
)

__all__ = ["COORDINATE_TRANSFORMATION_MODES", "MODES", "NEAREST_MODES", "RESIZE_ONNX", "axis_taps"]
