"""Resize, Upsample -> RESIZE_NEAREST or RESIZE_LINEAR, where one of their configurations computes
ONNX's result exactly, else the RESIZE_ONNX extension.

NNAdapter's resizes follow Paddle's interpolate (align_corners; align_mode 0 = half-pixel, 1 =
asymmetric; the ratio from scales or from the sizes), ONNX's has more coordinate transformation and
nearest rounding modes.  Rather than a table of which ONNX combination equals which Paddle one (easy
to get subtly wrong at the borders), each candidate configuration is checked at import: ONNX's
reference Resize and a numpy copy of the NNAdapter converter's float32 formulas run on a probe image of
the node's own spatial size, and the first candidate that agrees is emitted.  Where a size is known only
at execution, the candidate must take its ratio from constant scales, agree on probe images of several
sizes, and sample ONNX's source positions at every output position of every input size below 2^14
(float32's ratio * dst drifts from ONNX's dst / scale as dst grows); sizes computed at run time go to
RESIZE_ONNX unless import knows them.  Nothing agrees (cubic,
antialias, crop-and-resize, the other coordinate transformations and nearest modes, half_pixel where an
output of 1 pixel may occur: Paddle's ratio is then 0, ONNX samples the centre; other ranks and axes):
the node goes to the RESIZE_ONNX extension (nnadapter_tvm/operations/onnx_vision.py, computed by
op_converters/resize_onnx.py), which computes ONNX's Resize itself, also where sizes or scales are
computed at run time or the input's sizes are symbolic.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from nnadapter_tvm.frontends.onnx import host, shape_elements
from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations import onnx_vision
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision

F32 = np.float32


def _ratio(in_size: int, out_size: int, scale: float | None, align_corners: bool) -> np.float32:
    """RESIZE_*'s ratio (op_converters/vision.py _resize_ratio)."""
    if out_size <= 1:
        return F32(0.0)
    if align_corners:
        return F32(in_size - 1) / F32(out_size - 1)
    if scale is not None:
        return F32(1.0 / float(F32(scale)))
    return F32(in_size) / F32(out_size)


