"""The default CPU schedules (the targets/cpu/ package) on convolutions: same numbers as TVM's unscheduled
loops on odd shapes (channel counts that are not multiples of the vector width, 1x1, stride 2, asymmetric
pads, dilation, groups, depthwise with a multiplier, padded output channels), and the schedules really
apply: the expected rules, NHWC kept between convolutions, concatenations written in place by their
producers, padded groups with their epilogue fused, the NCHW fallback."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from schedutil import RNG, TARGET, check, const, conv, module, run, scheduled_function
from tvm import relax

import nnadapter_tvm as nna
from nnadapter_tvm.runtime.convert import quantize_expr
from nnadapter_tvm.targets.cpu import pipeline
from nnadapter_tvm.targets.cpu.compute import CONV, DEPTHWISE
from nnadapter_tvm.targets.cpu.groups import padded_group
from nnadapter_tvm.targets.cpu.layout import to_nhwc
from nnadapter_tvm.targets.cpu.lowering import Lowering
from nnadapter_tvm.targets.cpu.simd import vector_lanes

CONV_CASES = {
    "3x3-odd-channels": ((1, 3, 7, 9), dict(oc=5, k=3)),
    "3x3-vector-channels": ((2, 16, 6, 5), dict(oc=32, k=3)),
    "1x1": ((1, 24, 5, 7), dict(oc=40, k=1, pad=(0, 0, 0, 0))),
    "stride2-asymmetric-pad": ((1, 8, 9, 11), dict(oc=24, k=3, stride=2, pad=(0, 1, 1, 2))),
    "dilation2": ((1, 8, 10, 10), dict(oc=16, k=3, dilation=2, pad=(2, 2, 2, 2))),
    "groups": ((1, 12, 6, 6), dict(oc=24, k=3, groups=3)),
    "groups-odd": ((1, 6, 5, 5), dict(oc=10, k=1, groups=2, pad=(0, 0, 0, 0))),
    # Groups of 34 and 20 output channels: each group padded to whole vectors, then compacted.
    "groups-34": ((1, 68, 5, 6), dict(oc=68, k=1, groups=2, pad=(0, 0, 0, 0))),
    "groups-20-3x3": ((1, 40, 6, 5), dict(oc=60, k=3, groups=2, stride=2)),
    "depthwise": ((1, 20, 9, 7), dict(oc=20, k=3, groups=20)),
    "depthwise-multiplier": ((1, 4, 6, 6), dict(oc=8, k=3, groups=4)),
    # Padding computed per task of output rows (tiled._rows_per_pad): 1 row at stride 2, 4 rows at 3x3
    # stride 1 (32 rows), 8 rows dilated (64 rows).
    "depthwise-stride2-pad-per-row": ((1, 20, 11, 9), dict(oc=20, k=3, groups=20, stride=2)),
    "depthwise-pad-per-4-rows": ((1, 16, 32, 7), dict(oc=16, k=3, groups=16)),
    "depthwise-dilated-pad-per-8-rows": ((1, 8, 64, 6), dict(oc=8, k=3, groups=8, dilation=2, pad=(2, 2, 2, 2))),
    "channels-padded": ((1, 8, 5, 5), dict(oc=1000 // 8 + 3, k=1, pad=(0, 0, 0, 0))),
    "no-epilogue": ((1, 16, 5, 5), dict(oc=16, k=3, epilogue=False)),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv2d_matches_unscheduled(name):
    shape, kwargs = CONV_CASES[name]
    groups = kwargs.get("groups", 1)
    rule = DEPTHWISE if groups > 1 and groups == shape[1] else CONV
    check(module([shape], lambda bb, x: conv(bb, x, **kwargs)), [shape], rule)


@pytest.mark.parametrize(("shape", "stride", "per_task"), [((1, 16, 64, 8), 2, True), ((1, 16, 12, 8), 1, False)])
def test_depthwise_padding_is_computed_inside_its_row_tasks(shape, stride, per_task):
    """A depthwise convolution on a large map pads, inside each parallel task of output rows, only the input
    rows the task reads (no padded copy of the whole input before it); a small map whose tasks would pad
    their overlap over again keeps the whole copy."""
    mod = module([shape], lambda bb, x: conv(bb, x, shape[1], 3, stride=stride, groups=shape[1]))
    script = scheduled_function(mod, "fused_" + DEPTHWISE)
    pad, update = script.index('T.sblock("nna_pad")'), script.index(f'T.sblock("{DEPTHWISE}_update")')
    # Per task: the pad inside the convolution's parallel loop, which starts before it; else the
    # convolution's parallel loop starts between the two.
    inside = "T.parallel(" in script[:pad] and "T.parallel(" not in script[pad:update]
    assert inside == per_task, script


def test_conv_chain_with_pool_and_concat_stays_nhwc():
    """Two convolutions, a pool and a concatenation: one transpose in, one out, all NHWC between."""
    shape = (1, 16, 12, 12)

    def body(bb, x):
        a = conv(bb, x, 16, 3)
        b = conv(bb, x, 8, 1, pad=(0, 0, 0, 0))
        y = bb.emit(relax.op.concat([a, b], axis=1))
        y = bb.emit(relax.op.nn.max_pool2d(y, [3, 3], [2, 2], padding=[1, 1, 1, 1]))
        y = conv(bb, y, 24, 3)
        return bb.emit(relax.op.nn.avg_pool2d(y, [2, 2], [2, 2]))

    mod = module([shape], body)
    check(mod, [shape], CONV)
    converted = to_nhwc(mod).script(show_meta=False).splitlines()
    transposes = [line for line in converted if "permute_dims(" in line and "metadata" not in line]
    # Only the input (to NHWC) and the output (back to NCHW) are transposed; constants fold at compile time.
    assert all("permute_dims(x0," in line or line.strip().startswith("gv") for line in transposes), transposes


def test_lower_rank_operands_stay_nhwc():
    """A per-channel scale as ONNX files unsqueeze it (``[C, 1, 1]``), a bias of rank 1 along the width, a
    one-element constant as the first operand and a lower-rank model input: the ops stay NHWC (no transpose
    of the feature map around them) and the numbers match TVM's unscheduled loops."""
    shape, side = (1, 8, 6, 6), (8, 1, 1)

    def body(bb, x, s, lower_rank_first=False):
        y = conv(bb, x, 8, 3)
        y = bb.emit(relax.op.multiply(y, const(8, 1, 1)))
        y = bb.emit(relax.op.add(y, const(6)))
        y = bb.emit(relax.op.multiply(const(1), y))  # a one-element constant first (PaddleOCR's scales)
        y = bb.emit(relax.op.subtract(s, y) if lower_rank_first else relax.op.subtract(y, s))
        y = bb.emit(relax.op.nn.max_pool2d(y, [2, 2], [2, 2]))
        return conv(bb, y, 4, 3)

    mod = module([shape, side], body)
    check(mod, [shape, side], CONV)
    converted = to_nhwc(mod).script(show_meta=False).splitlines()
    transposes = [line for line in converted if "permute_dims(" in line and "metadata" not in line]
    feature_maps = [line for line in transposes if "permute_dims(x0," not in line and "(1, 1, 1, 8)" not in line]
    assert len(feature_maps) == 1 and feature_maps[0].strip().startswith("gv"), transposes
    # A lower-rank model input as the first operand keeps the op in NCHW (ConvertLayout follows the first
    # operand's layout), still with the right numbers.
    check(module([shape, side], lambda bb, x, s: body(bb, x, s, True)), [shape, side], CONV)


