"""The default CPU schedules (the targets/cpu/ package): same numbers as TVM's unscheduled loops, and
the schedules really apply (parallel and vectorized loops, packed weights, the expected rules)."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tvm
from tvm import relax, te

import nnadapter_tvm as nna
from nnadapter_tvm.op_converters import reduce as reduce_converters
from nnadapter_tvm.runtime.convert import quantize_expr
from nnadapter_tvm.targets import llvm as llvm_target
from nnadapter_tvm.targets.cpu import pipeline, schedule
from nnadapter_tvm.targets.cpu.compute import CONV, DENSE, DEPTHWISE
from nnadapter_tvm.targets.cpu.groups import padded_group
from nnadapter_tvm.targets.cpu.int8 import INT8_CONV
from nnadapter_tvm.targets.cpu.layout import to_nhwc
from nnadapter_tvm.targets.cpu.lowering import Lowering
from nnadapter_tvm.targets.cpu.simd import vector_lanes, vector_registers
from nnadapter_tvm.targets.cpu.winograd import WINOGRAD
from nnadapter_tvm.targets.llvm import LlvmDriver
from nnadapter_tvm.tools import builtin_model

TARGET = LlvmDriver().tvm_target({})
RNG = np.random.default_rng(0)


def _module(shapes: list[tuple], body) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(list(s), "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *params))
        bb.emit_func_output(out)
    return bb.finalize()


def _const(*shape: int) -> relax.Constant:
    return relax.const(RNG.standard_normal(shape).astype("float32"))


def _run(executable: relax.VMExecutable, inputs: list[np.ndarray]) -> np.ndarray:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def _check(mod: tvm.IRModule, shapes: list[tuple], expect_rule: str | None = None) -> dict[str, str]:
    """Scheduled and unscheduled builds of ``mod`` agree; returns the schedule report.  The direct
    convolution kernels are what this file checks: Winograd's have tests/targets/test_cpu_winograd.py."""
    inputs = [RNG.standard_normal(s).astype("float32") for s in shapes]
    with TARGET, tvm.transform.PassContext(opt_level=3):
        want = _run(tvm.compile(mod, TARGET), inputs)
    executable, report = pipeline.build(mod, TARGET, winograd=False)
    got = _run(executable, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if expect_rule is not None:
        assert expect_rule in report.values(), report
    return report


def _conv(bb, x, oc, k, stride=1, pad=(1, 1, 1, 1), dilation=1, groups=1, epilogue=True):
    c = x.ty.shape.values[1].value
    y = bb.emit(
        relax.op.nn.conv2d(
            x, _const(oc, c // groups, k, k), strides=stride, padding=list(pad), dilation=dilation, groups=groups
        )
    )
    if epilogue:
        y = bb.emit(relax.op.add(y, _const(1, oc, 1, 1)))
        y = bb.emit(relax.op.nn.relu(y))
    return y


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
    "channels-padded": ((1, 8, 5, 5), dict(oc=1000 // 8 + 3, k=1, pad=(0, 0, 0, 0))),
    "no-epilogue": ((1, 16, 5, 5), dict(oc=16, k=3, epilogue=False)),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv2d_matches_unscheduled(name):
    shape, kwargs = CONV_CASES[name]
    groups = kwargs.get("groups", 1)
    rule = DEPTHWISE if groups > 1 and groups == shape[1] else CONV
    _check(_module([shape], lambda bb, x: _conv(bb, x, **kwargs)), [shape], rule)


def test_conv_chain_with_pool_and_concat_stays_nhwc():
    """Two convolutions, a pool and a concatenation: one transpose in, one out, all NHWC between."""
    shape = (1, 16, 12, 12)

    def body(bb, x):
        a = _conv(bb, x, 16, 3)
        b = _conv(bb, x, 8, 1, pad=(0, 0, 0, 0))
        y = bb.emit(relax.op.concat([a, b], axis=1))
        y = bb.emit(relax.op.nn.max_pool2d(y, [3, 3], [2, 2], padding=[1, 1, 1, 1]))
        y = _conv(bb, y, 24, 3)
        return bb.emit(relax.op.nn.avg_pool2d(y, [2, 2], [2, 2]))

    mod = _module([shape], body)
    _check(mod, [shape], CONV)
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
        y = _conv(bb, x, 8, 3)
        y = bb.emit(relax.op.multiply(y, _const(8, 1, 1)))
        y = bb.emit(relax.op.add(y, _const(6)))
        y = bb.emit(relax.op.multiply(_const(1), y))  # a one-element constant first (PaddleOCR's scales)
        y = bb.emit(relax.op.subtract(s, y) if lower_rank_first else relax.op.subtract(y, s))
        y = bb.emit(relax.op.nn.max_pool2d(y, [2, 2], [2, 2]))
        return _conv(bb, y, 4, 3)

    mod = _module([shape, side], body)
    _check(mod, [shape, side], CONV)
    converted = to_nhwc(mod).script(show_meta=False).splitlines()
    transposes = [line for line in converted if "permute_dims(" in line and "metadata" not in line]
    feature_maps = [line for line in transposes if "permute_dims(x0," not in line and "(1, 1, 1, 8)" not in line]
    assert len(feature_maps) == 1 and feature_maps[0].strip().startswith("gv"), transposes
    # A lower-rank model input as the first operand keeps the op in NCHW (ConvertLayout follows the first
    # operand's layout), still with the right numbers.
    _check(_module([shape, side], lambda bb, x, s: body(bb, x, s, True)), [shape, side], CONV)


def test_quantized_round_trip_between_convolutions_stays_nhwc():
    """A convolution's output requantized to uint8 and dequantized for the next one (the runtime's
    quantize_expr, as a QDQ model's every layer does): the quantization moves to NHWC with the
    convolutions (a clip or a where with a scalar kept it in NCHW: two transposes of every feature map),
    and the numbers match TVM's unscheduled loops."""
    shape = (1, 8, 6, 6)
    uint8 = nna.OperandType(nna.Precision.QUANT_UINT8_ASYMM_PER_LAYER, [1, 8, 6, 6], scale=0.05, zero_point=128)

    def body(bb, x):
        q = bb.emit(quantize_expr(_conv(bb, x, 8, 3), uint8))
        y = bb.emit(relax.op.multiply(relax.op.subtract(relax.op.astype(q, "float32"), _const(1)), _const(1)))
        return _conv(bb, y, 4, 3)

    mod = _module([shape], body)
    _check(mod, [shape], CONV)
    converted = to_nhwc(mod).script(show_meta=False).splitlines()
    transposes = [line for line in converted if "permute_dims(" in line and "metadata" not in line]
    feature_maps = [line for line in transposes if "permute_dims(x0," not in line and "(1, 1, 1, " not in line]
    assert len(feature_maps) == 1 and feature_maps[0].strip().startswith("gv"), transposes


# Each case gives a concatenation's inputs; ``c(n)`` is the channel count of a convolution, n when the
# concatenation is over the channels, the model input's 16 when it is over the height.
CONCAT_CASES = {
    # Both inputs convolutions used only by the concatenation: each writes its slice, no copy kernel left.
    "two-convolutions": lambda bb, x, c: [_conv(bb, x, c(8), 3), _conv(bb, x, c(8), 1, pad=(0, 0, 0, 0))],
    # Odd channel counts, the producers computed in another order than they are concatenated.
    "three-reordered": lambda bb, x, c: (lambda last, mid, first: [first, mid, last])(
        _conv(bb, x, c(7), 3), _conv(bb, x, c(3), 1, pad=(0, 0, 0, 0)), _conv(bb, x, c(5), 3)
    ),
    # A pool is a producer too.
    "pool": lambda bb, x, c: [
        _conv(bb, x, c(8), 1, pad=(0, 0, 0, 0)),
        bb.emit(relax.op.nn.max_pool2d(_conv(bb, x, c(4), 3), [3, 3], [1, 1], padding=[1, 1, 1, 1])),
    ],
    # A model input (its transpose to NHWC fuses with the concatenation, which then stays a kernel).
    "model-input": lambda bb, x, c: [x, _conv(bb, x, c(8), 3)],
    # One producer read twice by the concatenation.
    "same-twice": lambda bb, x, c: [(a := _conv(bb, x, c(8), 3)), a],
    # Element-wise ops on the model input (they fuse with the concatenation).
    "element-wise": lambda bb, x, c: [
        bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, _const(1, 16, 1, 1))))),
        _conv(bb, x, c(4), 3),
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
        return _conv(bb, y, 8, 3) if then == "conv" else y

    mod = _module([shape], body)
    _check(mod, [shape], CONV)
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


def test_concatenation_of_a_tensor_used_elsewhere():
    """A concatenation's input that another op also reads is copied (densenet's running concatenation), and
    the in-place chain leaves that input intact for its other reader."""
    shape = (1, 8, 5, 5)

    def body(bb, x):
        a = _conv(bb, x, 8, 3)
        y = bb.emit(relax.op.concat([a, _conv(bb, x, 4, 1, pad=(0, 0, 0, 0))], axis=1))
        z = bb.emit(relax.op.concat([y, _conv(bb, y, 4, 3)], axis=1))
        return bb.emit(relax.op.add(bb.emit(relax.op.sum(z, axis=[1], keepdims=True)), a))

    _check(_module([shape], body), [shape], CONV)


def test_padded_groups_keep_their_epilogue_fused():
    """A grouped convolution padded to whole vectors a group (``targets/cpu/groups.py``): the per-channel
    ops after it (a computed scale, a bias, ReLU) run on the padded channels inside the convolution's
    kernel; a residual add of a whole tensor takes the compacted channels.  Same numbers as TVM's loops."""
    shape = (1, 68, 5, 6)

    def body(bb, x):
        y = _conv(bb, x, 68, 1, pad=(0, 0, 0, 0), groups=2)
        scale = bb.emit(relax.op.sqrt(bb.emit(relax.op.abs(_const(1, 68, 1, 1)))))  # folded at compile time
        y = bb.emit(relax.op.multiply(y, scale))
        y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, x))))
        return _conv(bb, y, 8, 1, pad=(0, 0, 0, 0))

    mod = _module([shape], body)
    _check(mod, [shape], CONV)
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
    mod = _module([shape], lambda bb, x: _conv(bb, x, 9, 3, groups=1))
    lowering = Lowering(TARGET, winograd=False)
    with TARGET:
        legal = relax.transform.LegalizeOps(customize_legalize_map=lowering.legalize_map())(mod)
    names = [gv.name_hint for gv in legal.functions]
    assert any(n.startswith(CONV) for n in names) and any("transpose" in n for n in names)
    inputs = [RNG.standard_normal(shape).astype("float32")]
    with TARGET, tvm.transform.PassContext(opt_level=3):
        want = _run(tvm.compile(mod, TARGET), inputs)
        got = _run(tvm.compile(legal, TARGET), inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_epilogue_with_an_independent_producer_matches_unscheduled():
    """Gemm with alpha and beta: y = (a @ b) * alpha + c * beta fuses c * beta, which does not consume the
    product, into the product's function; it must not be computed per tile (was a silent wrong result)."""

    def body(bb, a, c):
        y = bb.emit(relax.op.multiply(bb.emit(relax.op.matmul(a, _const(4, 5))), relax.const(0.25, "float32")))
        return bb.emit(relax.op.add(y, bb.emit(relax.op.multiply(c, relax.const(0.35, "float32")))))

    _check(_module([(3, 4), (1, 5)], body), [(3, 4), (1, 5)])


@pytest.mark.parametrize(
    "a_shape, n",
    [
        ((1, 17), 1000),
        ((3, 64), 10),
        ((5, 33), 48),
        ((2, 3, 5), 7),
        ((16, 20), 35),
        ((2, 77, 64), 96),
        ((5, 2, 4, 3), 6),
        ((5, 6, 2, 1), 5),
        ((2, 9, 4, 8), 8),
    ],
    ids=[
        "gemv-padded",
        "small-n",
        "rows",
        "batched",
        "tail",
        "batched-rows-not-dividing",
        "4d-tile-straddling-outer-batches",
        "4d-k1",
        "4d-gqa-attention",
    ],
)
def test_matmul_matches_unscheduled(a_shape, n):
    k = a_shape[-1]

    def body(bb, a):
        y = bb.emit(relax.op.matmul(a, _const(k, n)))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, _const(n)))))

    _check(_module([a_shape], body), [a_shape], DENSE)


