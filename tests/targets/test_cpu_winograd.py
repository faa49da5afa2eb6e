"""Winograd F(4x4, 3x3) convolutions (targets/cpu/winograd.py): the numbers of a float64 numpy convolution,
non-finite inputs giving the direct convolution's NaN and infinities (no more), where it applies, and the
``CPU_WINOGRAD`` switch through the public API."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from oputil import Const, In, Out, build_model, conv2d_ref, fuse, i32, run_model
from tvm import relax

import nnadapter_tvm as nna
from nnadapter_tvm.runtime.token import model_token
from nnadapter_tvm.targets.cpu import pipeline, winograd
from nnadapter_tvm.targets.cpu.compute import CONV
from nnadapter_tvm.targets.llvm import LlvmDriver

TARGET = LlvmDriver().tvm_target({})


@pytest.fixture(autouse=True)
def small_layers_too(request, monkeypatch):
    """The numbers are checked on small layers (fast to compile), which ``winograd.MIN_FLOPS`` leaves to the
    direct kernel in a real build; ``test_where_winograd_applies`` checks that policy itself."""
    if request.node.originalname != "test_where_winograd_applies":
        monkeypatch.setattr(winograd, "MIN_FLOPS", 0)


OP = nna.OperationType


def _reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, pads: tuple, relu: bool) -> np.ndarray:
    """``oputil.conv2d_ref`` (float64 sums; pads here: top, left, bottom, right), bias and an optional relu."""
    t, left, b, r = pads
    with np.errstate(invalid="ignore"):  # inf x 0 where the tests put them
        y = conv2d_ref(x, w, bias, [t, b, left, r], [1, 1], [1, 1], 1)
    return np.maximum(y, 0) if relu else y


def _build(x_shape: tuple, w: np.ndarray, bias: np.ndarray, pads: tuple, relu: bool, **options):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(x_shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=list(pads)))
            y = bb.emit(relax.op.add(y, relax.const(bias.reshape(1, -1, 1, 1))))
            if relu:
                y = bb.emit(relax.op.nn.relu(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return pipeline.build(bb.finalize(), TARGET, **options)


def _run(executable, x: np.ndarray) -> np.ndarray:
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


# (N, C, H, W), output channels, pads (top, left, bottom, right), relu
CASES = {
    "odd-channels": ((1, 3, 7, 9), 5, (1, 1, 1, 1), True),
    "batch-2-vector-channels": ((2, 16, 6, 5), 32, (1, 1, 1, 1), True),
    "asymmetric-pads": ((1, 8, 9, 11), 24, (0, 1, 1, 2), False),
    "no-padding": ((1, 16, 10, 10), 16, (0, 0, 0, 0), True),
    "wide-column-blocks": ((1, 16, 6, 70), 16, (1, 1, 1, 1), True),
    "channels-padded-to-vectors": ((1, 8, 12, 12), 40, (1, 1, 1, 1), False),
    "weight-larger-than-input": ((1, 64, 8, 8), 96, (1, 1, 1, 1), True),
    "input-larger-than-weight": ((1, 8, 32, 32), 8, (1, 1, 1, 1), True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_winograd_matches_numpy(name):
    shape, k, pads, relu = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(shape).astype("float32")
    w = (rng.standard_normal((k, shape[1], 3, 3)) / np.sqrt(9 * shape[1])).astype("float32")
    bias = rng.standard_normal(k).astype("float32")
    executable, report = _build(shape, w, bias, pads, relu)
    assert winograd.WINOGRAD in report.values(), report
    got, want = _run(executable, x), _reference(x, w, bias, pads, relu)
    assert got.shape == want.shape
    # F(4x4, 3x3)'s rounding: a few 1e-6 of the output's scale (the direct kernels: about 1e-7).
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


NON_FINITE_CASES = {
    # batch, channels in, size, channels out (two channel blocks), pads (10x10 outputs: edge tiles stick out)
    "one-image": ((1, 16, 12, 12), 32, (1, 1, 1, 1)),
    "batch-2-edge-tiles-2-blocks": ((2, 8, 12, 12), 64, (0, 0, 0, 0)),
}


@pytest.mark.parametrize("name", list(NON_FINITE_CASES))
def test_non_finite_inputs_reach_only_the_direct_convolutions_outputs(name):
    """NaN, infinities and a zero weight tap: the outputs whose 3x3 windows hold a non-finite value are
    NaN or infinite exactly where the float64 reference's are (inf x 0 = NaN included), with the same
    signs, and every other output of their tiles stays finite and right (the transforms alone would
    spread them over whole 4x4 tiles)."""
    shape, k, pads = NON_FINITE_CASES[name]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype("float32")
    x[0, 2, 5, 6] = np.nan
    x[0, :, 0, 0] = np.inf
    x[-1, 5, 9, 2] = -np.inf
    x[-1, 1, 11, 11] = np.inf  # a corner of the last (partial) tile
    w = (rng.standard_normal((k, shape[1], 3, 3)) / 12).astype("float32")
    w[3, 1, 2, 2] = 0.0  # inf x 0: NaN where the direct sum multiplies that tap by the infinity
    w[40 % k, 5, 1, 0] = 0.0
    bias = np.zeros(k, "float32")
    executable, report = _build(shape, w, bias, pads, False)
    assert winograd.WINOGRAD in report.values(), report
    got, want = _run(executable, x), _reference(x, w, bias, pads, False)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.sign(got[np.isinf(got)]), np.sign(want[np.isinf(want)]))
    finite = np.isfinite(want)
    assert (~finite).sum() > 9 and finite.sum() > 0.6 * want.size
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=2e-5 * np.abs(want[finite]).max())


@pytest.mark.parametrize(
    "shape,k", [((1, 16, 12, 12), 32), ((2, 16, 12, 12), 32), ((1, 64, 8, 8), 96)], ids=["n1", "n2", "weight-first"]
)
def test_direct_sums_run_under_the_tile_test(shape, k):
    """The direct sums' loops sit under the tile's test (``guard_direct``), whatever the batch and the loop
    order: without it they would add zeros for every output, at the direct convolution's cost."""
    w = np.random.default_rng(1).standard_normal((k, shape[1], 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=[1, 1, 1, 1])))
        bb.emit_func_output(out)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(bb.finalize(), TARGET, check_lowering=False)
    name = next(n for n, rule in report.items() if rule == winograd.WINOGRAD)
    text = prepared[name].script(show_meta=False)
    guard = text.index(f"{winograd.GUARD_ATTR}")
    assert "if " in text[text.rfind("\n", 0, text.rfind("\n", 0, guard)) : guard], text


