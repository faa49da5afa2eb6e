"""AVERAGE_POOL_2D and MAX_POOL_2D (with and without indices) against numpy references written from
the spec (output sizes) and Paddle's pooling kernels (which elements a window covers and counts;
max_pool2d_with_index for the indices), in float32 and QUANT_INT8_SYMM_PER_LAYER: every auto_pad mode,
ceil_mode, count_include_pad, every fuse_code, sizes known only at execution, NaN, and bad operands.

A window without real elements (op_converters/pool.py's rule): max gives the lowest float32 (Paddle's
-FLT_MAX) and index -1, average gives 0 (Paddle gives 0 with count_include_pad and 0 / 0 without; the
converter documents 0 as its choice).  Both paths are checked: TVM's pools where they give the spec's
size, the converter's TE compute where they do not (ceil_mode windows that start in the padding)."""

import math

import numpy as np
import pytest
from dynutil import check_sizes, compile_op, execute
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    b8,
    check_op,
    check_quantized,
    expect_error,
    fuse,
    fuse_ref,
    i32,
    q8_input,
    quantize,
    rand,
    run_model,
    run_op,
)
from pool_refs import (
    ATOL,
    DYNAMIC_SIZES,
    LOWEST,
    NAN_X,
    OP,
    RTOL,
    P,
    expect_invalid,
    max_with_index,
    nan_pool_ref,
    pool2d_ref,
)

import nnadapter_tvm as nna

PAD = nna.AutoPad


def same_pads(in_hw, kernel, strides):
    """Paddle's SAME: total = max((ceil(in/stride) - 1) * stride + k - in, 0), smaller half first."""
    pads = []
    for size, k, s in zip(in_hw, kernel, strides):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return pads


# name: (H, W, kernel, strides, auto_pad, pads [top, bottom, left, right] for NONE)
CONFIGS = {
    "k3s1_pad_asym": (7, 8, [3, 3], [1, 1], PAD.NONE, [1, 0, 2, 1]),
    "k3s2_pad_asym": (7, 8, [3, 3], [2, 2], PAD.NONE, [0, 2, 1, 1]),
    "k2x3_s2x1": (6, 7, [2, 3], [2, 1], PAD.NONE, [1, 1, 0, 2]),
    "k3s2_asym_overhang": (7, 7, [3, 3], [2, 2], PAD.NONE, [1, 0, 0, 1]),  # ceil_mode windows run past the padding
    "k2s2_nopad": (8, 9, [2, 2], [2, 2], PAD.NONE, [0, 0, 0, 0]),
    "k3s2_same": (7, 8, [3, 3], [2, 2], PAD.SAME, None),
    "k2s1_same": (5, 6, [2, 2], [1, 1], PAD.SAME, None),
    "k3s2_valid": (8, 7, [3, 3], [2, 2], PAD.VALID, None),
    # Windows without real elements.  With ceil_mode the spec counts a last row and column that start in
    # the padding (4x4; TVM's pools, like PyTorch, drop them and give 3x3).
    "k2s2_ceil_in_pad": (5, 5, [2, 2], [2, 2], PAD.NONE, [1, 1, 1, 1]),
    # ceil_mode rows starting past the padded edge (count 0) and columns starting in the right padding.
    "k1x2_s3x2_ceil_past_pad": (5, 6, [1, 2], [3, 2], PAD.NONE, [0, 0, 0, 1]),
    # Pads at least the kernel: windows wholly in the padding even without ceil_mode.
    "k2_pad_ge_kernel": (4, 5, [2, 2], [1, 2], PAD.NONE, [2, 0, 0, 3]),
}