@pytest.mark.parametrize(
    "op",
    ["add_relu", "softmax", "mean", "max_pool", "transpose", "compare"],
)
def test_generic_ops_match_unscheduled(op):
    shape = (2, 19, 7, 33)

    def body(bb, x):
        if op == "add_relu":
            return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, _const(1, 19, 1, 1)))))
        if op == "softmax":
            return bb.emit(relax.op.nn.softmax(x, axis=-1))
        if op == "mean":
            return bb.emit(relax.op.mean(x, axis=[2, 3]))
        if op == "max_pool":
            return bb.emit(relax.op.nn.max_pool2d(x, [3, 3], [2, 2], padding=[1, 1, 1, 1]))
        if op == "transpose":
            return bb.emit(relax.op.permute_dims(x, [0, 3, 2, 1]))
        mask = bb.emit(relax.op.not_equal(x, relax.const(0.5, "float32")))
        return bb.emit(relax.op.astype(mask, "float32"))

    _check(_module([shape], body), [shape])


@pytest.mark.parametrize("shape", [(3, 6625), (6625,)], ids=str)
@pytest.mark.parametrize("op", ["add_relu", "softmax", "log_softmax"])
def test_static_rows_without_a_vector_sized_divisor_are_vectorized(op, shape):
    """An innermost extent of 6625 (a recognizer's classes): whole vectors, then a scalar tail. TVM
    ignores a partition hint on a static loop (NarrowDataType renames its variable first), which left
    every vector guarded and scalarized; the schedule partitions the loop itself. Same results as TVM's
    unscheduled loops; a single row runs the whole vectors in parallel."""

    def body(bb, x):
        if op == "add_relu":
            return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, _const(6625)))))
        return bb.emit(getattr(relax.op.nn, op)(x, axis=-1))

    mod = _module([shape], body)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, _ = pipeline.prepare(mod, TARGET)
    functions = [f for _, f in prepared.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    text = "\n".join(f.script(show_meta=False) for f in functions)
    last = {"add_relu": "compute", "softmax": "softmax_norm", "log_softmax": "log_softmax_norm"}[op]
    # the last stage's whole vectors: a partition of its own, vectorized
    assert re.search(rf'in T\.vectorized\(T\.int64\(\d+\)\):\n\s+with T\.sblock\("{last}_\w+0"\)', text), text
    _check(mod, [shape])


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("rows, n", [((2, 3), 37), ((4,), 64), ((2, 5), 1500)], ids=str)
def test_softmax_runs_row_by_row_with_its_producers(rows, n, log):
    """A softmax along a static last axis, fused with the scale and the additive mask before it (attention's
    scores), computed row by row: one parallel loop over the rows with every stage under it, whole vectors
    of each row vectorized; the same results as TVM's unscheduled loops, also at a second batch of a
    symbolic build."""
    op = relax.op.nn.log_softmax if log else relax.op.nn.softmax
    mask = _const(n)

    def body(bb, x):
        scaled = bb.emit(relax.op.add(bb.emit(relax.op.multiply(x, relax.const(0.125, "float32"))), mask))
        return bb.emit(op(scaled, axis=-1))

    shape = (*rows, n)
    report = _check(_module([shape], body), [shape])
    assert "softmax-rows" in report.values(), report
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(_module([shape], body), TARGET)
    name = next(k for k, rule in report.items() if rule == "softmax-rows")
    text = prepared[name].script(show_meta=False)
    assert text.count("T.parallel(") == 1 and "T.vectorized(" in text, text
    if len(rows) > 1:
        sizes = [[(1, *rows[1:], n)], [(3, *rows[1:], n)]]
        _check_symbolic(body, list(sizes[0]), [(0,)], sizes, "softmax-rows")


def test_softmax_over_a_symbolic_last_axis_runs_row_by_row():
    """Attention's masked scores [B, heads, S, S] with S known only at execution (WHERE against -inf,
    then softmax): the row rule as for a static length (it once fell to one scalar reduction per row,
    exponentials computed twice: 105 of BERT-base's 258 ms), at lengths below, at and past a vector."""

    def body(bb, x):
        keep = bb.emit(relax.op.greater(x, relax.const(-1.5, "float32")))
        scaled = bb.emit(relax.op.multiply(x, relax.const(0.125, "float32")))
        masked = bb.emit(relax.op.where(keep, scaled, relax.const(-np.inf, "float32")))
        return bb.emit(relax.op.nn.softmax(masked, axis=-1))

    sizes = [[(1, 3, 5, 37)], [(2, 3, 5, 16)], [(1, 3, 5, 1)], [(1, 3, 5, 200)]]
    report = _check_symbolic(body, list(sizes[0]), [(0, 3)], sizes, "softmax-rows")
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(_symbolic_module(sizes[0], [(0, 3)], body), TARGET)
    name = next(k for k, rule in report.items() if rule == "softmax-rows")
    text = prepared[name].script(show_meta=False)
    assert text.count("T.parallel(") == 1 and "T.vectorized(" in text, text


def _scheduled_function(mod: tvm.IRModule, prefix: str) -> str:
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(mod, TARGET, winograd=False)
    name = next(n for n in report if n.startswith(f"fused_{prefix}") or n.startswith(prefix))
    assert report[name] != "none", report
    return prepared[name].script(show_meta=False)


def test_conv_schedule_is_tiled_parallel_vectorized_with_the_epilogue_on_the_tile():
    shape = (1, 32, 14, 14)
    text = _scheduled_function(_module([shape], lambda bb, x: _conv(bb, x, 64, 3)), CONV)
    assert "T.parallel" in text and "T.vectorized" in text and "T.unroll" in text
    assert 'scope="local"' in text  # the accumulator tile
    # the packed weight [OC / ob, KH, KW, IC, ob] is a constant parameter of the kernel
    lanes = vector_lanes(TARGET)
    assert f"T.int64({2 * lanes})), " in text or f"T.int64({lanes})), " in text


def test_dense_and_elementwise_schedules_apply():
    text = _scheduled_function(_module([(4, 256)], lambda bb, a: bb.emit(relax.op.matmul(a, _const(256, 512)))), "nna")
    assert "T.parallel" in text and "T.vectorized" in text
    text = _scheduled_function(
        _module([(8, 64, 32)], lambda bb, x: bb.emit(relax.op.nn.relu(bb.emit(relax.op.multiply(x, x))))), "fused"
    )
    assert "T.parallel" in text and "T.vectorized" in text


AVX2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})  # 8 lanes, 16 registers: a 6-row tile budget
PADDED_ROW_CASES = {
    "conv 3x3 on 7x7": ([(1, 64, 7, 7)], lambda bb, x: _conv(bb, x, 64, 3)),
    "conv 3x3 on 14x14": ([(1, 32, 14, 14)], lambda bb, x: _conv(bb, x, 32, 3)),
    "dense over 197 rows": ([(197, 96)], lambda bb, a: bb.emit(relax.op.matmul(a, _const(96, 64)))),
    "batched dense over [2, 197] rows": ([(2, 197, 48)], lambda bb, a: bb.emit(relax.op.matmul(a, _const(48, 32)))),
    "attention P V over 197 rows": (
        [(1, 2, 197, 197), (1, 2, 197, 32)],
        lambda bb, p, v: bb.emit(relax.op.matmul(p, v)),
    ),
}


