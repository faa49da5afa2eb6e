"""float32 exp and sigmoid of the CPU pipeline (``targets/cpu/vmath.py``) against numpy's float64 values:
at most 1 ulp (exp) and 2.5 ulp (sigmoid) wherever the result is a normal float32, IEEE's special values,
and no call of TVM's exp left (which LLVM turns into one libm call per element)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from nnadapter_tvm.targets.cpu import pipeline
from nnadapter_tvm.targets.cpu.simd import has_fma
from nnadapter_tvm.targets.llvm import LlvmDriver

TARGET = LlvmDriver().tvm_target({})
SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72283935546875, 88.7228, 88.73, -87.33, -103.97, -104.0]


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    sweep = np.linspace(-110, 95, 200_001)
    tiny = np.array([1e-30, -1e-30, 1e-8, -1e-8, 1e-3, 0.5 * np.log(2), -0.5 * np.log(2)])
    return np.concatenate([sweep, rng.standard_normal(50_000) * 30, tiny, SPECIAL]).astype(np.float32)


def _run(op, values: np.ndarray) -> tuple[np.ndarray, tvm.IRModule]:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([len(values)], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op(x)))
        bb.emit_func_output(out)
    mod = bb.finalize()
    executable, _ = pipeline.build(mod, TARGET)
    with TARGET:
        lowered = pipeline.lower(mod, TARGET)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    return got, lowered


@pytest.mark.parametrize(
    "op, reference, max_ulp",
    [(relax.op.exp, np.exp, 1.0), (relax.op.sigmoid, lambda v: 1 / (1 + np.exp(-v)), 2.5)],
    ids=["exp", "sigmoid"],
)
def test_exp_and_sigmoid_within_ulps_of_float64(op, reference, max_ulp):
    values = _values()
    got, lowered = _run(op, values)
    with np.errstate(all="ignore"):
        want = reference(values.astype(np.float64))
        want32 = want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want32))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want32))
    assert np.array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want32[np.isinf(want32)]))
    normal = np.isfinite(want32) & (np.abs(want32) >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal].astype(np.float64) - want[normal]) / np.spacing(np.abs(want32[normal])).astype(np.float64)
    assert ulps.max() <= max_ulp, (ulps.max(), values[normal][np.argmax(ulps)])
    # Results below float32's smallest normal: within its spacing (gradual underflow, as the docs say).
    low = np.isfinite(want32) & ~normal
    assert np.abs(got[low].astype(np.float64) - want[low]).max() <= np.finfo(np.float32).tiny
    text = "\n".join(f.script() for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    assert "T.exp(" not in text and "T.sigmoid(" not in text, "TVM's exp would be one libm call per element"


def test_float64_exp_keeps_tvm_lowering():
    """Only float32 takes the polynomial; float64 stays TVM's (libm's exp, exact to float64)."""
    values = np.array([-3.0, 0.0, 1.5, 700.0])
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.exp(x)))
        bb.emit_func_output(out)
    executable, _ = pipeline.build(bb.finalize(), TARGET)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    np.testing.assert_allclose(got, np.exp(values), rtol=1e-15)


def test_erf_within_ulps_of_float64_with_ieee_special_values():
    """GELU's erf (``vmath.erf_f32``): near-faithful over the whole range, erf(+-inf) = +-1, NaN kept, -0
    kept, and no call of TVM's erf left (libm's erff, one call per element)."""
    import math

    rng = np.random.default_rng(1)
    values = np.concatenate(
        [np.linspace(-7, 7, 200_001), rng.standard_normal(50_000) * 2, [1e-30, -1e-30, 1e-8, -4e-39, 0.927734375]]
    ).astype(np.float32)
    values = np.concatenate([values, np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.9, 4.0, 4.1, 1e30], "float32")])
    got, lowered = _run(relax.op.erf, values)
    finite = np.isfinite(values)
    want = np.array([math.erf(v) for v in values[finite].astype(np.float64)])
    want32 = want.astype(np.float32)
    normal = np.abs(want32) >= np.finfo(np.float32).tiny
    ulps = np.abs(got[finite][normal].astype(np.float64) - want[normal]) / np.spacing(np.abs(want32[normal]))
    assert ulps.max() <= 2.0, (ulps.max(), values[finite][normal][np.argmax(ulps)])
    assert np.abs(got[finite][~normal].astype(np.float64) - want[~normal]).max() <= np.finfo(np.float32).tiny
    assert np.isnan(got[np.isnan(values)]).all()
    assert got[values == np.inf].tolist() == [1.0] and got[values == -np.inf].tolist() == [-1.0]
    zeros = got[values == 0]
    assert (zeros == 0).all() and np.signbit(zeros).tolist() == np.signbit(values[values == 0]).tolist()
    text = "\n".join(f.script() for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    assert "T.erf(" not in text, "TVM's erf is one libm call per element"


def test_tanh_within_ulps_of_float64_with_ieee_special_values():
    """GPT-2's GELU tanh (``vmath.tanh_f32``) against numpy's float64 tanh, IEEE's special values kept, and
    no call of TVM's tanh left."""
    rng = np.random.default_rng(2)
    values = np.concatenate(
        [np.linspace(-12, 12, 200_001), rng.standard_normal(50_000) * 3, [1e-30, -1e-30, 1e-8, 0.625, -0.625, 50.0]]
    ).astype(np.float32)
    values = np.concatenate([values, np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], "float32")])
    got, lowered = _run(relax.op.tanh, values)
    want = np.tanh(values.astype(np.float64))
    want32 = want.astype(np.float32)
    normal = np.isfinite(values) & (np.abs(want32) >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal].astype(np.float64) - want[normal]) / np.spacing(np.abs(want32[normal]))
    assert ulps.max() <= 3.0, (ulps.max(), values[normal][np.argmax(ulps)])
    assert np.isnan(got[np.isnan(values)]).all()
    assert got[np.isinf(values)].tolist() == [1.0, -1.0] and got[np.abs(values) == 1e30].tolist() == [1.0, -1.0]
    zeros = got[values == 0]
    assert (zeros == 0).all() and np.signbit(zeros).tolist() == np.signbit(values[values == 0]).tolist()
    text = "\n".join(f.script() for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    assert "T.tanh(" not in text, "TVM's tanh is one libm call per element"


@pytest.mark.parametrize(
    "op, reference",
    [(relax.op.isnan, np.isnan), (relax.op.isinf, np.isinf), (relax.op.isfinite, np.isfinite)],
    ids=["isnan", "isinf", "isfinite"],
)
def test_float_class_tests_as_integer_compares(op, reference):
    """isnan / isinf / isfinite of float32 as compares of the bits, exact on every class (NaNs of either
    sign and any payload, infinities, the largest finite values, subnormals, zeros), and no TVM isnan
    left (LLVM turns it into a compare and a branch per element)."""
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF], "uint32")
    nans = bits.view(np.float32)
    largest = np.finfo(np.float32).max
    subnormal = np.finfo(np.float32).smallest_subnormal
    values = np.concatenate([_values(), nans, [largest, -largest, subnormal, -subnormal]]).astype(np.float32)
    got, lowered = _run(op, values)
    np.testing.assert_array_equal(got, reference(values))
    assert "T.isnan(" not in lowered.script(show_meta=False)


