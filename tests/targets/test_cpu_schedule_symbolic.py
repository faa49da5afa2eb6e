"""The default CPU schedules (the targets/cpu/ package) with symbolic shapes: each kind of kernel
compiled once with symbolic dims and run at several sizes against TVM's unscheduled static build
(convolutions, products with a symbolic batch or sequence, attention, reductions in lanes, pools,
softmax, injective kernels, a whole network, UNKNOWN dims through the Model API), every kernel
scheduled by its rule; and select-shaped kernels over a symbolic axis against numpy at every size."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tvm
from schedutil import (
    RNG,
    TARGET,
    check,
    check_symbolic,
    const,
    fixed,
    fixed_conv,
    module,
    scheduled_function,
    symbolic_module,
)
from tvm import relax, te

import nnadapter_tvm as nna
from nnadapter_tvm.op_converters import reduce as reduce_converters
from nnadapter_tvm.targets.cpu import pipeline, schedule
from nnadapter_tvm.targets.cpu.compute import CONV, DENSE, DEPTHWISE
from nnadapter_tvm.targets.cpu.simd import vector_lanes
from nnadapter_tvm.targets.cpu.winograd import WINOGRAD

# -- symbolic shapes: one compilation, several fed sizes --------------------------------------------


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
    check_symbolic(fixed_conv(**kwargs), [sizes[0][0]], [axes], sizes, rule)


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
        y = bb.emit(relax.op.matmul(a, fixed(32, 40)))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, fixed(40)))))

    check_symbolic(body, [shape], [symbolic], [[s] for s in sizes], DENSE)


def test_symbolic_steps_of_batch_1_tile_the_steps():
    """[T, 1, K] rows (an ONNX LSTM's input projection over T steps of batch 1): the register tile runs
    along T, padded to whole tiles, not along the axis of 1 (a tile of one row: 3x slower)."""
    mod = symbolic_module([(9, 1, 32)], [(0,)], lambda bb, a: bb.emit(relax.op.matmul(a, fixed(32, 40))))
    text = scheduled_function(mod, DENSE)
    tiles = [int(e) for e in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", text)]
    assert tiles and max(tiles) > 1, text


def test_symbolic_conv_keeps_batch_and_rows_parallel():
    """Batch and rows of a convolution after a strided one, N, H, W unknown: the rows' extent
    ((h - 1) // 2 + 1 - 1) // 2 + 1 is one TVM cannot sign (h is no buffer's dim there), but with no static
    loop before them to run in parallel instead, batch x rows stay one parallel loop in every convolution
    (PP-OCR's detector ran 1.5x slower with the batch alone parallel)."""

    def body(bb, x):
        return fixed_conv(oc=16, k=3, stride=2)(bb, fixed_conv(oc=8, k=3, stride=2)(bb, x))

    mod = symbolic_module([(1, 8, 9, 9)], [(0, 2, 3)], body)
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
    weight, bias = fixed(k, n), fixed(n)
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
    text = scheduled_function(mod, DENSE)
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
    report = check_symbolic(body, list(sizes[0]), [(0, 1), (0, 1)], sizes, DENSE)
    assert sum(rule == DENSE for rule in report.values()) >= 2, report


def test_decode_step_products_over_an_unknown_batch():
    """A decoding step's Q K^T and P V: one query row, batch and keys unknown ([B, 1, 16] x [B, 16, T]).
    A product packed per batch keeps its tile along the matrix's rows (here the 1), not across batches."""

    def body(bb, q, k):
        scores = bb.emit(relax.op.matmul(q, bb.emit(relax.op.permute_dims(k, [0, 2, 1]))))
        return bb.emit(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores)), k))

    sizes = [[(2, 1, 16), (2, 7, 16)], [(1, 1, 16), (1, 19, 16)], [(3, 1, 16), (3, 1, 16)]]
    check_symbolic(body, list(sizes[0]), [(0,), (0, 1)], sizes, DENSE)


def test_attention_over_heads_tiles_the_packed_operand_columns():
    """[B, heads, S, D] attention as transformers' exports write it (two batch axes, B unknown): the
    register tile of Q K^T and P V is as wide as the packed right operand's block (at most two vectors),
    not the left operand's last axis (P's S, which made a 1500-wide "tile" of a 64-column product:
    Whisper's encoder ran at 0.3 GFLOP/s)."""

    def body(bb, q, k):
        scores = bb.emit(relax.op.matmul(q, bb.emit(relax.op.permute_dims(k, [0, 1, 3, 2]))))
        return bb.emit(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores)), k))

    sizes = [[(2, 3, 40, 16), (2, 3, 40, 16)], [(1, 3, 40, 16), (1, 3, 40, 16)]]
    check_symbolic(body, list(sizes[0]), [(0,), (0,)], sizes, DENSE)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(symbolic_module(sizes[0], [(0,), (0,)], body), TARGET)
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
    check(module([shape], lambda bb, a: bb.emit(relax.op.matmul(a, const(64, 96)))), [shape], DENSE)


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

    mod = symbolic_module([shape], [symbolic], body) if symbolic else module([shape], body)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(mod, TARGET)
    (name,) = report
    assert "T.vectorized(" in prepared[name].script(show_meta=False), prepared[name].script(show_meta=False)
    if not symbolic:
        check(mod, [shape], "generic")
        return
    other = tuple(d + 3 if i in symbolic else d for i, d in enumerate(shape))
    check_symbolic(
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
            return bb.emit(relax.op.nn.conv2d_transpose(x, fixed(19, 4, 2, 2), strides=2))
        return bb.emit(relax.op.add(x, fixed(1, 19, 1, 1)))

    sizes = [[shape], [(2, 19, 4, 33)], [(1, 19, 1, 1)]]
    check_symbolic(body, [shape], [(0, 2, 3)], sizes, "softmax-rows" if op == "softmax" else "generic")


def test_symbolic_conv_network_stays_nhwc_and_scheduled():
    """A conv -> pool -> conv -> global pool -> dense chain with N, H, W unknown: every kernel scheduled by
    its rule (convolutions by the conv rule, the classifier by the dense rule), results as the static build."""

    def body(bb, x):
        y = fixed_conv(16, 3, stride=2)(bb, x)
        y = bb.emit(relax.op.nn.max_pool2d(y, [3, 3], [2, 2], padding=[1, 1, 1, 1]))
        y = fixed_conv(24, 3)(bb, y)
        y = bb.emit(relax.op.mean(y, axis=[2, 3]))
        return bb.emit(relax.op.nn.softmax(bb.emit(relax.op.matmul(y, fixed(24, 10)))))

    sizes = [[(1, 3, 20, 20)], [(3, 3, 33, 17)]]
    report = check_symbolic(body, [sizes[0][0]], [(0, 2, 3)], sizes, CONV)
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
    return module(dims, body)


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