@pytest.mark.parametrize("target", [TARGET, AVX2], ids=["host", "avx2"])
@pytest.mark.parametrize("name", list(PADDED_ROW_CASES))
def test_rows_no_tile_divides_are_padded_to_whole_tiles(name, target):
    """Extents with no divisor within the register budget (prime 197; 7 and 14 with AVX2's 6 rows) run
    tiles of several rows over a padded, cropped extent instead of one-row tiles, and compute what TVM's
    unscheduled loops compute. The AVX2 build runs on any x86-64 CPU with AVX2 (this is how its tiles are
    checked on an AVX-512 machine)."""
    if target is AVX2 and not tvm.target.codegen.target_has_features("avx2", TARGET):
        pytest.skip("the host CPU cannot run AVX2 code")
    shapes, body = PADDED_ROW_CASES[name]
    mod = _module(shapes, body)
    inputs = [RNG.standard_normal(s).astype("float32") for s in shapes]
    with TARGET, tvm.transform.PassContext(opt_level=3):
        want = _run(tvm.compile(mod, TARGET), inputs)
    executable, report = pipeline.build(mod, target, winograd=False)
    np.testing.assert_allclose(_run(executable, inputs), want, rtol=1e-4, atol=1e-4)
    with target, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(mod, target, winograd=False)
    tiled = [n for n, rule in report.items() if rule in (CONV, DENSE)]
    assert tiled, report
    for kernel in tiled:
        unrolled = [int(n) for n in re.findall(r"T\.unroll\(T\.int64\((\d+)\)\)", prepared[kernel].script())]
        assert unrolled and max(unrolled) >= 4, (kernel, unrolled)