def _nearest_1d(in_size: int, out_size: int, ratio: np.float32, align_corners: bool) -> np.ndarray:
    src = ratio * np.arange(out_size, dtype=F32)
    if align_corners:
        src = src + F32(0.5)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _linear_1d(in_size: int, out_size: int, ratio: np.float32, half_pixel: bool):
    k = np.arange(out_size, dtype=F32)
    src = ratio * (k + F32(0.5)) - F32(0.5) if half_pixel else ratio * k
    src = np.maximum(src, F32(0.0))
    low = np.minimum(src.astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    return low, high, (src - low.astype(F32)).astype(F32)


def _mirror(x: np.ndarray, out_hw: tuple[int, int], config: dict) -> np.ndarray:
    """What RESIZE_NEAREST / RESIZE_LINEAR compute for ``config`` on a [1, 1, H, W] float32 image."""
    (h, w), (oh, ow) = x.shape[2:], out_hw
    scales = config["scales"] or (None, None)
    ac = config["align_corners"]
    rh, rw = _ratio(h, oh, scales[0], ac), _ratio(w, ow, scales[1], ac)
    if not config["linear"]:
        return x[:, :, _nearest_1d(h, oh, rh, ac)][:, :, :, _nearest_1d(w, ow, rw, ac)]
    half = config["align_mode"] == 0 and not ac
    h0, h1, lh = _linear_1d(h, oh, rh, half)
    w0, w1, lw = _linear_1d(w, ow, rw, half)
    lh, lw = lh[:, None], lw[None, :]
    one = F32(1.0)
    top = x[0, 0][h0][:, w0] * (one - lw) + x[0, 0][h0][:, w1] * lw
    bottom = x[0, 0][h1][:, w0] * (one - lw) + x[0, 0][h1][:, w1] * lw
    return (top * (one - lh) + bottom * lh)[None, None]


def _candidates(linear: bool, scales: tuple[float, float] | None) -> list[dict]:
    found = []
    for ac in (False, True):
        for mode in (1, 0) if linear else (1,):
            for s in (None, scales) if not ac and scales is not None else (None,):
                found.append({"linear": linear, "align_corners": ac, "align_mode": mode, "scales": s})
    return found


def _probe_inputs(ctx: NodeContext, probe: np.ndarray, sizes: np.ndarray | None = None) -> list[np.ndarray | None]:
    """The node's inputs for ONNX's reference on ``probe``: its constants, an empty roi where the roi is
    computed, and ``sizes`` in place of a sizes input computed at run time."""
    arrays: list[np.ndarray | None] = [probe]
    for i in range(1, ctx.input_count):
        v = ctx.optional(i)
        if v is None:
            arrays.append(None)
            continue
        if i == 1 and ctx.op_type == "Resize" and ctx.opset >= 11 and not v.is_const:
            arrays.append(np.zeros([0], F32))  # roi: read by tf_crop_and_resize only, which goes to RESIZE_ONNX
            continue
        if i == 3 and sizes is not None:
            arrays.append(sizes)
            continue
        array = ctx.const(i)  # the output size depends on it
        if ctx.op_type == "Resize" and i == 3 and array.size == 4 and ctx.attr("axes", None) is None:
            array = np.concatenate([[1, 1], array[2:]]).astype(array.dtype)  # sizes: N, C of the probe
        arrays.append(array)
    return arrays


def _onnx_scales(ctx: NodeContext, x: Value) -> tuple[float, float] | None:
    """The H and W scales ONNX's coordinate transformation uses, when given as scales."""
    if ctx.op_type == "Upsample":
        scales = ctx.attr_or_input("scales", 1, 9, None)
    else:
        scales = ctx.const(1 if ctx.opset < 11 else 2, None) if ctx.has(1 if ctx.opset < 11 else 2) else None
    if scales is None or np.size(scales) == 0:
        return None
    scales = np.reshape(np.asarray(scales, F32), -1)
    return float(scales[-2]), float(scales[-1])


# Spatial sizes the configuration is checked on where the node's own are known only at execution: odd and
# even, below and above the scale's period, one of 1 (a 1-pixel input).  The source positions of every
# output position of every size below _SIZE_CHECK_LIMIT are checked as well (_scaled_positions_agree).
_PROBE_SIZES = (1, 2, 5, 8, 13, 30)

# Sizes up to which RESIZE_*'s output size from scales, int(float32(n) * float32(scale)), is checked
# against ONNX's floor(n * scale) when n is known only at execution.
_SIZE_CHECK_LIMIT = 1 << 14


def _onnx_source(k: np.ndarray, scale: float, transform: str) -> np.ndarray | None:
    """ONNX's source coordinate of output positions ``k`` for a coordinate transformation that depends on
    the scale alone (float64, as onnx's reference computes it; pytorch_half_pixel's 1-pixel output is left
    to the probes), or None where it depends on the sizes too."""
    if transform in ("half_pixel", "pytorch_half_pixel"):
        return (k + 0.5) / scale - 0.5
    if transform == "asymmetric":
        return k / scale
    if transform == "tf_half_pixel_for_nn":
        return (k + 0.5) / scale
    return None


def _onnx_nearest(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    """ONNX's nearest index of source coordinates ``x`` (before clamping to the input)."""
    rounded = {
        "round_prefer_floor": np.ceil(x - 0.5),
        "round_prefer_ceil": np.floor(x + 0.5),
        "floor": np.floor(x),
        "ceil": np.ceil(x),
    }[nearest_mode]
    return np.maximum(rounded, 0).astype(np.int64)


def _scaled_positions_agree(config: dict, scale: float, transform: str, nearest_mode: str) -> bool:
    """Whether ``config``, whose ratio comes from ``scale`` (so it does not depend on the input size), samples
    the source positions ONNX samples for every output position of every input size below
    _SIZE_CHECK_LIMIT: the same pixel for nearest, the same position to 2e-6 for linear.  Probe images of
    a few sizes cannot see this: float32's ratio * dst drifts from ONNX's dst / scale as dst grows (a
    nearest index off by one at an exact integer, a bilinear weight off by float32's step at that
    position)."""
    k = np.arange(int(_SIZE_CHECK_LIMIT * float(F32(scale))) + 1)
    onnx = _onnx_source(k.astype(np.float64), float(F32(scale)), transform)
    if onnx is None:
        return False
    ratio = _ratio(2, 2, scale, False)
    unclamped = np.iinfo(np.int64).max
    if not config["linear"]:
        return bool(np.array_equal(_nearest_1d(unclamped, k.size, ratio, False), _onnx_nearest(onnx, nearest_mode)))
    low, _, frac = _linear_1d(unclamped, k.size, ratio, config["align_mode"] == 0)
    return bool(np.max(np.abs(low + frac.astype(np.float64) - np.maximum(onnx, 0.0))) <= 2e-6)


def _scaled_size_agrees(scale: float) -> bool:
    n = np.arange(1, _SIZE_CHECK_LIMIT)
    nnadapter = (n.astype(F32) * F32(scale)).astype(np.int64)
    onnx = np.floor(n * np.float64(F32(scale))).astype(np.int64)
    return bool(np.array_equal(nnadapter, onnx))


@onnx_op("Resize", "Upsample")
def resize(ctx: NodeContext) -> Value:
    """Resize / Upsample (4-D, H and W only) -> RESIZE_NEAREST or RESIZE_LINEAR with the configuration
    (align_corners, align_mode, ratio from scales or sizes) checked at import to compute ONNX's result.

    Where H or W is known only at execution, the check runs on probe images of several sizes in its
    place (every candidate must agree on all of them), and with ``scales`` the operation computes the
    output size from the scales (int(float32(n) * scale), checked equal to ONNX's floor(n * scale) for
    every n below 2^14)."""
    x = ctx.input(0)
    mode = ctx.attr("mode", "nearest")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.op_type == "Resize" else "asymmetric")
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    what = f"mode '{mode}', coordinate_transformation_mode '{transform}'" + (
        f", nearest_mode '{nearest_mode}'" if mode == "nearest" else ""
    )
    if x.dtype != np.float32:
        ctx.unsupported(f"{x.dtype} input: RESIZE_* compute in float32")
    axes = ctx.attr("axes", None)
    if (
        mode not in ("nearest", "linear", "bilinear")
        or x.rank != 4
        or (axes is not None and sorted(a % 4 for a in axes) != [2, 3])
        or ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch"
        or transform == "tf_crop_and_resize"
    ):
        return _resize_onnx(ctx, x, f"{what}: NNAdapter's RESIZE_* resize H and W, nearest or bilinear, unfiltered")
    n, c, h, w = (None if d is None or d < 0 else d for d in x.shape)
    if ctx.op_type == "Resize" and ctx.opset >= 11 and ctx.has(3) and _computed(ctx.input(3)):
        return _resize_to_computed_sizes(ctx, x, (n, c, h, w), mode != "nearest", what)
    scales_at = 1 if ctx.opset < 11 else 2
    if ctx.op_type == "Resize" and ctx.has(scales_at) and _computed(ctx.input(scales_at)):
        return _resize_onnx(ctx, x, f"{what}: scales computed at run time")
    scales = _onnx_scales(ctx, x)
    dynamic = h is None or w is None
    probes = [(h, w)] if not dynamic else [(h or a, w or b) for a, b in zip(_PROBE_SIZES, reversed(_PROBE_SIZES))]
    rng = np.random.default_rng(0)
    images = [rng.random((1, 1, ph, pw)).astype(F32) for ph, pw in probes]
    expected = [host.evaluate(ctx.node, _probe_inputs(ctx, image), ctx.opset)[0] for image in images]
    out_sizes = [e.shape[2:] for e in expected]
    out = ctx.out_shape()
    if not dynamic:
        out_hw = out_sizes[0]
        if out is None or any(d is None for d in out) or tuple(out) != (n, c, *out_hw):
            ctx.unsupported(f"output shape {out} vs ({n}, {c}, {out_hw}): only H and W may change")
    else:
        # An unknown axis keeps a static output size where ONNX's sizes give it, else scales give it.
        sizes_given = ctx.op_type == "Resize" and ctx.opset >= 11 and ctx.has(3)
        out_hw = tuple(
            axis_sizes[0] if given is not None or sizes_given else None
            for axis_sizes, given in zip(zip(*out_sizes), (h, w))
        )
        if None in out_hw:
            if scales is None:
                ctx.unsupported(f"{x.describe()}: an output size that depends on the unknown input size needs scales")
            bad = [sc for sc in scales if not _scaled_size_agrees(sc)]
            if bad:
                return _resize_onnx(
                    ctx,
                    x,
                    f"{what}: with scales {list(scales)}, RESIZE_*'s int(float32(n) * scale) differs from ONNX's "
                    "floor(n * scale) for some size n, which is known only at execution",
                )
    linear = mode != "nearest"
    unknown_axes = [axis for axis, size in enumerate((h, w)) if size is None]
    for config in _candidates(linear, scales):
        if unknown_axes and (config["scales"] is None or config["align_corners"]):
            continue  # the ratio would depend on a size known only at execution: ONNX's arithmetic and float32's part
        if not all(_scaled_positions_agree(config, scales[axis], transform, nearest_mode) for axis in unknown_axes):
            continue
        if all(
            np.allclose(_mirror(image, e.shape[2:], config), e, rtol=0, atol=0 if not linear else 2e-6)
            for image, e in zip(images, expected)
        ):
            return _emit(ctx, x, (n, c, *out_hw), config, scales if None in out_hw else None)
    return _resize_onnx(ctx, x, f"{what}: no RESIZE_{'LINEAR' if linear else 'NEAREST'} configuration computes it")


def _computed(v: Value) -> bool:
    """Whether ``v`` is computed at run time (from shapes, whose elements are tracked at import, or from
    values: a detector's transform scales the image's size in float), not a constant."""
    return not v.is_const


def _resize_to_computed_sizes(ctx: NodeContext, x: Value, dims: tuple, linear: bool, what: str) -> Value:
    """Resize whose ``sizes`` [N, C, H, W] is computed from shapes.  Where import knows the computed H and W
    and the input's (a static graph that takes its sizes from Shape), RESIZE_* gets its [H, W] (a SLICE of
    the sizes) with the ratio in / out, in a configuration checked on the node's own sizes.  Otherwise
    RESIZE_ONNX: Paddle's float32 ratio in / out and ONNX's dst / (out / in) sample other positions at some
    pairs of sizes (a nearest index off by one, 2 -> 82 at pixel 41; a bilinear weight off by float32's
    step, 320 -> 800), and no set of probe sizes can vouch for every pair a run may meet."""
    sizes = ctx.input(3)
    n, c, h, w = dims
    if sizes.shape != (4,) or ctx.attr("axes", None) is not None:
        return _resize_onnx(ctx, x, f"{what}: RESIZE_* take a computed sizes input of 4 values [N, C, H, W]")
    known = sizes.elements or (None,) * 4
    if any(k is not None and d is not None and k != d for k, d in zip(known[:2], (n, c))):
        return _resize_onnx(ctx, x, f"{what}: sizes {known} change N or C of {x.describe()}, RESIZE_* resize H and W")
    out_h, out_w = known[2:]
    if not all(isinstance(d, int) and d > 0 for d in (h, w, out_h, out_w)):
        return _resize_onnx(ctx, x, f"{what}: sizes known only at execution (ONNX's arithmetic for every pair)")
    image = np.random.default_rng(0).random((1, 1, h, w)).astype(F32)
    arrays = _probe_inputs(ctx, image, np.asarray([1, 1, out_h, out_w], "int64"))
    expected = host.evaluate(ctx.node, arrays, ctx.opset)[0]
    for config in _candidates(linear, None):
        if np.allclose(_mirror(image, (out_h, out_w), config), expected, rtol=0, atol=2e-6 if linear else 0):
            hw = ctx.emit(
                O.SLICE, [sizes, ctx.i32([0]), ctx.i32([2]), ctx.i32([4]), ctx.i32([1])], shape=(2,), dtype=sizes.dtype
            )
            inputs = [x, hw, ctx.f32(np.zeros([0], F32)), ctx.boolean(config["align_corners"])]
            if linear:
                inputs.append(ctx.i32(config["align_mode"]))
            return ctx.emit(O.RESIZE_LINEAR if linear else O.RESIZE_NEAREST, inputs, shape=(n, c, out_h, out_w))
    return _resize_onnx(ctx, x, f"{what}: no RESIZE_{'LINEAR' if linear else 'NEAREST'} configuration computes it")


def _emit(ctx: NodeContext, x: Value, shape: tuple, config: dict, size_scales=None) -> Value:
    """RESIZE_* with ``config`` giving ``shape`` [N, C, H, W] (None where known only at execution);
    ``size_scales`` (an output size known only at execution): the shape operand is empty and the scales
    give the size (and, unless align_corners, the ratio)."""
    out_hw = shape[2:]
    if size_scales is not None:
        inputs = [x, ctx.i32(np.zeros([0], "int32")), ctx.f32(np.asarray(size_scales, F32))]
    else:
        scales = ctx.f32(np.zeros([0], F32) if config["scales"] is None else np.asarray(config["scales"], F32))
        inputs = [x, ctx.i32(list(out_hw)), scales]
    inputs.append(ctx.boolean(config["align_corners"]))
    if config["linear"]:
        return ctx.emit(O.RESIZE_LINEAR, [*inputs, ctx.i32(config["align_mode"])], shape=shape)
    return ctx.emit(O.RESIZE_NEAREST, inputs, shape=shape)


def _resize_onnx(ctx: NodeContext, x: Value, why: str) -> Value:
    """Resize (opset 11 and up) -> the RESIZE_ONNX extension, which computes every mode and coordinate
    transformation as ONNX does: its sizes and scales are ONNX's over the input's whole rank (axes
    resolved as the reference's _interpolate_nd resolves them).  Constant sizes and scales on sizes known
    at import give the output shape here; ``sizes`` or ``scales`` computed at run time (from shapes, or
    from data) and input sizes known only at execution become operands and expressions the operation
    evaluates when it runs, so one compilation serves every size.  ``why`` says why RESIZE_* did not do."""
    if ctx.op_type != "Resize" or ctx.opset < 11:
        ctx.unsupported(f"{why} (and RESIZE_ONNX takes Resize from opset 11)")
    mode = ctx.attr("mode", "nearest")
    if mode not in onnx_vision.RESIZE_MODES:
        ctx.unsupported(f"{why}: mode '{mode}' is not one of ONNX's")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    for name, value, names in (
        ("coordinate_transformation_mode", transform, onnx_vision.COORDINATE_TRANSFORMATION_MODES),
        ("nearest_mode", nearest_mode, onnx_vision.NEAREST_MODES),
    ):
        if value not in names:
            ctx.unsupported(f"{name} '{value}' is not one of {', '.join(names)}")
    rank = x.rank
    if rank is None:
        ctx.unsupported(f"{why}; {x.describe()} has an unknown rank")
    dims = [None if d is None or d < 0 else int(d) for d in x.shape]
    axes = [int(a) % rank for a in ctx.attr("axes", list(range(rank)))]
    if len(set(axes)) != len(axes):
        ctx.fail(f"axes {ctx.attr('axes')} name an axis twice")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        ctx.fail(f"keep_aspect_ratio_policy '{policy}' is not stretch, not_larger or not_smaller")
    antialias = bool(ctx.attr("antialias", 0))
    roi = _roi(ctx, rank, axes, transform)
    scales_in = ctx.optional(2) if ctx.input_count > 2 else None
    sizes_in = ctx.optional(3) if ctx.input_count > 3 else None
    scales_in = None if scales_in is not None and scales_in.is_const and scales_in.const.size == 0 else scales_in
    sizes_in = None if sizes_in is not None and sizes_in.is_const and sizes_in.const.size == 0 else sizes_in
    if (scales_in is None) == (sizes_in is None):
        ctx.fail("exactly one of scales and sizes must be given")
    given, what = (sizes_in, "sizes") if sizes_in is not None else (scales_in, "scales")
    if given.rank != 1 or (given.shape[0] is not None and given.shape[0] != len(axes)):
        ctx.fail(f"{what} {given.describe()} must hold one value per axis {axes}")
    if sizes_in is not None and not sizes_in.is_const:
        if policy != "stretch":
            _refuse_computed(
                ctx,
                sizes_in,
                f"keep_aspect_ratio_policy '{policy}' with sizes computed at run time: the kept scale, and with it "
                "the output size, would be computed in float from values known only at execution",
            )
        if antialias:
            _refuse_computed(
                ctx, sizes_in, "antialias with sizes computed at run time: its number of taps depends on the scale"
            )
        sizes = _full_rank(ctx, x, sizes_in, axes, rank)
        known = shape_elements.of(sizes) or (None,) * rank
        out = [k if k is not None and k >= 0 else None for k in known]
        scales = ctx.constant(np.zeros([0]), "float64")
    elif scales_in is not None and not scales_in.is_const:
        if antialias:
            _refuse_computed(
                ctx, scales_in, "antialias with scales computed at run time: its number of taps depends on the scale"
            )
        scales = _full_rank(ctx, x, scales_in, axes, rank)
        sizes = ctx.i32([-1] * rank)
        out = [None] * rank
    elif sizes_in is not None:
        sizes_given = [int(s) for s in np.reshape(sizes_in.const, -1)]
        out = list(dims)
        for s, d in zip(sizes_given, axes):
            out[d] = s
        if policy != "stretch":
            if any(dims[d] is None for d in axes):
                ctx.unsupported(
                    f"keep_aspect_ratio_policy '{policy}' on {x.describe()}: the kept scale depends on sizes known "
                    "only at execution"
                )
            kept = (min if policy == "not_larger" else max)(out[d] / dims[d] for d in axes)
            for d in axes:
                out[d] = int(kept * dims[d] + 0.5)  # ONNX rounds half up
        resized_unknown = [d for d in axes if dims[d] is None and out[d] is not None]
        if antialias and resized_unknown:
            ctx.unsupported(
                f"antialias on axis {resized_unknown[0]} of {x.describe()}, whose scale depends on its size known "
                "only at execution (the number of taps depends on it)"
            )
        if all(dims[d] is not None for d in axes) or policy != "stretch":
            scale = [1.0] * rank
            for d in axes:
                scale[d] = out[d] / dims[d] if policy == "stretch" else kept
            scales = ctx.constant(scale, "float64")
        else:
            scales = ctx.constant(np.zeros([0]), "float64")  # each axis' scale: its output / input size
        sizes = ctx.i32([-1 if o is None else o for o in out])
    else:
        scale = [1.0] * rank
        for s, d in zip(np.reshape(scales_in.const, -1), axes):
            scale[d] = float(s)
        out = list(dims)
        for d in range(rank):
            if scale[d] != 1.0 or (roi is not None and transform == "tf_crop_and_resize"):
                out[d] = None if dims[d] is None else int(np.floor(scale[d] * dims[d]))
        scales = ctx.constant(scale, "float64")
        sizes = ctx.i32([-1 if o is None else o for o in out])
    inputs = [
        x,
        sizes,
        scales,
        ctx.constant(roi if roi is not None and transform == "tf_crop_and_resize" else [], "float64"),
        ctx.i32(onnx_vision.RESIZE_MODES.index(mode)),
        ctx.i32(onnx_vision.COORDINATE_TRANSFORMATION_MODES.index(transform)),
        ctx.i32(onnx_vision.NEAREST_MODES.index(nearest_mode)),
        ctx.f32(ctx.attr("cubic_coeff_a", -0.75)),
        ctx.boolean(ctx.attr("exclude_outside", 0)),
        ctx.f32(ctx.attr("extrapolation_value", 0.0)),
        ctx.boolean(antialias),
    ]
    return ctx.emit(onnx_vision.RESIZE_ONNX, inputs, shape=tuple(out))


def _refuse_computed(ctx: NodeContext, value: Value, message: str) -> NoReturn:
    """Refuse what needs ``value`` at import, naming the graph inputs it is computed from as needed
    constants (as ``NodeContext.const`` does): onnx's backend then binds them and imports again."""
    ctx.graph.needs_constant += ctx.graph.input_ancestors(value)
    ctx.unsupported(message)


def _roi(ctx: NodeContext, rank: int, axes: list[int], transform: str) -> list[float] | None:
    """The roi over the whole rank (starts, then ends), or None; it must be known at import."""
    if not ctx.has(1):
        return None
    roi = ctx.input(1)
    if not roi.is_const:
        if transform != "tf_crop_and_resize":
            return None  # only tf_crop_and_resize reads it
        roi = ctx.const(1)
    else:
        roi = roi.const
    if np.size(roi) == 0:
        return None
    roi = [float(r) for r in np.reshape(roi, -1)]
    if len(roi) == 2 * rank and len(axes) != rank:
        return roi
    if len(roi) != 2 * len(axes):
        ctx.fail(f"roi {roi} must hold {2 * len(axes)} values (starts, then ends)")
    full = [0.0] * rank + [1.0] * rank
    for i, d in enumerate(axes):
        full[d], full[rank + d] = roi[i], roi[len(axes) + i]
    return full


def _full_rank(ctx: NodeContext, x: Value, given: Value, axes: list[int], rank: int) -> Value:
    """A computed ``sizes`` or ``scales`` of ``axes`` as one value per axis of ``x``: an axis it does not
    name keeps its size (SHAPE's element) or has scale 1."""
    if axes == list(range(rank)):
        return given
    shape = None
    if given.dtype.kind in "iu":
        precision = Precision.INT32 if given.dtype == np.int32 else Precision.INT64
        shape = ctx.emit(O.SHAPE, [x, ctx.i32(int(precision))], shape=(rank,), dtype=given.dtype)
    parts = []
    for d in range(rank):
        if d not in axes and shape is None:
            parts.append(ctx.constant([1.0], given.dtype))
            continue
        source, at = (given, axes.index(d)) if d in axes else (shape, d)
        bounds = [ctx.i32([0]), ctx.i32([at]), ctx.i32([at + 1]), ctx.i32([1])]
        parts.append(ctx.emit(O.SLICE, [source, *bounds], shape=(1,), dtype=given.dtype))
    return ctx.emit(O.CONCAT, [*parts, ctx.i32(0)], shape=(rank,), dtype=given.dtype)
