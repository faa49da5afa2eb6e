"""``nnadapter-tvm profile``: every kernel of an inference timed through the VM's instrument hook, with
FLOPs that match the operation's own count."""

from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.tools import cli, profile


def _conv_relu(width: int | str = 10) -> onnx.ModelProto:
    """Conv 3x3 (4 -> 8 channels, 10 x ``width`` (a dim_param: unknown), no padding) + bias, then Relu."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype("float32"), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, None if isinstance(width, str) else 8])],
        initializer=[w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_kernels_are_timed_and_their_flops_counted():
    model = _conv_relu()
    predictor = nna.Predictor(model)
    feeds = {"x": np.ones((1, 4, 10, 10), "float32")}
    timer, whole_s, flops = profile.profile(predictor, feeds, repeat=3)
    assert whole_s > 0
    kernels = [k for k in timer.seconds if k != profile.BUILTINS]
    assert kernels and all(timer.calls[k] % 3 == 0 for k in kernels), "calls counted per inference"
    # The convolution's multiply-adds (2 FLOPs each) are counted, plus at most a few per output for the
    # fused bias and Relu.
    macs = 8 * 4 * 3 * 3 * 8 * 8
    counted = sum(flops.get(k) or 0 for k in kernels)
    assert 2 * macs <= counted <= 2 * macs + 4 * 8 * 8 * 8, counted
    # The instrument is removed afterwards: a run counts no more calls, and answers as numpy's convolution.
    calls = dict(timer.calls)
    x = np.random.default_rng(1).standard_normal((1, 4, 10, 10)).astype("float32")
    got = predictor.run({"x": x})[0]
    assert dict(timer.calls) == calls
    np.testing.assert_allclose(got, _conv_relu_reference(model, x), rtol=1e-4, atol=1e-4)


def _big_and_small_convolutions() -> onnx.ModelProto:
    """A 3x3 convolution of 64 -> 64 channels over 56 x 56 (231 MFLOP), then a 1x1 one down to 1 channel
    (0.4 MFLOP): two kernels whose work differs 580-fold."""
    rng = np.random.default_rng(2)
    big = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype("float32") * 0.05, "big")
    small = numpy_helper.from_array(rng.standard_normal((1, 64, 1, 1)).astype("float32"), "small")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "big"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["c", "small"], ["y"]),
        ],
        "big_small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 56, 56])],
        initializer=[big, small],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_instrument_times_each_kernel_where_its_work_is():
    """The instrument's times are each kernel's own: every kernel is called once an inference, the one
    with by far the most FLOPs (TVM's count, independent of the timer) takes the most time, and the
    kernels' times add up to no more than the instrumented inferences took (timed from outside)."""
    predictor = nna.Predictor(_big_and_small_convolutions())
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 64, 56, 56)).astype("float32")}
    repeat = 5
    start = time.perf_counter()
    timer, whole_s, flops = profile.profile(predictor, feeds, repeat=repeat)
    outside = time.perf_counter() - start
    kernels = [k for k in timer.seconds if k != profile.BUILTINS]
    assert all(timer.calls[k] == repeat for k in kernels), dict(timer.calls)
    by_flops = sorted(kernels, key=lambda k: flops.get(k) or 0)
    heaviest, second = by_flops[-1], by_flops[-2]
    assert (flops[heaviest] or 0) > 100 * (flops.get(second) or 0), flops
    assert timer.seconds[heaviest] > 3 * max(timer.seconds[k] for k in kernels if k != heaviest), dict(timer.seconds)
    # ``outside`` also holds the warm-up and the uninstrumented runs.
    assert sum(timer.seconds.values()) < outside - repeat * whole_s


def _conv_relu_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    weights = {t.name: numpy_helper.to_array(t).astype("float64") for t in model.graph.initializer}
    w, b = weights["w"], weights["b"]
    oh, ow = x.shape[2] - 2, x.shape[3] - 2
    y = np.zeros((1, 8, oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", x[:, :, i : i + oh, j : j + ow].astype("float64"), w[:, :, i, j])
    return np.maximum(y + b[None, :, None, None], 0)


def test_report_lists_kernels_with_share_and_rate():
    timer = profile.KernelTimer()
    timer.seconds.update({"conv": 0.004, profile.BUILTINS: 0.001})
    timer.calls.update({"conv": 2, profile.BUILTINS: 10})
    text = profile.report(timer, whole_s=0.0025, flops={"conv": 1e7}, repeat=2, peak=10.0, top=5)
    conv = next(line for line in text.splitlines() if line.startswith("conv"))
    # 2 ms per inference, 80 % of 2.5 ms of calls; 1e7 FLOPs in 2 ms = 5 GFLOP/s, half the peak.
    assert conv.split()[1:] == ["1", "2.000", "80.0%", "0.010", "5.0", "50%"]
    assert "whole model: 0.010 GFLOP in 2.500 ms = 4.0 GFLOP/s (40% of peak)" in text


def test_cli_profiles_a_model(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_conv_relu(), path)
    assert cli.main(["profile", str(path), "--repeat", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "whole model:" in out and "GFLOP/s" in out
    # The compile's phases come first, the kernels after them.
    assert out.index("compile phase") < out.index("whole model:")
    assert "TIR scheduling" in out and "LLVM codegen" in out


def test_symbolic_kernels_show_no_flops(tmp_path, capsys):
    """TVM's estimate takes an extent known only at execution as 1: such a kernel shows no FLOPs, and the
    total says it left them out.  ``--shape`` gives the size fed."""
    path = tmp_path / "m.onnx"
    onnx.save(_conv_relu("w"), path)
    assert cli.main(["profile", str(path), "--repeat", "2", "--threads", "1", "--shape", "1x4x10x12"]) == 0
    out = capsys.readouterr().out
    conv = next(line for line in out.splitlines() if "conv2d" in line)
    assert "GFLOP" not in conv and "%" in conv and len(conv.split()) == 4, conv
    assert "kernel(s) with sizes known only at execution not counted" in out