@pytest.mark.skipif(not has_fma(TARGET), reason="this CPU has no FMA: the division keeps TVM's lowering")
@pytest.mark.parametrize("layout", ["per-channel", "scalar"])
def test_division_by_a_constant_is_correctly_rounded(layout: str) -> None:
    """x / c by a constant c as RN(1/c) and two fmas (``quotient_f32``): equal to numpy's float32 division
    element for element, on quotients one ulp from half-integers (where a requantization's rounding
    turns), IEEE's special values (inf / c = inf, NaN, -0 keeps its sign), and on the scale of a
    requantization (x / 0.0235...)."""
    rng = np.random.default_rng(1)
    channels = 16 if layout == "per-channel" else 1
    c = (rng.uniform(1e-3, 3.0, channels) * 2.0 ** rng.integers(-6, 6, channels)).astype("float32")
    n = 4096
    halves = (rng.integers(-300, 300, (n, channels)) + 0.5).astype("float32")
    near = np.nextafter((halves * c).astype("float32"), rng.choice([-np.inf, np.inf], (n, channels)).astype("float32"))
    wide = rng.standard_normal((n, channels)).astype("float32") * np.float32(10.0) ** rng.integers(-20, 20, (n, 1))
    special = np.tile(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30], "float32")[:, None], (1, channels))
    values = np.concatenate([near, wide.astype("float32"), special]).astype("float32")

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(values.shape), "float32"))
    divisor = c.reshape(1, channels) if layout == "per-channel" else c.reshape(())
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.divide(x, relax.const(divisor))))
        bb.emit_func_output(out)
    mod = bb.finalize()
    executable, _ = pipeline.build(mod, TARGET)
    with TARGET:
        assert "llvm.fma" in pipeline.lower(mod, TARGET).script(), "the division kept TVM's lowering"
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    want = values / divisor
    normal = ~np.isfinite(want) | (np.abs(want) >= np.finfo(np.float32).tiny) | (want == 0)
    np.testing.assert_array_equal(got[normal], want[normal])
    assert np.array_equal(np.signbit(got[normal]), np.signbit(want[normal]))
