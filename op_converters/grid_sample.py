"""GRID_SAMPLE, as Paddle's grid_sample CPU kernel computes it (the spec leaves the operation loosely
defined): one TE compute in float32, its sampled positions matching Paddle's bit for bit."""

from __future__ import annotations

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import dtype_of, f32
from nnadapter_tvm.op_converters.helpers import rank4
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import InterpolateMode, PadMode
from nnadapter_tvm.types import OperationType as O


@converter(O.GRID_SAMPLE)
def grid_sample(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], grid [N, H_out, W_out, 2] of (x, y) in [-1, 1], align_corners, mode
    (BILINEAR, NEAREST; NONE = BILINEAR), pad_mode (CONSTANT or NONE = zeros, EDGE or REPLICATE = border,
    REFLECT = reflection) -> output [N, C, H_out, W_out].

    x maps to (x + 1) / 2 * (W - 1) with align_corners, else (x + 1) * W / 2 - 0.5 (likewise y); border
    clips to [0, W - 1]; reflection mirrors at the corner centres (align_corners) or edges, then clips.
    Bilinear weighs the 4 neighbours, a neighbour outside the input counting 0; nearest rounds halves
    to even (std::nearbyint, as Paddle 3.3 and PyTorch do) and gives 0 outside.  The output's spatial
    size is the grid's (the spec's "same shape as input" holds only for a grid of the input's size).

    Reference: Paddle's paddle.nn.functional.grid_sample (CPU kernel: mode, padding_mode, align_corners).
    """
    x, grid = args.tensor("input"), args.tensor("grid")
    n, _, _, _ = rank4(args, x, "input")
    grid_shape = args.shape(grid)
    if len(grid_shape) != 4 or grid_shape[3] != 2:
        args.fail(f"must have shape [N, H_out, W_out, 2], got {grid_shape}", "grid")
    if isinstance(n, int) and isinstance(grid_shape[0], int) and n != grid_shape[0]:
        args.fail(f"batch {grid_shape[0]} differs from the input's {n}", "grid")
    align_corners = args.bool("align_corners", False)
    mode = args.int("mode", InterpolateMode.BILINEAR)
    if mode not in (InterpolateMode.NONE, InterpolateMode.BILINEAR, InterpolateMode.NEAREST):
        args.fail(f"must be {_names(InterpolateMode)}, got {mode}", "mode")
    pad_mode = args.int("pad_mode", PadMode.CONSTANT)
    if pad_mode not in tuple(PadMode):
        args.fail(f"must be {_names(PadMode)}, got {pad_mode}", "pad_mode")
    nearest = mode == InterpolateMode.NEAREST
    border = pad_mode in (PadMode.EDGE, PadMode.REPLICATE)
    reflection = pad_mode == PadMode.REFLECT

    def source(g: tirx.PrimExpr, size) -> tirx.PrimExpr:
        """Unnormalize a grid coordinate and apply the padding mode, as Paddle's Unnormalize and Clip."""
        max_val = f32(size - 1)
        if align_corners:
            v = (g + f32(1.0)) * (max_val * f32(0.5))
        else:
            v = (g + f32(1.0)) * (f32(size) * f32(0.5)) - f32(0.5)
        if border:
            v = tirx.min(tirx.max(v, f32(0.0)), max_val)
        elif reflection:
            if align_corners:
                if isinstance(size, tirx.IntImm) and size.value == 1:
                    return f32(0.0)  # Paddle: a 1-pixel axis reflects onto its only pixel
                span = max_val * f32(2.0)
                a = tirx.abs(v)
                extra = a - tirx.floor(a / span) * span
                v = tirx.Select(size > 1, tirx.min(extra, span - extra), f32(0.0))
            else:
                span = f32(size) * f32(2.0)
                a = tirx.abs(v + f32(0.5))
                extra = a - tirx.floor(a / span) * span
                v = tirx.min(extra, span - extra) - f32(0.5)
                v = tirx.min(tirx.max(v, f32(0.0)), max_val)
        return v

    def compute(data: te.Tensor, g: te.Tensor) -> te.Tensor:
        batch, channels, h, w = data.shape
        _, out_h, out_w, _ = g.shape

        def pixel(b, ch, yi, xi):
            """data[b, ch, yi, xi] for integer-valued float coordinates, 0 outside the input."""
            inside = tirx.all(xi >= f32(0.0), xi <= f32(w - 1), yi >= f32(0.0), yi <= f32(h - 1))
            yc = tirx.min(tirx.max(yi.astype(dtype_of(b)), 0), h - 1)
            xc = tirx.min(tirx.max(xi.astype(dtype_of(b)), 0), w - 1)
            return tirx.Select(inside, data[b, ch, yc, xc], f32(0.0))

        def body(b, ch, i, j):
            gx = source(g[b, i, j, 0], w)
            gy = source(g[b, i, j, 1], h)
            if nearest:
                return pixel(b, ch, tirx.nearbyint(gy), tirx.nearbyint(gx))
            x0, y0 = tirx.floor(gx), tirx.floor(gy)
            x1, y1 = x0 + f32(1.0), y0 + f32(1.0)
            dw, de, dn, ds = gx - x0, x1 - gx, gy - y0, y1 - gy
            return (
                pixel(b, ch, y0, x0) * de * ds
                + pixel(b, ch, y0, x1) * dw * ds
                + pixel(b, ch, y1, x0) * de * dn
                + pixel(b, ch, y1, x1) * dw * dn
            )

        return te.compute([batch, channels, out_h, out_w], body, name="grid_sample")

    return args.emit_te(compute, x, grid)


def _names(enum) -> str:
    return "one of " + ", ".join(f"{m.name}={m.value}" for m in enum)
