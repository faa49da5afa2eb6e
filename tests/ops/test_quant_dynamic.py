"""The dynamic-quantization extension operations (DYNAMIC_QUANTIZE_LINEAR, CONV_2D_INTEGER,
MAT_MUL_INTEGER) against numpy references written from ONNX's operator definitions: exact int32 sums
(compared for equality), zero points per tensor / per channel / per row and column, constant or fed at
run time, uint8 and int8, static and symbolic (UNKNOWN) dimensions, and each of the converter's four
routes (one float32 product, x split in hi/lo halves, x and w split, the int32 product) with the
extreme operands that reach the route's bound."""

from __future__ import annotations

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, Out, build_model, expect_error, i32, run_model

import nnadapter_tvm as nna
from nnadapter_tvm.op_converters.quant_dynamic import integer_route

OP = nna.OperationType
P = nna.Precision
PREC = {"uint8": P.UINT8, "int8": P.INT8}


def dql_ref(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX's DynamicQuantizeLinear, step by step in float32 (as onnx.reference computes it)."""
    max_x = np.float32(max(np.float32(0), x.max()))
    min_x = np.float32(min(np.float32(0), x.min()))
    scale = np.float32(np.float32(1.0) if max_x == min_x else max_x - min_x) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - min_x / scale, 0, 255)).astype("float32")
    y = np.clip(np.rint(x / scale) + zp, 0, 255)
    return y.astype("uint8"), np.asarray(scale, "float32"), np.asarray(zp, "uint8")


def ints(shape, dtype: str, seed: int, low: int | None = None, high: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return np.random.default_rng(seed).integers(low, high + 1, size=shape).astype(dtype)


def conv_int_ref(x, w, x_zp, w_zp, pads, strides, dilations, group) -> np.ndarray:
    """sum over the window of (x - x_zp) * (w - w_zp) in int64 (checked to fit int32); pads [t, b, l, r]
    add zeros of x - x_zp."""
    xs = x.astype("int64") - np.asarray(x_zp, "int64").reshape(-1)[0]
    w_zp = np.asarray(w_zp, "int64").reshape(-1)
    ws = w.astype("int64") - (w_zp.reshape(-1, 1, 1, 1) if w_zp.size > 1 else w_zp[0])
    xs = np.pad(xs, [(0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])])
    n, _, h, wd = xs.shape
    oc, cg, kh, kw = ws.shape
    oh = (h - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n, oc, oh, ow), "int64")
    per = oc // group
    for o in range(oc):
        g = o // per
        for i in range(kh):
            for j in range(kw):
                patch = xs[
                    :,
                    g * cg : (g + 1) * cg,
                    i * dilations[0] : i * dilations[0] + strides[0] * (oh - 1) + 1 : strides[0],
                    j * dilations[1] : j * dilations[1] + strides[1] * (ow - 1) + 1 : strides[1],
                ]
                y[:, o] += np.einsum("nchw,c->nhw", patch, ws[o, :, i, j])
    assert np.abs(y).max(initial=0) < 2**31
    return y.astype("int32")


def matmul_int_ref(a, b, a_zp, b_zp) -> np.ndarray:
    a64 = a.astype("int64") - (0 if a_zp is None else np.asarray(a_zp, "int64"))
    b64 = b.astype("int64") - (0 if b_zp is None else np.asarray(b_zp, "int64"))
    y = np.matmul(a64, b64)
    assert np.abs(y).max(initial=0) < 2**31
    return y.astype("int32")


def zp_operand(value, precision, fed: bool):
    return In(value, precision) if fed else Const(value, precision)


# -- DYNAMIC_QUANTIZE_LINEAR -----------------------------------------------------------------


def dql_model(x: np.ndarray, dims, scalar_dims):
    return build_model(
        OP.DYNAMIC_QUANTIZE_LINEAR,
        [In(x, dims=dims)],
        [Out(P.UINT8, dims), Out(P.FLOAT32, scalar_dims), Out(P.UINT8, scalar_dims)],
        [x.shape, (), ()],
    )


