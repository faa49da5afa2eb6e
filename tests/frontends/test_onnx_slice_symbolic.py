"""ONNX Slice with constant bounds on an axis whose size comes only at execution (a dim_param): onnxruntime's
answer at every size fed, empty slices included (issue 17: x[-1:3] of a symbolic axis fed 5 elements was
refused with std::bad_alloc, Relax's strided_slice having inferred a length of -1; with its own compute, the
default CPU schedules then wrote before the empty output)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nnadapter_tvm.onnxruntime as nort

ort = pytest.importorskip("onnxruntime")

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)

# (start, end, step) on the symbolic axis: every sign, bounds past either end (INT64 extremes, as exporters
# write "to the end"), and slices that come out empty at some of the sizes fed.
SLICES = [
    (-1, 3, 1),  # empty at 5
    (-8, -5, -1),  # empty at 5
    (1, I64_MAX, 1),
    (-3, I64_MAX, 2),
    (-1, I64_MIN, -1),  # reversed
    (5, I64_MIN, -2),
    (2, -1, 1),
    (-2, 1, -1),
    (3, 1, 1),  # always empty
    (-100, 100, 3),
    (100, -100, -2),
    (0, 3, -1),  # always empty
    (1, -1, -1),  # always empty
    (-5, -1, 2),
    (7, -8, -3),
    (-3, -9, -1),
]

SIZES = [5, 0, 1, 2, 9]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNADAPTER_TVM_CACHE_DIR", str(tmp_path / "cache"))


def slices_model(slices: list[tuple[int, int, int]], axis: int = 1) -> bytes:
    """x [2, n, 3] (n a dim_param) -> one output per Slice of axis ``axis`` by constant bounds."""
    nodes, inits, outputs = [], [], []
    for i, (start, end, step) in enumerate(slices):
        names = [f"s{i}", f"e{i}", f"a{i}", f"t{i}"]
        for name, value in zip(names, (start, end, axis, step)):
            inits.append(onnx.numpy_helper.from_array(np.array([value], np.int64), name))
        nodes.append(h.make_node("Slice", ["x", *names], [f"y{i}"]))
        outputs.append(h.make_tensor_value_info(f"y{i}", T.FLOAT, [2, None, 3] if axis == 1 else [2, None, None]))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, "n", 3])], outputs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_slices_of_a_symbolic_axis_like_onnxruntime() -> None:
    """Sixteen Slices of one input's symbolic axis, one compilation, fed n = 5, 0, 1, 2, 9: shapes and
    values equal onnxruntime's."""
    model = slices_model(SLICES)
    ours = nort.InferenceSession(model, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model)
    rng = np.random.default_rng(3)
    for n in SIZES:
        feeds = {"x": rng.standard_normal((2, n, 3)).astype(np.float32)}
        for bounds, want, got in zip(SLICES, theirs.run(None, feeds), ours.run(None, feeds), strict=True):
            assert got.shape == want.shape, f"n = {n}, x[{bounds}]: shape {got.shape} != onnxruntime's {want.shape}"
            np.testing.assert_array_equal(got, want, err_msg=f"n = {n}, x[{bounds}]")


def test_empty_slice_of_a_symbolic_axis_then_an_element_wise_op() -> None:
    """x[-1:3] of the symbolic axis, then Relu and an Add with itself: the empty result flows through the
    kernels after it (fused or not) at n = 5, and the same compilation gives values at n = 9."""
    starts, ends, axes = (onnx.numpy_helper.from_array(np.array([v], np.int64), k) for k, v in
                          (("s", -1), ("e", 3), ("a", 1)))  # fmt: skip
    nodes = [
        h.make_node("Slice", ["x", "s", "e", "a"], ["y"]),
        h.make_node("Relu", ["y"], ["r"]),
        h.make_node("Add", ["r", "y"], ["z"]),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2, "n", 3])],
        [h.make_tensor_value_info("z", T.FLOAT, None)],
        [starts, ends, axes],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    ours = nort.InferenceSession(model, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model)
    for n in (5, 9, 0, 5):
        feeds = {"x": np.arange(2 * n * 3, dtype=np.float32).reshape(2, n, 3) - 7}
        (want,), (got,) = theirs.run(None, feeds), ours.run(None, feeds)
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)


def test_slices_of_a_static_axis_beside_a_symbolic_one() -> None:
    """The same Slices of the static axis (3 elements) of an input whose other axis is a dim_param. A
    backward slice "to the beginning" (INT_MIN) came out with a dimension of -2147483647 (TOPI's
    strided_slice clamps no bound once any axis is symbolic), refused as INVALID_PARAMETER."""
    model = slices_model(SLICES, axis=2)
    ours = nort.InferenceSession(model, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model)
    rng = np.random.default_rng(4)
    for n in (5, 1):
        feeds = {"x": rng.standard_normal((2, n, 3)).astype(np.float32)}
        for bounds, want, got in zip(SLICES, theirs.run(None, feeds), ours.run(None, feeds), strict=True):
            assert got.shape == want.shape, f"n = {n}, x[..., {bounds}]: {got.shape} != onnxruntime's {want.shape}"
            np.testing.assert_array_equal(got, want, err_msg=f"n = {n}, x[..., {bounds}]")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_select_last_index_beside_a_symbolic_axis(op) -> None:
    """ArgMax/ArgMin with select_last_index (a backward slice inside) on static axes of [n, 3, 4, 5]: a
    fuzz finding, refused before, now onnxruntime's indices (ties everywhere: values drawn from 0..2)."""
    nodes = [h.make_node(op, ["x"], [f"y{a}"], axis=a, keepdims=a % 2, select_last_index=1) for a in (1, 2, -1)]
    outputs = [h.make_tensor_value_info(f"y{a}", T.INT64, None) for a in (1, 2, -1)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 3, 4, 5])], outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]).SerializeToString()
    ours = nort.InferenceSession(model, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model)
    for n in (2, 1):
        feeds = {"x": np.random.default_rng(n).integers(0, 3, (n, 3, 4, 5)).astype(np.float32)}
        for want, got in zip(theirs.run(None, feeds), ours.run(None, feeds), strict=True):
            np.testing.assert_array_equal(got, want)