def test_quantized_round_trip_between_convolutions_stays_nhwc():
    """A convolution's output requantized to uint8 and dequantized for the next one (the runtime's
    quantize_expr, as a QDQ model's every layer does): the quantization moves to NHWC with the
    convolutions (a clip or a where with a scalar kept it in NCHW: two transposes of every feature map),
    and the numbers match TVM's unscheduled loops."""
    shape = (1, 8, 6, 6)
    uint8 = nna.OperandType(nna.Precision.QUANT_UINT8_ASYMM_PER_LAYER, [1, 8, 6, 6], scale=0.05, zero_point=128)

    def body(bb, x):
        q = bb.emit(quantize_expr(conv(bb, x, 8, 3), uint8))
        y = bb.emit(relax.op.multiply(relax.op.subtract(relax.op.astype(q, "float32"), const(1)), const(1)))
        return conv(bb, y, 4, 3)

    mod = module([shape], body)
    check(mod, [shape], CONV)
    converted = to_nhwc(mod).script(show_meta=False).splitlines()
    transposes = [line for line in converted if "permute_dims(" in line and "metadata" not in line]
    feature_maps = [line for line in transposes if "permute_dims(x0," not in line and "(1, 1, 1, " not in line]
    assert len(feature_maps) == 1 and feature_maps[0].strip().startswith("gv"), transposes


