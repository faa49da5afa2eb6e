"""The default CPU schedules (the targets/cpu/ package) on matrix products and the other kernels, and the
rules themselves: same numbers as TVM's unscheduled loops (batched and tail products, pools, softmax,
transposes, comparisons, rows without a vector-sized divisor), and the schedules really apply (parallel
and vectorized loops, packed weights, register tiles over padded rows, softmax row by row); a failing
rule leaves its kernel unscheduled, the vector width follows the target, CPU_SCHEDULES turns them off."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tvm
from schedutil import RNG, TARGET, check, check_symbolic, const, conv, module, run, scheduled_function, symbolic_module
from tvm import relax, te

import nnadapter_tvm as nna
from nnadapter_tvm.targets import llvm as llvm_target
from nnadapter_tvm.targets.cpu import pipeline, schedule
from nnadapter_tvm.targets.cpu.compute import CONV, DENSE
from nnadapter_tvm.targets.cpu.int8 import INT8_CONV
from nnadapter_tvm.targets.cpu.simd import vector_lanes, vector_registers
from nnadapter_tvm.targets.llvm import LlvmDriver
from nnadapter_tvm.tools import builtin_model


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
        y = bb.emit(relax.op.matmul(a, const(k, n)))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, const(n)))))

    check(module([a_shape], body), [a_shape], DENSE)


@pytest.mark.parametrize(
    "op",
    ["add_relu", "softmax", "mean", "max_pool", "transpose", "compare"],
)
def test_generic_ops_match_unscheduled(op):
    shape = (2, 19, 7, 33)

    def body(bb, x):
        if op == "add_relu":
            return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, const(1, 19, 1, 1)))))
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

    check(module([shape], body), [shape])


@pytest.mark.parametrize("shape", [(3, 6625), (6625,)], ids=str)
@pytest.mark.parametrize("op", ["add_relu", "softmax", "log_softmax"])
def test_static_rows_without_a_vector_sized_divisor_are_vectorized(op, shape):
    """An innermost extent of 6625 (a recognizer's classes): whole vectors, then a scalar tail. TVM
    ignores a partition hint on a static loop (NarrowDataType renames its variable first), which left
    every vector guarded and scalarized; the schedule partitions the loop itself. Same results as TVM's
    unscheduled loops; a single row runs the whole vectors in parallel."""

    def body(bb, x):
        if op == "add_relu":
            return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, const(6625)))))
        return bb.emit(getattr(relax.op.nn, op)(x, axis=-1))

    mod = module([shape], body)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, _ = pipeline.prepare(mod, TARGET)
    functions = [f for _, f in prepared.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    text = "\n".join(f.script(show_meta=False) for f in functions)
    last = {"add_relu": "compute", "softmax": "softmax_norm", "log_softmax": "log_softmax_norm"}[op]
    # the last stage's whole vectors: a partition of its own, vectorized
    assert re.search(rf'in T\.vectorized\(T\.int64\(\d+\)\):\n\s+with T\.sblock\("{last}_\w+0"\)', text), text
    check(mod, [shape])


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("rows, n", [((2, 3), 37), ((4,), 64), ((2, 5), 1500)], ids=str)
def test_softmax_runs_row_by_row_with_its_producers(rows, n, log):
    """A softmax along a static last axis, fused with the scale and the additive mask before it (attention's
    scores), computed row by row: one parallel loop over the rows with every stage under it, whole vectors
    of each row vectorized; the same results as TVM's unscheduled loops, also at a second batch of a
    symbolic build."""
    op = relax.op.nn.log_softmax if log else relax.op.nn.softmax
    mask = const(n)

    def body(bb, x):
        scaled = bb.emit(relax.op.add(bb.emit(relax.op.multiply(x, relax.const(0.125, "float32"))), mask))
        return bb.emit(op(scaled, axis=-1))

    shape = (*rows, n)
    report = check(module([shape], body), [shape])
    assert "softmax-rows" in report.values(), report
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(module([shape], body), TARGET)
    name = next(k for k, rule in report.items() if rule == "softmax-rows")
    text = prepared[name].script(show_meta=False)
    assert text.count("T.parallel(") == 1 and "T.vectorized(" in text, text
    if len(rows) > 1:
        sizes = [[(1, *rows[1:], n)], [(3, *rows[1:], n)]]
        check_symbolic(body, list(sizes[0]), [(0,)], sizes, "softmax-rows")


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
    report = check_symbolic(body, list(sizes[0]), [(0, 3)], sizes, "softmax-rows")
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(symbolic_module(sizes[0], [(0, 3)], body), TARGET)
    name = next(k for k, rule in report.items() if rule == "softmax-rows")
    text = prepared[name].script(show_meta=False)
    assert text.count("T.parallel(") == 1 and "T.vectorized(" in text, text


def test_conv_schedule_is_tiled_parallel_vectorized_with_the_epilogue_on_the_tile():
    shape = (1, 32, 14, 14)
    text = scheduled_function(module([shape], lambda bb, x: conv(bb, x, 64, 3)), CONV)
    assert "T.parallel" in text and "T.vectorized" in text and "T.unroll" in text
    assert 'scope="local"' in text  # the accumulator tile
    # the packed weight [OC / ob, KH, KW, IC, ob] is a constant parameter of the kernel
    lanes = vector_lanes(TARGET)
    assert f"T.int64({2 * lanes})), " in text or f"T.int64({lanes})), " in text


def test_dense_and_elementwise_schedules_apply():
    text = scheduled_function(module([(4, 256)], lambda bb, a: bb.emit(relax.op.matmul(a, const(256, 512)))), "nna")
    assert "T.parallel" in text and "T.vectorized" in text
    text = scheduled_function(
        module([(8, 64, 32)], lambda bb, x: bb.emit(relax.op.nn.relu(bb.emit(relax.op.multiply(x, x))))), "fused"
    )
    assert "T.parallel" in text and "T.vectorized" in text


AVX2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})  # 8 lanes, 16 registers: a 6-row tile budget
PADDED_ROW_CASES = {
    "conv 3x3 on 7x7": ([(1, 64, 7, 7)], lambda bb, x: conv(bb, x, 64, 3)),
    "conv 3x3 on 14x14": ([(1, 32, 14, 14)], lambda bb, x: conv(bb, x, 32, 3)),
    "dense over 197 rows": ([(197, 96)], lambda bb, a: bb.emit(relax.op.matmul(a, const(96, 64)))),
    "batched dense over [2, 197] rows": ([(2, 197, 48)], lambda bb, a: bb.emit(relax.op.matmul(a, const(48, 32)))),
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
    mod = module(shapes, body)
    inputs = [RNG.standard_normal(s).astype("float32") for s in shapes]
    with TARGET, tvm.transform.PassContext(opt_level=3):
        want = run(tvm.compile(mod, TARGET), inputs)
    executable, report = pipeline.build(mod, target, winograd=False)
    np.testing.assert_allclose(run(executable, inputs), want, rtol=1e-4, atol=1e-4)
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
        report = check(module([shape], lambda bb, x: conv(bb, x, 16, 3)), [shape])
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
