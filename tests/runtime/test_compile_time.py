"""Compile time (issue 13): identical kernels are compiled once, constant kernels are folded with one build
and give the constants Relax's FoldConstant gives, and a compile's time is broken down per phase
(``runtime.phases``, ``nnadapter-tvm run MODEL -v``)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tvm
import tvm_ffi
from onnx import TensorProto, helper, numpy_helper
from oputil import execute
from tvm import relax, tirx

import nnadapter_tvm as nna
from nnadapter_tvm.runtime import phases
from nnadapter_tvm.runtime.convert import convert_subgraph
from nnadapter_tvm.targets import constant_folding
from nnadapter_tvm.targets.cpu import pipeline
from nnadapter_tvm.targets.cpu.compute import CONV
from nnadapter_tvm.targets.llvm import LlvmDriver
from nnadapter_tvm.tools import cli

TARGET = LlvmDriver().tvm_target({})
RNG = np.random.default_rng(0)


def _twin_blocks():
    """x [1, 8, 10, 10] -> (Conv 3x3 pad 1 + bias, Relu) twice: two blocks of the same shapes, their own weights."""
    nodes, inits = [], []
    name = "x"
    for k in range(2):
        w = RNG.uniform(-0.3, 0.3, (8, 8, 3, 3)).astype("float32")
        b = RNG.uniform(-0.3, 0.3, 8).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes.append(helper.make_node("Conv", [name, f"w{k}", f"b{k}"], [f"c{k}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        name = f"r{k}"
    graph = helper.make_graph(
        nodes,
        "twin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 8, 10, 10])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reference(model, x: np.ndarray) -> np.ndarray:
    """numpy: each block's convolution (cross-correlation, zero padding 1), bias and Relu."""
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    y = x
    for k in range(2):
        w, b = weights[f"w{k}"], weights[f"b{k}"]
        p = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)])
        out = np.zeros((1, 8, 10, 10), "float64")
        for i in range(3):
            for j in range(3):
                out += np.einsum("nchw,oc->nohw", p[:, :, i : i + 10, j : j + 10], w[:, :, i, j])
        y = np.maximum(out + b[None, :, None, None], 0).astype("float32")
    return y


def _conv_kernels(mod: tvm.IRModule) -> list[str]:
    found = []
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            blocks: list[str] = []
            tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlock, lambda b, seen=blocks: seen.append(b.name_hint))])
            if any(n.startswith(CONV) for n in blocks):
                found.append(gvar.name_hint)
    return found


def _calls(mod: tvm.IRModule, name: str) -> int:
    count = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and any(
            isinstance(a, relax.GlobalVar) and a.name_hint == name for a in expr.args
        ):
            count.append(expr)

    relax.analysis.post_order_visit(mod["main"], visit)
    return len(count)


def test_identical_blocks_compile_one_kernel_and_match_numpy():
    model = _twin_blocks()
    predictor = nna.Predictor(model)
    x = RNG.standard_normal((1, 8, 10, 10)).astype("float32")
    np.testing.assert_allclose(predictor.run({"x": x})[0], _reference(model, x), rtol=1e-4, atol=1e-4)
    # The module the build compiles (scheduled, before codegen): one convolution kernel, called twice.
    segment = predictor.plan.all_segments()[0]
    sub = segment.build_model()
    mod, _ = convert_subgraph(sub.inputs, sub.outputs, sub.operations)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        scheduled, report = pipeline.prepare(mod, TARGET)
    kernels = _conv_kernels(scheduled)
    assert len(kernels) == 1, kernels
    assert _calls(scheduled, kernels[0]) == 2
    assert report[kernels[0]] == CONV  # too small a layer for Winograd (winograd.MIN_FLOPS)


