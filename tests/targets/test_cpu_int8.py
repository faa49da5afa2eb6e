"""The CPU's 8-bit integer convolutions and products (targets/cpu/int8.py): ``conv2d`` / ``matmul`` of uint8
(or int8) by a constant int8 weight into int32 give exactly numpy's int64 sums, on the integer kernel of
each x86 target (vpdpbusd: AVX-512 VNNI, AVX-VNNI; pmaddwd on 16-bit values: AVX-512BW, AVX2) and on the
float route where there is none (SSE)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax

from nnadapter_tvm.targets.cpu import int8, pipeline
from nnadapter_tvm.targets.cpu.compute import CONV, DENSE
from nnadapter_tvm.targets.cpu.winograd import WINOGRAD
from nnadapter_tvm.targets.llvm import LlvmDriver

HOST = LlvmDriver().tvm_target({})
# The targets a build here can also run: the host's own, and older x86 CPUs whose instructions it has.
TARGETS = {
    "host": HOST,
    "avx-vnni-256": tvm.target.Target({"kind": "llvm", "mcpu": "alderlake"}),  # vpdpbusd on 256 bits
    "avx512-no-vnni": tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"}),  # pmaddwd on 512
    "avx2": tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}),  # pmaddwd on 256
    "sse": tvm.target.Target({"kind": "llvm", "mcpu": "x86-64"}),  # none: the float route
}
HOST_FEATURES = {name: int8._has(name, HOST) for name in ("avx2", "avxvnni", "avx512bw")}
RUNNABLE = {
    "host": True,
    "avx-vnni-256": HOST_FEATURES["avxvnni"],
    "avx512-no-vnni": HOST_FEATURES["avx512bw"],
    "avx2": HOST_FEATURES["avx2"],
    "sse": True,
}

# (channels in, height, width, channels out, kernel, stride, pads [top, left, bottom, right], dilation)
CASES = {
    "3x3-padded": (16, 9, 10, 32, 3, 1, (1, 1, 1, 1), 1),
    "1x1": (32, 7, 8, 64, 1, 1, (0, 0, 0, 0), 1),
    "first-layer-3-channels": (3, 12, 12, 16, 3, 2, (1, 1, 0, 0), 1),
    "channels-not-multiple-of-4": (6, 6, 7, 20, 3, 1, (0, 1, 1, 0), 1),
    "strided-dilated": (8, 11, 11, 16, 3, 2, (2, 2, 2, 2), 2),
}


def _reference(x: np.ndarray, w: np.ndarray, stride: int, pads: tuple, dilation: int) -> np.ndarray:
    """NCHW int64 cross-correlation of the zero-padded input."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype("int64"), [(0, 0), (0, 0), (top, bottom), (left, right)])
    oc, _, k, _ = w.shape
    span = (k - 1) * dilation + 1
    oh = (xp.shape[2] - span) // stride + 1
    ow = (xp.shape[3] - span) // stride + 1
    out = np.zeros((x.shape[0], oc, oh, ow), "int64")
    for a in range(k):
        for b in range(k):
            window = xp[:, :, a * dilation :, b * dilation :][:, :, : oh * stride : stride, : ow * stride : stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, a, b].astype("int64"))
    return out


def _build(x: np.ndarray, w: np.ndarray, offset: np.ndarray, stride, pads, dilation, target):
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, str(x.dtype)))
    with bb.function("main", [xv]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.conv2d(
                    xv,
                    relax.const(w),
                    strides=stride,
                    padding=list(pads),
                    dilation=dilation,
                    out_dtype="int32",
                )
            )
            out = bb.emit_output(relax.op.add(y, relax.const(offset.reshape(1, -1, 1, 1))))
        bb.emit_func_output(out)
    return pipeline.build(bb.finalize(), target)


