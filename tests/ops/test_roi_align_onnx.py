"""ROI_ALIGN_ONNX (extension 2202) against ONNX's reference evaluator running a RoiAlign node of the
same configuration (onnx.reference.ops.op_roi_align, which follows onnxruntime's CPU kernel), in both
pooling modes, both coordinate transformations, fixed and adaptive sampling, with ROIs reaching past
the feature map."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from oputil import UNKNOWN, In, Out, b8, check_op, expect_error, f32, i32, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations import onnx_vision as R

OP = R.ROI_ALIGN_ONNX
TOL = {"rtol": 1e-5, "atol": 1e-5}
ROIS = np.array([[0.5, 0.2, 3.1, 2.8], [1.0, 1.5, 6.5, 4.0], [-1.5, -0.7, 2.0, 1.0], [2.2, 0.4, 2.3, 0.6]], np.float32)
BATCH = np.array([0, 1, 1, 0], np.int64)


def onnx_roi_align(x, rois, batch, *, mode, half_pixel, out_hw, sampling_ratio, spatial_scale):
    node = helper.make_node(
        "RoiAlign",
        ["X", "rois", "batch"],
        ["Y"],
        mode=mode,
        coordinate_transformation_mode="half_pixel" if half_pixel else "output_half_pixel",
        output_height=out_hw[0],
        output_width=out_hw[1],
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
    )
    feeds = {"X": x, "rois": rois, "batch": batch}
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()
    ]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


def operands(x, rois, batch, *, mode, half_pixel, out_hw, sampling_ratio, spatial_scale, rois_dims=None):
    return [
        In(x),
        In(rois, dims=rois_dims),
        In(batch.astype(np.int32), nna.Precision.INT32, dims=None if rois_dims is None else [rois_dims[0]]),
        i32(out_hw[0]),
        i32(out_hw[1]),
        i32(sampling_ratio),
        f32(spatial_scale),
        b8(half_pixel),
        i32(R.ROI_ALIGN_MODES.index(mode)),
    ]


@pytest.mark.parametrize("mode", R.ROI_ALIGN_MODES)
@pytest.mark.parametrize("half_pixel", [False, True])
@pytest.mark.parametrize("sampling_ratio,out_hw,spatial_scale", [(0, (2, 3), 1.0), (2, (3, 2), 0.5), (1, (1, 1), 1.0)])
def test_against_onnx(mode, half_pixel, sampling_ratio, out_hw, spatial_scale):
    x = rand(2, 3, 5, 6, seed=1)
    kwargs = dict(
        mode=mode, half_pixel=half_pixel, out_hw=out_hw, sampling_ratio=sampling_ratio, spatial_scale=spatial_scale
    )
    expected = onnx_roi_align(x, ROIS, BATCH, **kwargs)
    check_op(OP, operands(x, ROIS, BATCH, **kwargs), expected, **TOL)


def test_max_symbolic_roi_count():
    x = rand(2, 2, 5, 6, seed=2)
    kwargs = dict(mode="max", half_pixel=True, out_hw=(2, 2), sampling_ratio=0, spatial_scale=1.0)
    expected = onnx_roi_align(x, ROIS, BATCH, **kwargs)
    inputs = operands(x, ROIS, BATCH, rois_dims=[UNKNOWN, 4], **kwargs)
    (got,) = run_op(OP, inputs, [Out(dims=[UNKNOWN, 2, 2, 2])], [expected.shape])
    np.testing.assert_allclose(got, expected, **TOL)


def test_errors():
    x = rand(2, 1, 4, 4)
    kwargs = dict(half_pixel=False, out_hw=(2, 2), sampling_ratio=2, spatial_scale=1.0)

    def run(mode="max", rois=ROIS, **changes):
        inputs = operands(x, rois, BATCH, mode=mode, **{**kwargs, **changes})
        return run_op(OP, inputs, [Out()], [(4, 1, 2, 2)])

    bad_mode = operands(x, ROIS, BATCH, mode="max", **kwargs)
    bad_mode[-1] = i32(2)
    expect_error(lambda: run_op(OP, bad_mode, [Out()], [(4, 1, 2, 2)]), "ROI_ALIGN_ONNX", "mode", "1=max", "got 2")
    expect_error(lambda: run(rois=ROIS[:, :3]), "rois", "[R, 4]")
    expect_error(lambda: run(out_hw=(0, 2)), "output_height", "positive")
    expect_error(lambda: run(spatial_scale=0.0), "spatial_scale", "positive")


def test_registered_as_extension():
    assert nna.OperationType(2202) is OP and OP.name == "ROI_ALIGN_ONNX"
