"""RESIZE_ONNX (extension 2200) against ONNX's reference evaluator running a Resize node of the same
configuration (onnx.reference.ops.op_resize, the operator's reference implementation), over ranks,
modes, coordinate transformations, nearest modes, cubic coefficients, exclude_outside, antialias and
tf_crop_and_resize's roi and extrapolation value."""

import numpy as np
import onnx
import pytest
from dynutil import check_sizes, compile_op
from onnx import helper
from onnx.reference import ReferenceEvaluator
from oputil import UNKNOWN, Const, In, Out, P, b8, check_op, execute, expect_error, f32, i32, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations import onnx_vision as R

OP = R.RESIZE_ONNX
# Sums of up to 16 float32 products (4 x 4 cubic taps) against the reference's float64.
TOL = {"rtol": 1e-5, "atol": 2e-5}


def onnx_resize(x, *, scales=None, sizes=None, roi=None, **attrs):
    """ONNX's reference Resize of ``x`` (opset 19) with ``attrs`` (ONNX's attribute names and strings)."""
    names = ["X", "roi" if roi is not None else "", "scales" if scales is not None else ""]
    feeds = {"X": x}
    if roi is not None:
        feeds["roi"] = np.asarray(roi, np.float32)
    if scales is not None:
        feeds["scales"] = np.asarray(scales, np.float32)
    if sizes is not None:
        names.append("sizes")
        feeds["sizes"] = np.asarray(sizes, np.int64)
    node = helper.make_node("Resize", names, ["Y"], **attrs)
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()
    ]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


def operands(
    x,
    out_shape,
    scale,
    roi=None,
    mode="nearest",
    ctm="half_pixel",
    nearest_mode="round_prefer_floor",
    a=-0.75,
    exclude_outside=False,
    extrapolation=0.0,
    antialias=False,
    x_dims=None,
):
    return [
        In(x, dims=x_dims),
        i32(list(out_shape)),
        Const(None if scale is None else np.asarray(scale, np.float64), P.FLOAT64),
        Const(None if roi is None else np.asarray(roi, np.float64), P.FLOAT64),
        i32(R.RESIZE_MODES.index(mode)),
        i32(R.COORDINATE_TRANSFORMATION_MODES.index(ctm)),
        i32(R.NEAREST_MODES.index(nearest_mode)),
        f32(a),
        b8(exclude_outside),
        f32(extrapolation),
        b8(antialias),
    ]


TRANSFORMS = R.COORDINATE_TRANSFORMATION_MODES[:5]


@pytest.mark.parametrize("mode", R.RESIZE_MODES)
@pytest.mark.parametrize("ctm", TRANSFORMS)
@pytest.mark.parametrize(
    "shape,scales", [((1, 2, 4, 5), (1, 1, 1.7, 0.6)), ((2, 3, 7), (1, 1, 2.0)), ((5, 3), (0.5, 1.5))]
)
def test_scales(mode, ctm, shape, scales):
    x = rand(*shape, seed=1)
    expected = onnx_resize(x, scales=scales, mode=mode, coordinate_transformation_mode=ctm)
    check_op(OP, operands(x, expected.shape, scales, mode=mode, ctm=ctm), expected, **TOL)


@pytest.mark.parametrize("nearest_mode", R.NEAREST_MODES)
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"])
def test_nearest_modes_sizes(nearest_mode, ctm):
    x = rand(1, 1, 4, 6, seed=2)
    sizes = (1, 1, 7, 4)  # up along H, down along W: ties at .5 fall where the sizes make them
    expected = onnx_resize(
        x, sizes=sizes, mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nearest_mode
    )
    scale = [o / i for o, i in zip(sizes, x.shape)]
    check_op(OP, operands(x, sizes, scale, ctm=ctm, nearest_mode=nearest_mode), expected, rtol=0, atol=0)


@pytest.mark.parametrize("a", [-0.5, -0.75])
@pytest.mark.parametrize("exclude_outside", [False, True])
@pytest.mark.parametrize("scales", [(1, 1, 0.8, 0.8), (1, 1, 1.3, 2.0)])
def test_cubic(a, exclude_outside, scales):
    x = rand(1, 2, 5, 4, seed=3)
    expected = onnx_resize(x, scales=scales, mode="cubic", cubic_coeff_a=a, exclude_outside=int(exclude_outside))
    inputs = operands(x, expected.shape, scales, mode="cubic", a=a, exclude_outside=exclude_outside)
    check_op(OP, inputs, expected, **TOL)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [(1, 1, 0.6, 0.8), (1, 1, 0.2, 1.5)])
