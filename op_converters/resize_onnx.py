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
import tvm
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import f32
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.onnx_vision import COORDINATE_TRANSFORMATION_MODES, NEAREST_MODES
from nnadapter_tvm.operations.onnx_vision import RESIZE_MODES as MODES
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode

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


def _identity(in_size, out_size, scale: float, roi: tuple[float, float] | None) -> bool:
    """ONNX skips an axis of scale 1 keeping its size (and the whole roi); sizes may be expressions."""
    same = out_size == in_size if isinstance(out_size, int) and isinstance(in_size, int) else _equal(out_size, in_size)
    return (
        same and math.isclose(scale, 1.0) and (roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0)))
    )


def _equal(a, b) -> bool:
    """Whether two sizes (ints or TIR expressions) are provably equal."""
    a = tirx.IntImm("int64", a) if isinstance(a, int) else a
    b = tirx.IntImm("int64", b) if isinstance(b, int) else b
    if str(a.ty) != str(b.ty):
        a, b = tirx.Cast("int64", a), tirx.Cast("int64", b)
    return bool(tvm.sym.Analyzer().can_prove_equal(a, b))


def _choice(args: OpArgs, name: str, names: tuple[str, ...], default: int) -> str:
    code = args.int(name, default)
    if not 0 <= code < len(names):
        args.fail(f"must be one of {', '.join(f'{i}={n}' for i, n in enumerate(names))}, got {code}", name)
    return names[code]