def test_failing_rule_leaves_the_function_unscheduled(monkeypatch, caplog):
    """A rule that raises is reported as a WARNING naming the rule and the kernel, the next rule is tried,
    and with every rule failing the kernel keeps its unscheduled loops (same numbers)."""

    def broken(*args, **kwargs):
        raise RuntimeError("rule bug")

    monkeypatch.setattr(next(r for r in schedule.RULES if r.name == CONV), "schedule", broken)
    monkeypatch.setattr(schedule, "schedule_generic", broken)
    shape = (1, 8, 6, 6)
    with caplog.at_level(logging.WARNING, logger="nnadapter_tvm"):
        report = _check(_module([shape], lambda bb, x: _conv(bb, x, 16, 3)), [shape])
    assert set(report.values()) == {"none"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    conv_kernel = next(name for name in report if "conv" in name)
    assert any(f"rule {CONV} failed on kernel {conv_kernel}: rule bug" in m for m in warnings), warnings
    for kernel in report:
        assert any(f"rule generic failed on kernel {kernel}: rule bug" in m for m in warnings), (kernel, warnings)


def test_a_main_block_rule_takes_its_own_block_only():
    """The int8 convolution's block name extends the float one's; each rule applies to its own (the float
    rule used to be tried on int8 kernels and fail), fusion's numbered copies included."""
    x = te.placeholder((4, 8), "int32", name="x")
    for name, rule in [(INT8_CONV, INT8_CONV), (CONV, CONV), (CONV + "_1", CONV), (DENSE + "_2_1", DENSE)]:
        y = te.compute((4, 8), lambda i, j: x[i, j] + 1, name=name)
        kernel = schedule.Kernel(te.create_prim_func([x, y]))
        applying = [r.name for r in schedule.RULES if r.applies(kernel)]
        assert applying == [rule, "generic"], (name, applying)


def test_vector_width_follows_the_target():
    avx512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
    neon = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]})
    assert vector_lanes(avx512) == 16
    assert vector_lanes(avx2) == 8
    assert vector_lanes(neon) == 4
    assert vector_registers(neon) == 32 and vector_registers(avx2) == 16


def _builtin(properties: str, batch: int) -> np.ndarray:
    context = nna.Context([nna.Device.acquire("llvm")], properties)
    compilation = nna.Compilation(builtin_model.build(), context)
    compilation.finish()
    execution = nna.Execution(compilation)
    outputs = execution.use_arrays([builtin_model.sample_input(batch)])
    execution.compute()
    return outputs[0]


def test_builtin_model_same_with_and_without_schedules():
    """Through the public API, with the unknown batch of the built-in model."""
    on = _builtin("", 3)
    off = _builtin("CPU_SCHEDULES=0;", 3)
    np.testing.assert_allclose(on, off, rtol=1e-4, atol=1e-5)


def test_cpu_schedules_property_enters_the_token_and_is_checked():
    on = nna.Context([nna.Device.acquire("llvm")], "CPU_SCHEDULES=1;").codegen_properties()
    off = nna.Context([nna.Device.acquire("llvm")], "CPU_SCHEDULES=0;").codegen_properties()
    assert on["CPU_SCHEDULES"] is True and off["CPU_SCHEDULES"] is False
    assert nna.Context([nna.Device.acquire("arm")], "CPU_SCHEDULES=off;").properties["CPU_SCHEDULES"] is False
    with pytest.raises(nna.NNAdapterError, match="CPU_SCHEDULES"):
        nna.Context([nna.Device.acquire("llvm")], "CPU_SCHEDULES=maybe;")


def test_llvm_target_uses_the_host_cpu():
    target = LlvmDriver().tvm_target({})
    if llvm_target.host_cpu():
        assert str(target.attrs["mcpu"]) == llvm_target.host_cpu()
    assert str(LlvmDriver().tvm_target({"LLVM_MCPU": "haswell"}).attrs["mcpu"]) == "haswell"


# -- symbolic shapes: one compilation, several fed sizes --------------------------------------------


