"""The CPU's 8-bit integer convolutions (targets/cpu/int8.py): ``conv2d`` of uint8 by a constant int8
weight into int32 gives exactly numpy's int64 sums, on the dot-product kernel (AVX-512 VNNI, AVX-VNNI on
256-bit vectors) where the target has it, and on the float route (AVX2 without VNNI) elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from nnadapter_tvm.targets.cpu import int8, pipeline
from nnadapter_tvm.targets.cpu.compute import CONV
from nnadapter_tvm.targets.llvm import LlvmDriver

HOST = LlvmDriver().tvm_target({})
# The targets a build here can also run: the host's own, and older x86 CPUs whose instructions it has.
TARGETS = {
    "host": HOST,
    "avx-vnni-256": tvm.target.Target({"kind": "llvm", "mcpu": "alderlake"}),
    "avx2": tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}),
}
HOST_FEATURES = {name: int8._has(name, HOST) for name in ("avx2", "avxvnni", "avx512vnni")}
RUNNABLE = {"host": True, "avx-vnni-256": HOST_FEATURES["avxvnni"], "avx2": HOST_FEATURES["avx2"]}

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
    xv = relax.Var("x", relax.TensorType(x.shape, "uint8"))
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


@pytest.mark.parametrize("target_name", list(TARGETS))
@pytest.mark.parametrize("case", list(CASES))
def test_int8_conv_sums_exactly(case: str, target_name: str) -> None:
    if not RUNNABLE[target_name]:
        pytest.skip(f"this machine cannot run code built for {target_name}")
    c, h, wd, oc, k, stride, pads, dilation = CASES[case]
    target = TARGETS[target_name]
    rng = np.random.default_rng(len(case))
    x = rng.integers(0, 256, (2, c, h, wd)).astype("uint8")
    # Extreme values included: 255 x -128 in every product of a row.
    x[0, :, 0, :] = 255
    w = rng.integers(-128, 128, (oc, c, k, k)).astype("int8")
    w[0] = -128
    offset = rng.integers(-1000, 1000, oc).astype("int32")
    executable, report = _build(x, w, offset, stride, pads, dilation, target)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = _reference(x, w, stride, pads, dilation) + offset.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(got, want)
    rules = set(report.values())
    if int8.dot_product(target) is not None:
        assert int8.INT8_CONV in rules, report
    elif int8.exact_in_float32(w):
        assert CONV in rules, report  # the float route's kernel


def test_weights_past_the_float32_bound_keep_exact_sums() -> None:
    """A weight whose sums may leave float32's exact integers (255 x 128 x 576 > 2^24) is not put on the
    float route: the result is still exact on a target without the dot product."""
    if not RUNNABLE["avx2"]:
        pytest.skip("this machine cannot run AVX2 code")
    x = np.full((1, 64, 5, 5), 255, "uint8")
    w = np.full((8, 64, 3, 3), -128, "int8")
    assert not int8.exact_in_float32(w)
    executable, _ = _build(x, w, np.zeros(8, "int32"), 1, (1, 1, 1, 1), 1, TARGETS["avx2"])
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, _reference(x, w, 1, (1, 1, 1, 1), 1))


# (left operand's shape [..., M, K], N)
DENSE_CASES = {
    "one-row-odd-k": ((1, 101), 40),
    "rows": ((6, 64), 48),
    "batched-rows": ((2, 3, 24), 20),
    "wide": ((2, 256), 1000),
}


@pytest.mark.parametrize("target_name", list(TARGETS))
@pytest.mark.parametrize("case", list(DENSE_CASES))
def test_int8_matmul_sums_exactly(case: str, target_name: str) -> None:
    """``matmul`` of uint8 by a constant int8 [K, N] into int32 (a quantized FULLY_CONNECTED's product)."""
    if not RUNNABLE[target_name]:
        pytest.skip(f"this machine cannot run code built for {target_name}")
    shape, n = DENSE_CASES[case]
    target = TARGETS[target_name]
    rng = np.random.default_rng(len(case))
    a = rng.integers(0, 256, shape).astype("uint8")
    a.reshape(-1, shape[-1])[0] = 255
    w = rng.integers(-128, 128, (shape[-1], n)).astype("int8")
    w[:, 0] = -128
    bb = relax.BlockBuilder()
    av = relax.Var("a", relax.TensorType(a.shape, "uint8"))
    with bb.function("main", [av]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(av, relax.const(w), out_dtype="int32"))
        bb.emit_func_output(out)
    executable, report = pipeline.build(bb.finalize(), target)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(a)).numpy()
    np.testing.assert_array_equal(got, a.astype("int64") @ w.astype("int64"))
    if int8.dot_product(target) is not None:
        assert int8.INT8_DENSE in set(report.values()), report
