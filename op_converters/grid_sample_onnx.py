"""GRID_SAMPLE_ONNX (extension 2201): ONNX's GridSample in every mode and spatial rank.

NNAdapter's GRID_SAMPLE follows Paddle: 4-D inputs, bilinear or nearest (the ONNX importer keeps using
it there).  This operation adds what ONNX has beyond it, bicubic sampling and volumetric (5-D) inputs,
and computes every mode as ONNX's reference does: the grid coordinate is denormalized in float32, moved
inside the input by the padding mode (border clamps it, reflection mirrors it), and the output is the
sum over the taps of each spatial axis (2 linear, 4 cubic, 1 nearest) of the product of their weights
times the input there, a tap outside the input reading 0 (zeros), the nearest edge (border) or its
mirror (reflection).
"""

from __future__ import annotations

import itertools

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import f32
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.onnx_vision import GRID_SAMPLE_MODES as MODES
from nnadapter_tvm.operations.onnx_vision import PADDING_MODES
from nnadapter_tvm.types import OperationType as O

_CUBIC_A = -0.75  # ONNX's GridSample fixes Keys' coefficient


def _f64(value) -> tirx.PrimExpr:
    return tirx.const(float(value), "float64") if isinstance(value, (int, float)) else value.astype("float64")


def _reflect(v: tirx.PrimExpr, lo: tirx.PrimExpr, hi: tirx.PrimExpr) -> tirx.PrimExpr:
    """ONNX's _gs_reflect in float64: mirror ``v`` at ``lo`` and ``hi`` until it lies between them
    (a zero range, a 1-pixel axis with align_corners, gives ``lo``)."""
    span = hi - lo
    safe = tirx.Select(span > _f64(0.0), span, _f64(1.0))

    def fold(dx, near, far):
        """dx past the ``near`` border: an even number of whole spans lands r inside from it, odd from far."""
        n = tirx.floor(dx / safe)
        r = dx - n * safe
        even = tirx.floormod(n.astype("int64"), 2) == 0
        return near, far, r, even

    near, far, r, even = fold(lo - v, lo, hi)
    low_side = tirx.Select(even, near + r, far - r)
    near, far, r, even = fold(v - hi, hi, lo)
    high_side = tirx.Select(even, near - r, far + r)
    result = tirx.Select(v < lo, low_side, tirx.Select(v > hi, high_side, v))
    return tirx.Select(span > _f64(0.0), result, lo)


def _cubic_weights(t: tirx.PrimExpr) -> list[tirx.PrimExpr]:
    """Keys' weights of the taps x0 - 1 .. x0 + 2 at fraction ``t`` = x - x0 (float32)."""
    a, one, two = f32(_CUBIC_A), f32(1.0), f32(2.0)

    def near(x):
        return ((a + f32(2.0)) * x - (a + f32(3.0))) * x * x + one

    def far(x):
        return ((a * x - f32(5.0) * a) * x + f32(8.0) * a) * x - f32(4.0) * a

    return [far(t + one), near(t), near(one - t), far(two - t)]


