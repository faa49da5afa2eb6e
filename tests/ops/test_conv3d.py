"""CONV_3D_TRANSPOSE (extension 2400) against a numpy reference written from ONNX ConvTranspose's definition,
and ONNX ConvTranspose on 5-D inputs through the importer against onnx's reference evaluator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from oputil import Const, In, Out, check_op, expect_error, f32, i32, rand, run_op

import nnadapter_tvm as nna
from nnadapter_tvm.operations.conv3d import CONV_3D_TRANSPOSE

UNKNOWN = -1


def _conv3d_transpose_ref(x, w, b, pads, strides, dilations, output_padding, group):
    """Every input voxel scatters x * filter into the full result at i * stride + a * dilation; the output
    is positions [pad_begin, pad_begin + out) of it (zeros past it), plus the bias."""
    n, c_in, *sizes = x.shape
    _, c_out_g, *kernel = w.shape
    full = [(s - 1) * st + (k - 1) * d + 1 for s, st, k, d in zip(sizes, strides, kernel, dilations)]
    out = [f - pb - pe + p for f, pb, pe, p in zip(full, pads[:3], pads[3:], output_padding)]
    y = np.zeros([n, c_out_g * group, *[max(f, pb + o) for f, pb, o in zip(full, pads[:3], out)]], "float64")
    per_group = c_in // group
    for c in range(c_in):
        g = c // per_group
        for i, j, v in itertools.product(*[range(s) for s in sizes]):
            for a, bb, e in itertools.product(*[range(k) for k in kernel]):
                pos = (
                    i * strides[0] + a * dilations[0],
                    j * strides[1] + bb * dilations[1],
                    v * strides[2] + e * dilations[2],
                )
                y[:, g * c_out_g : (g + 1) * c_out_g, pos[0], pos[1], pos[2]] += (
                    x[:, c, i, j, v, None] * w[c, :, a, bb, e]
                )
    y = y[:, :, pads[0] : pads[0] + out[0], pads[1] : pads[1] + out[1], pads[2] : pads[2] + out[2]]
    if b is not None:
        y = y + b[None, :, None, None, None]
    return y.astype("float32")


CASES = [
    # x shape, filter shape, pads, strides, dilations, output_padding, group
    ((1, 1, 3, 4, 5), (1, 2, 3, 3, 3), [0] * 6, [1, 1, 1], [1, 1, 1], [0, 0, 0], 1),  # onnx's node case
    ((2, 2, 2, 3, 2), (2, 3, 2, 2, 3), [1, 0, 1, 0, 1, 1], [2, 1, 2], [1, 1, 1], [1, 0, 1], 1),
    ((1, 4, 2, 2, 3), (4, 1, 3, 2, 2), [0, 1, 0, 1, 0, 0], [1, 2, 1], [2, 1, 2], [1, 1, 0], 2),
]


def _operands(x, w, b, pads, strides, dilations, output_padding, group, x_in=None):
    return [
        x_in if x_in is not None else In(x),
        f32(w),
        f32(b) if b is not None else Const(None, nna.Precision.FLOAT32),
        i32(pads),
        i32(strides),
        i32(dilations),
        i32(output_padding),
        i32([group]),
    ]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_conv_3d_transpose(case, with_bias):
    x_shape, w_shape, pads, strides, dilations, output_padding, group = case
    x, w = rand(*x_shape, seed=1), rand(*w_shape, seed=2)
    b = rand(w_shape[1] * group, seed=3) if with_bias else None
    expected = _conv3d_transpose_ref(x, w, b, pads, strides, dilations, output_padding, group)
    operands = _operands(x, w, b, pads, strides, dilations, output_padding, group)
    check_op(CONV_3D_TRANSPOSE, operands, expected, rtol=1e-5, atol=1e-5)


def test_conv_3d_transpose_symbolic_batch_and_depth():
    x_shape, w_shape, pads, strides, dilations, output_padding, group = CASES[1]
    x, w, b = rand(*x_shape, seed=4), rand(*w_shape, seed=5), rand(w_shape[1], seed=6)
    expected = _conv3d_transpose_ref(x, w, b, pads, strides, dilations, output_padding, group)
    x_in = In(x, dims=[UNKNOWN, x_shape[1], UNKNOWN, *x_shape[3:]])
    operands = _operands(x, w, b, pads, strides, dilations, output_padding, group, x_in)
    out = Out(dims=[UNKNOWN, expected.shape[1], UNKNOWN, *expected.shape[3:]])
    (got,) = run_op(CONV_3D_TRANSPOSE, operands, [out], [expected.shape])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "change,operand,fragment",
    [
        ({"output_padding": [2, 0, 0]}, "'output_padding'", "max(stride, dilation)"),
        ({"group": 3}, "'group'", "divide C_in"),
        ({"pads": [0, 0, 0, 0]}, "'pads'", "6 values"),
        ({"pads": [3, 0, 0, 3, 0, 0]}, "'pads'", "output size"),
        ({"strides": [0, 1, 1]}, "'strides'", "positive"),
    ],
)
def test_conv_3d_transpose_bad_operands(change, operand, fragment):
    x_shape, w_shape, pads, strides, dilations, output_padding, group = CASES[0]
    geometry = {"pads": pads, "strides": strides, "dilations": dilations, "output_padding": output_padding}
    geometry["group"] = group
    geometry.update(change)
    x, w = rand(*x_shape), rand(*w_shape)
    operands = _operands(x, w, None, geometry["pads"], geometry["strides"], geometry["dilations"],
                         geometry["output_padding"], geometry["group"])  # fmt: skip
    run = lambda: run_op(CONV_3D_TRANSPOSE, operands, [Out(dims=[1, 2, 5, 6, 7])], [(1, 2, 5, 6, 7)])  # noqa: E731
    expect_error(run, "CONV_3D_TRANSPOSE", operand, fragment)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 0, 1]},
        {"strides": [2, 2, 1], "auto_pad": "SAME_UPPER"},
        {"strides": [1, 2, 2], "auto_pad": "SAME_LOWER"},
        {"dilations": [1, 2, 1]},
    ],
    ids=str,
)
def test_onnx_conv_transpose_3d(attrs):
    x = rand(2, 2, 3, 3, 4, seed=7)
    w = rand(2, 2, 2, 3, 2, seed=8)
    b = rand(2 * attrs.get("group", 1), seed=9)
    f = TensorProto.FLOAT
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", f, ["n", 2, 3, 3, 4])],
        [helper.make_tensor_value_info("y", f, None)],
        initializer=[helper.make_tensor("w", f, w.shape, w.ravel()), helper.make_tensor("b", f, b.shape, b.ravel())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = nna.Predictor(model).run({"x": x})
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