def test_antialias(mode, scales):
    x = rand(1, 2, 16, 8, seed=4)
    expected = onnx_resize(x, scales=scales, mode=mode, antialias=1)
    check_op(OP, operands(x, expected.shape, scales, mode=mode, antialias=True), expected, **TOL)


@pytest.mark.parametrize("mode", R.RESIZE_MODES)
@pytest.mark.parametrize("extrapolation", [0.0, 10.0])
def test_tf_crop_and_resize(mode, extrapolation):
    x = rand(1, 1, 5, 6, seed=5)
    roi = [0, 0, -0.2, 0.4, 1, 1, 0.7, 1.3]  # W's window reaches past the input: extrapolated
    sizes = (1, 1, 4, 7)
    expected = onnx_resize(
        x,
        roi=roi,
        sizes=sizes,
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=extrapolation,
    )
    scale = [o / i for o, i in zip(sizes, x.shape)]
    inputs = operands(x, sizes, scale, roi=roi, mode=mode, ctm="tf_crop_and_resize", extrapolation=extrapolation)
    check_op(OP, inputs, expected, **TOL)


def test_tf_crop_and_resize_antialias_many_taps():
    """Antialiased downsampling by 0.2 weighs more taps than a pass unrolls, with extrapolation."""
    x = rand(1, 1, 20, 3, seed=6)
    roi = [0, 0, -0.1, 0, 1, 1, 1.0, 1]
    sizes = (1, 1, 4, 3)
    expected = onnx_resize(
        x,
        roi=roi,
        sizes=sizes,
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-3.0,
        antialias=1,
    )
    scale = [o / i for o, i in zip(sizes, x.shape)]
    inputs = operands(
        x, sizes, scale, roi=roi, mode="linear", ctm="tf_crop_and_resize", extrapolation=-3.0, antialias=True
    )
    check_op(OP, inputs, expected, **TOL)


def test_symbolic_batch_kept():
    """An axis of unknown size that is not resized keeps its size (sizes -1)."""
    x = rand(3, 2, 4, 4, seed=7)
    scales = (1, 1, 1.5, 0.5)
    expected = onnx_resize(x, scales=scales, mode="linear")
    inputs = operands(x, (-1, 2, 6, 2), scales, mode="linear", x_dims=[UNKNOWN, 2, 4, 4])
    (got,) = run_op(OP, inputs, [Out(dims=[UNKNOWN, 2, 6, 2])], [expected.shape])
    np.testing.assert_allclose(got, expected, **TOL)


# (input shape, sizes) fed to one compilation whose input and sizes are known only at execution: up and down,
# a 1-pixel output, the batch and channels kept.
FED = [((1, 2, 4, 6), (1, 2, 7, 3)), ((2, 2, 5, 3), (2, 2, 1, 8))]


@pytest.mark.parametrize("mode", R.RESIZE_MODES)
def test_sizes_fed_at_execution(mode):
    """sizes a model input: read at execution as new symbolic sizes, each axis' scale output / input, the
    positions and weights computed by kernels (every axis resized: none is known to keep its size)."""
    x0, sizes0 = FED[0]
    ctm = {"nearest": "asymmetric", "linear": "half_pixel", "cubic": "pytorch_half_pixel"}[mode]
    inputs = operands(rand(*x0), sizes0, None, mode=mode, ctm=ctm, nearest_mode="round_prefer_ceil")
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN] * 4)
    inputs[1] = In(np.asarray(sizes0, "int64"), P.INT64)
    compilation = compile_op(OP, inputs, [Out(dims=[UNKNOWN] * 4)])
    cases = []
    for k, (shape, sizes) in enumerate(FED):
        x = rand(*shape, seed=10 + k)
        expected = onnx_resize(
            x, sizes=sizes, mode=mode, coordinate_transformation_mode=ctm, nearest_mode="round_prefer_ceil"
        )
        cases.append(([x, np.asarray(sizes, "int64")], [expected.astype(np.float32)]))
    check_sizes(compilation, cases, **TOL)