def _inputs(shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random 8-bit inputs, the first row all at the extreme whose products with -128 are largest (255 x -128
    for uint8; -128 x -128 for int8, whose +128 shift onto vpdpbusd's unsigned operand makes it 0)."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    x.reshape(-1, shape[-1])[0] = info.max if dtype == "uint8" else info.min
    return x


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("target_name", list(TARGETS))
@pytest.mark.parametrize("case", list(CASES))
def test_int8_conv_sums_exactly(case: str, target_name: str, dtype: str) -> None:
    """uint8 inputs (zero points) and int8 ones (onnxruntime's default S8S8 quantization)."""
    if not RUNNABLE[target_name]:
        pytest.skip(f"this machine cannot run code built for {target_name}")
    c, h, wd, oc, k, stride, pads, dilation = CASES[case]
    target = TARGETS[target_name]
    rng = np.random.default_rng(len(case))
    x = _inputs((2, c, h, wd), dtype, rng)
    w = rng.integers(-128, 128, (oc, c, k, k)).astype("int8")
    w[0] = -128
    offset = rng.integers(-1000, 1000, oc).astype("int32")
    executable, report = _build(x, w, offset, stride, pads, dilation, target)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = _reference(x, w, stride, pads, dilation) + offset.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(got, want)
    rules = set(report.values())
    if int8.dot_product(target, dtype) is not None:
        assert int8.INT8_CONV in rules, report
    elif int8.exact_in_float32(w):
        assert CONV in rules, report  # the float route's kernel


def test_weights_past_the_float32_bound_keep_exact_sums() -> None:
    """A weight whose sums may leave float32's exact integers (255 x 128 x 576 > 2^24) is not put on the
    float route: the result is still exact on a target without an integer kernel."""
    x = np.full((1, 64, 5, 5), 255, "uint8")
    w = np.full((8, 64, 3, 3), -128, "int8")
    assert not int8.exact_in_float32(w)
    executable, _ = _build(x, w, np.zeros(8, "int32"), 1, (1, 1, 1, 1), 1, TARGETS["sse"])
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, _reference(x, w, 1, (1, 1, 1, 1), 1))


# (left operand's shape [..., M, K], N)
DENSE_CASES = {
    "one-row-odd-k": ((1, 101), 40),
    "rows": ((6, 64), 48),
    "batched-rows": ((2, 3, 24), 20),
    "wide": ((2, 256), 1000),
}


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("target_name", list(TARGETS))
@pytest.mark.parametrize("case", list(DENSE_CASES))
def test_int8_matmul_sums_exactly(case: str, target_name: str, dtype: str) -> None:
    """``matmul`` of 8-bit by a constant int8 [K, N] into int32 (a quantized FULLY_CONNECTED's product)."""
    if not RUNNABLE[target_name]:
        pytest.skip(f"this machine cannot run code built for {target_name}")
    shape, n = DENSE_CASES[case]
    target = TARGETS[target_name]
    rng = np.random.default_rng(len(case))
    a = _inputs(shape, dtype, rng)
    w = rng.integers(-128, 128, (shape[-1], n)).astype("int8")
    w[:, 0] = -128
    executable, report = pipeline.build(_matmul_module(list(shape[:-1]), shape[-1], w, dtype), target)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(a)).numpy()
    np.testing.assert_array_equal(got, a.astype("int64") @ w.astype("int64"))
    if int8.dot_product(target, dtype) is not None:
        assert int8.INT8_DENSE in set(report.values()), report


def test_3x3_without_vnni_takes_winograd() -> None:
    """Without vpdpbusd, a stride-1 3x3 convolution Winograd applies to runs it in float32 (a quarter of the
    products; pmaddwd does no more an instruction than float32's FMA): sums as close as a float32
    convolution's, rounded to integers, not exact."""
    if not RUNNABLE["avx2"]:
        pytest.skip("this machine cannot run AVX2 code")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 64, 28, 28)).astype("uint8")
    w = rng.integers(-128, 128, (64, 64, 3, 3)).astype("int8")
    executable, report = _build(x, w, np.zeros(64, "int32"), 1, (1, 1, 1, 1), 1, TARGETS["avx2"])
    assert WINOGRAD in set(report.values()), report
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = _reference(x, w, 1, (1, 1, 1, 1), 1)
    assert got.dtype == np.int32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def _matmul_module(shape: list, k: int, w: np.ndarray, dtype: str = "uint8") -> tvm.IRModule:
    bb = relax.BlockBuilder()
    av = relax.Var("a", relax.TensorType([*shape, k], dtype))
    with bb.function("main", [av]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(av, relax.const(w), out_dtype="int32"))
        bb.emit_func_output(out)
    return bb.finalize()