# Each case gives a concatenation's inputs; ``c(n)`` is the channel count of a convolution, n when the
# concatenation is over the channels, the model input's 16 when it is over the height.
CONCAT_CASES = {
    # Both inputs convolutions used only by the concatenation: each writes its slice, no copy kernel left.
    "two-convolutions": lambda bb, x, c: [conv(bb, x, c(8), 3), conv(bb, x, c(8), 1, pad=(0, 0, 0, 0))],
    # Odd channel counts, the producers computed in another order than they are concatenated.
    "three-reordered": lambda bb, x, c: (lambda last, mid, first: [first, mid, last])(
        conv(bb, x, c(7), 3), conv(bb, x, c(3), 1, pad=(0, 0, 0, 0)), conv(bb, x, c(5), 3)
    ),
    # A pool is a producer too.
    "pool": lambda bb, x, c: [
        conv(bb, x, c(8), 1, pad=(0, 0, 0, 0)),
        bb.emit(relax.op.nn.max_pool2d(conv(bb, x, c(4), 3), [3, 3], [1, 1], padding=[1, 1, 1, 1])),
    ],
    # A model input (its transpose to NHWC fuses with the concatenation, which then stays a kernel).
    "model-input": lambda bb, x, c: [x, conv(bb, x, c(8), 3)],
    # One producer read twice by the concatenation.
    "same-twice": lambda bb, x, c: [(a := conv(bb, x, c(8), 3)), a],
    # Element-wise ops on the model input (they fuse with the concatenation).
    "element-wise": lambda bb, x, c: [
        bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, const(1, 16, 1, 1))))),
        conv(bb, x, c(4), 3),
    ],
}


@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("then", ["conv", "output"])
@pytest.mark.parametrize("name", list(CONCAT_CASES))
def test_concatenation_written_in_place(name, then, axis):
    """Producers write their slices of a concatenation's buffer (``targets/cpu/concat.py``): the same numbers
    as TVM's unscheduled loops, on the channel axis and on the height, followed by a convolution or as the
    model's output; followed by a convolution, no concatenation kernel is left."""
    shape = (1, 16, 6, 5)

    def body(bb, x):
        inputs = CONCAT_CASES[name](bb, x, lambda n: n if axis == 1 else shape[1])
        y = bb.emit(relax.op.concat(inputs, axis=axis))
        return conv(bb, y, 8, 3) if then == "conv" else y

    mod = module([shape], body)
    check(mod, [shape], CONV)
    with TARGET:
        lowered = pipeline.lower(mod, TARGET)
    names = [g.name_hint for g in lowered.get_global_vars()]
    concat_kernels = [n for n in names if "concatenate" in n]
    writes = [n for n in names if "_into_concat" in n]
    if name == "same-twice":
        assert concat_kernels and not writes, "a tensor read twice is not the producer of one slice"
    elif then == "conv" and name in ("two-convolutions", "three-reordered", "pool"):
        # (As the model's output, the concatenation fuses with the transpose back to NCHW.)
        assert len(writes) == (3 if name == "three-reordered" else 2) and not concat_kernels, names


def test_requantized_concatenation_is_written_in_place():
    """A QDQ model requantizes a concatenation's result (squeezenet's fire modules): the element-wise steps
    (a division by a per-tensor scale spread over the channels, rounding, clipping, the uint8 cast and back)
    move onto each input (``elementwise_into_concat``), join the producing convolutions' epilogues, and the
    concatenation is written in place; the same numbers as TVM's unscheduled loops."""
    shape = (1, 16, 6, 5)
    f32 = np.float32

    def body(bb, x):
        y = bb.emit(relax.op.concat([conv(bb, x, 8, 3), conv(bb, x, 8, 1, pad=(0, 0, 0, 0))], axis=1))
        y = bb.emit(relax.op.divide(y, relax.const(np.full((1, 16, 1, 1), 0.05, "float32"))))
        y = bb.emit(relax.op.round(y))
        y = bb.emit(relax.op.minimum(bb.emit(relax.op.maximum(y, relax.const(f32(-128)))), relax.const(f32(127))))
        y = bb.emit(relax.op.astype(bb.emit(relax.op.astype(y, "int8")), "float32"))
        return conv(bb, y, 8, 3)

    mod = module([shape], body)
    check(mod, [shape], CONV)
    with TARGET:
        names = [g.name_hint for g in pipeline.lower(mod, TARGET).get_global_vars()]
    assert not [n for n in names if "concatenate" in n], names
    assert len([n for n in names if "_into_concat" in n]) == 2, names