def _symbolic_module(shapes: list[tuple], symbolic: list[tuple[int, ...]], body) -> tvm.IRModule:
    """``_module`` with the listed axes of each input symbolic; an axis index names one variable shared by
    every input that lists it (two inputs with a symbolic axis 0 share one batch)."""
    names: dict[int, tvm.tirx.Var] = {}
    dims = [
        [names.setdefault(i, tvm.tirx.Var(f"n{i}", "int64")) if i in axes else d for i, d in enumerate(shape)]
        for shape, axes in zip(shapes, symbolic)
    ]
    return _module(dims, body)


def _check_symbolic(body, shapes: list[tuple], symbolic: list[tuple[int, ...]], sizes: list[list[tuple]], rule: str):
    """The module compiled once with symbolic axes gives, at each fed size, what TVM's unscheduled build of
    the static module gives; every kernel is scheduled (none left to the naive fallback), ``rule`` among them."""
    executable, report = pipeline.build(_symbolic_module(shapes, symbolic, body), TARGET)
    assert "none" not in report.values(), report
    assert rule in report.values(), report
    vm = relax.VirtualMachine(executable, tvm.cpu())
    for fed in sizes:
        inputs = [RNG.standard_normal(s).astype("float32") for s in fed]
        with TARGET, tvm.transform.PassContext(opt_level=3):
            want = _run(tvm.compile(_module(fed, body), TARGET), inputs)
        got = vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()
        # F(4x4, 3x3) rounds to a few 1e-6 of the output's scale (test_cpu_winograd); the others to 1e-7.
        atol = max(1e-4, 2e-5 * float(np.abs(want).max())) if rule == WINOGRAD else 1e-4
        np.testing.assert_allclose(got, want, rtol=1e-4 if rule != WINOGRAD else 0, atol=atol, err_msg=str(fed))
    return report


def _fixed_conv(oc, k, stride=1, pad=1, groups=1):
    """A convolution + bias + ReLU whose weights do not change between builds (one seed per layer)."""

    def body(bb, x):
        c = int(x.ty.shape.values[1].value)
        rng = np.random.default_rng(oc * 100 + k * 10 + groups)
        w = relax.const(rng.standard_normal((oc, c // groups, k, k)).astype("float32"))
        y = bb.emit(
            relax.op.nn.conv2d(x, w, strides=stride, padding=[pad] * 4 if isinstance(pad, int) else pad, groups=groups)
        )
        y = bb.emit(relax.op.add(y, relax.const(rng.standard_normal((1, oc, 1, 1)).astype("float32"))))
        return bb.emit(relax.op.nn.relu(y))

    return body


SYMBOLIC_CONV_CASES = {
    # name: (input channels, conv arguments, the rule); fed at widths that are and are not multiples of
    # the symbolic tile, and at width 1 (every column a clamped read past the end of its tile)
    "3x3": (16, dict(oc=32, k=3), CONV),
    "3x3-wide": (64, dict(oc=64, k=3), CONV),  # a padding stage of several vectors a pixel
    "1x1": (8, dict(oc=24, k=1, pad=0), CONV),
    "stride2-asymmetric-pad": (8, dict(oc=16, k=3, stride=2, pad=(0, 1, 1, 2)), CONV),
    "grouped": (12, dict(oc=24, k=3, groups=3), CONV),
    "grouped-padded": (68, dict(oc=68, k=1, groups=2, pad=0), CONV),
    "depthwise": (16, dict(oc=16, k=3, groups=16), DEPTHWISE),
    "depthwise-stride2": (16, dict(oc=16, k=3, stride=2, groups=16), DEPTHWISE),
}


@pytest.mark.parametrize("axes", [(0, 2, 3), (3,), (2,), (0,)], ids=["nhw", "w", "h", "n"])
@pytest.mark.parametrize("name", list(SYMBOLIC_CONV_CASES))
def test_symbolic_batch_height_width_conv(name, axes):
    """Batch, height and width unknown, or one of them alone (a text line's width: with the width alone
    unknown, every kernel fell back to naive loops, 90x slower, until the parallel loops stopped fusing
    static loops inside a symbolic one)."""
    c, kwargs, rule = SYMBOLIC_CONV_CASES[name]
    if name == "3x3-wide" and axes == (0, 2, 3):
        rule = WINOGRAD  # 64 x 64 channels at an unknown (typical) size: winograd.applies
    sizes = [[(1, c, 9, 9)], [(2, c, 5, 16)], [(1, c, 3, 1)]]
    sizes = [[tuple(d if i in axes else sizes[0][0][i] for i, d in enumerate(fed[0]))] for fed in sizes]
    _check_symbolic(_fixed_conv(**kwargs), [sizes[0][0]], [axes], sizes, rule)


def _fixed(*shape: int) -> relax.Constant:
    return relax.const(np.random.default_rng(sum(shape)).standard_normal(shape).astype("float32"))


@pytest.mark.parametrize(
    "shape, symbolic, sizes",
    [
        ((3, 32), (0,), [(1, 32), (5, 32)]),
        ((2, 9, 32), (0, 1), [(2, 9, 32), (1, 1, 32), (3, 16, 32)]),
        ((2, 9, 32), (1,), [(2, 1, 32), (2, 20, 32)]),
        ((9, 1, 32), (0,), [(9, 1, 32), (1, 1, 32), (20, 1, 32)]),
    ],
    ids=["batch", "batch-and-sequence", "sequence", "steps-of-batch-1"],
)
def test_symbolic_rows_dense(shape, symbolic, sizes):
    """[B, T, K] x [K, N] with B and/or T unknown: the packed dense rule, rows padded to whole tiles."""

    def body(bb, a):
        y = bb.emit(relax.op.matmul(a, _fixed(32, 40)))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, _fixed(40)))))

    _check_symbolic(body, [shape], [symbolic], [[s] for s in sizes], DENSE)


