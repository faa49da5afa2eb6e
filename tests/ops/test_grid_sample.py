"""GRID_SAMPLE against a numpy reference written with explicit loops from Paddle's grid_sample CPU
kernel (the spec leaves the operation to Paddle's operator of the same name).  Index arithmetic is done
in float32 as Paddle does it, so that sampled positions agree exactly; only the blending arithmetic gets
a tolerance.  The reference was checked once, outside this suite, against paddlepaddle 3.3.1 on every
case below.
"""

import math

import numpy as np
import pytest
from oputil import (
    UNKNOWN,
    In,
    Out,
    b8,
    check_op,
    check_quantized,
    expect_error,
    i32,
    q8_input,
    rand,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
F = np.float32
EXACT = {"rtol": 0, "atol": 0}
# Bilinear blends of 4 float32 products of inputs in [-2, 2], accumulated in a different order than the
# reference: a few float32 ulps.
BLEND = {"rtol": 1e-5, "atol": 1e-5}


def run(op, inputs, shapes):
    return run_op(op, inputs, [Out() for _ in shapes], shapes)


MODE = nna.InterpolateMode
PAD = nna.PadMode


def grid_source(g, size, align_corners, padding):
    """Paddle's Unnormalize then Clip for one coordinate, in float32."""
    g = F(g)
    v = (g + F(1)) * F((size - 1) * 0.5) if align_corners else (g + F(1)) * F(size * 0.5) - F(0.5)
    if padding == "border":
        v = min(max(v, F(0)), F(size - 1))
    elif padding == "reflection":
        if align_corners:
            if size == 1:
                return F(0)
            span = F((size - 1) * 2)
            a = abs(v)
            extra = a - F(math.floor(a / span)) * span
            v = min(extra, span - extra)
        else:
            span = F(size * 2)
            a = abs(v + F(0.5))
            extra = a - F(math.floor(a / span)) * span
            v = min(extra, span - extra) - F(0.5)
            v = min(max(v, F(0)), F(size - 1))
    return F(v)


def grid_sample_ref(x, grid, align_corners, mode, padding):
    n, c, h, w = x.shape
    _, out_h, out_w, _ = grid.shape
    y = np.zeros((n, c, out_h, out_w), F)

    def at(b, yi, xi):
        """x[b, :, yi, xi], or 0 outside the input (Paddle's IsInBound)."""
        if 0 <= xi <= w - 1 and 0 <= yi <= h - 1:
            return x[b, :, int(yi), int(xi)].astype("float64")
        return np.zeros(c)

    for b in range(n):
        for i in range(out_h):
            for j in range(out_w):
                gx = grid_source(grid[b, i, j, 0], w, align_corners, padding)
                gy = grid_source(grid[b, i, j, 1], h, align_corners, padding)
                if mode == "nearest":
                    # std::nearbyint: halves to even.
                    y[b, :, i, j] = at(b, np.rint(gy), np.rint(gx))
                    continue
                x0, y0 = math.floor(gx), math.floor(gy)
                dw, de, dn, ds = gx - x0, x0 + 1 - gx, gy - y0, y0 + 1 - gy
                y[b, :, i, j] = (
                    at(b, y0, x0) * de * ds
                    + at(b, y0, x0 + 1) * dw * ds
                    + at(b, y0 + 1, x0) * de * dn
                    + at(b, y0 + 1, x0 + 1) * dw * dn
                )
    return y


PADDINGS = {"zeros": PAD.CONSTANT, "border": PAD.EDGE, "reflection": PAD.REFLECT}
MODES = {"bilinear": MODE.BILINEAR, "nearest": MODE.NEAREST}


def grid_inputs(x_operand, grid, align_corners, mode, pad_mode):
    return [x_operand, In(grid), b8([align_corners]), i32([int(mode)]), i32([int(pad_mode)])]


@pytest.mark.parametrize("mode", list(MODES), ids=list(MODES))
@pytest.mark.parametrize("padding", list(PADDINGS), ids=list(PADDINGS))
@pytest.mark.parametrize("align_corners", [False, True], ids=["edges", "corners"])
def test_grid_sample(mode, padding, align_corners):
    # A grid reaching past [-1, 1] so that every padding mode matters; output 5 x 6 from a 4 x 5 input.
    x = rand(2, 3, 4, 5, seed=10)
    grid = rand(2, 5, 6, 2, seed=11, low=-1.6, high=1.6)
    expected = grid_sample_ref(x, grid, align_corners, mode, padding)
    inputs = grid_inputs(In(x), grid, align_corners, MODES[mode], PADDINGS[padding])
    check_op(OP.GRID_SAMPLE, inputs, expected, **BLEND)


def test_grid_sample_nearest_rounds_halves_to_even():
    # Unaligned, W = 4: x = -1 -> -0.5 (rounds to -0: inside, not -1: outside); x = 0.5 -> 2.5 (to 2, not 3);
    # x = 0 -> 1.5 (to 2); x = 1 -> 3.5 (to 4: outside).  Along H = 2: y = 0.5 -> 1.0, y = -0.5 -> 0.0,
    # y = 0 -> 0.5 (to 0).  Paddle 3.3's kernel gives exactly these.
    x = rand(1, 2, 2, 4, seed=12)
    grid = np.array([[[[-1.0, 0.5], [0.5, 0.5], [0.0, -0.5], [1.0, 0.0], [-0.25, 0.0]]]], F)
    expected = grid_sample_ref(x, grid, False, "nearest", "zeros")
    assert expected[0, 0, 0, 0] == x[0, 0, 1, 0] and expected[0, 0, 0, 1] == x[0, 0, 1, 2]
    assert expected[0, 0, 0, 3] == 0 and expected[0, 0, 0, 4] == x[0, 0, 0, 1]
    check_op(OP.GRID_SAMPLE, grid_inputs(In(x), grid, False, MODE.NEAREST, PAD.CONSTANT), expected, **EXACT)


@pytest.mark.parametrize(
    "mode,pad_mode,ref",
    [(MODE.NONE, PAD.NONE, ("bilinear", "zeros")), (MODE.BILINEAR, PAD.REPLICATE, ("bilinear", "border"))],
    ids=["none_is_bilinear_zeros", "replicate_is_border"],
)
def test_grid_sample_mode_aliases(mode, pad_mode, ref):
    x = rand(1, 2, 3, 3, seed=13)
    grid = rand(1, 2, 4, 2, seed=14, low=-1.4, high=1.4)
    expected = grid_sample_ref(x, grid, True, *ref)
    check_op(OP.GRID_SAMPLE, grid_inputs(In(x), grid, True, mode, pad_mode), expected, **BLEND)


def test_grid_sample_unknown_dims_and_1_pixel_reflection():
    # Symbolic batch and grid size; a 1-pixel-wide input with aligned reflection (span 0 -> 0).
    x = rand(2, 2, 3, 1, seed=15)
    grid = rand(2, 3, 2, 2, seed=16, low=-1.5, high=1.5)
    expected = grid_sample_ref(x, grid, True, "bilinear", "reflection")
    inputs = [
        In(x, dims=[UNKNOWN, 2, 3, 1]),
        In(grid, dims=[UNKNOWN, UNKNOWN, UNKNOWN, 2]),
        b8([True]),
        i32([int(MODE.BILINEAR)]),
        i32([int(PAD.REFLECT)]),
    ]
    check_op(OP.GRID_SAMPLE, inputs, expected, outputs=[Out(dims=[UNKNOWN, 2, UNKNOWN, UNKNOWN])], **BLEND)


def test_grid_sample_quantized():
    x, x_real = q8_input(rand(1, 2, 4, 4, seed=17), 0.02)
    grid = rand(1, 3, 3, 2, seed=18, low=-1.2, high=1.2)
    expected = grid_sample_ref(x_real, grid, False, "bilinear", "border")
    check_quantized(OP.GRID_SAMPLE, grid_inputs(x, grid, False, MODE.BILINEAR, PAD.EDGE), expected, out_scale=0.02)


@pytest.mark.parametrize(
    "grid_shape,mode,pad_mode,operand",
    [
        ((1, 3, 3, 3), MODE.BILINEAR, PAD.CONSTANT, "'grid'"),
        ((2, 3, 3, 2), MODE.BILINEAR, PAD.CONSTANT, "'grid'"),
        ((1, 3, 3, 2), 3, PAD.CONSTANT, "'mode'"),
        ((1, 3, 3, 2), MODE.BILINEAR, 9, "'pad_mode'"),
    ],
    ids=["grid_last_dim", "grid_batch", "mode", "pad_mode"],
)
def test_grid_sample_invalid(grid_shape, mode, pad_mode, operand):
    inputs = grid_inputs(In(rand(1, 2, 3, 3)), rand(*grid_shape), False, mode, pad_mode)
    expect_error(lambda: run(OP.GRID_SAMPLE, inputs, [(1, 2, 3, 3)]), "GRID_SAMPLE", operand)
