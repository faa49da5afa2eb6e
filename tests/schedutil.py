"""Helpers of the default CPU schedules' tests (tests/targets/test_cpu_schedule_conv.py,
test_cpu_schedule_rules.py and test_cpu_schedule_symbolic.py): Relax modules built from a body
(``module``, ``symbolic_module``), random and fixed constants, and scheduled builds checked against TVM's
unscheduled loops (``check``), statically or compiled once with symbolic axes and run at several fed
sizes (``check_symbolic``)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from nnadapter_tvm.targets.cpu import pipeline
from nnadapter_tvm.targets.cpu.winograd import WINOGRAD
from nnadapter_tvm.targets.llvm import LlvmDriver

TARGET = LlvmDriver().tvm_target({})
RNG = np.random.default_rng(0)


def module(shapes: list[tuple], body) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(list(s), "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *params))
        bb.emit_func_output(out)
    return bb.finalize()


def const(*shape: int) -> relax.Constant:
    return relax.const(RNG.standard_normal(shape).astype("float32"))


def run(executable: relax.VMExecutable, inputs: list[np.ndarray]) -> np.ndarray:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def check(mod: tvm.IRModule, shapes: list[tuple], expect_rule: str | None = None) -> dict[str, str]:
    """Scheduled and unscheduled builds of ``mod`` agree; returns the schedule report.  The direct
    convolution kernels are what these tests check: Winograd's have tests/targets/test_cpu_winograd.py."""
    inputs = [RNG.standard_normal(s).astype("float32") for s in shapes]
    with TARGET, tvm.transform.PassContext(opt_level=3):
        want = run(tvm.compile(mod, TARGET), inputs)
    executable, report = pipeline.build(mod, TARGET, winograd=False)
    got = run(executable, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if expect_rule is not None:
        assert expect_rule in report.values(), report
    return report


def conv(bb, x, oc, k, stride=1, pad=(1, 1, 1, 1), dilation=1, groups=1, epilogue=True):
    c = x.ty.shape.values[1].value
    y = bb.emit(
        relax.op.nn.conv2d(
            x, const(oc, c // groups, k, k), strides=stride, padding=list(pad), dilation=dilation, groups=groups
        )
    )
    if epilogue:
        y = bb.emit(relax.op.add(y, const(1, oc, 1, 1)))
        y = bb.emit(relax.op.nn.relu(y))
    return y


def scheduled_function(mod: tvm.IRModule, prefix: str) -> str:
    with TARGET, tvm.transform.PassContext(opt_level=3):
        prepared, report = pipeline.prepare(mod, TARGET, winograd=False)
    name = next(n for n in report if n.startswith(f"fused_{prefix}") or n.startswith(prefix))
    assert report[name] != "none", report
    return prepared[name].script(show_meta=False)


def symbolic_module(shapes: list[tuple], symbolic: list[tuple[int, ...]], body) -> tvm.IRModule:
    """``module`` with the listed axes of each input symbolic; an axis index names one variable shared by
    every input that lists it (two inputs with a symbolic axis 0 share one batch)."""
    names: dict[int, tvm.tirx.Var] = {}
    dims = [
        [names.setdefault(i, tvm.tirx.Var(f"n{i}", "int64")) if i in axes else d for i, d in enumerate(shape)]
        for shape, axes in zip(shapes, symbolic)
    ]
    return module(dims, body)


def check_symbolic(body, shapes: list[tuple], symbolic: list[tuple[int, ...]], sizes: list[list[tuple]], rule: str):
    """The module compiled once with symbolic axes gives, at each fed size, what TVM's unscheduled build of
    the static module gives; every kernel is scheduled (none left to the naive fallback), ``rule`` among them."""
    executable, report = pipeline.build(symbolic_module(shapes, symbolic, body), TARGET)
    assert "none" not in report.values(), report
    assert rule in report.values(), report
    vm = relax.VirtualMachine(executable, tvm.cpu())
    for fed in sizes:
        inputs = [RNG.standard_normal(s).astype("float32") for s in fed]
        with TARGET, tvm.transform.PassContext(opt_level=3):
            want = run(tvm.compile(module(fed, body), TARGET), inputs)
        got = vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()
        # F(4x4, 3x3) rounds to a few 1e-6 of the output's scale (test_cpu_winograd); the others to 1e-7.
        atol = max(1e-4, 2e-5 * float(np.abs(want).max())) if rule == WINOGRAD else 1e-4
        np.testing.assert_allclose(got, want, rtol=1e-4 if rule != WINOGRAD else 0, atol=atol, err_msg=str(fed))
    return report


def fixed_conv(oc, k, stride=1, pad=1, groups=1):
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


def fixed(*shape: int) -> relax.Constant:
    return relax.const(np.random.default_rng(sum(shape)).standard_normal(shape).astype("float32"))