def test_symbolic_steps_of_batch_1_tile_the_steps():
    """[T, 1, K] rows (an ONNX LSTM's input projection over T steps of batch 1): the register tile runs
    along T, padded to whole tiles, not along the axis of 1 (a tile of one row: 3x slower)."""
    mod = _symbolic_module([(9, 1, 32)], [(0,)], lambda bb, a: bb.emit(relax.op.matmul(a, _fixed(32, 40))))
    text = _scheduled_function(mod, DENSE)
    tiles = [int(e) for e in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", text)]
    assert tiles and max(tiles) > 1, text


def test_symbolic_conv_keeps_batch_and_rows_parallel():
    """Batch and rows of a convolution after a strided one, N, H, W unknown: the rows' extent
    ((h - 1) // 2 + 1 - 1) // 2 + 1 is one TVM cannot sign (h is no buffer's dim there), but with no static
    loop before them to run in parallel instead, batch x rows stay one parallel loop in every convolution
    (PP-OCR's detector ran 1.5x slower with the batch alone parallel)."""

    def body(bb, x):
        return _fixed_conv(oc=16, k=3, stride=2)(bb, _fixed_conv(oc=8, k=3, stride=2)(bb, x))

    mod = _symbolic_module([(1, 8, 9, 9)], [(0, 2, 3)], body)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(mod, TARGET)
    convs = [name for name, rule in report.items() if rule == CONV]
    assert len(convs) == 2, report
    for name in convs:
        parallel = re.findall(r"in T\.parallel\((.*)\):", prepared[name].script(show_meta=False))
        assert any("n0" in p and "n2" in p for p in parallel), (name, parallel)


def _dense_over_strided_rows(k: int, n: int, stride: int) -> tuple[tvm.IRModule, relax.Constant, relax.Constant]:
    """x [(w - 1) // stride + 1, k] x [k, n] + bias, with w given as a shape argument: rows that are an
    expression of a symbolic width (a recognizer's time steps after its strided convolutions)."""
    w = tvm.tirx.Var("w", "int64")
    weight, bias = _fixed(k, n), _fixed(n)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([(w - 1) // stride + 1, k], "float32"))
    width = relax.Var("width", relax.ShapeType([w]))
    with bb.function("main", [x, width]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, weight)), bias))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.finalize(), weight, bias


def test_rows_of_an_unsigned_expression_stay_out_of_the_parallel_loop():
    """Rows (w - 1) // 8 + 1: TVM cannot prove the count of row tiles non-negative (it knows nothing of
    w), so a parallel loop fused over column blocks x row tiles kept a truncated division and max(0, ..)
    in each offset of the register tile, which LLVM then kept in memory (2.4x slower).  With enough
    column blocks to keep the threads busy, the parallel loop is those alone; the results at several
    widths match numpy."""
    mod, weight, bias = _dense_over_strided_rows(64, 1280, 8)
    text = _scheduled_function(mod, DENSE)
    parallel = re.findall(r"in T\.parallel\((.*)\):", text)
    assert parallel and all(re.fullmatch(r"T\.int64\(\d+\)", p) for p in parallel), parallel
    executable, _ = pipeline.build(mod, TARGET)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    for width in (1, 8, 9, 70, 257):
        x = RNG.standard_normal(((width - 1) // 8 + 1, 64)).astype("float32")
        got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.ShapeTuple([width])).numpy()
        want = x.astype("float64") @ weight.value.numpy() + bias.value.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"w = {width}")


def test_symbolic_attention_products_and_softmax():
    """Q K^T and P V of two run-time tensors with an unknown batch and sequence length."""

    def body(bb, q, k):
        scores = bb.emit(relax.op.matmul(q, bb.emit(relax.op.permute_dims(k, [0, 2, 1]))))
        weights = bb.emit(relax.op.nn.softmax(bb.emit(relax.op.multiply(scores, relax.const(0.25, "float32")))))
        return bb.emit(relax.op.matmul(weights, k))

    sizes = [[(1, 7, 16), (1, 7, 16)], [(2, 19, 16), (2, 19, 16)], [(1, 1, 16), (1, 1, 16)]]
    report = _check_symbolic(body, list(sizes[0]), [(0, 1), (0, 1)], sizes, DENSE)
    assert sum(rule == DENSE for rule in report.values()) >= 2, report


def test_decode_step_products_over_an_unknown_batch():
    """A decoding step's Q K^T and P V: one query row, batch and keys unknown ([B, 1, 16] x [B, 16, T]).
    A product packed per batch keeps its tile along the matrix's rows (here the 1), not across batches."""

    def body(bb, q, k):
        scores = bb.emit(relax.op.matmul(q, bb.emit(relax.op.permute_dims(k, [0, 2, 1]))))
        return bb.emit(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores)), k))

    sizes = [[(2, 1, 16), (2, 7, 16)], [(1, 1, 16), (1, 19, 16)], [(3, 1, 16), (3, 1, 16)]]
    _check_symbolic(body, list(sizes[0]), [(0,), (0, 1)], sizes, DENSE)