def test_concatenation_of_a_tensor_used_elsewhere():
    """A concatenation's input that another op also reads is copied (densenet's running concatenation), and
    the in-place chain leaves that input intact for its other reader."""
    shape = (1, 8, 5, 5)

    def body(bb, x):
        a = conv(bb, x, 8, 3)
        y = bb.emit(relax.op.concat([a, conv(bb, x, 4, 1, pad=(0, 0, 0, 0))], axis=1))
        z = bb.emit(relax.op.concat([y, conv(bb, y, 4, 3)], axis=1))
        return bb.emit(relax.op.add(bb.emit(relax.op.sum(z, axis=[1], keepdims=True)), a))

    check(module([shape], body), [shape], CONV)


def test_padded_groups_keep_their_epilogue_fused():
    """A grouped convolution padded to whole vectors a group (``targets/cpu/groups.py``): the per-channel
    ops after it (a computed scale, a bias, ReLU) run on the padded channels inside the convolution's
    kernel; a residual add of a whole tensor takes the compacted channels.  Same numbers as TVM's loops."""
    shape = (1, 68, 5, 6)

    def body(bb, x):
        y = conv(bb, x, 68, 1, pad=(0, 0, 0, 0), groups=2)
        scale = bb.emit(relax.op.sqrt(bb.emit(relax.op.abs(const(1, 68, 1, 1)))))  # folded at compile time
        y = bb.emit(relax.op.multiply(y, scale))
        y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, x))))
        return conv(bb, y, 8, 1, pad=(0, 0, 0, 0))

    mod = module([shape], body)
    check(mod, [shape], CONV)
    with TARGET:
        lowered = pipeline.lower(mod, TARGET)
    width = 2 * padded_group(68, 2, vector_lanes(TARGET))
    assert width > 68
    convs = {g.name_hint: f for g, f in lowered.functions_items() if g.name_hint.startswith("fused_" + CONV)}
    grouped = [name for name, f in convs.items() if int(f.params[-1].ty.shape[-1]) == width]
    assert len(grouped) == 1 and "multiply" in grouped[0] and "reshape" not in grouped[0], list(convs)


def test_nchw_fallback_converts_each_convolution():
    """When ConvertLayout is not run (or fails), a convolution converts its own input and output."""
    shape = (1, 5, 6, 7)
    mod = module([shape], lambda bb, x: conv(bb, x, 9, 3, groups=1))
    lowering = Lowering(TARGET, winograd=False)
    with TARGET:
        legal = relax.transform.LegalizeOps(customize_legalize_map=lowering.legalize_map())(mod)
    names = [gv.name_hint for gv in legal.functions]
    assert any(n.startswith(CONV) for n in names) and any("transpose" in n for n in names)
    inputs = [RNG.standard_normal(shape).astype("float32")]
    with TARGET, tvm.transform.PassContext(opt_level=3):
        want = run(tvm.compile(mod, TARGET), inputs)
        got = run(tvm.compile(legal, TARGET), inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_epilogue_with_an_independent_producer_matches_unscheduled():
    """Gemm with alpha and beta: y = (a @ b) * alpha + c * beta fuses c * beta, which does not consume the
    product, into the product's function; it must not be computed per tile (was a silent wrong result)."""

    def body(bb, a, c):
        y = bb.emit(relax.op.multiply(bb.emit(relax.op.matmul(a, const(4, 5))), relax.const(0.25, "float32")))
        return bb.emit(relax.op.add(y, bb.emit(relax.op.multiply(c, relax.const(0.35, "float32")))))

    check(module([(3, 4), (1, 5)], body), [(3, 4), (1, 5)])