def pool_case(op, config, ceil_mode, code, count_include_pad=False, seed=0, scale=1.0):
    h, w, kernel, strides, auto_pad, pads = config
    x = rand(2, 3, h, w, seed=seed) * np.float32(scale)
    # An empty pads operand (VALID, SAME) means no explicit padding.
    ref_pads = same_pads([h, w], kernel, strides) if auto_pad == PAD.SAME else pads or [0, 0, 0, 0]
    kind = "max" if op == OP.MAX_POOL_2D else "avg"
    expected = fuse_ref(pool2d_ref(x, kind, kernel, strides, ref_pads, ceil_mode, count_include_pad), code)
    head = [In(x), i32([int(auto_pad)]), i32(pads) if pads is not None else Const(None, nna.Precision.INT32)]
    head += [i32(kernel), i32(strides), b8([ceil_mode])]
    if op == OP.MAX_POOL_2D:
        inputs = [*head, b8([False]), i32([int(nna.Precision.INT32)]), fuse(code)]
    else:
        inputs = [*head, b8([count_include_pad]), fuse(code)]
    return inputs, expected


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude_pad", "include_pad"])
def test_average_pool2d(config, ceil_mode, count_include_pad):
    inputs, expected = pool_case(OP.AVERAGE_POOL_2D, config, ceil_mode, nna.FuseCode.NONE, count_include_pad)
    check_op(OP.AVERAGE_POOL_2D, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
def test_max_pool2d(config, ceil_mode):
    inputs, expected = pool_case(OP.MAX_POOL_2D, config, ceil_mode, nna.FuseCode.NONE)
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_pool2d_fuse_codes(op, code):
    # Inputs in [-3, 3] so that RELU1 and RELU6 both clip something.
    inputs, expected = pool_case(op, CONFIGS["k3s2_pad_asym"], True, code, True, seed=3, scale=1.5)
    check_op(op, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_empty_flags_take_defaults(op):
    # ceil_mode and count_include_pad are not trailing; given empty they take the spec's default, false.
    inputs, expected = pool_case(op, CONFIGS["k3s2_pad_asym"], False, nna.FuseCode.NONE, False)
    empty = Const(None, nna.Precision.BOOL8)
    inputs[5] = empty
    if op == OP.AVERAGE_POOL_2D:
        inputs[6] = empty
    check_op(op, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize("config", ["k3s2_pad_asym", "k2s2_ceil_in_pad"], ids=["relax_pool", "spec_size_pool"])
def test_pool2d_unknown_batch(op, config):
    inputs, expected = pool_case(op, CONFIGS[config], True, nna.FuseCode.RELU, True)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, *inputs[0].value.shape[1:]])
    out = Out(dims=[UNKNOWN, *expected.shape[1:]])
    check_op(op, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
def test_pool2d_unknown_spatial(op, ceil_mode):
    # Symbolic H and W: the output sizes are the spec's formulas in them; with ceil_mode TVM cannot
    # tell whether its size matches, so the spec-size compute runs.
    inputs, expected = pool_case(op, CONFIGS["k2s2_ceil_in_pad"], ceil_mode, nna.FuseCode.NONE, True)
    inputs[0] = In(inputs[0].value, dims=[2, 3, UNKNOWN, UNKNOWN])
    out = Out(dims=[2, 3, UNKNOWN, UNKNOWN])
    check_op(op, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_bad_fuse_code(op):
    inputs, expected = pool_case(op, CONFIGS["k2s2_nopad"], False, nna.FuseCode.NONE)
    inputs[-1] = i32([9])
    expect_invalid(op, inputs, expected.shape, "fuse_code")


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_three_pads(op):
    inputs, expected = pool_case(op, CONFIGS["k2s2_nopad"], False, nna.FuseCode.NONE)
    inputs[2] = i32([0, 0, 0])
    expect_invalid(op, inputs, expected.shape, "pads")


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_bad_kernel(op):
    inputs, expected = pool_case(op, CONFIGS["k2s2_nopad"], False, nna.FuseCode.NONE)
    inputs[3] = i32([2, 0])
    expect_invalid(op, inputs, expected.shape, "kernel_shape")


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_kernel_larger_than_padded_input(op):
    inputs, _ = pool_case(op, (2, 5, [3, 3], [1, 1], PAD.NONE, [0, 0, 0, 0]), False, nna.FuseCode.NONE)
    expect_invalid(op, inputs, (2, 3, 1, 3), "kernel_shape")


# -- indices: MAX_POOL_2D return_indices -----------------------------------------------------------


def pool_windows(size, k, s, before, after, ceil_mode):
    """[start, end) of each window along one axis: the spec's output count, cut at the padded edge."""
    rnd = math.ceil if ceil_mode else math.floor
    count = rnd((size + before + after - k) / s + 1)
    return [(i * s - before, min(i * s - before + k, size + after)) for i in range(count)]


def max_pool_index_case(config, ceil_mode, dtype, code=nna.FuseCode.NONE, x=None):
    h, w, kernel, strides, auto_pad, pads = config
    x = rand(2, 3, h, w, seed=11) if x is None else x
    ref_pads = same_pads([h, w], kernel, strides) if auto_pad == PAD.SAME else pads or [0, 0, 0, 0]
    wh = pool_windows(h, kernel[0], strides[0], ref_pads[0], ref_pads[1], ceil_mode)
    ww = pool_windows(w, kernel[1], strides[1], ref_pads[2], ref_pads[3], ceil_mode)
    values, indices = max_with_index(x, wh, ww)
    inputs = [In(x), i32([int(auto_pad)]), i32(pads) if pads is not None else Const(None, P.INT32)]
    inputs += [i32(kernel), i32(strides), b8([ceil_mode]), b8([True]), i32([int(dtype)]), fuse(code)]
    return inputs, [fuse_ref(values, code), indices.astype("int32" if dtype == P.INT32 else "int64")]


@pytest.mark.parametrize(
    "config",
    ["k3s1_pad_asym", "k2x3_s2x1", "k3s2_asym_overhang", "k3s2_same", "k2s2_ceil_in_pad", "k1x2_s3x2_ceil_past_pad"],
    ids=lambda c: c,
)
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
def test_max_pool2d_indices(config, ceil_mode):
    dtype = P.INT64 if ceil_mode else P.INT32
    inputs, expected = max_pool_index_case(CONFIGS[config], ceil_mode, dtype)
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


def test_max_pool2d_indices_first_of_ties():
    # Values from {-1, 0, 1}: most windows hold their maximum several times; the first in row-major
    # order wins.  The fused RELU applies to the values, not the indices.
    x = np.random.default_rng(12).integers(-1, 2, (2, 3, 7, 8)).astype("float32")
    inputs, expected = max_pool_index_case(CONFIGS["k3s1_pad_asym"], True, P.INT32, nna.FuseCode.RELU, x=x)
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


def test_max_pool2d_indices_window_in_padding():
    # H = 2 with 2 rows of bottom padding and a 2x2 kernel of stride 2: the second row of windows
    # covers only padding, which Paddle reports as index -1 with the value -FLT_MAX.
    x = rand(1, 2, 2, 4, seed=13)
    config = (2, 4, [2, 2], [2, 2], PAD.NONE, [0, 2, 0, 0])
    inputs, expected = max_pool_index_case(config, False, P.INT32, x=x)
    assert (expected[1][:, :, 1] == -1).all() and (expected[0][:, :, 1] == LOWEST).all()
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


def test_max_pool2d_indices_unknown_batch():
    inputs, expected = max_pool_index_case(CONFIGS["k3s2_pad_asym"], True, P.INT64)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, *inputs[0].value.shape[1:]])
    outs = [Out(dims=[UNKNOWN, *e.shape[1:]], precision=p) for e, p in zip(expected, (P.FLOAT32, P.INT64))]
    check_op(OP.MAX_POOL_2D, inputs, expected, outputs=outs, rtol=0, atol=0)


def test_max_pool2d_indices_quantized():
    # int8 inputs tie often; indices come from the dequantized values, the output is requantized.
    x, x_real = q8_input(rand(2, 3, 7, 8, seed=14), 0.05)
    inputs, (values, indices) = max_pool_index_case(CONFIGS["k3s2_pad_asym"], False, P.INT64, x=x_real)
    inputs[0] = x
    outs = [Out(P.QUANT_INT8_SYMM_PER_LAYER, scale=0.05), Out(P.INT64)]
    got = run_op(OP.MAX_POOL_2D, inputs, outs, [values.shape, indices.shape])
    # The maximum of int8 values is one of them: requantized with the same scale it is exact.
    np.testing.assert_array_equal(got[0], quantize(values, 0.05))
    np.testing.assert_array_equal(got[1], indices)


@pytest.mark.parametrize(
    "index, value, outputs, operand",
    [
        (6, b8([True]), 1, "return_indices"),  # indices asked for, no indices output
        (6, b8([False]), 2, "return_indices"),  # an indices output nobody asked for
        (7, i32([int(P.FLOAT32)]), 2, "return_indices_dtype"),
        (7, i32([int(P.INT64)]), 2, "return_indices_dtype"),  # the indices output is declared INT32
    ],
    ids=["no_output", "unasked_output", "float_dtype", "dtype_mismatch"],
)
def test_max_pool2d_indices_invalid(index, value, outputs, operand):
    inputs, expected = max_pool_index_case(CONFIGS["k2s2_nopad"], False, P.INT32)
    inputs[index] = value
    outs = [Out(), Out(P.INT32)][:outputs]
    shapes = [e.shape for e in expected][:outputs]
    expect_error(lambda: run_op(OP.MAX_POOL_2D, inputs, outs, shapes), "MAX_POOL_2D", f"'{operand}'")


# -- quantized pooling ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize(
    "config, code",
    [("k3s2_pad_asym", nna.FuseCode.RELU6), ("k2s2_ceil_in_pad", nna.FuseCode.NONE)],
    ids=["relax_pool", "spec_size_pool"],
)
def test_pool2d_quantized(op, config, code):
    # spec_size_pool: empty max windows (-FLT_MAX) saturate to -128.
    h, w, kernel, strides, _, pads = CONFIGS[config]
    x, x_real = q8_input(rand(2, 3, h, w, seed=17), 0.02)
    inputs, _ = pool_case(op, CONFIGS[config], True, code, True)
    inputs[0] = x
    kind = "max" if op == OP.MAX_POOL_2D else "avg"
    expected = fuse_ref(pool2d_ref(x_real, kind, kernel, strides, pads, True, True), code)
    with np.errstate(over="ignore"):  # the reference quantizer's -FLT_MAX / scale overflows to -inf: -128
        check_quantized(op, inputs, expected, out_scale=0.015)