@pytest.mark.parametrize(
    "x_shape,w_shape,strides,dilation,groups,applies",
    [
        ((1, 56, 56, 64), (64, 64, 3, 3), (1, 1), (1, 1), 1, True),
        ((1, 56, 56, 64), (64, 64, 3, 3), (2, 2), (1, 1), 1, False),
        ((1, 56, 56, 64), (64, 64, 3, 3), (1, 1), (2, 2), 1, False),
        ((1, 56, 56, 64), (64, 32, 3, 3), (1, 1), (1, 1), 2, False),
        ((1, 56, 56, 64), (64, 64, 5, 5), (1, 1), (1, 1), 1, False),
        ((1, 7, 7, 512), (512, 512, 3, 3), (1, 1), (1, 1), 1, False),  # 4 tiles: the weight's bytes dominate
        ((1, 7, 7, 256), (256, 256, 3, 3), (1, 1), (1, 1), 1, True),
        ((1, 2, 9, 8), (8, 8, 3, 3), (1, 1), (1, 1), 1, False),  # no full 3x3 window along the height
        ((1, 14, 14, 128), (32, 128, 3, 3), (1, 1), (1, 1), 1, False),  # 29 MFLOP: compiles longer than it saves
        ((1, 28, 28, 128), (32, 128, 3, 3), (1, 1), (1, 1), 1, True),  # 58 MFLOP
        # Unknown sizes count as a batch of 1 and 28 x 28 (TYPICAL_SIDE); the tiles cannot be counted.
        (("n", "h", "w", 64), (64, 64, 3, 3), (1, 1), (1, 1), 1, True),
        ((1, "h", "w", 256), (256, 256, 3, 3), (1, 1), (1, 1), 1, True),
        (("n", 7, 7, 512), (512, 512, 3, 3), (1, 1), (1, 1), 1, False),
        ((1, "h", "w", 32), (32, 32, 3, 3), (1, 1), (1, 1), 1, False),  # 14 MFLOP at 28 x 28
        ((1, "h", "w", "c"), (64, 64, 3, 3), (1, 1), (1, 1), 1, False),  # channels unknown
        ((1, "(h-1)//4+1", "w", 64), (64, 64, 3, 3), (1, 1), (1, 1), 1, False),  # a size derived from others
    ],
)
def test_where_winograd_applies(x_shape, w_shape, strides, dilation, groups, applies):
    h = tvm.tirx.Var("h", "int64")
    sizes = {"(h-1)//4+1": (h - 1) // 4 + 1, "h": h}
    x_shape = [sizes.get(d, tvm.tirx.Var(d, "int64")) if isinstance(d, str) else d for d in x_shape]
    assert winograd.applies(x_shape, list(w_shape), strides, dilation, groups) is applies


def test_the_switch_keeps_the_direct_kernel():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    bias = np.zeros(16, "float32")
    _, report = _build((1, 8, 12, 12), w, bias, (1, 1, 1, 1), True, winograd=False)
    assert CONV in report.values() and winograd.WINOGRAD not in report.values(), report


def _symbolic(x_shape: list, w: np.ndarray, pads: tuple, relu: bool):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=list(pads)))
            out = bb.emit_output(bb.emit(relax.op.nn.relu(y)) if relu else y)
        bb.emit_func_output(out)
    return pipeline.build(bb.finalize(), TARGET)


