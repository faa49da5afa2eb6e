"""GRID_SAMPLE_ONNX (extension 2201) against ONNX's reference evaluator running a GridSample node of
the same configuration (onnx.reference.ops.op_grid_sample, the operator's reference implementation),
over 4-D and 5-D inputs, every mode, padding mode and align_corners, with grid coordinates reaching
past [-1, 1] so that every padding mode is exercised."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from oputil import UNKNOWN, In, Out, b8, check_op, expect_error, i32, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations import onnx_vision as G

OP = G.GRID_SAMPLE_ONNX
# Up to 64 float32 products (4 x 4 x 4 cubic taps) summed in another order than the reference.
TOL = {"rtol": 1e-5, "atol": 1e-5}


def onnx_grid_sample_model(x, grid, mode, padding_mode, align_corners) -> onnx.ModelProto:
    node = helper.make_node(
        "GridSample", ["X", "G"], ["Y"], mode=mode, padding_mode=padding_mode, align_corners=int(align_corners)
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("G", onnx.TensorProto.FLOAT, grid.shape),
        ],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def onnx_grid_sample(x, grid, mode, padding_mode, align_corners):
    model = onnx_grid_sample_model(x, grid, mode, padding_mode, align_corners)
    return ReferenceEvaluator(model).run(None, {"X": x, "G": grid})[0]


def operands(x, grid, mode, padding, align_corners, x_dims=None, grid_dims=None):
    return [
        In(x, dims=x_dims),
        In(grid, dims=grid_dims),
        b8(align_corners),
        i32(G.GRID_SAMPLE_MODES.index(mode)),
        i32(G.PADDING_MODES.index(padding)),
    ]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding", G.PADDING_MODES)
@pytest.mark.parametrize("mode", G.GRID_SAMPLE_MODES)
@pytest.mark.parametrize("shape,grid_shape", [((1, 2, 3, 4), (1, 3, 2, 2)), ((2, 1, 2, 3, 4), (2, 2, 2, 3, 3))])
def test_against_onnx(mode, padding, align_corners, shape, grid_shape):
    x = rand(*shape, seed=1)
    grid = rand(*grid_shape, seed=2, low=-1.6, high=1.6)
    expected = onnx_grid_sample(x, grid, mode, padding, align_corners)
    check_op(OP, operands(x, grid, mode, padding, align_corners), expected, **TOL)


def test_one_pixel_axis_reflection_align_corners():
    """A 1-pixel axis with align_corners has a zero reflection range (ONNX's reference divides by it):
    onnxruntime, like this operation, reads the axis' only pixel."""
    import onnxruntime

    x = rand(1, 1, 1, 3, seed=3)
    grid = rand(1, 2, 2, 2, seed=4, low=-1.5, high=1.5)
    model = onnx_grid_sample_model(x, grid, "linear", "reflection", True)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"X": x, "G": grid})[0]
    check_op(OP, operands(x, grid, "linear", "reflection", True), expected, **TOL)


def test_symbolic_sizes():
    x = rand(2, 2, 3, 4, seed=5)
    grid = rand(2, 3, 2, 2, seed=6, low=-1.2, high=1.2)
    expected = onnx_grid_sample(x, grid, "cubic", "border", False)
    inputs = operands(
        x, grid, "cubic", "border", False, x_dims=[UNKNOWN, 2, UNKNOWN, UNKNOWN], grid_dims=[UNKNOWN, UNKNOWN, 2, 2]
    )
    (got,) = run_op(OP, inputs, [Out(dims=[UNKNOWN, 2, UNKNOWN, 2])], [expected.shape])
    np.testing.assert_allclose(got, expected, **TOL)


def test_errors():
    x, grid = rand(1, 1, 3, 3), rand(1, 2, 2, 2)

    def run(x=x, grid=grid, mode=0, padding=0):
        inputs = [In(x), In(grid), b8(False), i32(mode), i32(padding)]
        return run_op(OP, inputs, [Out()], [(1, 1, 2, 2)])

    expect_error(lambda: run(x=rand(1, 3, 3)), "GRID_SAMPLE_ONNX", "input", "4-D")
    expect_error(lambda: run(grid=rand(1, 2, 2, 3)), "grid", "[N, O1, O2, 2]")
    expect_error(lambda: run(grid=rand(2, 2, 2, 2)), "grid", "batch 2")
    expect_error(lambda: run(mode=5), "mode", "2=cubic", "got 5")
    expect_error(lambda: run(padding=3), "padding_mode", "2=reflection", "got 3")


def test_registered_as_extension():
    assert nna.OperationType(2201) is OP and OP.name == "GRID_SAMPLE_ONNX"