def _gelu_stages(blocks: int):
    """x [N, 4, H, W] (N, H, W unknown) -> (depthwise Conv 7x7 pad 3 + bias, exact GELU by Erf) ``blocks``
    times: the same shapes in every block, each with its own weights, as a ConvNeXt stage has them."""
    nodes, inits = [], []
    name = "x"
    for k in range(blocks):
        w = RNG.uniform(-0.2, 0.2, (4, 1, 7, 7)).astype("float32")
        b = RNG.uniform(-0.2, 0.2, 4).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes += [
            helper.make_node("Conv", [name, f"w{k}", f"b{k}"], [f"c{k}"], pads=[3, 3, 3, 3], group=4),
            helper.make_node("Div", [f"c{k}", "sqrt2"], [f"d{k}"]),
            helper.make_node("Erf", [f"d{k}"], [f"e{k}"]),
            helper.make_node("Add", [f"e{k}", "one"], [f"p{k}"]),
            helper.make_node("Mul", [f"c{k}", f"p{k}"], [f"m{k}"]),
            helper.make_node("Mul", [f"m{k}", "half"], [f"g{k}"]),
        ]
        name = f"g{k}"
    for const, value in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5)):
        inits.append(numpy_helper.from_array(np.array(value, "float32"), const))
    dims = ["N", 4, "H", "W"]
    graph = helper.make_graph(
        nodes,
        "stage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _gelu_stage_reference(model, x: np.ndarray, blocks: int) -> np.ndarray:
    from scipy.special import erf

    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    y = x.astype("float64")
    h, w = x.shape[2:]
    for k in range(blocks):
        p = np.pad(y, [(0, 0), (0, 0), (3, 3), (3, 3)])
        out = np.zeros_like(y)
        for i in range(7):
            for j in range(7):
                out += p[:, :, i : i + h, j : j + w] * weights[f"w{k}"][None, :, 0, i, j, None, None]
        c = out + weights[f"b{k}"][None, :, None, None]
        y = 0.5 * c * (1 + erf(c / np.sqrt(2)))
    return y


def test_repeated_blocks_with_unknown_sizes_compile_each_kernel_once():
    """Three blocks of one structure with N, H and W unknown: the convolution's output size is simplified
    (unsimplified, ``(H + 3 + 3 - 7) + 1`` grew block by block and no two kernels were equal), equal kernels
    are merged whatever FuseTIR named them, and the GELU's erf reads its argument once (bound with a
    ``Let``: substituted, it appeared about a hundred times and took half a second to lower)."""
    blocks = 3
    model = _gelu_stages(blocks)
    predictor = nna.Predictor(model)
    for shape in [(1, 4, 9, 11), (2, 4, 5, 6)]:
        x = RNG.standard_normal(shape).astype("float32")
        np.testing.assert_allclose(
            predictor.run({"x": x})[0], _gelu_stage_reference(model, x, blocks), rtol=1e-4, atol=1e-4
        )
    segment = predictor.plan.all_segments()[0]
    sub = segment.build_model()
    mod, _ = convert_subgraph(sub.inputs, sub.outputs, sub.operations)
    with TARGET, tvm.transform.PassContext(opt_level=3):
        scheduled, _ = pipeline.prepare(mod, TARGET)
    kernels = [g.name_hint for g, f in scheduled.functions_items() if "depthwise" in g.name_hint]
    assert len(kernels) == 1, kernels
    assert _calls(scheduled, kernels[0]) == blocks
    func = scheduled[kernels[0]]
    # Its parameters' shapes are as simple as the model's: no window arithmetic left in them.
    signature = next(line for line in func.script().splitlines() if line.startswith("def main("))
    assert signature.count("(sym_N, sym_H, sym_W, T.int64(4))") == 2, signature
    assert len(func.script()) < 20000, len(func.script())


def _lowered_both_ways(mod: tvm.IRModule) -> tuple[tvm.IRModule, tvm.IRModule]:
    """``pipeline.lower`` with the batched folding, and without it (Relax's FoldConstant alone)."""
    with TARGET, tvm.transform.PassContext(opt_level=3):
        ours = pipeline.lower(mod, TARGET)
        original = pipeline.FoldConstantCalls
        try:
            pipeline.FoldConstantCalls = tvm.transform.Sequential([])
            theirs = pipeline.lower(mod, TARGET)
        finally:
            pipeline.FoldConstantCalls = original
    return ours, theirs


def test_batched_folding_gives_foldconstants_module():
    """The packing kernels folded at once (numpy for the packings): the same module, constants included, as
    FoldConstant alone gives; 8 output channels pad to a whole vector block, so the padding is covered."""
    sub = nna.Predictor(_twin_blocks()).plan.all_segments()[0].build_model()
    mod, _ = convert_subgraph(sub.inputs, sub.outputs, sub.operations)
    ours, theirs = _lowered_both_ways(mod)
    assert tvm_ffi.structural_equal(ours, theirs)


def test_depthwise_grouped_and_dense_packings_fold_as_foldconstant_does(monkeypatch):
    """numpy's depthwise, grouped-convolution and dense packings (a dense width of 10 pads to whole blocks),
    and a BatchNormalization's parameter chain: the same constants as FoldConstant's."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 16, 6, 6], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(RNG.standard_normal((16, 1, 3, 3)).astype("float32")),
                                           padding=[1, 1, 1, 1], groups=16))  # fmt: skip
            y = bb.emit(relax.op.nn.conv2d(y, relax.const(RNG.standard_normal((16, 4, 3, 3)).astype("float32")),
                                           padding=[1, 1, 1, 1], groups=4))  # fmt: skip
            gamma, beta, mean, var = (relax.const(RNG.uniform(0.5, 1.5, 16).astype("float32")) for _ in range(4))
            y = bb.emit(relax.TupleGetItem(bb.emit(relax.op.nn.batch_norm(y, gamma, beta, mean, var, axis=1)), 0))
            flat = bb.emit(relax.op.reshape(y, [1, 16 * 36]))
            out = bb.emit_output(relax.op.matmul(flat, relax.const(RNG.standard_normal((576, 10)).astype("float32"))))
        bb.emit_func_output(out)
    used: list[str] = []
    for name in ("_pack_conv", "_pack_depthwise", "_pack_dense"):
        packer = getattr(constant_folding, name)
        monkeypatch.setattr(constant_folding, name, lambda w, o, p=packer, n=name: (used.append(n), p(w, o))[1])
    ours, theirs = _lowered_both_ways(bb.finalize())
    assert sorted(set(used)) == ["_pack_conv", "_pack_dense", "_pack_depthwise"]  # numpy did every packing
    assert tvm_ffi.structural_equal(ours, theirs)


def test_folding_runs_chains_of_constant_kernels():
    """A constant kernel fed by another constant kernel is folded too (a second round), to numpy's values."""
    a = RNG.standard_normal((4, 6)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4, 6], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.exp(relax.const(a)))
            u = bb.emit(relax.op.add(t, relax.const(a)))
            out = bb.emit_output(relax.op.multiply(x, u))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.finalize())
    folded = constant_folding.fold_constant_calls(mod)
    bindings = [b.value for block in folded["main"].body.blocks for b in block.bindings]
    constants = [v for v in bindings if isinstance(v, tvm.ir.expr.Constant)]
    assert len(constants) == 2  # exp(a) and exp(a) + a: only the product with x is left to run
    np.testing.assert_allclose(constants[-1].value.numpy(), np.exp(a) + a, rtol=1e-6)
    xv = RNG.standard_normal((4, 6)).astype("float32")
    vm = relax.VirtualMachine(tvm.compile(folded, TARGET), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(xv)).numpy(), xv * (np.exp(a) + a), rtol=1e-5)


