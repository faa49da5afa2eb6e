"""The CPU build's last steps (issue 13, compile time): LLVM code generated and emitted by several modules
in threads (``targets/cpu/codegen.py``) gives the outputs of ``tvm.compile``'s single module, in memory,
exported and through the cache; and the schedules are checked to lower only where the build fails."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax, s_tir, tirx

import nnadapter_tvm as nna
from nnadapter_tvm.errors import TVM_ERRORS
from nnadapter_tvm.frontends.onnx import import_model
from nnadapter_tvm.targets.cpu import codegen, pipeline, schedule
from nnadapter_tvm.targets.llvm import LlvmDriver

TARGET = LlvmDriver().tvm_target({})
RNG = np.random.default_rng(0)

# Element-wise operations, each of its own kernel (nothing fuses them: the module is built unfused).
_UNARY = [
    ("exp", np.exp),
    ("tanh", np.tanh),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("negative", np.negative),
    ("sin", np.sin),
    ("cos", np.cos),
    ("abs", np.abs),
    ("square", np.square),
    ("floor", np.floor),
    ("ceil", np.ceil),
]


def _many_kernels() -> tuple[tvm.IRModule, np.ndarray, np.ndarray]:
    """A Relax chain of 20 operations over [4, 6] (a unary operation, then an addition of a constant,
    ten times): 12 distinct kernels after legalization; its input and numpy's output."""
    x = RNG.uniform(-1, 1, (4, 6)).astype("float32")
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType([4, 6], "float32"))
    expected = x.astype("float64")
    with bb.function("main", [var]):
        y = var
        for k, (name, fn) in enumerate(_UNARY):
            c = RNG.uniform(-0.5, 0.5, (1, 6)).astype("float32") if k % 2 else RNG.uniform(-0.5, 0.5, (4, 1))
            c = c.astype("float32")
            y = bb.emit(getattr(relax.op, name)(y))
            y = bb.emit(relax.op.add(y, relax.const(c)))
            expected = fn(expected) + c
        bb.emit_func_output(y)
    return bb.get(), x, expected.astype("float32")


def _run(executable_or_module, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(executable_or_module, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_kernels_split_over_modules_give_tvm_compiles_outputs(tmp_path, monkeypatch):
    monkeypatch.setattr(codegen, "MIN_KERNELS_PER_MODULE", 1)
    mod, x, expected = _many_kernels()
    with TARGET, tvm.transform.PassContext(opt_level=3):
        single = tvm.compile(mod, TARGET)
        split = codegen.build(mod, TARGET, jobs=3)
    assert len(single.mod._collect_dso_modules()) == 1
    assert len(split.mod._collect_dso_modules()) == 3  # the kernels dealt over three LLVM modules
    reference = _run(single, x)
    np.testing.assert_allclose(reference, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_run(split, x), reference)  # in memory: kernels found in the imports
    path = str(tmp_path / "split.so")
    codegen.export(split, path)
    assert {f for f in os.listdir(tmp_path) if f.endswith(".o")} == {"lib0.o", "lib1.o", "lib2.o", "devc.o"}
    np.testing.assert_array_equal(_run(tvm.runtime.load_module(path), x), reference)  # one shared library


def test_few_kernels_stay_in_one_module():
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType([4], "float32"))
    with bb.function("main", [var]):
        bb.emit_func_output(bb.emit(relax.op.exp(var)))
    with TARGET, tvm.transform.PassContext(opt_level=3):
        executable = codegen.build(bb.get(), TARGET, jobs=4)
    assert len(executable.mod._collect_dso_modules()) == 1  # fewer than MIN_KERNELS_PER_MODULE


def _onnx_chain() -> tuple[object, np.ndarray]:
    """x [2, 8, 6, 6] -> Conv, Relu, then element-wise operations and pools that do not fuse into one kernel."""
    w = RNG.uniform(-0.3, 0.3, (8, 8, 3, 3)).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sigmoid", ["p"], ["s"]),
        helper.make_node("ReduceMean", ["s"], ["m"], axes=[2, 3], keepdims=1),
        helper.make_node("Mul", ["s", "m"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 3, 3])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), w


def _chain_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    p = np.pad(x.astype("float64"), [(0, 0), (0, 0), (1, 1), (1, 1)])
    c = sum(
        np.einsum("nchw,oc->nohw", p[:, :, i : i + 6, j : j + 6], w[:, :, i, j]) for i in range(3) for j in range(3)
    )
    r = np.maximum(c, 0)
    pooled = r.reshape(2, 8, 3, 2, 3, 2).max(axis=(3, 5))
    s = 1 / (1 + np.exp(-pooled))
    return (s * s.mean(axis=(2, 3), keepdims=True)).astype("float32")


def _compile(model, cache_dir) -> nna.Compilation:
    nmodel = import_model(model)
    compilation = nna.Compilation(
        nmodel, nna.Context([nna.Device.acquire("llvm")]), cache_token="p" * 32, cache_dir=cache_dir
    )
    compilation.finish()
    return compilation


def _run_compilation(compilation: nna.Compilation, x: np.ndarray) -> np.ndarray:
    return compilation.run([x])[0].numpy()


