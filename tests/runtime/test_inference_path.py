"""The path of one inference (issue 14): host inputs reach TVM without a copy when they are aligned,
through an aligned staging copy when not (misaligned, read-only, strided, a scalar); outputs are the
caller's own arrays, even where the compiled code returns an input (or a view of one); values stay
on the device between subgraphs and loop iterations. References: numpy and onnxruntime."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnadapter_tvm as nna
from nnadapter_tvm.types import OperandType, Precision

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _misaligned(a: np.ndarray) -> np.ndarray:
    """``a``'s values in memory that starts 4 bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 4
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == 4
    return out


@pytest.fixture(scope="module")
def affine() -> tuple[nna.Predictor, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype("float32")
    b = rng.standard_normal(8).astype("float32")
    model = _model(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        [helper.make_tensor_value_info("x", F, [2, 8])],
        [helper.make_tensor_value_info("y", F, [2, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    return nna.Predictor(model), w, b


def test_inputs_in_any_memory_give_the_same_result(affine) -> None:
    predictor, w, b = affine
    x = np.random.default_rng(1).standard_normal((2, 8)).astype("float32")
    want = x @ w + b
    readonly = x.copy()
    readonly.flags.writeable = False
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    assert not strided.flags.c_contiguous
    for fed in (x, _misaligned(x), readonly, strided, x.tolist()):
        (got,) = predictor.run({"x": np.asarray(fed, "float32") if isinstance(fed, list) else fed})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_outputs_are_new_arrays_each_run(affine) -> None:
    predictor, w, b = affine
    rng = np.random.default_rng(2)
    x1, x2 = (rng.standard_normal((2, 8)).astype("float32") for _ in range(2))
    (y1,) = predictor.run([x1])
    (y2,) = predictor.run([x2])
    assert not np.shares_memory(y1, y2) and y1.flags.writeable and y1.flags.owndata
    np.testing.assert_allclose(y1, x1 @ w + b, rtol=1e-5, atol=1e-5)  # not overwritten by the second run
    y1[...] = 0  # the caller's to change: the next run is unaffected
    np.testing.assert_allclose(predictor.run([x1])[0], x1 @ w + b, rtol=1e-5, atol=1e-5)


def test_an_output_that_is_an_input_is_still_the_callers_own() -> None:
    """Reshape compiles to a view of the input: the output shares the staged input's memory, so the
    staging buffer is handed over and the next run stages into another one."""
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [3, 2]), helper.make_tensor_value_info("z", F, [2, 3])],
        [numpy_helper.from_array(np.array([3, 2], "int64"), "shape")],
    )
    predictor = nna.Predictor(model)
    rng = np.random.default_rng(3)
    runs = [_misaligned(rng.standard_normal((2, 3)).astype("float32")) for _ in range(3)]
    results = [predictor.run({"x": x}) for x in runs]
    for x, (y, z) in zip(runs, results):
        np.testing.assert_array_equal(y, x.reshape(3, 2))
        np.testing.assert_array_equal(z, np.maximum(x, 0))
        assert not np.shares_memory(y, x)


def _loop_model(trip: int) -> tuple[onnx.ModelProto, dict]:
    """A Loop as PyTorch exports a ``for``: the condition passed through (the body's output is its
    input), acc = relu(acc @ W + b) carried, acc scanned each iteration."""
    rng = np.random.default_rng(4)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["acc_in", "W"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", B, []),
            helper.make_tensor_value_info("acc_in", F, [1, 16]),
        ],
        [
            helper.make_tensor_value_info("cond_out", B, []),
            helper.make_tensor_value_info("acc_out", F, [1, 16]),
            helper.make_tensor_value_info("scan", F, [1, 16]),
        ],
    )
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 16)) / 4).astype("float32"), "W"),
        numpy_helper.from_array(rng.standard_normal(16).astype("float32") / 4, "b"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    model = _model(
        [helper.make_node("Loop", ["M", "cond", "x"], ["y", "ys"], body=body)],
        [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("x", F, [1, 16])],
        [helper.make_tensor_value_info("y", F, [1, 16]), helper.make_tensor_value_info("ys", F, [None, 1, 16])],
        inits,
    )
    feeds = {"M": np.array(trip, "int64"), "x": rng.standard_normal((1, 16)).astype("float32")}
    return model, feeds


@pytest.mark.parametrize("trip", [0, 1, 6])
def test_loop_values_stay_on_the_device_between_iterations(trip: int) -> None:
    model, feeds = _loop_model(trip)
    predictor = nna.Predictor(model)
    for _ in range(2):  # the second run reuses each thread's VM and staging buffers
        got = predictor.run(feeds)
        for g, w in zip(got, _ort(model, feeds)):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_predictor_runs_from_several_threads_at_once() -> None:
    model, _ = _loop_model(3)
    predictor = nna.Predictor(model)
    rng = np.random.default_rng(5)
    feeds = [
        {"M": np.array(k % 4, "int64"), "x": _misaligned(rng.standard_normal((1, 16)).astype("float32"))}
        for k in range(8)
    ]
    want = [_ort(model, f) for f in feeds]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(feeds), timeout=60)

    def worker(k: int) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                for g, w in zip(predictor.run(feeds[k]), want[k]):
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_wrong_input_is_reported_once_at_the_boundary(affine) -> None:
    predictor, _, _ = affine
    with pytest.raises(nna.NNAdapterError, match=r"input 'x' must be float32, got float64"):
        predictor.run({"x": np.zeros((2, 8))})
    with pytest.raises(nna.NNAdapterError, match=r"input 'x' dimension 0 must be 2 \[2, 8\], got shape \[3, 8\]"):
        predictor.run({"x": np.zeros((3, 8), "float32")})


def test_operand_type_copy_is_independent() -> None:
    t = OperandType(Precision.QUANT_INT8_SYMM_PER_CHANNEL, [4, nna.UNKNOWN], scale=[0.5] * 4, channel_dim=0)
    c = t.copy()
    assert c == t and c is not t
    c.dimensions[1] = 7
    c.scale[0] = 2.0
    assert t.dimensions == [4, nna.UNKNOWN] and t.scale == [0.5] * 4
    changed = t.copy(dimensions=[4, 3])
    assert changed.dimensions == [4, 3] and t.dimensions == [4, nna.UNKNOWN]
    with pytest.raises(nna.NNAdapterError, match="negative"):
        t.copy(dimensions=[4, -5])


def test_numpy_scalars_and_empty_arrays() -> None:
    """A numpy scalar fed to a scalar input stays a scalar; an empty array reaches TVM as a compact tensor
    (numpy gives it zero strides). Reference: onnxruntime."""
    model = _model(
        [
            helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
            helper.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=1),
        ],
        [
            helper.make_tensor_value_info("x", F, [3, 4]),
            helper.make_tensor_value_info("lo", F, []),
            helper.make_tensor_value_info("hi", F, []),
            helper.make_tensor_value_info("e", F, [2, 0, 4]),
        ],
        [helper.make_tensor_value_info("c", F, [3, 4]), helper.make_tensor_value_info("s", F, [2, 1, 4])],
        [numpy_helper.from_array(np.array([1], "int64"), "axes")],
    )
    predictor = nna.Predictor(model)
    x = np.random.default_rng(6).standard_normal((3, 4)).astype("float32")
    feeds = {"x": x, "lo": np.float32(-0.5), "hi": np.float32(0.25), "e": np.zeros((2, 0, 4), "float32")}
    got = predictor.run(feeds)
    want = _ort(model, {k: np.asarray(v) for k, v in feeds.items()})
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)