# -- dimensions UNKNOWN until execution: one compilation, several sizes -----------------------------------


def _dynamic_pool(op, kernel, strides, pads, ceil_mode, count_include_pad=False, auto_pad=PAD.NONE, c=3):
    """A pool over [?, c, ?, ?] compiled once and checked at DYNAMIC_SIZES against pool2d_ref."""
    kind = "max" if op == OP.MAX_POOL_2D else "avg"
    dims = [UNKNOWN, c, UNKNOWN, UNKNOWN]
    head = [In(rand(1, c, 7, 8), dims=dims), i32([int(auto_pad)])]
    head += [i32(pads) if pads is not None else Const(None, nna.Precision.INT32), i32(kernel), i32(strides)]
    head += [b8([ceil_mode])]
    if op == OP.MAX_POOL_2D:
        inputs = [*head, b8([False]), i32([int(nna.Precision.INT32)]), fuse(nna.FuseCode.NONE)]
    else:
        inputs = [*head, b8([count_include_pad]), fuse(nna.FuseCode.NONE)]
    compilation = compile_op(op, inputs, [Out(dims=dims)])
    cases = []
    for k, (n, h, w) in enumerate(DYNAMIC_SIZES):
        x = rand(n, c, h, w, seed=20 + k)
        ref_pads = same_pads([h, w], kernel, strides) if auto_pad == PAD.SAME else pads or [0, 0, 0, 0]
        cases.append(([x], [pool2d_ref(x, kind, kernel, strides, ref_pads, ceil_mode, count_include_pad)]))
    check_sizes(compilation, cases, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
@pytest.mark.parametrize(
    "kernel, strides, pads",
    [([3, 3], [2, 2], [1, 0, 2, 1]), ([2, 2], [2, 2], [0, 0, 0, 0]), ([3, 2], [1, 2], [1, 1, 0, 1])],
    ids=["k3s2_pad_asym", "k2s2", "k3x2_s1x2"],
)
def test_pool2d_unknown_batch_and_spatial_sizes(op, ceil_mode, kernel, strides, pads):
    """Output sizes are the spec's floor / ceil formulas as TIR expressions of the symbolic H and W:
    one compilation serves every size."""
    _dynamic_pool(op, kernel, strides, pads, ceil_mode, count_include_pad=ceil_mode)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_same_stride1_unknown_spatial(op):
    """SAME with stride 1 pads kernel - 1 in total whatever the size: symbolic H and W are fine."""
    _dynamic_pool(op, [3, 2], [1, 1], None, False, auto_pad=PAD.SAME)


def test_pool2d_same_stride2_unknown_spatial_is_unsupported():
    # SAME's pads then depend on H % stride, and the pool takes static pads: refused, naming the reason.
    inputs, _ = pool_case(OP.MAX_POOL_2D, CONFIGS["k3s2_same"], False, nna.FuseCode.NONE)
    inputs[0] = In(inputs[0].value, dims=[2, 3, UNKNOWN, UNKNOWN])
    expect_error(
        lambda: compile_op(OP.MAX_POOL_2D, inputs, [Out(dims=[2, 3, UNKNOWN, UNKNOWN])]),
        "MAX_POOL_2D",
        "'auto_pad'",
        "stride 2",
        code=nna.ResultCode.FEATURE_NOT_SUPPORTED,
    )


# -- NaN through the max pools: numpy's max, whatever the NaN's place in the window -----------------------


@pytest.mark.parametrize("dims", [None, [UNKNOWN, 1, UNKNOWN, UNKNOWN]], ids=["static", "unknown"])
def test_max_pool2d_nan_anywhere_in_window(dims):
    """MAX_POOL_2D through Relax's pool, lowered by pool.legalize_max_pool2d: a NaN first, in the middle or
    last in its window gives NaN; a window of -inf gives -inf (not the lowest float32)."""
    x = NAN_X
    expected = nan_pool_ref(x)
    assert np.isnan(expected[0, 0, 0, :2]).all() and np.isnan(expected[0, 0, 1, 0]) and expected[0, 0, 1, 1] == -np.inf
    inputs = [In(x, dims=dims), i32([int(PAD.NONE)]), i32([0, 0, 0, 0]), i32([2, 2]), i32([2, 2]), b8([False])]
    inputs += [b8([True]), i32([int(P.INT64)]), fuse(nna.FuseCode.NONE)]
    # The indices point at the first NaN of a NaN window (numpy's argmax), at the first -inf of the -inf one.
    flat = x.reshape(1, 1, 2, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 1, 2, 3, 4)
    first = np.argmax(flat, axis=-1)
    rows, cols = np.indices((2, 3))
    indices = ((2 * rows + first[0, 0] // 2) * 6 + 2 * cols + first[0, 0] % 2)[None, None].astype("int64")
    if dims is None:
        check_op(OP.MAX_POOL_2D, inputs, [expected, indices], rtol=0, atol=0)
    else:
        out = [Out(dims=[UNKNOWN, 1, UNKNOWN, UNKNOWN]), Out(P.INT64, dims=[UNKNOWN, 1, UNKNOWN, UNKNOWN])]
        check_sizes(compile_op(OP.MAX_POOL_2D, inputs, out), [([x], [expected, indices])], rtol=0, atol=0)


def test_max_pool2d_nan_with_a_convolution_before():
    """In a model with a convolution the pool runs in NHWC (ConvertLayout) and is vectorized over
    channels: the NaN-aware lowering holds there too."""
    rng = np.random.default_rng(40)
    x = rng.uniform(-1, 1, (1, 8, 6, 6)).astype("float32")
    x[0, 2, 0, 1] = x[0, 5, 1, 0] = np.nan  # a 1x1 convolution spreads each to every channel of its pixel
    w = rng.uniform(-1, 1, (16, 8, 1, 1)).astype("float32")
    model = nna.Model()
    t = nna.OperandType
    xin = model.add_operand(t(P.FLOAT32, [1, 8, 6, 6]))
    operands = [xin]
    for value in (w, np.zeros(16, "float32")):
        operand = model.add_operand(t(P.FLOAT32, list(value.shape)))
        model.set_operand_value(operand, value)
        operands.append(operand)
    for value, precision in (([int(PAD.NONE)], P.INT32), ([0, 0, 0, 0], P.INT32), ([1, 1], P.INT32), ([1], P.INT32)):
        operand = model.add_operand(t(precision, [len(value)]))
        model.set_operand_value(operand, np.asarray(value, "int32"))
        operands.append(operand)
    for value in ([1, 1], [0]):
        operand = model.add_operand(t(P.INT32, [len(value)]))
        model.set_operand_value(operand, np.asarray(value, "int32"))
        operands.append(operand)
    y = model.add_operand(t(P.FLOAT32, [1, 16, 6, 6]))
    model.add_operation(OP.CONV_2D, operands, [y])
    pool_in = [y]
    for value, dtype, precision in (
        ([int(PAD.NONE)], "int32", P.INT32),
        ([1, 1, 1, 1], "int32", P.INT32),
        ([3, 3], "int32", P.INT32),
        ([2, 2], "int32", P.INT32),
        ([False], "bool", P.BOOL8),
        ([False], "bool", P.BOOL8),
        ([int(P.INT32)], "int32", P.INT32),
        ([0], "int32", P.INT32),
    ):
        operand = model.add_operand(t(precision, [1 if len(value) == 1 else len(value)]))
        model.set_operand_value(operand, np.asarray(value, dtype))
        pool_in.append(operand)
    z = model.add_operand(t(P.FLOAT32, [1, 16, 3, 3]))
    model.add_operation(OP.MAX_POOL_2D, pool_in, [z])
    model.identify_inputs_and_outputs([xin], [z])
    model.finish()
    (got,) = run_model(model, [x])
    conv = np.einsum("nchw,oc->nohw", x.astype("float64"), w[:, :, 0, 0].astype("float64")).astype("float32")
    with np.errstate(invalid="ignore"):
        expected = pool2d_ref(conv, "max", [3, 3], [2, 2], [1, 1, 1, 1], False)
    assert np.isnan(expected).any() and not np.isnan(expected).all()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", ["k2s2_ceil_in_pad", "k1x2_s3x2_ceil_past_pad"], ids=str)
def test_spec_size_max_pool2d_keeps_nan(config):
    """Where the spec's ceil_mode size differs from Relax's pool (windows that start in the padding), the
    pool is a TE compute: a window holding a NaN gives NaN wherever in the window it is (numpy's max).
    Relax's own pool does too (test_max_pool2d_nan_anywhere_in_window)."""
    ceil_mode = True
    inputs, _ = pool_case(OP.MAX_POOL_2D, CONFIGS[config], ceil_mode, nna.FuseCode.RELU, seed=3)
    x = inputs[0].value.copy()
    rng = np.random.default_rng(3)
    x.reshape(-1)[rng.choice(x.size, x.size // 10, replace=False)] = np.nan
    inputs[0] = In(x)
    _, _, kernel, strides, _, pads = CONFIGS[config]
    with np.errstate(invalid="ignore"):
        expected = fuse_ref(pool2d_ref(x, "max", kernel, strides, pads or [0, 0, 0, 0], ceil_mode), nna.FuseCode.RELU)
    assert np.isnan(expected).any() and not np.isnan(expected).all()
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)


@pytest.mark.parametrize("op", [OP.AVERAGE_POOL_2D, OP.MAX_POOL_2D], ids=lambda o: o.name)
def test_pool2d_window_larger_than_an_input_known_at_execution(op):
    """The spec's output size floor((H + pads - k) / s) + 1 is 0 or less when the padded input is smaller
    than the window: with H known only at execution that fails the execution (INVALID_DIMENSIONS naming
    the operation and kernel_shape), as a static H fails the compilation, instead of an empty output."""
    inputs, _ = pool_case(op, CONFIGS["k3s2_pad_asym"], False, nna.FuseCode.NONE)
    dims = [UNKNOWN, 3, UNKNOWN, UNKNOWN]
    inputs[0] = In(inputs[0].value, dims=dims)
    compilation = compile_op(op, inputs, [Out(dims=dims)])
    kind = "max" if op == OP.MAX_POOL_2D else "avg"
    x = rand(1, 3, 3, 4, seed=9)  # 3 + 0 + 2 rows >= 3: fine
    expected = pool2d_ref(x, kind, [3, 3], [2, 2], [0, 2, 1, 1], False)
    check_sizes(compilation, [([x], [expected])], rtol=RTOL, atol=ATOL)
    expect_error(
        lambda: execute(compilation, [rand(1, 3, 0, 4)]),  # 0 + 0 + 2 rows < 3
        op.name,
        "'kernel_shape'",
        "exceeds the padded input",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
def test_max_pool2d_padding_is_left_out_beside_minus_infinity(ceil_mode):
    """A window holding padding and real elements that are all -inf gives -inf: the padding is left out of
    the maximum (ONNX), it is not the lowest finite value (which gave -FLT_MAX, a fuzz finding). A window
    with no real element still gives -FLT_MAX (test_max_pool2d_indices_window_in_padding)."""
    x = rand(1, 2, 4, 4, seed=21)
    x[:, :, 0, :] = -np.inf  # the first row: every window of the first output row is padding + -inf
    config = (4, 4, [2, 1], [2, 1], PAD.NONE, [1, 0, 0, 0])
    inputs, expected = max_pool_index_case(config, ceil_mode, P.INT64, x=x)
    assert (expected[0][:, :, 0] == -np.inf).all()
    check_op(OP.MAX_POOL_2D, inputs, expected, rtol=0, atol=0)
    inputs[6] = b8([False])  # the TVM-sized path without indices
    check_op(OP.MAX_POOL_2D, inputs, expected[0], rtol=0, atol=0)