def test_attention_over_heads_tiles_the_packed_operand_columns():
    """[B, heads, S, D] attention as transformers' exports write it (two batch axes, B unknown): the
    register tile of Q K^T and P V is as wide as the packed right operand's block (at most two vectors),
    not the left operand's last axis (P's S, which made a 1500-wide "tile" of a 64-column product:
    Whisper's encoder ran at 0.3 GFLOP/s)."""

    def body(bb, q, k):
        scores = bb.emit(relax.op.matmul(q, bb.emit(relax.op.permute_dims(k, [0, 1, 3, 2]))))
        return bb.emit(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores)), k))

    sizes = [[(2, 3, 40, 16), (2, 3, 40, 16)], [(1, 3, 40, 16), (1, 3, 40, 16)]]
    _check_symbolic(body, list(sizes[0]), [(0,), (0,)], sizes, DENSE)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(_symbolic_module(sizes[0], [(0,), (0,)], body), TARGET)
    widths = []
    for name in (n for n, rule in report.items() if rule == DENSE):
        text = prepared[name].script(show_meta=False)
        widths += [int(w) for w in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", text)]
        assert re.search(r"T\.parallel\(\w+ \* T\.int64\((\d+)\)\)", text), text  # batch and heads fused
    lanes = vector_lanes(TARGET)
    assert widths and max(widths) <= 2 * lanes, (widths, report)


def test_static_rows_ending_in_1_tile_the_rows_before():
    """[2, 77, 1, 64] x [64, 96]: rows whose tile would straddle batches are not fused, and the tile runs
    along the 77, not the 1; the same results as TVM's unscheduled loops."""
    shape = (2, 77, 1, 64)
    _check(_module([shape], lambda bb, a: bb.emit(relax.op.matmul(a, _const(64, 96)))), [shape], DENSE)


@pytest.mark.parametrize(
    "reduce, shape, symbolic",
    [
        ("max", (128, 768), ()),  # every element, in parallel chunks
        ("min", (128, 768), (0,)),  # every element, rows unknown (DynamicQuantizeLinear's range)
        ("sum", (3, 37), ()),  # each row: whole vectors and a tail
        ("max", (5, 37), (0, 1)),  # each row of a length known only at execution
        ("sum", (2, 3, 40), (2,)),
        ("max", (2, 5, 48), (0, 1)),  # [B, S, 768]: the static axis in lanes, the symbolic ones outside
    ],
    ids=str,
)
def test_reductions_along_the_contiguous_axis_run_in_lanes(reduce, shape, symbolic):
    """A reduction over the last axes (of every element, or of each row) is reduced per lane (a vector of
    partial results) and then over the lanes: vectorized, the same results as TVM's unscheduled loops,
    also at other sizes of a symbolic build."""
    axis = None if reduce != "sum" else [-1]
    op = {"max": relax.op.max, "min": relax.op.min, "sum": relax.op.sum}[reduce]

    def body(bb, x):
        return bb.emit(op(x, axis=axis))

    mod = _symbolic_module([shape], [symbolic], body) if symbolic else _module([shape], body)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(mod, TARGET)
    (name,) = report
    assert "T.vectorized(" in prepared[name].script(show_meta=False), prepared[name].script(show_meta=False)
    if not symbolic:
        _check(mod, [shape], "generic")
        return
    other = tuple(d + 3 if i in symbolic else d for i, d in enumerate(shape))
    _check_symbolic(
        body,
        [shape],
        [symbolic],
        [[shape], [other], [tuple(1 if i in symbolic else d for i, d in enumerate(shape))]],
        "generic",
    )


def test_copies_of_a_scalar_take_the_generic_rule(caplog):
    """A copy that reads a rank-0 tensor (GATHER's index check of a scalar index, a FILL of a computed
    value) is scheduled by the generic rule: the transpose tiling looked at its read's last index, which
    a scalar read has none of, and the rule failed (the kernel ran as TVM's loops)."""
    a = te.placeholder((), "int64", name="a")
    copied = te.compute((1,), lambda _: a[()], name="copied")
    out = te.compute((1,), lambda _: copied[0], name="out")
    with caplog.at_level(logging.WARNING, logger="nnadapter_tvm"), TARGET:
        _, rule = schedule.schedule_prim_func(te.create_prim_func([a, out]), TARGET)
    assert rule == "generic" and not caplog.records, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("shape, axes", [((128, 768), [0, 1]), ((5, 37), [1])], ids=str)
def test_a_reducer_tvm_cannot_factor_keeps_the_generic_rule(shape, axes, caplog):
    """REDUCE_MAX of floats keeps NaN (a select TVM's rfactor does not recognise): its contiguous-axis
    reduction is not split into lanes but still scheduled by the generic rule, without a warning, and
    keeps the NaN where one is reduced (it failed the rule and ran as TVM's naive loops)."""
    x = te.placeholder(shape, "float32", name="x")
    func = te.create_prim_func([x, reduce_converters._float_max(x, axes, False)])
    with caplog.at_level(logging.WARNING, logger="nnadapter_tvm"), TARGET:
        scheduled, rule = schedule.schedule_prim_func(func, TARGET)
    assert rule == "generic" and not caplog.records, [r.getMessage() for r in caplog.records]
    data = RNG.standard_normal(shape).astype("float32")
    data[tuple(d // 2 for d in shape)] = np.nan
    out = np.empty(() if len(axes) == len(shape) else shape[0], "float32")
    built = tvm.compile(tvm.IRModule({"main": scheduled}), TARGET)
    got = tvm.runtime.tensor(out)
    built["main"](tvm.runtime.tensor(data), got)
    np.testing.assert_array_equal(got.numpy(), np.max(data, axis=tuple(axes)))


@pytest.mark.parametrize(
    "op",
    ["max_pool", "avg_pool", "global_mean", "softmax", "transpose", "concat", "pad", "broadcast_add", "conv_transpose"],
)
def test_symbolic_generic_ops(op):
    """Pools, reductions, softmax (by its row rule), injective kernels and TVM's own conv2d_transpose (a
    reduction whose contiguous axis, the width, is symbolic) on NCHW inputs with N, H, W unknown."""
    shape = (1, 19, 9, 11)

    def body(bb, x):
        if op == "max_pool":
            return bb.emit(relax.op.nn.max_pool2d(x, [3, 3], [2, 2], padding=[1, 1, 1, 1]))
        if op == "avg_pool":
            return bb.emit(relax.op.nn.avg_pool2d(x, [2, 2], [2, 2]))
        if op == "global_mean":
            return bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True))
        if op == "softmax":
            return bb.emit(relax.op.nn.softmax(x, axis=-1))
        if op == "transpose":
            return bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
        if op == "concat":
            return bb.emit(relax.op.concat([x, bb.emit(relax.op.nn.relu(x))], axis=1))
        if op == "pad":
            return bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 1, 2, 3, 0]))
        if op == "conv_transpose":
            return bb.emit(relax.op.nn.conv2d_transpose(x, _fixed(19, 4, 2, 2), strides=2))
        return bb.emit(relax.op.add(x, _fixed(1, 19, 1, 1)))

    sizes = [[shape], [(2, 19, 4, 33)], [(1, 19, 1, 1)]]
    _check_symbolic(body, [shape], [(0, 2, 3)], sizes, "softmax-rows" if op == "softmax" else "generic")


def test_symbolic_conv_network_stays_nhwc_and_scheduled():
    """A conv -> pool -> conv -> global pool -> dense chain with N, H, W unknown: every kernel scheduled by
    its rule (convolutions by the conv rule, the classifier by the dense rule), results as the static build."""

    def body(bb, x):
        y = _fixed_conv(16, 3, stride=2)(bb, x)
        y = bb.emit(relax.op.nn.max_pool2d(y, [3, 3], [2, 2], padding=[1, 1, 1, 1]))
        y = _fixed_conv(24, 3)(bb, y)
        y = bb.emit(relax.op.mean(y, axis=[2, 3]))
        return bb.emit(relax.op.nn.softmax(bb.emit(relax.op.matmul(y, _fixed(24, 10)))))

    sizes = [[(1, 3, 20, 20)], [(3, 3, 33, 17)]]
    report = _check_symbolic(body, [sizes[0][0]], [(0, 2, 3)], sizes, CONV)
    assert DENSE in report.values(), report
    assert sum(rule == CONV for rule in report.values()) == 2, report