@converter(O.GRID_SAMPLE_ONNX)
def _grid_sample_onnx(args: OpArgs) -> relax.Expr:
    """input [N, C, D1, ..., Dk] (k = 2 or 3, float32), grid [N, O1, ..., Ok, k] (float32, the last axis
    (x, y[, z]) in [-1, 1], x along Dk), align_corners, mode (0 linear, 1 nearest, 2 cubic),
    padding_mode (0 zeros, 1 border, 2 reflection) -> output [N, C, O1, ..., Ok]: ONNX's GridSample.

    Each grid coordinate g maps to x = (g + 1) / 2 * (D - 1) with align_corners, else ((g + 1) * D - 1)
    / 2; outside [-0.5, D - 0.5] ([0, D - 1] with align_corners) border clamps x to [0, D - 1] and
    reflection mirrors it back.  Nearest rounds x half to even; linear weighs floor(x) and floor(x) + 1
    by 1 - t and t (t = x - floor(x)); cubic weighs floor(x) - 1 .. floor(x) + 2 by Keys' kernel with
    a = -0.75.  The output sums the products of the axes' weights times the input at each combination
    of taps; a tap outside the input reads 0 (zeros), the clamped index (border) or the mirrored one
    (reflection).

    Reference: ONNX GridSample (opset 22), onnx.reference.ops.op_grid_sample.
    """
    x, grid = args.tensor("input"), args.tensor("grid")
    shape, grid_shape = args.shape(x), args.shape(grid)
    k = len(shape) - 2
    if k not in (2, 3):
        args.fail(f"must be 4-D [N, C, H, W] or 5-D [N, C, D, H, W], got shape {shape}", "input")
    if len(grid_shape) != k + 2 or grid_shape[-1] != k:
        args.fail(f"must have shape [N, {', '.join(f'O{i + 1}' for i in range(k))}, {k}], got {grid_shape}", "grid")
    if isinstance(shape[0], int) and isinstance(grid_shape[0], int) and shape[0] != grid_shape[0]:
        args.fail(f"batch {grid_shape[0]} differs from the input's {shape[0]}", "grid")
    align_corners = args.bool("align_corners", False)
    mode, padding = args.int("mode", 0), args.int("padding_mode", 0)
    if not 0 <= mode < len(MODES):
        args.fail(f"must be one of {', '.join(f'{i}={n}' for i, n in enumerate(MODES))}, got {mode}", "mode")
    if not 0 <= padding < len(PADDING_MODES):
        names = ", ".join(f"{i}={n}" for i, n in enumerate(PADDING_MODES))
        args.fail(f"must be one of {names}, got {padding}", "padding_mode")
    mode, padding = MODES[mode], PADDING_MODES[padding]

    def compute(data: te.Tensor, g: te.Tensor) -> te.Tensor:
        n, c, *sizes = data.shape
        out_spatial = list(g.shape[1:-1])

        def bounds(size):
            if align_corners:
                return _f64(0.0), _f64(size - 1)
            return _f64(-0.5), _f64(size) - _f64(0.5)

        def coordinate(v, size):
            """The denormalized coordinate moved inside by the padding mode (float32)."""
            if align_corners:
                x = (v + f32(1.0)) / f32(2.0) * f32(size - 1)
            else:
                x = ((v + f32(1.0)) * f32(size) - f32(1.0)) / f32(2.0)
            if mode == "nearest":
                x = tirx.nearbyint(x)
            lo, hi = bounds(size)
            outside = tirx.any(_f64(x) < lo, _f64(x) > hi)
            if padding == "border":
                x = tirx.Select(outside, tirx.min(tirx.max(x, f32(0.0)), f32(size - 1)), x)
            elif padding == "reflection":
                x = tirx.Select(outside, _reflect(_f64(x), lo, hi).astype("float32"), x)
            return x

        def tap(i, size):
            """Index ``i`` (int32) as the padding mode reads it; -1 where it reads 0 (zeros)."""
            last = (size - 1).astype("int32")
            clamped = tirx.min(tirx.max(i, 0), last)
            if padding == "zeros":
                return tirx.Select(tirx.all(i >= 0, i <= last), clamped, tirx.const(-1, "int32"))
            if padding == "border":
                return clamped
            lo, hi = bounds(size)
            mirrored = _reflect(_f64(i), lo, hi).astype("int32")  # truncation, as int() in the reference
            return tirx.min(tirx.max(mirrored, 0), last)

        # Per spatial axis, a stage of each output position's taps (index, weight): the final sum then reads
        # them, instead of one expression repeating every axis' arithmetic for every combination of taps.
        taps = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
        grid_positions = [g.shape[0], *out_spatial]
        indices, weights = [], []

        def axis_stages(axis, size):
            def coord_of(b, *o):
                return coordinate(g[(b, *o, k - 1 - axis)], size)  # the grid lists x (the last axis) first

            xc = te.compute(grid_positions, coord_of, name=f"coordinate{axis}")

            def index_of(b, *ot):
                x = xc[(b, *ot[:-1])]
                if mode == "nearest":
                    return tap(x.astype("int32"), size)
                offset = ot[-1] - (1 if mode == "cubic" else 0)
                return tap(tirx.floor(x).astype("int32") + offset.astype("int32"), size)

            def weight_of(b, *ot):
                x = xc[(b, *ot[:-1])]
                t = x - tirx.floor(x)
                w = [f32(1.0) - t, t] if mode == "linear" else _cubic_weights(t)
                result = w[-1]
                for j in range(len(w) - 2, -1, -1):
                    result = tirx.Select(ot[-1] == j, w[j], result)
                return result

            indices.append(te.compute([*grid_positions, taps], index_of, name=f"taps{axis}"))
            if mode != "nearest":
                weights.append(te.compute([*grid_positions, taps], weight_of, name=f"weights{axis}"))

        for axis, size in enumerate(sizes):
            axis_stages(axis, size)

        def body(b, ch, *o):
            total = None
            for combo in itertools.product(range(taps), repeat=k):
                index = [indices[a][(b, *o, t)] for a, t in enumerate(combo)]
                value = data[(b, ch, *(tirx.max(i, 0) for i in index))]
                if padding == "zeros":
                    value = tirx.Select(tirx.all(*(i >= 0 for i in index)), value, f32(0.0))
                for a, t in enumerate(combo):
                    if weights:
                        value = value * weights[a][(b, *o, t)]
                total = value if total is None else total + value
            return total

        return te.compute([n, c, *out_spatial], body, name="grid_sample_onnx")

    return args.emit_te(compute, x, grid)
