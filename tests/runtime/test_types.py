"""Enum values must equal upstream nnadapter.h (values copied from the header by hand)."""

import pytest

import nnadapter_tvm as nna


@pytest.mark.parametrize(
    ("member", "value"),
    [
        (nna.ResultCode.NO_ERROR, 0),
        (nna.ResultCode.INVALID_PARAMETER, 3),
        (nna.ResultCode.DEVICE_INTERNAL_ERROR, 5),
        (nna.Precision.BOOL8, 0),
        (nna.Precision.FLOAT32, 10),
        (nna.Precision.QUANT_INT8_SYMM_PER_LAYER, 24),
        (nna.Precision.QUANT_UINT8_ASYMM_PER_LAYER, 26),
        (nna.Precision.QUANT_INT32_SYMM_PER_CHANNEL, 31),
        (nna.Layout.NHWC, 1),
        (nna.Lifetime.MODEL_INPUT, 4),
        (nna.OperationType.ABS, 0),
        (nna.OperationType.ADD, 3),
        (nna.OperationType.CONV_2D, 14),
        (nna.OperationType.EQUAL, 21),
        (nna.OperationType.GREATER_EQUAL, 33),
        (nna.OperationType.MAX_POOL_2D, 49),
        (nna.OperationType.SOFTMAX, 77),
        (nna.OperationType.YOLO_BOX, 95),
        (nna.FuseCode.RELU6, 3),
        (nna.AutoPad.VALID, 2),
        (nna.PadMode.EDGE, 4),
        (nna.InterpolateMode.NEAREST, 2),
        (nna.DeviceType.ACCELERATOR, 2),
    ],
)
def test_upstream_values(member, value):
    assert int(member) == value


def test_unknown_and_version():
    assert nna.UNKNOWN == -65535
    assert nna.OperandType(nna.Precision.FLOAT32, [-1, 3]).dimensions == [nna.UNKNOWN, 3]
    assert nna.get_version() == 1


def test_quant_type_needs_scale():
    with pytest.raises(nna.NNAdapterError) as err:
        nna.OperandType(nna.Precision.QUANT_INT8_SYMM_PER_LAYER, [2])
    assert err.value.code == nna.ResultCode.INVALID_PARAMETER
    t = nna.OperandType(nna.Precision.QUANT_INT8_SYMM_PER_CHANNEL, [4, 2], scale=[0.1] * 4, channel_dim=0)
    assert t.scale == pytest.approx([0.1] * 4)


def test_per_channel_scales_must_match_channels():
    P = nna.Precision.QUANT_INT8_SYMM_PER_CHANNEL
    with pytest.raises(nna.NNAdapterError, match="3 scales for 4 channels"):
        nna.OperandType(P, [4, 2], scale=[0.1] * 3, channel_dim=0)
    with pytest.raises(nna.NNAdapterError, match="channel_dim 2 is outside the rank 2"):
        nna.OperandType(P, [4, 2], scale=[0.1] * 4, channel_dim=2)