# Symbolic axes of NCHW, channels in and out, pads, relu; the sizes fed: tails of every kind (outputs not
# whole tiles, a row of tiles not whole blocks), a map smaller than one tile, and batches of 1 and 2.
SYMBOLIC_CASES = {
    "h": ((0, 2), 8, 16, (1, 1, 1, 1), True, [(1, 12), (1, 7), (2, 1)]),
    "n-h-w": ((0, 2, 3), 16, 24, (1, 1, 1, 1), False, [(1, 12, 12), (2, 9, 30), (1, 2, 3), (3, 17, 5)]),
    "h-w-no-padding": ((2, 3), 8, 8, (0, 0, 0, 0), True, [(10, 14), (3, 3), (6, 41)]),
}


@pytest.mark.parametrize("name", list(SYMBOLIC_CASES))
def test_symbolic_sizes_run_winograd(name):
    """Batch, height and width unknown at compile time: one Winograd kernel computes every size fed
    (numpy's float64 convolution), including non-finite inputs at a tile's edge (the direct fallback)."""
    axes, c, k, pads, relu = SYMBOLIC_CASES[name][:5]
    fixed = {0: 1, 1: c, 2: 12, 3: 10}
    shape = [tvm.tirx.Var(f"d{i}", "int64") if i in axes else fixed[i] for i in range(4)]
    rng = np.random.default_rng(len(name))
    w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")
    executable, report = _symbolic(shape, w, pads, relu)
    assert winograd.WINOGRAD in report.values(), report
    bias = np.zeros(k, "float32")
    for fed in SYMBOLIC_CASES[name][5]:
        dims = {**fixed, **dict(zip(axes, fed))}
        x = rng.standard_normal([dims[i] for i in range(4)]).astype("float32")
        x[0, 1, -1, -1] = np.inf
        got, want = _run(executable, x), _reference(x, w, bias, pads, relu)
        assert got.shape == want.shape, fed
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        scale = np.abs(want[finite]).max() if finite.any() else 1.0
        np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=2e-5 * scale, err_msg=str(fed))


def test_whole_number_weights_keep_the_exact_direct_kernel():
    """An integer convolution computed in float32 (weights of whole numbers, inputs of small integers):
    the direct kernel's sums are exact, Winograd's fractions would round them."""
    rng = np.random.default_rng(7)
    w = rng.integers(-127, 128, size=(8, 16, 3, 3)).astype("float32")
    x = rng.integers(-255, 256, size=(1, 16, 10, 10)).astype("float32")
    bias = np.zeros(8, "float32")
    executable, report = _build(x.shape, w, bias, (1, 1, 1, 1), False)
    assert CONV in report.values() and winograd.WINOGRAD not in report.values(), report
    np.testing.assert_array_equal(_run(executable, x), _reference(x, w, bias, (1, 1, 1, 1), False))


def test_cpu_winograd_property_through_the_public_api():
    """CONV_2D with a constant weight: the same numbers with ``CPU_WINOGRAD`` on (the default) and off, a
    Winograd kernel only when on, a different model token for each, and a malformed value refused."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 8, 10, 10)).astype("float32")
    w = (rng.standard_normal((16, 8, 3, 3)) / 8).astype("float32")
    b = rng.standard_normal(16).astype("float32")
    inputs = [In(x), Const(w), Const(b), i32([0]), i32([1, 1, 1, 1]), i32([1, 1]), i32([1]), i32([1, 1])]
    inputs.append(fuse(nna.FuseCode.NONE))
    want = conv2d_ref(x, w, b, [1, 1, 1, 1], [1, 1], [1, 1], 1)
    model = build_model(OP.CONV_2D, inputs, [Out(nna.Precision.FLOAT32)], [want.shape])
    got = {}
    for props in ("", "CPU_WINOGRAD=0;"):
        (got[props],) = run_model(model, [x], properties=props)
        np.testing.assert_allclose(got[props], want, rtol=1e-5, atol=2e-5 * np.abs(want).max())
    # The direct kernel rounds differently: Winograd ran with the default and not with 0.
    assert not np.array_equal(got[""], got["CPU_WINOGRAD=0;"])
    contexts = {v: nna.Context([nna.Device.acquire("llvm")], f"CPU_WINOGRAD={v};") for v in (0, 1)}
    assert contexts[1].codegen_properties()["CPU_WINOGRAD"] is True
    assert contexts[0].codegen_properties()["CPU_WINOGRAD"] is False
    assert model_token(model, contexts[0]) != model_token(model, contexts[1])
    with pytest.raises(nna.NNAdapterError, match="CPU_WINOGRAD"):
        nna.Context([nna.Device.acquire("llvm")], "CPU_WINOGRAD=sometimes;")