@pytest.mark.parametrize("target_name", list(TARGETS))
def test_int8_matmul_with_rows_known_at_execution(target_name: str) -> None:
    """[B, S, K] uint8 rows (a dynamically quantized transformer's activations, batch and sequence
    unknown) by a constant int8 [K, N]: one build, exact at every size, on the integer kernel where the
    target has one (whole tiles of rows past the end, cropped)."""
    if not RUNNABLE[target_name]:
        pytest.skip(f"this machine cannot run code built for {target_name}")
    target = TARGETS[target_name]
    rng = np.random.default_rng(5)
    k, n = 72, 40
    w = rng.integers(-128, 128, (k, n)).astype("int8")
    b, s = tvm.tirx.Var("b", "int64"), tvm.tirx.Var("s", "int64")
    executable, report = pipeline.build(_matmul_module([b, s], k, w), target)
    if int8.dot_product(target, "uint8") is not None:
        assert int8.INT8_DENSE in set(report.values()), report
    vm = relax.VirtualMachine(executable, tvm.cpu())
    for size in [(1, 1), (1, 7), (2, 13), (3, 128)]:
        a = rng.integers(0, 256, (*size, k)).astype("uint8")
        got = vm["main"](tvm.runtime.tensor(a)).numpy()
        np.testing.assert_array_equal(got, a.astype("int64") @ w.astype("int64"), err_msg=str(size))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_products_past_the_float32_bound_split_the_input(dtype: str) -> None:
    """Without an integer kernel (SSE), a product whose one float32 sum could pass 2^24 (255 x 128 x 1024)
    runs as two float32 products of the input's high and low 4 bits (16 x 128 x 1024 < 2^24): exact."""
    k, n = 1024, 24
    w = np.full((k, n), -128, "int8")
    w[:, 1] = 127
    assert not int8.exact_in_float32(w.T)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    a = np.random.default_rng(6).integers(lo, hi, (5, k)).astype(dtype)
    a[0] = hi - 1
    a[1] = lo
    executable, report = pipeline.build(_matmul_module([5], k, w, dtype), TARGETS["sse"])
    assert list(report.values()).count(DENSE) == 2, report  # the two halves on the float product rule
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(a)).numpy()
    np.testing.assert_array_equal(got, a.astype("int64") @ w.astype("int64"))


@pytest.mark.parametrize("rows_known", [True, False], ids=["static", "symbolic"])
def test_dequantization_runs_in_the_int8_products_kernel(rows_known: bool) -> None:
    """MatMulInteger's epilogue as quantize_dynamic writes it (minus x_zero_point * colsum, cast, times
    x_scale * w_scale, plus the bias; the zero point and scale run-time scalars) joins the integer
    product's kernel, on the register tile: one kernel, rows known or not.  It ran as a kernel of its own
    per layer (the product was called opaque, and the scalar side computations blocked the tile)."""
    rng = np.random.default_rng(8)
    k, n = 64, 48
    w = rng.integers(-128, 128, (k, n)).astype("int8")
    bias = rng.standard_normal(n).astype("float32")
    rows = [2, 24] if rows_known else [tvm.tirx.Var("b", "int64"), tvm.tirx.Var("s", "int64")]
    bb = relax.BlockBuilder()
    av = relax.Var("a", relax.TensorType([*rows, k], "uint8"))
    zp = relax.Var("zp", relax.TensorType([], "int32"))
    scale = relax.Var("scale", relax.TensorType([], "float32"))
    with bb.function("main", [av, zp, scale]):
        with bb.dataflow():
            acc = bb.emit(relax.op.matmul(av, relax.const(w), out_dtype="int32"))
            sums = relax.const(w.astype("int32").sum(axis=0))
            acc = bb.emit(relax.op.subtract(acc, bb.emit(relax.op.multiply(zp, sums))))
            real = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(acc, "float32")), scale))
            out = bb.emit_output(relax.op.add(real, relax.const(bias)))
        bb.emit_func_output(out)
    executable, report = pipeline.build(bb.finalize(), HOST)
    if int8.dot_product(HOST, "uint8") is None:
        pytest.skip("this machine has no integer dot product")
    products = [name for name, rule in report.items() if rule == int8.INT8_DENSE]
    assert len(products) == 1 and products[0].startswith("fused_") and "add" in products[0], report
    vm = relax.VirtualMachine(executable, tvm.cpu())
    for size in ([2, 24], [1, 5], [3, 17]) if not rows_known else ([2, 24],):
        a = rng.integers(0, 256, (*size, k)).astype("uint8")
        z, s = np.int32(131), np.float32(0.0123)
        got = vm["main"](*(tvm.runtime.tensor(v) for v in (a, np.array(z), np.array(s)))).numpy()
        acc64 = (a.astype("int64") - z) @ w.astype("int64")
        want = acc64.astype("float32") * s + bias
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5, err_msg=str(size))


def test_int8_inputs_take_vpdpbusd_shifted_into_uint8() -> None:
    """vpdpbusd multiplies unsigned by signed bytes: an int8 input (onnxruntime's default S8S8) is shifted by
    +128 onto it (exactness: the int8 cases above), not sent to pmaddwd's half rate."""
    for name in ("avx-vnni-256",):
        dot = int8.dot_product(TARGETS[name], "int8")
        assert dot.group == 4 and dot.input_dtype == "uint8" and dot.shift == -128, dot
    assert int8.dot_product(TARGETS["avx2"], "int8").group == 2


def _lowered(mod: tvm.IRModule, target: tvm.target.Target) -> str:
    """Every kernel of ``mod`` after TVM's TIR pipeline (vectorization done), as text."""
    with target, tvm.transform.PassContext(opt_level=3):
        prepared, _ = pipeline.prepare(mod, target)
        texts = []
        for gv, f in prepared.functions_items():
            if isinstance(f, tvm.tirx.PrimFunc):
                m = tvm.IRModule({"main": f.with_attr("global_symbol", gv.name_hint)})
                m = tvm.tirx.transform.BindTarget(target.with_host(target))(m)
                texts.append(tvm.tirx.get_default_tir_pipeline(target)[0](m)["main"].script())
    return "\n".join(texts)


