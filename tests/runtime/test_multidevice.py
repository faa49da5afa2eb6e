"""Several devices in one context: per-operation placement, acyclic subgraphs, one .nnc."""

import numpy as np
import pytest
from oputil import expect_error

import nnadapter_tvm as nna
from nnadapter_tvm.runtime.partition import assign_devices, split_by_device
from nnadapter_tvm.tools import builtin_model

P, OP = nna.Precision, nna.OperationType


def run(compilation, x):
    out = {}

    def access(memory, t):
        out["y"] = np.empty(t.dimensions, t.dtype)
        return out["y"]

    e = nna.Execution(compilation)
    e.set_input(0, x)
    e.set_output(0, None, access)
    e.compute()
    return out["y"]


def context(properties="", devices=("llvm", "llvm")):
    return nna.Context([nna.Device.acquire(d) for d in devices], properties)


def test_forced_split_matches_single_device(tmp_path):
    x = builtin_model.sample_input(2)
    single = nna.Compilation(builtin_model.build(), context(devices=("llvm",)))
    single.finish()
    # Device 0 refuses pooling and batch norm, so they fall to device 1 and the chain alternates.
    props = "DEVICE_0_UNSUPPORTED_OPERATIONS=MAX_POOL_2D,BATCH_NORMALIZATION,AVERAGE_POOL_2D"
    ctx = context(props)
    token = "S" * 32
    split = nna.Compilation(builtin_model.build(), ctx, cache_token=token, cache_dir=tmp_path)
    split.finish()
    # conv | max pool | dw conv, 1x1 conv | bn | relu | avg pool | adaptive pool .. softmax
    assert split.devices_used == ["llvm"] * 7
    # Not bit for bit: a pool alone in its subgraph stays NCHW and reduces its rows per vector lane
    # (targets/cpu/generic.py), fused after a convolution it is NHWC: the sums' order differs (an ulp).
    np.testing.assert_allclose(run(split, x), run(single, x), rtol=1e-6, atol=1e-7)
    again = nna.Compilation(None, ctx, cache_token=token, cache_dir=tmp_path)  # one .nnc holds every subgraph
    again.finish()
    assert again.loaded_from_cache and again.devices_used == split.devices_used
    np.testing.assert_array_equal(run(again, x), run(split, x))  # the same kernels, from the cache


def f32(model, dims):
    return model.add_operand(nna.OperandType(P.FLOAT32, dims))


def diamond():
    """a = relu(x); b = sigmoid(a); c = add(a, b): with relu/add on device 0 and sigmoid on 1,
    putting c into a's subgraph would make a cycle through b's."""
    m = nna.Model()
    x, a, b, c = (f32(m, [2, 3]) for _ in range(4))
    code = m.add_operand(nna.OperandType(P.INT32, [1]))
    m.set_operand_value(code, np.array([0], "int32"))
    m.add_operation(OP.RELU, [x], [a])
    m.add_operation(OP.SIGMOID, [a], [b])
    m.add_operation(OP.ADD, [a, b, code], [c])
    m.identify_inputs_and_outputs([x], [c])
    m.finish()
    return m


def test_device_split_stays_acyclic():
    m = diamond()
    ctx = context("DEVICE_0_UNSUPPORTED_OPERATIONS=SIGMOID")
    subs = split_by_device(m, assign_devices(m, ctx))
    assert [[op.type for op in s.operations] for s in subs] == [[OP.RELU], [OP.SIGMOID], [OP.ADD]]
    assert [s.device_index for s in subs] == [0, 1, 0]
    assert [o.index for o in subs[0].outputs] == [1]  # a feeds both later subgraphs
    assert [o.index for o in subs[2].inputs] == [1, 2]
    compilation = nna.Compilation(m, ctx)
    compilation.finish()
    x = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    a = np.maximum(x, 0)
    np.testing.assert_allclose(run(compilation, x), a + 1 / (1 + np.exp(-a)), rtol=1e-6)


def test_same_device_operations_merge():
    m = diamond()
    subs = split_by_device(m, assign_devices(m, context()))
    assert len(subs) == 1 and [o.index for o in subs[0].outputs] == [3]


def test_operation_no_device_accepts_is_reported_with_all_others():
    m = diamond()
    ctx = context("DEVICE_0_UNSUPPORTED_OPERATIONS=SIGMOID,ADD;DEVICE_1_SUPPORTED_OPERATIONS=RELU")
    err = expect_error(
        lambda: nna.Compilation(m, ctx).finish(), "SIGMOID", "ADD", code=nna.ResultCode.FEATURE_NOT_SUPPORTED
    )
    assert "RELU" not in str(err)


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ("DEVICE_2_SUPPORTED_OPERATIONS=RELU", "has 2 device(s)"),
        ("DEVICE_0_UNSUPPORTED_OPERATIONS=RELU,NOPE", "unknown operation(s) NOPE"),
    ],
)
def test_bad_device_properties(props, fragment):
    expect_error(lambda: context(props), fragment)