def test_nested_phases_count_their_own_time_once():
    with phases.recording() as times:
        with phases.phase("outer"):
            time.sleep(0.05)
            with phases.phase("inner"):
                time.sleep(0.1)
        with phases.phase("outer"):
            time.sleep(0.02)
    outer, inner = times.seconds["outer"][0], times.seconds["inner"][0]
    assert 0.1 <= inner < 0.2
    assert 0.07 <= outer < 0.1 + 0.07  # its own 50 + 20 ms, not the inner phase's 100 ms
    with phases.phase("unrecorded"):  # no recorder: nothing kept, nothing fails
        pass
    assert "unrecorded" not in times.seconds


def test_a_compile_is_broken_down_into_its_phases(tmp_path, monkeypatch):
    monkeypatch.setenv("NNADAPTER_TVM_KERNEL_CACHE", str(tmp_path / "kernels"))  # empty: every phase runs
    model = _twin_blocks()
    start = time.perf_counter()
    with phases.recording() as session:
        predictor = nna.Predictor(model, cache_dir=tmp_path)
    elapsed = time.perf_counter() - start
    compilation = predictor.compilations[0]
    own = compilation.compile_phases
    expected = [
        phases.CONVERT,
        phases.RELAX,
        phases.LEGALIZE,
        phases.FOLD,
        phases.FUSE,
        phases.KERNEL_CACHE,
        phases.SCHEDULE,
        phases.TIR,
        phases.CODEGEN,
        phases.EXPORT,
        phases.LOAD,
        phases.CACHE,
    ]
    assert [name for name, _, _ in own.rows()] == expected
    assert all(wall >= 0 and cpu >= 0 for _, wall, cpu in own.rows())
    # Each phase counted once: the phases' sum stays within the compile, and covers most of it.
    wall, _ = own.total()
    assert 0.8 * compilation.compile_seconds <= wall <= elapsed
    # The caller's recorder also sees the cache file's write, which comes after the compile.
    assert session.seconds[phases.CACHE][0] >= own.seconds[phases.CACHE][0]
    assert session.total()[0] <= elapsed


@pytest.mark.parametrize("cached", [False, True])
def test_run_verbose_prints_the_phases(tmp_path, capsys, cached):
    path = tmp_path / "twin.onnx"
    import onnx

    onnx.save(_twin_blocks(), path)
    argv = ["run", str(path), "-v", "--cache-dir", str(tmp_path / "cache"), "--repeat", "1"]
    if cached:
        assert cli.main(argv) == 0
        capsys.readouterr()
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    if cached:
        assert "no compile phases" in out
    else:
        for name in (phases.IMPORT, phases.FOLD, phases.SCHEDULE, phases.TIR, phases.CODEGEN, phases.EXPORT):
            assert name in out
        assert "total" in out