@pytest.mark.parametrize("oc", [32, 24], ids=["whole-blocks", "sliced-channels"])
def test_requantizing_epilogue_is_vectorized(oc: int) -> None:
    """The requantization after an integer convolution (round half to even, clip, uint8) runs in vectors,
    also where the tile's last channel block is partly sliced off (24 of 32): TVM scalarized any loop that
    held ``nearbyint`` (registered without TVectorizable) lane by lane, and the slice's per-lane guard did
    the same; both made every 8-bit kernel's epilogue scalar.  The results equal numpy's."""
    rng = np.random.default_rng(oc)
    x = rng.integers(0, 256, (1, 16, 6, 7)).astype("uint8")
    w = rng.integers(-128, 128, (oc, 16, 1, 1)).astype("int8")
    scale = rng.uniform(1e-3, 3e-3, oc).astype("float32")
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "uint8"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            acc = bb.emit(relax.op.nn.conv2d(xv, relax.const(w), out_dtype="int32"))
            real = bb.emit(relax.op.multiply(relax.op.astype(acc, "float32"), relax.const(scale.reshape(1, -1, 1, 1))))
            q = bb.emit(relax.op.round(relax.op.add(real, relax.const(np.float32(100.0)))))
            lo, hi = relax.const(np.float32(0.0)), relax.const(np.float32(255.0))
            out = bb.emit_output(relax.op.astype(relax.op.minimum(relax.op.maximum(q, lo), hi), "uint8"))
        bb.emit_func_output(out)
    mod = bb.finalize()
    text = _lowered(mod, HOST)
    assert not re.search(r"for \w+_s\b|, \w+_s in", text), "a loop was scalarized lane by lane"
    executable, _ = pipeline.build(mod, HOST)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    acc = np.einsum("nchw,oc->nohw", x.astype("int64"), w[:, :, 0, 0].astype("int64")).astype("float32")
    want = np.clip(np.rint(acc * scale.reshape(1, -1, 1, 1) + np.float32(100.0)), 0, 255).astype("uint8")
    np.testing.assert_array_equal(got, want)


def test_a_stage_read_twice_is_computed_once() -> None:
    """A QDQ SiLU after an integer convolution reads its dequantized input twice (in the sigmoid and in the
    product): that stage stays one of its own on the tile, so the convolution's requantization runs once
    per element (inlined, it ran twice: two of its three roundings); the results equal numpy's."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 16, 5, 6)).astype("uint8")
    w = rng.integers(-128, 128, (32, 16, 1, 1)).astype("int8")
    f32 = np.float32
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "uint8"))

    def requantize(v, scale: float, zero: float):
        rounded = relax.op.round(relax.op.divide(v, relax.const(f32(scale))))
        shifted = relax.op.add(rounded, relax.const(f32(zero)))
        clipped = relax.op.minimum(relax.op.maximum(shifted, relax.const(f32(0))), relax.const(f32(255)))
        return relax.op.astype(clipped, "uint8")

    with bb.function("main", [xv]):
        with bb.dataflow():
            acc = bb.emit(relax.op.nn.conv2d(xv, relax.const(w), out_dtype="int32"))
            real = relax.op.multiply(relax.op.astype(acc, "float32"), relax.const(f32(0.002)))
            q = bb.emit(requantize(real, 0.05, 100))
            dq = bb.emit(
                relax.op.multiply(
                    relax.op.subtract(relax.op.astype(q, "float32"), relax.const(f32(100))), relax.const(f32(0.05))
                )
            )
            silu = bb.emit(relax.op.multiply(dq, relax.op.sigmoid(dq)))
            out = bb.emit_output(requantize(silu, 0.04, 10))
        bb.emit_func_output(out)
    mod = bb.finalize()
    text = _lowered(mod, HOST)
    assert text.count("nearbyint") == 2, text.count("nearbyint")
    executable, _ = pipeline.build(mod, HOST)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    acc = np.einsum("nchw,oc->nohw", x.astype("int64"), w[:, :, 0, 0].astype("int64")).astype("float32")
    q = np.clip(np.rint(acc * f32(0.002) / f32(0.05)) + 100, 0, 255)
    dq = (q.astype("float32") - f32(100)) * f32(0.05)
    silu = dq / (f32(1) + np.exp(-dq))
    want = np.clip(np.rint(silu / f32(0.04)) + 10, 0, 255).astype("uint8")
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # the sigmoid's float32 ulps
