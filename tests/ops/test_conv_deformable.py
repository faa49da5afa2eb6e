"""DEFORMABLE_CONV_2D against a numpy reference written from the spec and Paddle's deformable_conv
(its bilinear sampling, DmcnIm2colBilinear, where the spec is loose): groups, deformable groups,
dilation, strides, pads, bias present or empty, every fuse_code, offsets and masks that reduce it to
CONV_2D or sample outside the input, an UNKNOWN batch, quantized operands (int8 input, offset and mask;
per-layer or per-channel int8 filters with their int32 bias), and bad operands."""

import math

import numpy as np
import pytest
from conv_refs import ATOL, OP, RTOL, quant_bias, quant_filter
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    check_op,
    check_quantized,
    conv2d_ref,
    expect_error,
    fuse,
    fuse_ref,
    i32,
    q8_input,
    rand,
    run_op,
)

import nnadapter_tvm as nna


def bilinear(plane, y, x):
    """Paddle's DmcnIm2colBilinear: corners outside the plane count as 0; a point at or beyond -1 or the
    size gives 0."""
    h, w = plane.shape
    if not (y > -1 and x > -1 and y < h and x < w):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = y - y0, x - x0
    total = 0.0
    for yy, xx, weight in ((y0, x0, (1 - ly) * (1 - lx)), (y0, x0 + 1, (1 - ly) * lx)):
        total += weight * plane[yy, xx] if 0 <= yy < h and 0 <= xx < w else 0.0
    for yy, xx, weight in ((y0 + 1, x0, ly * (1 - lx)), (y0 + 1, x0 + 1, ly * lx)):
        total += weight * plane[yy, xx] if 0 <= yy < h and 0 <= xx < w else 0.0
    return total


def deformable_ref(x, offset, mask, w, b, pads, strides, dilations, group, dg):
    """Explicit loops in float64: sample every (channel, tap, output position), then the grouped product."""
    n, c_in = x.shape[:2]
    c_out, c_per_group, kh, kw = w.shape
    top, _, left, _ = pads
    (sh, sw), (dh, dw) = strides, dilations
    ho, wo = offset.shape[2:]
    x64, off64, mask64 = x.astype("float64"), offset.astype("float64"), mask.astype("float64")
    col = np.zeros((n, c_in, kh, kw, ho, wo))
    per_dg = c_in // dg
    for bi in range(n):
        for c in range(c_in):
            d = c // per_dg
            for i in range(kh):
                for j in range(kw):
                    t = d * kh * kw + i * kw + j
                    for oy in range(ho):
                        for ox in range(wo):
                            py = oy * sh - top + i * dh + off64[bi, 2 * t, oy, ox]
                            px = ox * sw - left + j * dw + off64[bi, 2 * t + 1, oy, ox]
                            col[bi, c, i, j, oy, ox] = mask64[bi, t, oy, ox] * bilinear(x64[bi, c], py, px)
    y = np.zeros((n, c_out, ho, wo))
    out_per_group = c_out // group
    for o in range(c_out):
        g = o // out_per_group
        y[:, o] = np.einsum("ncijyx,cij->nyx", col[:, g * c_per_group : (g + 1) * c_per_group], w[o])
    if b is not None:
        y += b[None, :, None, None]
    return y.astype("float32")