def test_elementwise_constant_kernels_fold_by_numpy_to_foldconstants_bits(monkeypatch):
    """Reshape, transpose, broadcast add of a scalar, rsqrt, multiply, where and a cast on constants: numpy
    evaluates them (no LLVM build), to the same bits as FoldConstant's LLVM-built kernels."""
    v = RNG.uniform(0.1, 2.0, (1, 24, 1, 1)).astype("float32")
    g = RNG.standard_normal(24).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 1, 1, 24], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.rsqrt(relax.op.add(relax.const(v), relax.const(np.float32(1e-5)))))
            s = bb.emit(relax.op.multiply(s, relax.op.reshape(relax.const(g), [1, 24, 1, 1])))
            s = bb.emit(relax.op.where(relax.op.greater(s, relax.const(np.float32(0))), s, relax.op.negative(s)))
            t = bb.emit(relax.op.astype(relax.op.permute_dims(s, [0, 2, 3, 1]), "float64"))
            out = bb.emit_output(relax.op.multiply(relax.op.astype(x, "float64"), t))
        bb.emit_func_output(out)
    legalized = relax.transform.LegalizeOps()(bb.finalize())

    def no_build(wanted):
        raise AssertionError(f"LLVM asked to build {sorted(wanted)}")

    monkeypatch.setattr(constant_folding, "_build", no_build)
    ours = relax.transform.FoldConstant()(constant_folding.fold_constant_calls(legalized))
    theirs = relax.transform.FoldConstant()(legalized)
    assert tvm_ffi.structural_equal(ours, theirs)
    bindings = [b.value for block in ours["main"].body.blocks for b in block.bindings]
    assert sum(isinstance(b, relax.Call) for b in bindings) == 2  # x's cast and the product: all else folded


def _reshape(model: nna.Model, x, dims: list[int], out_dims: list[int]):
    shape = model.add_operand(nna.OperandType(nna.Precision.INT32, [len(dims)]))
    model.set_operand_value(shape, np.array(dims, "int32"))
    out = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, out_dims))
    model.add_operation(nna.OperationType.RESHAPE, [x, shape], [out])
    return out


def test_a_condition_already_guarded_upstream_is_not_guarded_again():
    """Each run-time guard costs TVM's Relax passes milliseconds (a BERT export repeated three reshape
    conditions 60 times); a RESHAPE computed from a result already guarded by the same condition needs
    no guard of its own (that guard runs first in every order of the bindings), while one on a parallel
    branch keeps its own.  The execution still fails, naming a RESHAPE, where the condition does not hold."""
    U = nna.UNKNOWN
    model = nna.Model()
    x = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [U, 6]))
    r1 = _reshape(model, x, [0, -1, 3], [U, U, 3])  # guarded: the -1 is ambiguous when N is 0
    back = _reshape(model, r1, [0, 6], [U, 6])
    fuse = model.add_operand(nna.OperandType(nna.Precision.INT32, [1]))
    model.set_operand_value(fuse, np.array([0], "int32"))
    s = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, [U, 6]))
    model.add_operation(nna.OperationType.ADD, [x, back, fuse], [s])
    r2 = _reshape(model, s, [0, -1, 3], [U, U, 3])  # the same condition, computed from r1: not guarded again
    r3 = _reshape(model, x, [0, -1, 3], [U, U, 3])  # the same condition beside r1: guarded
    model.identify_inputs_and_outputs([x], [r2, r3])
    model.finish()

    checks = []
    convert_subgraph(model.inputs, model.outputs, model.operations, checks)
    ambiguous = [c for c in checks if "ambiguous" in c.message]
    assert len(ambiguous) == 2, [c.message for c in checks]

    compilation = nna.Compilation(model, nna.Context([nna.Device.acquire("llvm")]))
    compilation.finish()
    x2 = RNG.standard_normal((2, 6)).astype("float32")
    got2, got3 = execute(compilation, [x2])
    np.testing.assert_allclose(got2, (x2 + x2).reshape(2, 2, 3), rtol=1e-6)
    np.testing.assert_array_equal(got3, x2.reshape(2, 2, 3))
    with pytest.raises(nna.NNAdapterError) as info:
        execute(compilation, [np.zeros((0, 6), "float32")])
    assert info.value.code == nna.ResultCode.INVALID_DIMENSIONS
    assert "RESHAPE" in str(info.value) and "ambiguous" in str(info.value)