def _static(value) -> int | None:
    """A size as a Python int where it is static, else None."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, tirx.IntImm):
        return int(value.value)
    return None


def _scaled_size(in_size, scale: float):
    """ONNX's output size from a constant scale, floor(scale * n) in float64 (the reference's
    ``(scale_factors * shape).astype(int)``), for an input size known only at execution; an integer
    scale, or one over a power of two, multiplies or divides exactly."""
    if float(scale).is_integer():
        return in_size * int(scale)
    inverse = 1.0 / scale
    if inverse.is_integer() and inverse * scale == 1.0 and math.frexp(inverse)[0] == 0.5:
        return tirx.floordiv(in_size, int(inverse))
    return tirx.Cast("int64", tirx.floor(_f64(in_size) * _f64(scale)))


def _sizes(args: OpArgs, rank: int) -> list:
    """``sizes``: constants (-1: the size the scale gives), the expressions compile time knows for a
    computed sizes tensor (OpArgs.shape_values), or else its values read at execution as new symbolic
    sizes."""
    if args.operand("sizes").is_constant:
        sizes = args.ints("sizes")
        if len(sizes) != rank or any(s < -1 for s in sizes):
            args.fail(f"must hold {rank} sizes (-1: the size the scale gives), got {sizes}", "sizes")
        return sizes
    values = args.shape_values("sizes")
    if values is None:
        lengths = args.shape(args.raw_tensor("sizes"))
        if lengths != [rank]:
            args.fail(f"must be a 1-D tensor of {rank} sizes, got shape {lengths}", "sizes")
        read = args.runtime_shape("sizes", rank, "resize_size")
        # Where the output operand declares a size (the importer knows a detector's N and C), that size is
        # the one read, checked at execution: the axis keeps its size without a pass over the data.
        declared = args.output_type(0).dimensions
        for k, d in enumerate(declared if len(declared) == rank else []):
            if d >= 0:
                args.require_dims(read[k] == d, read[k], f"size {k} must be {d}, the output's declared size", "sizes")
                read[k] = d
        return read
    if len(values) != rank:
        args.fail(f"must hold {rank} sizes, got {len(values)}", "sizes")
    return values


def _scales(args: OpArgs, rank: int):
    """``scales``: floats (a constant), None (absent: each axis' scale is its output over its input
    size) or the tensor (computed at run time: the kernels read it)."""
    if not args.has("scales"):
        return None
    if not args.operand("scales").is_constant:
        tensor = args.tensor("scales")
        if args.shape(tensor) != [rank]:
            args.fail(f"must be a 1-D tensor of {rank} scales, got shape {args.shape(tensor)}", "scales")
        return tensor
    scales = [float(s) for s in np.reshape(args.value("scales"), -1)]
    if len(scales) != rank or not all(s > 0 for s in scales):
        args.fail(f"must hold {rank} positive scales, got {scales}", "scales")
    return scales


def _read_scaled_sizes(args: OpArgs, x: relax.Expr, scales: relax.Expr, rank: int) -> list[tirx.Var]:
    """floor(scale * n) of every axis where the scales are known only at execution: computed from the
    tensors in float64 and read back as new symbolic sizes."""
    dims = relax.op.astype(relax.op.shape_to_tensor(relax.op.shape_of(x)), "float64")
    product = relax.op.floor(relax.op.multiply(relax.op.astype(scales, "float64"), dims))
    shape = args.emit(relax.op.tensor_to_shape(relax.op.astype(product, "int64")))
    sizes = [tirx.Var(f"resize_scaled{k}", "int64") for k in range(rank)]
    args.match_cast(shape, sizes)
    return sizes


@converter(O.RESIZE_ONNX)
def _resize_onnx(args: OpArgs) -> relax.Expr:
    """input [d0, ..., d(r-1)] (float32), sizes [r] (int32 or int64: the output shape, constant or
    computed; a constant -1 takes the size from the scale, floor(scale * d)), scales [r] (float32 or
    float64: ONNX's scale of each axis, constant or computed; empty: output / input size), roi [2r]
    (optional: starts then ends, tf_crop_and_resize only), mode (0 nearest, 1 linear, 2 cubic),
    coordinate_transformation_mode (0 half_pixel, 1 half_pixel_symmetric, 2 pytorch_half_pixel, 3
    align_corners, 4 asymmetric, 5 tf_crop_and_resize), nearest_mode (0 round_prefer_floor, 1
    round_prefer_ceil, 2 floor, 3 ceil), cubic_coeff_a, exclude_outside, extrapolation_value, antialias
    -> output [sizes]: ONNX's Resize.

    Each axis whose scale is not 1 (or whose size or roi changes) is resized in turn, in axis order:
    output position y maps to a source position x by the coordinate transformation, and the output is
    the weighted sum of the input at the n positions nearest x (clamped into the input: edge padding),
    weighted by the mode's kernel (nearest: 1 on the neighbour nearest_mode picks; linear: the hat;
    cubic: Keys' kernel with a = cubic_coeff_a; antialias: the kernel stretched by 1 / scale when
    downsampling, weights normalized); exclude_outside zeroes the weights of positions outside the input
    and renormalizes; tf_crop_and_resize gives extrapolation_value where x falls outside the input.
    Positions and weights are computed in float64 as the reference computes them: at compile time where
    the axis' sizes and scale are known, else by kernels over the sizes found at execution (sizes
    computed from the model's dimensions, an input of unknown size, scales computed at run time), so one
    compilation serves every size.  An axis is skipped where its size provably stays (a computed size
    known as the input's own dimension); sizes read from data, or computed scales, resize every axis.
    antialias needs the scale at compile time (it sets the number of taps).

    Reference: ONNX Resize (opset 19), onnx.reference.ops.op_resize.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    rank = len(shape)
    sizes = _sizes(args, rank)
    scales = _scales(args, rank)
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
    computed_scales = isinstance(scales, relax.Expr)
    read = None
    if computed_scales and any(isinstance(s, int) and s < 0 for s in sizes):
        read = _read_scaled_sizes(args, x, scales, rank)
    kernel = {
        "mode": mode,
        "coordinate_transformation_mode": ctm,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": a,
        "exclude_outside": exclude_outside,
        "antialias": antialias,
    }
    for axis in range(rank):
        roi = None if roi_values is None else (float(roi_values[axis]), float(roi_values[axis + rank]))
        in_size, size = shape[axis], sizes[axis]
        given = not isinstance(size, int) or size >= 0  # else -1: the size the scale gives
        if computed_scales:
            scale = None
            out = size if given else read[axis]
        elif scales is not None:
            scale = scales[axis]
            if given:
                out = size
            elif isinstance(in_size, int):
                out = int(np.floor(scale * in_size))
            else:
                out = _scaled_size(in_size, scale)
        else:
            scale = None
            out = size if given else in_size  # -1 without scales keeps the size
        static_in, static_out = _static(in_size), _static(out)
        if scale is None and not computed_scales and static_in is not None and static_out is not None:
            scale = static_out / static_in  # the reference's output_size / input_size, float64
        if not computed_scales:
            derived = 1.0 if scale is None and _equal(out, in_size) else scale
            if derived is not None and _identity(in_size, out, derived, roi):
                continue
        if static_in is not None and static_out is not None and scale is not None:
            idx, weights, outside = axis_taps(static_in, static_out, scale, roi=roi, **kernel)
            tables = [relax.const(idx.astype("int32"))]
            tables.append(None if idx.shape[1] == 1 else relax.const(weights.astype(np.float32)))
            if outside is not None and outside.any():
                tables.append(relax.const(outside.astype("int32")))
            x = _resize_axis(args, x, axis, tables, idx.shape[1], extrapolation)
            continue
        if antialias and scale is None:
            args.fail(
                f"antialias on axis {axis}, whose scale is known only at execution: the number of taps depends on it",
                "antialias",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        tables, n = _dynamic_tables(args, axis, in_size, out, scale, scales if computed_scales else None, roi, kernel)
        x = _resize_axis(args, x, axis, tables, n, extrapolation)
    return x


def _f64(value) -> tirx.PrimExpr:
    return tirx.const(float(value), "float64") if isinstance(value, (int, float)) else value.astype("float64")


def _position(ctm: str, y, in_size, out_size, scale, roi) -> tirx.PrimExpr:
    """Output index ``y``'s position in the input (float64, the reference's _compute_x_ori)."""
    yf, n = _f64(y), _f64(in_size)
    half, one = _f64(0.5), _f64(1.0)
    width = scale * n  # ONNX's "output_width" (scale * input size, before truncation)
    if ctm == "align_corners":
        return tirx.Select(width == one, _f64(0.0), yf * (n - one) / (width - one))
    if ctm == "asymmetric":
        return yf / scale
    if ctm == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        centre = _f64(end - start) * (n - one) / _f64(2.0)
        x = tirx.Select(width == one, centre, yf * _f64(end - start) * (n - one) / (width - one))
        return x + _f64(start) * (n - one)
    if ctm == "pytorch_half_pixel":
        return tirx.Select(width == one, _f64(-0.5), (yf + half) / scale - half)
    if ctm == "half_pixel":
        return (yf + half) / scale - half
    # half_pixel_symmetric
    offset = n / _f64(2.0) * (one - _f64(out_size) / width)
    return offset + (yf + half) / scale - half


def _cubic_expr(x: tirx.PrimExpr, a: float) -> tirx.PrimExpr:
    """Keys' cubic kernel at ``x`` (float64), as _cubic_kernel."""
    x = tirx.abs(x)
    a = _f64(a)
    near = ((a + _f64(2.0)) * x - (a + _f64(3.0))) * x * x + _f64(1.0)
    far = ((a * x - _f64(5.0) * a) * x + _f64(8.0) * a) * x - _f64(4.0) * a
    return tirx.Select(x <= _f64(1.0), near, tirx.Select(x < _f64(2.0), far, _f64(0.0)))


def _dynamic_tables(args: OpArgs, axis: int, in_size, out_size, scale, scales, roi, kernel: dict):
    """One axis' index [out, n] (int64, clamped), weight [out, n] (float32; none for nearest) and, for
    tf_crop_and_resize, extrapolation mask [out] (int32) tables, computed by kernels from the sizes at
    execution as axis_taps computes them at compile time.  ``scale``: a float, or None (``scales``, the
    run-time tensor, holds it; else output / input size)."""
    mode, ctm = kernel["mode"], kernel["coordinate_transformation_mode"]
    antialias, exclude = kernel["antialias"], kernel["exclude_outside"]
    if mode == "nearest":
        n = 2
    elif not antialias:
        n = 2 if mode == "linear" else 4
    else:
        start = int(np.floor((-1 if mode == "linear" else -2) / min(scale, 1.0)) + 1)
        n = 2 - 2 * start
    zero, one = tirx.IntImm("int64", 0), tirx.IntImm("int64", 1)

    def geometry(o, n_in, n_out, tensors):
        """x, floor(x) as an int64, whether x is an integer, and the ratio in (0, 1]."""
        if scale is not None:
            s = _f64(scale)
        else:
            s = tensors[0][axis].astype("float64") if tensors else _f64(n_out) / _f64(n_in)
            # max(s, 0) is s (a scale is positive), but TVM 0.27's interval analysis then leaves it alone: a
            # position cast(y) / s bound by CSE made LowerIntrin's analyzer build a float64 IntImm and fail.
            s = tirx.max(s, _f64(0.0))
        x = _position(ctm, o, n_in, n_out, s, roi)
        floor = tirx.floor(x)
        is_int = x == floor
        ratio = tirx.Select(is_int, _f64(1.0), x - floor)
        return x, floor.astype("int64"), is_int, ratio

    def first_index(floor, is_int):
        """The first of the n taps nearest x (ties to the smaller: ONNX's _get_neighbor_idxes)."""
        return floor - n // 2 + tirx.Select(is_int, zero, one)

    def raw_weight(ratio, k):
        if mode == "linear" and not antialias:
            return _f64(1.0) - ratio if k == 0 else ratio
        if mode == "cubic" and not antialias:
            return _cubic_expr(ratio + _f64(1 - k) if k < 2 else _f64(k - 1) - ratio, kernel["cubic_coeff_a"])
        t = (_f64(1 - n // 2 + k) - ratio) * _f64(min(scale, 1.0))
        if mode == "linear":
            return tirx.max(tirx.min(_f64(1.0) - tirx.abs(t), _f64(1.0)), _f64(0.0))
        return _cubic_expr(t, kernel["cubic_coeff_a"])

    def clamp(i, n_in):
        return tirx.max(tirx.min(i, tirx.Cast("int64", n_in) - one), zero)

    def index(n_in, n_out, *tensors):
        def body(o, k):
            _, floor, is_int, ratio = geometry(o, n_in, n_out, tensors)
            first = first_index(floor, is_int)
            if mode != "nearest":
                return clamp(first + k.astype("int64"), n_in)
            right = {
                "round_prefer_floor": ratio > _f64(0.5),
                "round_prefer_ceil": ratio >= _f64(0.5),
                "floor": tirx.const(False),
                "ceil": tirx.const(True),
            }[kernel["nearest_mode"]]
            return clamp(first + tirx.Select(tirx.Or(right, ratio == _f64(1.0)), one, zero), n_in)

        return te.compute([n_out, 1 if mode == "nearest" else n], body, name="resize_onnx_index")

    def weight(n_in, n_out, *tensors):
        def body(o, k):
            _, floor, is_int, ratio = geometry(o, n_in, n_out, tensors)
            first = first_index(floor, is_int)
            terms = []
            for j in range(n):
                w = raw_weight(ratio, j)
                if exclude:
                    tap = first + j
                    inside = tirx.And(tap >= zero, tap < tirx.Cast("int64", n_in))
                    w = tirx.Select(inside, w, _f64(0.0))
                terms.append(w)
            picked = terms[0]
            for j in range(1, n):
                picked = tirx.Select(k == j, terms[j], picked)
            if antialias or exclude:
                total = terms[0]
                for t in terms[1:]:
                    total = total + t
                picked = picked / tirx.Select(total == _f64(0.0), _f64(1.0), total)
            return picked.astype("float32")

        return te.compute([n_out, n], body, name="resize_onnx_weight")

    def mask(n_in, n_out, *tensors):
        def body(o):
            x = geometry(o, n_in, n_out, tensors)[0]
            return tirx.Or(x < _f64(0.0), x > _f64(n_in) - _f64(1.0)).astype("int32")

        return te.compute([n_out], body, name="resize_onnx_mask")

    sizes = [tirx.IntImm("int64", d) if isinstance(d, int) else d for d in (in_size, out_size)]
    inputs = [*sizes] + ([] if scales is None else [scales])
    tables = [args.emit_te(index, *inputs, primfunc_name_hint="resize_onnx_index")]
    tables.append(None if mode == "nearest" else args.emit_te(weight, *inputs, primfunc_name_hint="resize_onnx_weight"))
    if ctm == "tf_crop_and_resize":
        tables.append(args.emit_te(mask, *inputs, primfunc_name_hint="resize_onnx_mask"))
    return tables, 1 if mode == "nearest" else n


def _resize_axis(args: OpArgs, x, axis: int, tables: list, n: int, extrapolation: float) -> relax.Expr:
    """One pass: out[..., o, ...] = sum_k weight[o, k] * x[..., index[o, k], ...] (extrapolation where
    ``mask[o]``); ``tables`` = [index, weight (None: one tap of weight 1), optional mask]."""
    index_table, weight_table = tables[0], tables[1] if len(tables) > 1 else None
    mask_table = tables[2] if len(tables) > 2 else None

    def compute(data: te.Tensor, index: te.Tensor, *rest: te.Tensor) -> te.Tensor:
        weight = rest[0] if weight_table is not None else None
        mask = rest[-1] if mask_table is not None else None
        out_shape = list(data.shape)
        out_shape[axis] = index.shape[0]

        def at(ix, k):
            src = list(ix)
            src[axis] = index[ix[axis], k].astype(str(ix[axis].ty))
            return data[tuple(src)]

        def body(*ix):
            o = ix[axis]
            if n == 1:
                value = at(ix, 0) if weight is None else weight[o, 0] * at(ix, 0)
            elif n <= _UNROLL:
                value = weight[o, 0] * at(ix, 0)
                for k in range(1, n):
                    value = value + weight[o, k] * at(ix, k)
            else:
                k = te.reduce_axis((0, n), name="k")
                value = te.sum(weight[o, k] * at(ix, k), axis=k)
            if mask is not None and n <= _UNROLL:
                value = tirx.Select(mask[o] != 0, f32(extrapolation), value)
            return value

        return te.compute(out_shape, body, name="resize_onnx")

    inputs = [t for t in (index_table, weight_table) if t is not None]
    if mask_table is not None and n > _UNROLL:
        # A reduction must be a TE compute's whole body: extrapolate in a second step.
        summed = args.emit_te(compute, x, *inputs, primfunc_name_hint="resize_onnx")

        def extrapolate(data: te.Tensor, mask: te.Tensor) -> te.Tensor:
            def body(*ix):
                return tirx.Select(mask[ix[axis]] != 0, f32(extrapolation), data[ix])

            return te.compute(data.shape, body, name="resize_onnx_extrapolate")

        return args.emit_te(extrapolate, summed, mask_table, primfunc_name_hint="resize_onnx_extrapolate")
    if mask_table is not None:
        inputs.append(mask_table)
    return args.emit_te(compute, x, *inputs, primfunc_name_hint="resize_onnx")