def deformable_case(
    groups, dg, pads, strides, dilations, bias, code, hw=(5, 6), kernel=(3, 3), seed=0, offset_range=2.0
):
    c_in, c_out, group = groups
    kh, kw = kernel
    ho = (hw[0] + pads[0] + pads[1] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    wo = (hw[1] + pads[2] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    x = rand(2, c_in, *hw, seed=seed)
    offset = rand(2, 2 * dg * kh * kw, ho, wo, seed=seed + 1, low=-offset_range, high=offset_range)
    mask = rand(2, dg * kh * kw, ho, wo, seed=seed + 2, low=0.0, high=1.0)
    w = rand(c_out, c_in // group, kh, kw, seed=seed + 3)
    b = rand(c_out, seed=seed + 4) if bias else None
    expected = fuse_ref(deformable_ref(x, offset, mask, w, b, pads, strides, dilations, group, dg), code)
    inputs = [In(x), In(offset), In(mask), Const(w), Const(b) if bias else Const(None)]
    inputs += [i32(pads), i32(strides), i32([group]), i32([dg]), i32(dilations), fuse(code)]
    return inputs, expected


# (C_in, C_out, group, deformable_group)
D_GROUPS = {"plain": ((3, 4, 1), 1), "group2": ((4, 6, 2), 1), "dg2": ((4, 4, 1), 2), "group2_dg4": ((4, 2, 2), 4)}


# Each group layout once, the geometry rotating; two more geometries for the deformable groups.
GEOMETRIES = {
    "same_size": ([1, 1, 1, 1], [1, 1], [1, 1]),
    "asym_s2x1_d1x2": ([1, 0, 2, 1], [2, 1], [1, 2]),
    "nopad_s1x2_d2x1": ([0, 0, 0, 0], [1, 2], [2, 1]),
}
D_GRID = [
    ("plain", "same_size"),
    ("group2", "asym_s2x1_d1x2"),
    ("dg2", "nopad_s1x2_d2x1"),
    ("dg2", "asym_s2x1_d1x2"),
    ("group2_dg4", "same_size"),
    ("group2_dg4", "nopad_s1x2_d2x1"),
]


@pytest.mark.parametrize("groups, geometry", D_GRID, ids=["-".join(c) for c in D_GRID])
def test_deformable_conv2d(groups, geometry):
    (c_in, c_out, group), dg = D_GROUPS[groups]
    pads, strides, dilations = GEOMETRIES[geometry]
    bias = geometry != "nopad_s1x2_d2x1"  # those take an empty bias operand
    inputs, expected = deformable_case((c_in, c_out, group), dg, pads, strides, dilations, bias, 0)
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_zero_offsets_unit_mask_is_conv2d():
    # With no displacement and a mask of ones the operation is CONV_2D on integer positions.
    inputs, _ = deformable_case((3, 4, 1), 1, [1, 0, 2, 1], [2, 1], [1, 2], True, 0, seed=4)
    x, w, b = inputs[0].value, inputs[3].value, inputs[4].value
    inputs[1] = In(np.zeros_like(inputs[1].value))
    inputs[2] = In(np.ones_like(inputs[2].value))
    check_op(OP.DEFORMABLE_CONV_2D, inputs, conv2d_ref(x, w, b, [1, 0, 2, 1], [2, 1], [1, 2], 1), rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_far_offsets_give_bias():
    # Every sampling point lands outside the input: only the bias remains.
    inputs, expected = deformable_case((3, 4, 1), 1, [1, 1, 1, 1], [1, 1], [1, 1], True, 0, seed=6)
    inputs[1] = In(np.full_like(inputs[1].value, 50.0))
    expected = np.broadcast_to(inputs[4].value[None, :, None, None], expected.shape).astype("float32")
    check_op(OP.DEFORMABLE_CONV_2D, inputs, np.ascontiguousarray(expected), rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_integer_offsets_at_edges():
    # Integer and half-integer offsets that land exactly on, just inside and just past the borders.
    inputs, _ = deformable_case((3, 2, 1), 1, [0, 0, 0, 0], [1, 1], [1, 1], False, 0, hw=(4, 4), seed=8)
    offset = np.random.default_rng(9).choice([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0], inputs[1].value.shape)
    inputs[1] = In(offset.astype("float32"))
    x, mask, w = inputs[0].value, inputs[2].value, inputs[3].value
    expected = deformable_ref(x, inputs[1].value, mask, w, None, [0, 0, 0, 0], [1, 1], [1, 1], 1, 1)
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_deformable_conv2d_fuse_code(code):
    inputs, expected = deformable_case((4, 4, 2), 2, [1, 1, 0, 1], [1, 1], [1, 1], True, code, seed=10)
    raw = deformable_case((4, 4, 2), 2, [1, 1, 0, 1], [1, 1], [1, 1], True, nna.FuseCode.NONE, seed=10)[1]
    # The raw outputs span below 0, (0, 1), (1, 6) and above 6, so each activation clips something.
    assert (raw < 0).any() and ((raw > 0) & (raw < 1)).any() and ((raw > 1) & (raw < 6)).any() and (raw > 6).any()
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_unknown_batch():
    inputs, expected = deformable_case((3, 4, 1), 1, [1, 1, 1, 1], [1, 1], [1, 1], True, 0, seed=12)
    for i in range(3):
        inputs[i] = In(inputs[i].value, dims=[UNKNOWN, *inputs[i].value.shape[1:]])
    out = Out(dims=[UNKNOWN, *expected.shape[1:]])
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("per_channel", [False, True], ids=["filter_per_layer", "filter_per_channel"])
def test_deformable_conv2d_quantized(per_channel):
    # offset and mask share the input's precision (QUANT_INT8_SYMM_PER_LAYER), each with its own scale.
    (c_in, c_out, group), dg = (4, 4, 1), 2
    pads, strides, dilations = [1, 1, 1, 1], [1, 1], [1, 1]
    in_scale = 0.02
    x, x_real = q8_input(rand(2, c_in, 4, 5, seed=41), in_scale)
    offset, offset_real = q8_input(rand(2, 2 * dg * 9, 4, 5, seed=42), 0.02)
    mask, mask_real = q8_input(rand(2, dg * 9, 4, 5, seed=43, low=0.0, high=1.0), 1 / 127)
    w_op, w_real, w_scale = quant_filter(rand(c_out, c_in, 3, 3, seed=44), in_scale, 0 if per_channel else None)
    b_op, b_real = quant_bias(rand(c_out, seed=45), in_scale, w_scale)
    inputs = [x, offset, mask, w_op, b_op, i32(pads), i32(strides), i32([group]), i32([dg]), i32(dilations), fuse(0)]
    expected = deformable_ref(x_real, offset_real, mask_real, w_real, b_real, pads, strides, dilations, group, dg)
    check_quantized(OP.DEFORMABLE_CONV_2D, inputs, expected, out_scale=0.05)


def expect_deformable_invalid(inputs, shape, operand):
    expect_error(lambda: run_op(OP.DEFORMABLE_CONV_2D, inputs, [Out()], [shape]), "DEFORMABLE_CONV_2D", f"'{operand}'")


def base_deformable():
    return deformable_case((4, 4, 2), 2, [1, 1, 1, 1], [2, 2], [1, 1], True, 0, seed=14)


@pytest.mark.parametrize(
    "index, value, operand",
    [
        (8, [3], "deformable_group"),  # C_in = 4
        (8, [0], "deformable_group"),
        (7, [3], "group"),
        (5, [1, 1, 1], "pads"),
        (6, [0, 1], "strides"),
        (10, [5], "fuse_code"),
    ],
)
def test_deformable_conv2d_invalid(index, value, operand):
    inputs, expected = base_deformable()
    inputs[index] = i32(value)
    expect_deformable_invalid(inputs, expected.shape, operand)


@pytest.mark.parametrize("index, operand", [(1, "offset"), (2, "mask")])
def test_deformable_conv2d_offset_and_mask_sized_like_the_input(index, operand):
    # The spec's [.., H_in, W_in]: with stride 2 that is not the output size Paddle indexes by.
    inputs, expected = base_deformable()
    channels = inputs[index].value.shape[1]
    inputs[index] = In(rand(2, channels, 5, 6))
    expect_deformable_invalid(inputs, expected.shape, operand)


def test_deformable_conv2d_offset_channels():
    inputs, expected = base_deformable()
    inputs[1] = In(rand(2, 18, *inputs[1].value.shape[2:]))  # 2 * dg * kh * kw = 36
    expect_deformable_invalid(inputs, expected.shape, "offset")