@pytest.mark.parametrize(
    "name, x",
    [
        ("mixed", np.random.default_rng(0).uniform(-3, 5, (2, 3, 4)).astype("float32")),
        ("positive", np.random.default_rng(1).uniform(0.5, 2, (3, 5)).astype("float32")),  # min adjusted to 0
        ("negative", np.random.default_rng(2).uniform(-4, -1, (3, 5)).astype("float32")),  # max adjusted to 0
        ("zeros", np.zeros((2, 3), "float32")),  # max == min: scale 1/255
        # ties: x / scale on .5 exactly (scale 1/255 * 255 = 1: x = k + 0.5 rounds to even)
        ("ties", np.asarray([0.0, 0.5, 1.5, 2.5, 3.5, 254.5, 255.0, 100.5], "float32")),
        ("ties_negative", np.asarray([-255.0, -0.5, -1.5, -2.5, -100.5, 0.0], "float32")),
    ],
)
@pytest.mark.parametrize("scalar_dims", [(), (1,)], ids=["scalar", "one"])
def test_dynamic_quantize_linear(name, x, scalar_dims):
    y, scale, zp = run_model(dql_model(x, list(x.shape), scalar_dims), [x])
    ry, rscale, rzp = dql_ref(x)
    assert scale.shape == scalar_dims and zp.shape == scalar_dims
    assert scale.dtype == np.float32 and zp.dtype == np.uint8 and y.dtype == np.uint8
    np.testing.assert_array_equal(scale.reshape(()), rscale)  # bit-exact: the same float32 steps
    np.testing.assert_array_equal(zp.reshape(()), rzp)
    np.testing.assert_array_equal(y, ry)


def test_dynamic_quantize_linear_symbolic_dims():
    """One compilation for every size: the reductions and the scale follow the fed data."""
    x0 = np.zeros((1, 1, 4, 3), "float32")
    model = dql_model(x0, [1, 1, 4, UNKNOWN], ())
    context = nna.Context([nna.Device.acquire("llvm")])
    compilation = nna.Compilation(model, context)
    compilation.finish()
    for width, seed in ((3, 0), (17, 1), (64, 2)):
        x = np.random.default_rng(seed).normal(0, 2, (1, 1, 4, width)).astype("float32")
        for got, want in zip(run_compiled(compilation, [x], 3), dql_ref(x)):
            np.testing.assert_array_equal(got, want)


def run_compiled(compilation: nna.Compilation, feeds: list[np.ndarray], outputs: int) -> list[np.ndarray]:
    """One execution of a finished compilation; outputs sized from the types the runtime reports."""
    execution = nna.Execution(compilation)
    for i, feed in enumerate(feeds):
        execution.set_input(i, feed)
    got: list[np.ndarray | None] = [None] * outputs

    def access(i: int):
        def fill(memory, t: nna.OperandType) -> np.ndarray:
            got[i] = np.empty(t.dimensions, t.dtype)
            return got[i]

        return fill

    for i in range(outputs):
        execution.set_output(i, None, access(i))
    execution.compute()
    return got


def test_dynamic_quantize_linear_bad_scale_shape():
    x = np.ones((2, 2), "float32")
    model = build_model(
        OP.DYNAMIC_QUANTIZE_LINEAR,
        [In(x)],
        [Out(P.UINT8), Out(P.FLOAT32, (2,)), Out(P.UINT8, ())],
        [x.shape, (), ()],
    )
    expect_error(lambda: run_model(model, [x]), "DYNAMIC_QUANTIZE_LINEAR", "output 1", "[] or [1]")


# -- CONV_2D_INTEGER -----------------------------------------------------------------------