def _conv_model(hw: int) -> nna.Model:
    from nnadapter_tvm.types import AutoPad, FuseCode, OperandType
    from nnadapter_tvm.types import OperationType as O
    from nnadapter_tvm.types import Precision as P

    rng = np.random.default_rng(5)
    model = nna.Model()

    def const(value, precision=P.FLOAT32):
        operand = model.add_operand(OperandType(precision, list(value.shape)))
        model.set_operand_value(operand, value)
        return operand

    def i32(*values):
        return const(np.asarray(values, "int32"), P.INT32)

    x = model.add_operand(OperandType(P.FLOAT32, [nna.UNKNOWN, 8, hw, hw]))
    y = model.add_operand(OperandType(P.FLOAT32, [nna.UNKNOWN, 16, hw, hw]))
    w = const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
    b = const(rng.standard_normal(16).astype("float32"))
    args = [x, w, b, i32(AutoPad.NONE), i32(1, 1, 1, 1), i32(1, 1), i32(1), i32(1, 1), i32(FuseCode.RELU)]
    model.add_operation(O.CONV_2D, args, [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def test_unknown_dims_through_the_model_api(caplog):
    """CONV_2D with N, H, W = UNKNOWN: compiled once, run at two sizes, same as numpy; the driver logs the
    rule of each kernel and none is the naive fallback."""
    import logging

    from oputil import conv2d_ref

    caplog.set_level(logging.DEBUG, logger="nnadapter_tvm")
    model = _conv_model(nna.UNKNOWN)
    compilation = nna.Compilation(model, nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    logged = [r.getMessage() for r in caplog.records if "schedules:" in r.getMessage()]
    assert logged and "'none'" not in logged[-1] and CONV in logged[-1], logged
    weights = [np.asarray(op.value()) for op in model.operations[0].inputs[1:3]]
    for shape in [(1, 8, 12, 12), (2, 8, 5, 9)]:
        x = RNG.standard_normal(shape).astype("float32")
        execution = nna.Execution(compilation)
        outputs = execution.use_arrays([x])
        execution.compute()
        want = np.maximum(conv2d_ref(x, *weights, (1, 1, 1, 1), (1, 1), (1, 1), 1), 0)
        np.testing.assert_allclose(outputs[0], want, rtol=1e-4, atol=1e-4)


# -- select-shaped kernels over a symbolic axis ----------------------------------------------------
# A kernel whose value switches between inputs (or a pad value) by comparing the symbolic axis' index
# with a size (concat, pad) gives TVM's LoopPartition a second condition beside the guard of the
# whole-vector split; where the switch falls inside the last, partial vector it emitted a tail loop
# that overlapped the first one and read the second input at negative indices (found by the ONNX fuzzer:
# tests/fuzz_corpus_onnx/fixed-Concat-symbolic-dim-cpu-schedules-reads-garbage.json).  Sizes 1..40 put
# the switch in every lane of three vectors for 4-, 8- and 16-lane targets.

SELECT_SIZES = range(1, 41)


def _select_module(dims: list[list], body) -> tvm.IRModule:
    """``body`` over float32 inputs of ``dims`` (ints, or the symbolic size ``n``)."""
    return _module(dims, body)


def _concat(axis: int):
    return lambda bb, *xs: bb.emit(relax.op.concat(list(xs), axis=axis))


N = tvm.tirx.Var("n", "int64")

SELECT_CASES = {
    # name: (input dims with N symbolic, relax body, numpy reference)
    "concat-axis0": ([[N], [3]], _concat(0), lambda a, b: np.concatenate([a, b])),
    "concat-axis0-symbolic-second": ([[5], [N]], _concat(0), lambda a, b: np.concatenate([a, b])),
    "concat-axis0-three": ([[N], [3], [N]], _concat(0), lambda *xs: np.concatenate(xs)),
    "concat-axis1": ([[2, N], [2, 5]], _concat(1), lambda a, b: np.concatenate([a, b], 1)),
    "concat-axis1-three": ([[2, N], [2, 3], [2, N]], _concat(1), lambda *xs: np.concatenate(xs, 1)),
    "concat-axis1-symbolic-rows": ([[N, 3], [N, 21]], _concat(1), lambda a, b: np.concatenate([a, b], 1)),
    "concat-axis3-nchw": (
        [[1, 2, 3, N], [1, 2, 3, 7]],
        _concat(3),
        lambda a, b: np.concatenate([a, b], 3),
    ),
    "pad-last-axis": (
        [[2, N]],
        lambda bb, x: bb.emit(relax.op.nn.pad(x, [0, 0, 3, 2], pad_value=1.5)),
        lambda a: np.pad(a, [(0, 0), (3, 2)], constant_values=1.5),
    ),
    "pad-then-relu": (
        [[3, N]],
        lambda bb, x: bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.pad(x, [0, 0, 17, 1], pad_value=-2.0)))),
        lambda a: np.maximum(np.pad(a, [(0, 0), (17, 1)], constant_values=-2.0), 0),
    ),
    "where": (
        [[2, N], [2, N]],
        lambda bb, x, y: bb.emit(relax.op.where(bb.emit(relax.op.greater(x, y)), x, bb.emit(relax.op.negative(y)))),
        lambda a, b: np.where(a > b, a, -b),
    ),
    "max-pool-width": (
        [[1, 2, 3, N]],
        lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, [1, 3], [1, 1], padding=[0, 1, 0, 1])),
        lambda a: np.max(
            np.stack(
                [np.pad(a, [(0, 0)] * 3 + [(1, 1)], constant_values=-np.inf)[..., i : i + a.shape[3]] for i in range(3)]
            ),
            0,
        ),
    ),
}


@pytest.mark.parametrize("name", list(SELECT_CASES))
def test_select_kernels_over_a_symbolic_axis_match_numpy(name):
    """Compiled once with the axis N symbolic, each kernel gives numpy's result bit for bit at every N in
    1..40 (data copies only: no rounding)."""
    dims, body, reference = SELECT_CASES[name]
    executable, report = pipeline.build(_select_module(dims, body), TARGET)
    assert "none" not in report.values(), report
    vm = relax.VirtualMachine(executable, tvm.cpu())
    for n in SELECT_SIZES:
        inputs = [RNG.standard_normal([n if d is N else d for d in shape]).astype("float32") for shape in dims]
        got = vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()
        np.testing.assert_array_equal(got, reference(*inputs), err_msg=f"{name} at n = {n}")
