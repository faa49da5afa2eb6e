#!/usr/bin/env python3
"""Latency of representative models on the ``llvm`` device, with and without the default CPU
schedules, next to onnxruntime on the equivalent ONNX graph, at the same thread count.

    python scripts/bench_ops.py [--threads 2] [--repeat 20] [--cases conv3x3,conv1x1,...]
                                [--onnx squeezenet,resnet50,...] [--no-unscheduled] [--json]

Cases (built through the public NNAdapter API; the ONNX graph is made with onnx.helper from the same
weights): ``conv3x3`` 64->64 on 56x56 with bias and ReLU, ``conv1x1`` 64->256 on 56x56 with bias,
``depthwise`` 3x3 on 32x112x112 with bias and ReLU6, ``fc`` 2048->1000 (batch 1), ``builtin``
(nnadapter_tvm/tools/builtin_model.py, batch 1).  ``--onnx`` adds models of onnx's backend/test/data/light
(``light_<name>.onnx``) imported with ``nnadapter_tvm.frontends.onnx``; ``--onnx all`` takes the
eight CNNs of the performance target.  Times are the minimum over ``--repeat`` runs of
``Execution.compute`` (after a warm-up), onnxruntime's the minimum of as many ``InferenceSession.run``
calls, in alternating bursts so that both see the same machine load; the ratio is ours /
onnxruntime's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

import nnadapter_tvm as nna
from nnadapter_tvm.tools import builtin_model
from nnadapter_tvm.types import AutoPad, FuseCode, OperandType
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P

LIGHT_CNNS = [
    "resnet50",
    "squeezenet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "shufflenet",
    "vgg19",
    "bvlc_alexnet",
    "zfnet512",
]


# -- NNAdapter models and their ONNX twins ---------------------------------------------------


class Case:
    """An NNAdapter model, the same computation as an ONNX model, and an input."""

    def __init__(self, name: str, model: nna.Model, onnx_model: object | None, inputs: list[np.ndarray]):
        self.name, self.model, self.onnx_model, self.inputs = name, model, onnx_model, inputs


def _const(model: nna.Model, value: np.ndarray, precision: P = P.FLOAT32):
    operand = model.add_operand(OperandType(precision, list(value.shape)))
    model.set_operand_value(operand, np.ascontiguousarray(value))
    return operand


def _i32(model: nna.Model, *values: int):
    return _const(model, np.asarray(values, "int32"), P.INT32)


def _conv_case(name: str, c: int, hw: int, oc: int, k: int, group: int, fuse: FuseCode) -> Case:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((oc, c // group, k, k)) * (2 / (c // group * k * k)) ** 0.5).astype("float32")
    b = rng.standard_normal(oc).astype("float32") * 0.1
    pad = k // 2
    model = nna.Model()
    x = model.add_operand(OperandType(P.FLOAT32, [1, c, hw, hw]))
    y = model.add_operand(OperandType(P.FLOAT32, [1, oc, hw, hw]))
    args = [x, _const(model, w), _const(model, b), _i32(model, AutoPad.NONE), _i32(model, pad, pad, pad, pad)]
    args += [_i32(model, 1, 1), _i32(model, group), _i32(model, 1, 1), _i32(model, fuse)]
    model.add_operation(O.CONV_2D, args, [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    conv_out = "y" if fuse == FuseCode.NONE else "c"
    nodes = [
        helper.make_node(
            "Conv", ["x", "W", "B"], [conv_out], kernel_shape=[k, k], pads=[pad] * 4, group=group, strides=[1, 1]
        )
    ]
    if fuse == FuseCode.RELU:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif fuse == FuseCode.RELU6:
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    if fuse == FuseCode.RELU6:
        inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, hw, hw])],
        inits,
    )
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(onnx_model)
    return Case(name, model, onnx_model, [rng.random((1, c, hw, hw)).astype("float32")])


def _fc_case() -> Case:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    k, n = 2048, 1000
    w = (rng.standard_normal((n, k)) / k**0.5).astype("float32")
    b = rng.standard_normal(n).astype("float32") * 0.1
    model = nna.Model()
    x = model.add_operand(OperandType(P.FLOAT32, [1, k]))
    y = model.add_operand(OperandType(P.FLOAT32, [1, n]))
    model.add_operation(O.FULLY_CONNECTED, [x, _const(model, w), _const(model, b), _i32(model, FuseCode.NONE)], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)],
        "fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return Case("fc 2048->1000", model, onnx_model, [rng.random((1, k)).astype("float32")])


def _builtin_onnx(model: nna.Model) -> object:
    """The built-in model's operations as ONNX nodes (the operations it uses, nothing more)."""
    from onnx import TensorProto, helper, numpy_helper

    names: dict[int, str] = {}
    inits, nodes = [], []

    def name(operand) -> str:
        if operand.index not in names:
            names[operand.index] = f"t{operand.index}"
            if operand.is_constant:
                inits.append(numpy_helper.from_array(np.asarray(operand.value()), names[operand.index]))
        return names[operand.index]

    def ints(operand) -> list[int]:
        return [int(v) for v in np.asarray(operand.value()).ravel()]

    def fused(out: str, code: int) -> str:
        if code == FuseCode.NONE:
            return out
        nodes.append(helper.make_node("Relu" if code == FuseCode.RELU else "Clip", [out + "_f"], [out]))
        if code == FuseCode.RELU6:
            nodes[-1].input.extend(["zero", "six"])
        return out + "_f"

    inits += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    for op in model.operations:
        ins, out = op.inputs, name(op.outputs[0])
        if op.type == O.CONV_2D:
            k = list(ins[1].type.dimensions[2:])
            pad = [(k[0] - 1) // 2] * 4 if ints(ins[3])[0] == AutoPad.SAME else ints(ins[4])
            target = fused(out, ints(ins[8])[0])
            nodes.append(
                helper.make_node(
                    "Conv",
                    [name(ins[0]), name(ins[1]), name(ins[2])],
                    [target],
                    kernel_shape=k,
                    pads=[pad[0], pad[2], pad[1], pad[3]],
                    strides=ints(ins[5]),
                    group=ints(ins[6])[0],
                    dilations=ints(ins[7]),
                )
            )
        elif op.type in (O.MAX_POOL_2D, O.AVERAGE_POOL_2D):
            kind = "MaxPool" if op.type == O.MAX_POOL_2D else "AveragePool"
            nodes.append(helper.make_node(kind, [name(ins[0])], [out], kernel_shape=ints(ins[3]), strides=ints(ins[4])))
        elif op.type == O.BATCH_NORMALIZATION:
            nodes.append(
                helper.make_node(
                    "BatchNormalization",
                    [name(i) for i in ins[:5]],
                    [out],
                    epsilon=float(np.asarray(ins[5].value()).ravel()[0]),
                )
            )
        elif op.type == O.RELU:
            nodes.append(helper.make_node("Relu", [name(ins[0])], [out]))
        elif op.type == O.ADAPTIVE_AVERAGE_POOL_2D:
            nodes.append(helper.make_node("GlobalAveragePool", [name(ins[0])], [out]))
        elif op.type == O.FLATTEN:
            nodes.append(helper.make_node("Flatten", [name(ins[0])], [out], axis=1))
        elif op.type == O.FULLY_CONNECTED:
            nodes.append(helper.make_node("Gemm", [name(i) for i in ins[:3]], [fused(out, 0)], transB=1))
        elif op.type == O.SOFTMAX:
            nodes.append(helper.make_node("Softmax", [name(ins[0])], [out], axis=ints(ins[1])[0]))
        else:
            raise ValueError(f"no ONNX twin for {op.type.name}")
    x, y = model.inputs[0], model.outputs[0]
    graph = helper.make_graph(
        nodes,
        "builtin",
        [helper.make_tensor_value_info(name(x), TensorProto.FLOAT, [1, *builtin_model.INPUT_SHAPE])],
        [helper.make_tensor_value_info(name(y), TensorProto.FLOAT, [1, builtin_model.CLASSES])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


CASES: dict[str, Callable[[], Case]] = {
    "conv3x3": lambda: _conv_case("conv 3x3 64->64 56x56 +bias+relu", 64, 56, 64, 3, 1, FuseCode.RELU),
    "conv1x1": lambda: _conv_case("conv 1x1 64->256 56x56 +bias", 64, 56, 256, 1, 1, FuseCode.NONE),
    "depthwise": lambda: _conv_case("depthwise 3x3 32ch 112x112 +bias+relu6", 32, 112, 32, 3, 32, FuseCode.RELU6),
    "fc": _fc_case,
    "builtin": lambda: _builtin_case(),
}


def _builtin_case() -> Case:
    model = builtin_model.build()
    return Case("builtin model (batch 1)", model, _builtin_onnx(model), [builtin_model.sample_input(1)])


def _light_case(name: str) -> Case:
    import onnx

    from nnadapter_tvm.frontends.onnx import import_model

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    model = import_model(path)
    x = np.random.default_rng(0).random((1, 3, 224, 224)).astype("float32")
    return Case(name, model, onnx.load(path), [x])


# -- timing ---------------------------------------------------------------------------------


def _compile(case: Case, properties: str) -> tuple[nna.Execution, list, float]:
    start = time.perf_counter()
    compilation = nna.Compilation(case.model, nna.Context([nna.Device.acquire("llvm")], properties))
    compilation.finish()
    seconds = time.perf_counter() - start
    execution = nna.Execution(compilation)
    outputs = execution.use_arrays(case.inputs)
    execution.compute()
    return execution, outputs, seconds


def _ort_session(case: Case, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(case.onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), case.inputs)}
    return lambda: session.run(None, feeds)


def _min_times(runs: dict[str, Callable[[], object]], repeat: int, burst: int = 5) -> dict[str, float]:
    """Minimum time of each run over ``repeat`` calls, taken in alternating bursts of ``burst`` calls:
    every variant sees the same machine load, and the idle worker threads of one runtime (TVM's and
    onnxruntime's pools both spin a while after a parallel region) have gone quiet before the other
    is timed."""
    for run in runs.values():
        run()  # warm-up
    best = {key: math.inf for key in runs}
    for _ in range(max(1, -(-repeat // burst))):
        for key, run in runs.items():
            run()  # let the other runtime's spinning threads settle
            for _ in range(burst):
                start = time.perf_counter()
                run()
                best[key] = min(best[key], time.perf_counter() - start)
    return {key: value * 1e3 for key, value in best.items()}


def bench(case: Case, threads: int, repeat: int, unscheduled: bool) -> dict:
    props = f"TVM_NUM_THREADS={threads};"
    scheduled, outputs, compile_s = _compile(case, props)
    runs: dict[str, Callable[[], object]] = {"scheduled": scheduled.compute}
    row: dict = {"case": case.name, "compile_s": round(compile_s, 1)}
    if unscheduled:
        plain, plain_outputs, plain_s = _compile(case, props + "CPU_SCHEDULES=0;")
        runs["unscheduled"] = plain.compute
        row["compile_unscheduled_s"] = round(plain_s, 1)
        row["max_abs_diff_vs_unscheduled"] = float(np.max(np.abs(outputs[0] - plain_outputs[0])))
    if case.onnx_model is not None:
        ort_run = _ort_session(case, threads)
        runs["onnxruntime"] = ort_run
        reference = ort_run()[0]
        row["max_abs_diff_vs_onnxruntime"] = float(np.max(np.abs(outputs[0].reshape(reference.shape) - reference)))
    row.update({f"{key}_ms": round(value, 3) for key, value in _min_times(runs, repeat).items()})
    if "onnxruntime_ms" in row:
        row["ratio_vs_onnxruntime"] = round(row["scheduled_ms"] / row["onnxruntime_ms"], 2)
    if "unscheduled_ms" in row:
        row["speedup_vs_unscheduled"] = round(row["unscheduled_ms"] / row["scheduled_ms"], 1)
    return row


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} logical CPUs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--onnx", default="", help="light ONNX models by name, or 'all'")
    parser.add_argument("--no-unscheduled", action="store_true", help="skip the CPU_SCHEDULES=0 builds")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON on the last line")
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}")
    models = LIGHT_CNNS if args.onnx == "all" else [m for m in args.onnx.split(",") if m]
    print(f"# {machine()}; {args.threads} threads; min of {args.repeat} runs", flush=True)
    rows = []
    for make in [CASES[c] for c in cases] + [lambda m=m: _light_case(m) for m in models]:
        case = make()
        row = bench(case, args.threads, args.repeat, not args.no_unscheduled and case.name not in models)
        rows.append(row)
        cols = [f"{k}={v}" for k, v in row.items() if k != "case"]
        print(f"{row['case']}: " + "  ".join(cols), flush=True)
    ratios = [r["ratio_vs_onnxruntime"] for r in rows if r["case"] in models and "ratio_vs_onnxruntime" in r]
    if ratios:
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geometric mean of ours / onnxruntime over {len(ratios)} ONNX models: {geomean:.2f}")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