def conv_int_inputs(x, w, x_zp, w_zp, pads, strides, dilations, group, x_dims=None, fed_zp=False, fed_w=False):
    xp, wp = PREC[x.dtype.name], PREC[w.dtype.name]
    return [
        In(x, xp, dims=x_dims),
        In(w, wp) if fed_w else Const(w, wp),
        zp_operand(np.asarray(x_zp, x.dtype), xp, fed_zp),
        Const(None, wp) if w_zp is None else Const(np.asarray(w_zp, w.dtype), wp),
        i32([0]),
        i32(pads),
        i32(strides),
        i32([group]),
        i32(dilations),
    ]


def check_conv_int(inputs, expected, x_dims=None):
    model = build_model(
        OP.CONV_2D_INTEGER, inputs, [Out(P.INT32, x_dims and [*expected.shape[:2], UNKNOWN, UNKNOWN])], [expected.shape]
    )
    feeds = [a.value for a in inputs if isinstance(a, In)]
    (got,) = run_model(model, feeds)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def operands(shape, dtype: str, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, zero point) of ``kind``: "random" (any values, any zero point), "small" (within 3 of the
    zero point), or "extreme" (mostly the type's far end from the zero point: |v - zp| = 255, the largest
    products there are, with a few |v - zp| = 0)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    if kind == "random":
        return ints(shape, dtype, seed), ints((), dtype, seed + 100)
    zp = int(rng.integers(info.min + 3, info.max - 2)) if kind == "small" else info.min
    if kind == "small":
        return (zp + rng.integers(-3, 4, size=shape)).astype(dtype), np.asarray(zp, dtype)
    values = np.where(rng.random(shape) < 0.97, info.max, info.min)
    return values.astype(dtype), np.asarray(zp, dtype)


def route(w: np.ndarray, w_zp: np.ndarray, axis, terms: int, fed: bool) -> str:
    """The converter's route for these weights (asserted, so that each case tests the route it names)."""
    shifted = np.abs(w.astype("int64") - w_zp.astype("int64"))
    return integer_route(None if fed else int(shifted.sum(axis=axis).max()), terms)