def test_split_build_runs_from_the_cache(tmp_path, monkeypatch):
    """Every kernel of its own module (three threads): the compiled model, the same model loaded from its
    one cache file, and numpy agree."""
    monkeypatch.setenv("NNADAPTER_TVM_KERNEL_CACHE", "0")  # which builds each kernel apart
    monkeypatch.setattr(codegen, "MIN_KERNELS_PER_MODULE", 1)
    monkeypatch.setattr(codegen, "default_jobs", lambda: 3)
    built: list[int] = []
    original = codegen.build

    def counting(mod, target, jobs=None, lift=False, cached=None):
        executable = original(mod, target, jobs, lift, cached)
        built.append(len(executable.mod._collect_dso_modules()))
        return executable

    monkeypatch.setattr(codegen, "build", counting)
    model, w = _onnx_chain()
    x = RNG.standard_normal((2, 8, 6, 6)).astype("float32")
    compiled = _compile(model, tmp_path)
    assert built == [3]
    assert os.listdir(tmp_path) == ["p" * 32 + ".nnc"]
    loaded = _compile(model, tmp_path)
    assert loaded.loaded_from_cache and built == [3]
    expected = _chain_reference(x, w)
    np.testing.assert_allclose(_run_compilation(compiled, x), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(_run_compilation(loaded, x), _run_compilation(compiled, x))


def test_schedules_are_not_checked_when_the_build_succeeds(monkeypatch):
    calls: list[object] = []
    original = schedule._lowers
    monkeypatch.setattr(schedule, "_lowers", lambda f, t: (calls.append(f), original(f, t))[1])
    mod, x, expected = _many_kernels()
    executable, report = pipeline.build(mod, TARGET)
    assert calls == []
    assert set(report.values()) == {"generic"}
    np.testing.assert_allclose(_run(executable, x), expected, rtol=1e-5, atol=1e-5)


def _symbolic_exp() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    var = relax.Var("x", relax.TensorType([n, 6], "float32"))
    with bb.function("main", [var]):
        bb.emit_func_output(bb.emit(relax.op.add(relax.op.exp(var), relax.const(1.0, "float32"))))
    return bb.get()


def test_a_schedule_that_does_not_lower_falls_back_after_the_failed_build(monkeypatch):
    """A generic rule that vectorizes a loop of symbolic extent (no such vector: the TIR pipeline refuses
    it): the first build fails, each schedule is then checked, the rule is dropped for the unscheduled
    loops, as the checked scheduling (``prepare``) reports, and the model runs."""

    def unlowerable(sch: s_tir.Schedule, target, vectorize: bool = True) -> None:
        block = next(b for b in schedule.child_blocks(sch) if sch.get(b).name_hint != "root")
        sch.vectorize(sch.fuse(*sch.get_loops(block)))

    monkeypatch.setattr(schedule, "schedule_generic", unlowerable)
    mod = _symbolic_exp()
    with TARGET, tvm.transform.PassContext(opt_level=3):
        _, checked = pipeline.prepare(mod, TARGET)
        with pytest.raises(TVM_ERRORS):  # unchecked, the rule's result reaches the build and fails it
            scheduled, _ = pipeline.prepare(mod, TARGET, check_lowering=False)
            codegen.build(scheduled, TARGET)
    executable, report = pipeline.build(mod, TARGET)
    assert report == checked and set(report.values()) == {"none"}
    x = RNG.standard_normal((5, 6)).astype("float32")
    np.testing.assert_allclose(_run(executable, x), np.exp(x) + 1, rtol=1e-6)


def test_functions_without_noalias_never_share_an_llvm_module():
    """A symbolic shape makes Relax add a ``shape_func`` without ``tirx.noalias`` beside the kernels. TVM's
    LLVM code generator gives every function of a module the aliasing flag of the last one declared, so
    sharing a module with it put all the kernel's buffers in one alias set (a dense product's register
    accumulators stored back to memory on each step: 2.6x slower). It gets a module of its own, even in a
    one-thread build, and the kernel's buffers keep distinct alias classes."""
    mod = _symbolic_exp()
    executable = pipeline.build(mod, TARGET, jobs=1)[0]
    sources = [m.inspect_source("ll") for m in executable.mod._collect_dso_modules()]
    kernels = [src for src in sources if "shape_func" not in src]
    assert len(sources) == 2 and len(kernels) == 1
    assert "tvm-alias" not in kernels[0] and "ptr noalias" in kernels[0]
    x = RNG.standard_normal((5, 6)).astype("float32")
    np.testing.assert_allclose(_run(executable, x), np.exp(x) + 1, rtol=1e-6)


def test_build_threads_from_the_environment(monkeypatch):
    monkeypatch.setenv(codegen.THREADS_ENV, "1")
    assert codegen.default_jobs() == 1
    monkeypatch.setenv(codegen.THREADS_ENV, "3")
    assert codegen.default_jobs() == 3
    monkeypatch.setenv(codegen.THREADS_ENV, "many")
    with pytest.raises(nna.NNAdapterError, match=codegen.THREADS_ENV):
        codegen.default_jobs()
    monkeypatch.delenv(codegen.THREADS_ENV)
    assert codegen.default_jobs() == len(os.sched_getaffinity(0))
