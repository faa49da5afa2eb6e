#!/usr/bin/env python3
"""Symbolic shapes against static ones: the same network compiled once with unknown dims and once for
the exact size it is fed, on the ``llvm`` device with the default CPU schedules.

    python scripts/bench_dynamic.py [--threads 2] [--rounds 5] [--block 10] [--nets resnet,mobilenet,...]
                                    [--json] [--rules]

Networks (built through the public NNAdapter Model API, weights from a fixed seed; the symbolic build
declares every batch, height, width or sequence dimension ``nna.UNKNOWN``, channels static):

- ``conv64``: one 64 -> 64 3x3 CONV_2D with bias and ReLU (issue 12's example: 2.97 ms static, 117.6 ms
  with H, W unknown before the schedules handled symbolic extents).
- ``conv256`` / ``conv512``: two 3x3 CONV_2D + ReLU of 256 channels at 14x14 / 512 at 7x7 (resnet18's last
  stages: many channels, small maps).
- ``resnet``: a ResNet stage, two basic blocks 64 -> 64 (3x3 conv + ReLU, 3x3 conv, residual add +
  ReLU) and a downsampling block 64 -> 128 (3x3 stride 2, 1x1 stride-2 projection).
- ``mobilenet``: inverted residual blocks: 1x1 expand 32 -> 96 + ReLU6, 3x3 depthwise + ReLU6, 1x1
  project + residual add, then a stride-2 depthwise block to 64 channels, and a grouped 3x3 conv.
- ``classifier``: 3x3 stride-2 conv 3 -> 32, 3x3 stride-2 max pool, 3x3 conv 32 -> 64, average pool,
  global average pool, flatten, fully connected 64 -> 10, softmax; batch, height and width unknown.
- ``transformer``: x [B, T, 64]: Q, K, V projections (MatMul with [64, 64]), Q K^T (a batched MatMul of
  two run-time tensors), scaling, softmax over T, @ V, output projection + residual, a 64 -> 256 -> 64
  ReLU feed-forward + residual; batch and sequence length unknown.

Timing: after a warm-up, the symbolic and the static compilation each run ``--block`` times in turn
(A x N, B x N), for ``--rounds`` rounds; a round's figure is each side's median, the ratio is the median
of the per-round ratios symbolic / static (see docs/performance.md, "Measuring").  ``--rules`` also
prints which default schedule rule took each kernel of the symbolic build (``none`` would mean the naive
fallback).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import nnadapter_tvm as nna
from nnadapter_tvm.types import AutoPad, FuseCode, OperandType
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P


class Net:
    """Builds one network through the Model API for a fed size; ``symbolic`` turns the dims listed as
    symbolic in each ``tensor`` call into ``nna.UNKNOWN``."""

    def __init__(self, symbolic: bool, seed: int = 0):
        self.model = nna.Model()
        self.symbolic = symbolic
        self.rng = np.random.default_rng(seed)
        self.shapes: dict[int, tuple[list[int], tuple[int, ...]]] = {}

    def const(self, value: np.ndarray, precision: P = P.FLOAT32):
        operand = self.model.add_operand(OperandType(precision, list(value.shape)))
        self.model.set_operand_value(operand, np.ascontiguousarray(value))
        return operand

    def i32(self, *values: int):
        return self.const(np.asarray(values, "int32"), P.INT32)

    def b8(self, value: bool):
        return self.const(np.array([value]), P.BOOL8)

    def weights(self, *shape: int):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return self.const(self.rng.normal(0, (2.0 / fan_in) ** 0.5, shape).astype("float32"))

    def tensor(self, dims: list[int], symbolic_axes: tuple[int, ...]):
        shown = [nna.UNKNOWN if self.symbolic and i in symbolic_axes else d for i, d in enumerate(dims)]
        operand = self.model.add_operand(OperandType(P.FLOAT32, shown))
        # the fed size and the symbolic axes, for the builder's own shape arithmetic
        self.shapes[operand.index] = (list(dims), tuple(symbolic_axes))
        return operand

    def shape(self, operand) -> list[int]:
        return self.shapes[operand.index][0]

    def axes(self, operand) -> tuple[int, ...]:
        return self.shapes[operand.index][1]

    def op(self, op_type: O, inputs: list, dims: list[int], symbolic_axes: tuple[int, ...]):
        out = self.tensor(dims, symbolic_axes)
        self.model.add_operation(op_type, inputs, [out])
        return out

    # NCHW layers: batch, height and width symbolic
    def conv(self, x, oc: int, k: int, stride: int = 1, group: int = 1, fuse: FuseCode = FuseCode.RELU):
        n, c, h, w = self.shape(x)
        pad = k // 2
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        bias = self.const(self.rng.normal(0, 0.1, oc).astype("float32"))
        args = [x, self.weights(oc, c // group, k, k), bias, self.i32(AutoPad.NONE), self.i32(pad, pad, pad, pad)]
        args += [self.i32(stride, stride), self.i32(group), self.i32(1, 1), self.i32(fuse)]
        return self.op(O.CONV_2D, args, [n, oc, oh, ow], (0, 2, 3))

    def pool(self, x, kind: O, k: int, stride: int, pad: int = 0):
        n, c, h, w = self.shape(x)
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        args = [x, self.i32(AutoPad.NONE), self.i32(pad, pad, pad, pad), self.i32(k, k), self.i32(stride, stride)]
        args.append(self.b8(False))  # ceil_mode
        if kind == O.MAX_POOL_2D:
            args += [self.b8(False), self.i32(P.INT32), self.i32(FuseCode.NONE)]
        else:
            args += [self.b8(False), self.i32(FuseCode.NONE)]  # count_include_pad, fuse
        return self.op(kind, args, [n, c, oh, ow], (0, 2, 3))

    def add(self, a, b, fuse: FuseCode = FuseCode.NONE):
        return self.op(O.ADD, [a, b, self.i32(fuse)], self.shape(a), self.axes(a))

    def matmul(self, a, b, transpose_b: bool = False):
        if isinstance(b, np.ndarray):
            shape_b, axes_b = list(b.shape), ()
            b = self.const(b)
        else:
            shape_b, axes_b = self.shape(b), self.axes(b)
        n = shape_b[-2] if transpose_b else shape_b[-1]
        dims = [*self.shape(a)[:-1], n]
        n_axis = len(shape_b) - 2 if transpose_b else len(shape_b) - 1
        axes = self.axes(a) + ((len(dims) - 1,) if n_axis in axes_b else ())
        return self.op(O.MAT_MUL, [a, b, self.b8(False), self.b8(transpose_b)], dims, axes)

    def finish(self, inputs: list, outputs: list) -> nna.Model:
        self.model.identify_inputs_and_outputs(inputs, outputs)
        self.model.finish()
        return self.model


def conv64(net: Net, size: tuple[int, ...]):
    n, h, w = size
    x = net.tensor([n, 64, h, w], (0, 2, 3))
    return [x], [net.conv(x, 64, 3)]


def deep_convs(net: Net, size: tuple[int, ...]):
    n, c, h, w = size
    x = net.tensor([n, c, h, w], (0, 2, 3))
    return [x], [net.conv(net.conv(x, c, 3), c, 3)]


def narrow(net: Net, size: tuple[int, ...]):
    n, h, w = size
    x = net.tensor([n, 64, h, w], (0, 2, 3))
    return [x], [net.conv(x, 24, 1)]


def resnet(net: Net, size: tuple[int, ...]):
    n, h, w = size
    x = net.tensor([n, 64, h, w], (0, 2, 3))
    y = x
    for _ in range(2):
        z = net.conv(net.conv(y, 64, 3), 64, 3, fuse=FuseCode.NONE)
        y = net.add(z, y, FuseCode.RELU)
    z = net.conv(net.conv(y, 128, 3, stride=2), 128, 3, fuse=FuseCode.NONE)
    y = net.add(z, net.conv(y, 128, 1, stride=2, fuse=FuseCode.NONE), FuseCode.RELU)
    return [x], [y]


def mobilenet(net: Net, size: tuple[int, ...]):
    n, h, w = size
    x = net.tensor([n, 32, h, w], (0, 2, 3))
    y = x
    for _ in range(2):
        z = net.conv(y, 96, 1, fuse=FuseCode.RELU6)
        z = net.conv(z, 96, 3, group=96, fuse=FuseCode.RELU6)
        y = net.add(net.conv(z, 32, 1, fuse=FuseCode.NONE), y)
    z = net.conv(y, 96, 1, fuse=FuseCode.RELU6)
    z = net.conv(z, 96, 3, stride=2, group=96, fuse=FuseCode.RELU6)
    y = net.conv(z, 64, 1, fuse=FuseCode.NONE)
    y = net.conv(y, 64, 3, group=4)
    return [x], [y]


def classifier(net: Net, size: tuple[int, ...]):
    n, h, w = size
    x = net.tensor([n, 3, h, w], (0, 2, 3))
    y = net.conv(x, 32, 3, stride=2)
    y = net.pool(y, O.MAX_POOL_2D, 3, 2, pad=1)
    y = net.conv(y, 64, 3)
    y = net.pool(y, O.AVERAGE_POOL_2D, 2, 2)
    n, c = net.shape(y)[:2]
    y = net.op(O.ADAPTIVE_AVERAGE_POOL_2D, [y, net.i32(1, 1)], [n, c, 1, 1], (0,))
    y = net.op(O.FLATTEN, [y, net.i32(1), net.i32(3)], [n, c], (0,))
    y = net.op(O.FULLY_CONNECTED, [y, net.weights(10, c), net.weights(10), net.i32(FuseCode.NONE)], [n, 10], (0,))
    y = net.op(O.SOFTMAX, [y, net.i32(1)], [n, 10], (0,))
    return [x], [y]


def transformer(net: Net, size: tuple[int, ...]):
    b, t = size
    d, ff = 64, 256
    x = net.tensor([b, t, d], (0, 1))

    def proj(v, k, n):
        return net.matmul(v, net.rng.normal(0, k**-0.5, (k, n)).astype("float32"))

    q, k, v = proj(x, d, d), proj(x, d, d), proj(x, d, d)
    scores = net.matmul(q, k, transpose_b=True)
    scores = net.op(O.MUL, [scores, net.const(np.array([d**-0.5], "float32")), net.i32(0)], [b, t, t], (0, 1, 2))
    attn = net.op(O.SOFTMAX, [scores, net.i32(-1)], [b, t, t], (0, 1, 2))
    y = net.add(proj(net.matmul(attn, v), d, d), x)
    h = net.op(O.RELU, [proj(y, d, ff)], [b, t, ff], (0, 1))
    y = net.add(proj(h, ff, d), y)
    return [x], [y]


NETS: dict[str, tuple[Callable, list[tuple[int, ...]], Callable[[tuple[int, ...]], tuple[int, ...]]]] = {
    # name: (builder, fed sizes, input shape of a size)
    "conv64": (conv64, [(1, 56, 56), (1, 40, 72)], lambda s: (s[0], 64, s[1], s[2])),
    # resnet18's last two stages: 3x3 convolutions of many channels on small maps.
    "conv256": (deep_convs, [(1, 256, 14, 14), (1, 256, 10, 18)], lambda s: (s[0], s[1], s[2], s[3])),
    "conv512": (deep_convs, [(1, 512, 7, 7), (1, 512, 5, 9)], lambda s: (s[0], s[1], s[2], s[3])),
    "narrow": (narrow, [(1, 56, 56), (1, 40, 72)], lambda s: (s[0], 64, s[1], s[2])),
    "resnet": (resnet, [(1, 56, 56), (1, 40, 72)], lambda s: (s[0], 64, s[1], s[2])),
    "mobilenet": (mobilenet, [(1, 56, 56), (1, 48, 80)], lambda s: (s[0], 32, s[1], s[2])),
    "classifier": (classifier, [(1, 64, 64), (4, 96, 128)], lambda s: (s[0], 3, s[1], s[2])),
    "transformer": (transformer, [(1, 128), (2, 77)], lambda s: (s[0], s[1], 64)),
}


class Runner:
    def __init__(self, model: nna.Model, threads: int):
        context = nna.Context([nna.Device.acquire("llvm")], f"TVM_NUM_THREADS={threads};")
        start = time.perf_counter()
        self.compilation = nna.Compilation(model, context)
        self.compilation.finish()
        self.compile_s = time.perf_counter() - start
        self.execution = nna.Execution(self.compilation)

    def feed(self, inputs: list[np.ndarray]) -> list:
        outputs = self.execution.use_arrays(inputs)
        self.execution.compute()
        return outputs

    def times(self, count: int) -> list[float]:
        result = []
        for _ in range(count):
            start = time.perf_counter()
            self.execution.compute()
            result.append(time.perf_counter() - start)
        return result


def schedule_rules(model: nna.Model) -> dict[str, str]:
    """Which default CPU rule scheduled each kernel of ``model`` (built here, outside the cache)."""
    import tvm

    from nnadapter_tvm.runtime.convert import convert_model
    from nnadapter_tvm.targets.cpu import pipeline
    from nnadapter_tvm.targets.llvm import LlvmDriver

    mod, _ = convert_model(model)
    target = LlvmDriver().tvm_target({})
    with target, tvm.transform.PassContext(opt_level=3):
        return pipeline.prepare(mod, target)[1]


def bench(name: str, threads: int, rounds: int, block: int, show_rules: bool) -> list[dict]:
    build, sizes, input_shape = NETS[name]
    net = Net(symbolic=True)
    inputs, outputs = build(net, sizes[0])
    model = net.finish(inputs, outputs)
    if show_rules:
        print(f"# {name}: {schedule_rules(model)}", file=sys.stderr)
    symbolic = Runner(model, threads)
    rows = []
    for size in sizes:
        net = Net(symbolic=False)
        static = Runner(net.finish(*build(net, size)), threads)
        x = np.random.default_rng(1).uniform(-1, 1, input_shape(size)).astype("float32")
        got, want = symbolic.feed([x])[0], static.feed([x])[0]
        error = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))
        ratios, sym_ms, static_ms = [], [], []
        symbolic.times(3), static.times(3)
        for _ in range(rounds):
            a = statistics.median(symbolic.times(block))
            b = statistics.median(static.times(block))
            ratios.append(a / b)
            sym_ms.append(a * 1e3)
            static_ms.append(b * 1e3)
        rows.append(
            {
                "net": name,
                "size": "x".join(str(v) for v in input_shape(size)),
                "symbolic_ms": statistics.median(sym_ms),
                "static_ms": statistics.median(static_ms),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "max_rel_error": error,
                "compile_symbolic_s": symbolic.compile_s,
                "compile_static_s": static.compile_s,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rules", action="store_true", help="print the schedule rule of each symbolic kernel")
    args = parser.parse_args(argv)
    rows = []
    if not args.json:
        print(f"{args.threads} threads, {args.rounds} rounds of {args.block} runs each side; ratio = symbolic / static")
        print("| net | fed size | symbolic ms | static ms | ratio (min-max over rounds) | max rel. diff |")
        print("|---|---|---|---|---|---|")
    for name in [n.strip() for n in args.nets.split(",") if n.strip()]:
        if name not in NETS:
            parser.error(f"unknown net {name!r} (known: {', '.join(NETS)})")
        rows += bench(name, args.threads, args.rounds, args.block, args.rules)
        if not args.json:
            for row in rows[-len(NETS[name][1]) :]:
                ratio = f"{row['ratio']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
                print(
                    f"| {row['net']} | {row['size']} | {row['symbolic_ms']:.3f} | {row['static_ms']:.3f} | {ratio} | "
                    f"{row['max_rel_error']:.1e} |",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