@pytest.mark.parametrize("xt, wt", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
@pytest.mark.parametrize(
    "c_in, c_out, k, pads, strides, dilations, group, kind, fed, want",
    [
        (3, 4, 3, [1, 1, 1, 1], [1, 1], [1, 1], 1, "random", False, "float"),
        # 360 products of up to 255 * 255
        (40, 3, 3, [1, 0, 2, 1], [2, 1], [1, 2], 1, "extreme", False, "split_x"),
        (512, 2, 3, [1, 1, 1, 1], [1, 1], [1, 1], 1, "extreme", False, "split_both"),  # 4608 products
        (512, 2, 3, [1, 1, 1, 1], [1, 1], [1, 1], 1, "small", False, "float"),  # 4608 products of small weights
        (7300, 2, 3, [0, 0, 0, 0], [1, 1], [1, 1], 1, "random", False, "int32"),  # 65700 products
        (8, 8, 3, [0, 0, 0, 0], [1, 1], [1, 1], 2, "random", False, "float"),  # grouped
        # A filter fed at run time: routes from the window size alone (every |w - w_zp| <= 255).
        (4, 3, 3, [1, 1, 1, 1], [1, 1], [1, 1], 1, "extreme", True, "float"),
        (64, 3, 3, [1, 1, 1, 1], [1, 1], [1, 1], 1, "extreme", True, "split_x"),
        (512, 2, 3, [1, 1, 1, 1], [1, 1], [1, 1], 1, "extreme", True, "split_both"),
    ],
    ids=[
        "small",
        "split_strided_dilated",
        "split_both",
        "small_weights",
        "int32",
        "grouped",
        "fed_float",
        "fed_split_x",
        "fed_split_both",
    ],
)
def test_conv_2d_integer(xt, wt, c_in, c_out, k, pads, strides, dilations, group, kind, fed, want):
    w, w_zp = operands((c_out, c_in // group, k, k), wt, kind, 2)
    assert route(w, w_zp, (1, 2, 3), c_in // group * k * k, fed) == want
    x, x_zp = operands((2, c_in, 7, 6), xt, "random" if kind == "random" else "extreme", 1)
    expected = conv_int_ref(x, w, x_zp, w_zp, pads, strides, dilations, group)
    inputs = conv_int_inputs(x, w, x_zp, w_zp, pads, strides, dilations, group, fed_w=fed)
    model = build_model(OP.CONV_2D_INTEGER, inputs, [Out(P.INT32)], [expected.shape])
    (got,) = run_model(model, [x, w] if fed else [x])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("fed_zp", [False, True], ids=["const_zp", "fed_zp"])
@pytest.mark.parametrize("fed_w", [False, True], ids=["const_filter", "fed_filter"])
def test_conv_2d_integer_per_channel_and_symbolic(fed_zp, fed_w):
    """Per-output-channel filter zero points, a run-time input zero point, H and W unknown until execution."""
    w = ints((5, 6, 3, 3), "int8", 5)
    w_zp = ints((5,), "int8", 6)
    pads, strides, dilations = [1, 1, 1, 1], [2, 2], [1, 1]
    x0 = ints((1, 6, 9, 9), "uint8", 7)
    inputs = conv_int_inputs(
        x0, w, np.uint8(131), w_zp, pads, strides, dilations, 1, [1, 6, UNKNOWN, UNKNOWN], fed_zp, fed_w
    )
    model = build_model(OP.CONV_2D_INTEGER, inputs, [Out(P.INT32, [1, 5, UNKNOWN, UNKNOWN])], [(1, 5, 5, 5)])
    for h, wd, seed in ((9, 9, 0), (5, 12, 1), (16, 3, 2)):
        x = ints((1, 6, h, wd), "uint8", 10 + seed)
        x_zp = ints((), "uint8", 20 + seed) if fed_zp else np.uint8(131)
        feeds = [x] + ([w] if fed_w else []) + ([np.asarray(x_zp, "uint8")] if fed_zp else [])
        (got,) = run_model(model, feeds)
        np.testing.assert_array_equal(got, conv_int_ref(x, w, x_zp, w_zp, pads, strides, dilations, 1))


def test_conv_2d_integer_no_filter_zero_point():
    x, w = ints((1, 2, 4, 4), "uint8", 1), ints((3, 2, 2, 2), "uint8", 2)
    expected = conv_int_ref(x, w, 7, 0, [0, 0, 0, 0], [1, 1], [1, 1], 1)
    check_conv_int(conv_int_inputs(x, w, np.uint8(7), None, [0, 0, 0, 0], [1, 1], [1, 1], 1), expected)


def test_conv_2d_integer_errors():
    x, w = ints((1, 2, 4, 4), "uint8", 1), ints((3, 2, 2, 2), "uint8", 2)
    bad_zp = conv_int_inputs(x, w, np.uint8(7), np.zeros(2, "uint8"), [0, 0, 0, 0], [1, 1], [1, 1], 1)
    model = build_model(OP.CONV_2D_INTEGER, bad_zp, [Out(P.INT32)], [(1, 3, 3, 3)])
    expect_error(lambda: run_model(model, [x]), "CONV_2D_INTEGER", "filter_zero_point", "[C_out] = [3]")
    mixed = conv_int_inputs(x, w, np.uint8(7), None, [0, 0, 0, 0], [1, 1], [1, 1], 1)
    mixed[2] = Const(np.asarray(7, "int8"), P.INT8)
    expect_error(
        lambda: build_model(OP.CONV_2D_INTEGER, mixed, [Out(P.INT32)], [(1, 3, 3, 3)]),
        "CONV_2D_INTEGER",
        "input_zero_point",
        "differs from 'input'",
    )


# -- MAT_MUL_INTEGER -----------------------------------------------------------------------


def check_matmul_int(a, b, a_zp, b_zp, a_dims=None, fed_b=False, fed_zp=False, out_dims=None, feeds_list=None):
    ap, bp = PREC[a.dtype.name], PREC[b.dtype.name]
    inputs = [In(a, ap, dims=a_dims), In(b, bp) if fed_b else Const(b, bp)]
    inputs.append(Const(None, ap) if a_zp is None else zp_operand(np.asarray(a_zp, a.dtype), ap, fed_zp))
    inputs.append(Const(None, bp) if b_zp is None else Const(np.asarray(b_zp, b.dtype), bp))
    expected = matmul_int_ref(a, b, a_zp, b_zp)
    model = build_model(OP.MAT_MUL_INTEGER, inputs, [Out(P.INT32, out_dims)], [expected.shape])
    for feed_a in feeds_list or [a]:
        feeds = [feed_a] + ([b] if fed_b else []) + ([np.asarray(a_zp, a.dtype)] if fed_zp else [])
        (got,) = run_model(model, feeds)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, matmul_int_ref(feed_a, b, a_zp, b_zp))


@pytest.mark.parametrize("at, bt", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
@pytest.mark.parametrize(
    "k, kind, fed, want",
    [
        (16, "random", False, "float"),
        (300, "extreme", False, "split_x"),
        (4400, "extreme", False, "split_both"),
        (4400, "small", False, "float"),
        (65600, "random", False, "int32"),
        (200, "extreme", True, "float"),
        (300, "extreme", True, "split_x"),
        (4400, "extreme", True, "split_both"),
    ],
    ids=["k16", "k300_split_x", "k4400_split_both", "k4400_small", "k65600_int32", "fed_k200", "fed_k300", "fed_k4400"],
)
def test_mat_mul_integer(at, bt, k, kind, fed, want):
    b, b_zp = operands((k, 5), bt, kind, 2)
    assert route(b, b_zp, 0, k, fed) == want
    a, a_zp = operands((3, k), at, "random" if kind == "random" else "extreme", 1)
    check_matmul_int(a, b, a_zp, b_zp, fed_b=fed)


def test_mat_mul_integer_per_row_and_column():
    """x's zero point per row ([M, 1]), y's per column ([N]), as ONNX's operator text defines them."""
    a, b = ints((4, 7), "uint8", 1), ints((7, 3), "int8", 2)
    check_matmul_int(a, b, ints((4, 1), "uint8", 3), ints((3,), "int8", 4))


def test_mat_mul_integer_batched_symbolic_fed():
    """A batched x with a symbolic row count, a fed zero point, a fed y and a constant y."""
    b = ints((2, 9, 4), "uint8", 2)
    a0 = ints((2, 3, 9), "uint8", 1)
    feeds = [ints((2, m, 9), "uint8", 10 + m) for m in (1, 3, 8)]
    for fed_b in (False, True):
        check_matmul_int(
            a0, b, np.uint8(77), np.uint8(3), [2, UNKNOWN, 9], fed_b, True, [2, UNKNOWN, 4], feeds_list=feeds
        )


def test_mat_mul_integer_without_zero_points():
    a, b = ints((2, 5), "int8", 1), ints((5, 6), "int8", 2)
    check_matmul_int(a, b, None, None)


def test_mat_mul_integer_errors():
    a, b = ints((2, 5), "uint8", 1), ints((4, 6), "uint8", 2)
    inputs = [In(a, P.UINT8), Const(b, P.UINT8)]
    model = build_model(OP.MAT_MUL_INTEGER, inputs, [Out(P.INT32)], [(2, 6)])
    expect_error(lambda: run_model(model, [a]), "MAT_MUL_INTEGER", "reduction lengths 5 != 4")
    zp = [In(a, P.UINT8), Const(ints((5, 6), "uint8", 3), P.UINT8), Const(np.zeros(3, "uint8"), P.UINT8)]
    model = build_model(OP.MAT_MUL_INTEGER, zp, [Out(P.INT32)], [(2, 6)])
    expect_error(lambda: run_model(model, [a]), "MAT_MUL_INTEGER", "x_zero_point", "does not broadcast")
