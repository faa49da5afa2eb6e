"""What float64 accumulation costs REDUCE_SUM / REDUCE_MEAN of float32 (op_converters/reduce.py): each
kernel or model compiled twice, with the float64 accumulator (the default) and with float32 (as on
OpenCL), timed in alternating rounds; the median of the per-round ratios, and each kernel's error
against numpy's float64 sum.

    python scripts/bench_reduce_accumulation.py                        # the kernels, squeezenet, resnet50
    python scripts/bench_reduce_accumulation.py --models squeezenet --rounds 16

Kernels run alone through TVM's time_evaluator on the VM (no Python execution path in the figure); models
through the Predictor (2 threads), both builds in one process.  No cache is used: the accumulator is chosen
at compile time and is not part of the model token.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nnadapter_tvm as nna
from nnadapter_tvm.op_converters import reduce as reduce_converters
from nnadapter_tvm.tools import benchmark

OP = nna.OperationType
# name, operation, input shape, axes
KERNELS = [
    ("sum [64, 4096] over axis 1 (contiguous)", OP.REDUCE_SUM, (64, 4096), [1]),
    ("sum [64, 4096] over axis 0", OP.REDUCE_SUM, (64, 4096), [0]),
    ("mean [1, 2048, 7, 7] over H, W", OP.REDUCE_MEAN, (1, 2048, 7, 7), [2, 3]),
    ("mean [1, 7, 7, 2048] over H, W (resnet50's, NHWC)", OP.REDUCE_MEAN, (1, 7, 7, 2048), [1, 2]),
    ("mean [1, 13, 13, 1000] over H, W (squeezenet's, NHWC)", OP.REDUCE_MEAN, (1, 13, 13, 1000), [1, 2]),
]


class float32_accumulation:
    """Compile as for a target without float64 (OpenCL) inside the block."""

    def __enter__(self) -> None:
        self._saved = reduce_converters._has_float64
        reduce_converters._has_float64 = lambda target: False

    def __exit__(self, *exc) -> None:
        reduce_converters._has_float64 = self._saved


def _reduce_model(op: OP, shape: tuple, axes: list[int]) -> nna.Model:
    model = nna.Model()
    x = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, list(shape)))
    axes_operand = model.add_operand(nna.OperandType(nna.Precision.INT32, [len(axes)]))
    model.set_operand_value(axes_operand, np.array(axes, "int32"))
    keep = model.add_operand(nna.OperandType(nna.Precision.BOOL8, [1]))
    model.set_operand_value(keep, np.array([True]))
    out = [1 if a in axes else d for a, d in enumerate(shape)]
    y = model.add_operand(nna.OperandType(nna.Precision.FLOAT32, out))
    model.add_operation(op, [x, axes_operand, keep], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def kernels(rounds: int, number: int) -> None:
    import tvm
    from tvm import relax

    from nnadapter_tvm.runtime.convert import convert_model
    from nnadapter_tvm.targets import DRIVERS

    dev = tvm.cpu()

    def build(model: nna.Model) -> relax.VirtualMachine:
        mod, _ = convert_model(model)
        return relax.VirtualMachine(DRIVERS["llvm"].build(mod, {}), dev)

    for name, op, shape, axes in KERNELS:
        data = np.random.default_rng(0).standard_normal(shape).astype("float32")
        x = tvm.runtime.tensor(data, dev)
        model = _reduce_model(op, shape, axes)
        wide = build(model)
        with float32_accumulation():
            narrow = build(model)
        exact = data.astype("float64").sum(tuple(axes), keepdims=True)
        if op == OP.REDUCE_MEAN:
            exact /= np.prod([shape[a] for a in axes])

        def error(vm: relax.VirtualMachine, exact=exact, x=x) -> float:
            return float(np.max(np.abs(vm["main"](x)[0].numpy() - exact) / np.abs(exact)))

        timers = [vm.time_evaluator("main", dev, number=number, repeat=1) for vm in (wide, narrow)]
        for timer in timers:
            timer(x)
        times: list[list[float]] = [[], []]
        for _ in range(rounds):
            for k, timer in enumerate(timers):
                times[k].append(timer(x).mean)
        ratios = [a / b for a, b in zip(*times)]
        print(
            f"{name}: float64 {statistics.median(times[0]) * 1e6:.1f} us, float32 "
            f"{statistics.median(times[1]) * 1e6:.1f} us, {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]; relative error {error(wide):.1e} against {error(narrow):.1e}"
        )


def models(names: list[str], rounds: int, block: int) -> None:
    for name in names:
        model, _ = benchmark.optimizable(onnx.load(os.path.join(benchmark.LIGHT_DIR, f"light_{name}.onnx")))
        feeds = benchmark.model_inputs(model)
        wide = nna.Predictor(model, context_properties="TVM_NUM_THREADS=2")
        with float32_accumulation():
            narrow = nna.Predictor(model, context_properties="TVM_NUM_THREADS=2")
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(wide.run(feeds), narrow.run(feeds)))

        def median_of_block(predictor: nna.Predictor, feeds=feeds) -> float:
            times = []
            for _ in range(block):
                start = time.perf_counter()
                predictor.run(feeds)
                times.append(time.perf_counter() - start)
            return statistics.median(times)

        median_of_block(wide), median_of_block(narrow)
        times: list[list[float]] = [[], []]
        for _ in range(rounds):
            for k, predictor in enumerate((wide, narrow)):
                times[k].append(median_of_block(predictor))
                time.sleep(benchmark.SETTLE_S)
        ratios = [a / b for a, b in zip(*times)]
        print(
            f"{name}: float64 {statistics.median(times[0]) * 1e3:.3f} ms, float32 "
            f"{statistics.median(times[1]) * 1e3:.3f} ms, {statistics.median(ratios):.3f}x "
            f"[{min(ratios):.3f}-{max(ratios):.3f}]; largest output difference {diff:.1e}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "resnet50"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block", type=int, default=8, help="model runs per block")
    parser.add_argument("--number", type=int, default=200, help="kernel calls per round")
    args = parser.parse_args()
    kernels(args.rounds, args.number)
    models(args.models, args.rounds, args.block)


if __name__ == "__main__":
    main()