def test_sizes_fed_at_execution_declared_output_sizes_kept():
    """A fed sizes tensor whose N and C the output operand declares: those axes keep their size (no pass),
    and a run whose sizes say otherwise fails naming the operand."""
    inputs = operands(rand(2, 2, 4, 6), (2, 2, 7, 3), None, mode="linear")
    inputs[0] = In(inputs[0].value, dims=[2, 2, UNKNOWN, UNKNOWN])
    inputs[1] = In(np.asarray([2, 2, 7, 3], "int64"), P.INT64)
    compilation = compile_op(OP, inputs, [Out(dims=[2, 2, UNKNOWN, UNKNOWN])])
    x = rand(2, 2, 5, 3, seed=30)
    expected = onnx_resize(x, sizes=(2, 2, 1, 8), mode="linear").astype(np.float32)
    check_sizes(compilation, [([x, np.asarray([2, 2, 1, 8], "int64")], [expected])], **TOL)
    expect_error(
        lambda: execute(compilation, [x, np.asarray([1, 2, 1, 8], "int64")]),
        "RESIZE_ONNX",
        "sizes",
        "size 0 must be 2",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_scales_fed_at_execution_on_symbolic_sizes():
    """scales a model input: the output sizes floor(scale * n) read at execution, the kernels reading the
    scales; tf_crop_and_resize with a constant roi extrapolates where the window leaves the input."""
    roi = [0, 0, 0.13, -0.2, 1, 1, 0.77, 1.1]
    attrs = dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=10.0)
    inputs = operands(rand(1, 2, 4, 6), (-1,) * 4, (1, 1, 2.0, 0.5), roi=roi, mode="linear", extrapolation=10.0)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, 2, UNKNOWN, UNKNOWN])
    inputs[2] = In(np.asarray([1, 1, 2.0, 0.5], np.float32))
    inputs[5] = i32(R.COORDINATE_TRANSFORMATION_MODES.index("tf_crop_and_resize"))
    compilation = compile_op(OP, inputs, [Out(dims=[UNKNOWN] * 4)])
    cases = []
    for k, (shape, scales) in enumerate([((1, 2, 4, 6), (1, 1, 2.0, 0.5)), ((3, 2, 5, 3), (1, 1, 1.5, 3.0))]):
        x = rand(*shape, seed=20 + k)
        expected = onnx_resize(x, scales=scales, roi=roi, **attrs).astype(np.float32)
        cases.append(([x, np.asarray(scales, np.float32)], [expected]))
    check_sizes(compilation, cases, **TOL)


def test_errors():
    x = rand(1, 1, 4, 4)
    good = dict(out_shape=(1, 1, 8, 8), scale=(1, 1, 2, 2))

    def run(**changes):
        kwargs = {**good, **changes}
        out = kwargs.pop("out_shape")
        return run_op(OP, operands(x, out, **kwargs), [Out()], [(1, 1, 8, 8)])

    expect_error(lambda: run(out_shape=(1, 8, 8)), "RESIZE_ONNX", "sizes", "must hold 4")
    expect_error(lambda: run(scale=(1, 1, 0, 2)), "scales", "positive")
    expect_error(lambda: run(mode="nearest", antialias=True), "antialias")
    bad_mode = operands(x, (1, 1, 8, 8), (1, 1, 2, 2))
    bad_mode[4] = i32(7)
    expect_error(lambda: run_op(OP, bad_mode, [Out()], [(1, 1, 8, 8)]), "mode", "0=nearest", "got 7")
    # Sizes known, input size not (the scale output / input only at execution): antialias's taps need it.
    symbolic = operands(x, (1, 1, 2, 2), None, mode="linear", antialias=True, x_dims=[1, 1, UNKNOWN, 4])
    expect_error(
        lambda: run_op(OP, symbolic, [Out()], [(1, 1, 2, 2)]),
        "antialias",
        "axis 2",
        "known only at execution",
        code=nna.ResultCode.FEATURE_NOT_SUPPORTED,
    )


def test_registered_as_extension():
    assert nna.OperationType(2200) is OP and OP.name == "RESIZE_ONNX"
