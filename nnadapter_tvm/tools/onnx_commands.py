"""``nnadapter-tvm run MODEL.onnx`` and ``nnadapter-tvm info MODEL.onnx``."""

from __future__ import annotations

import argparse
import time

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph, ImportOptions
from nnadapter_tvm.frontends.onnx.loader import load_model
from nnadapter_tvm.frontends.onnx.partition_config import PartitionConfig
from nnadapter_tvm.frontends.onnx.plan import CompiledSegment, Plan, make_plan
from nnadapter_tvm.frontends.onnx.values import Unit, Value
from nnadapter_tvm.session.index import Port
from nnadapter_tvm.session.predictor import Predictor


def random_input(value: Value | Port, rng: np.random.Generator, shape: list[int] | None = None) -> np.ndarray:
    """Seeded random data for ``value``: of ``shape`` where given, else its dims with unknown ones 1."""
    if shape is None:
        shape = [1 if d is None else d for d in (value.shape or ())]
    else:
        fixed = list(value.shape or ())
        if len(shape) != len(fixed) or any(f is not None and f != g for f, g in zip(fixed, shape)):
            shown = "x".join("?" if f is None else str(f) for f in fixed)
            fail(f"--shape for input {value.name!r}: {shape} does not fit its dims {shown}")
    dtype = np.dtype(value.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.integers(0, 10, shape).astype(dtype)


def _read_inputs(
    specs: list[str], predictor: Predictor, shapes: dict[str | None, list[int]] | None = None
) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            fail(f"--input {spec!r}: expected NAME=FILE.npy")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            fail(f"--input {name}: cannot read {path}: {err}")
    rng = np.random.default_rng(0)
    for value in predictor.inputs:
        if value.name not in feeds and not specs:
            shapes = shapes or {}
            feeds[value.name] = random_input(value, rng, shapes.get(value.name, shapes.get(None)))
    return feeds


def cmd_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    bar = tqdm(total=None, unit="subgraph", desc="compiling", leave=False)

    def progress(done: int, total: int, subgraph: CompiledSegment) -> None:
        bar.total = total
        bar.n = done
        bar.set_postfix_str(f"subgraph {min(done + 1, total)}/{total}: {subgraph.operation_count} operations")
        bar.refresh()

    start = time.perf_counter()
    try:
        predictor = Predictor(
            args.model,
            devices=args.device or ["llvm"],
            context_properties=args.properties,
            cache_dir=args.cache_dir,
            partition_config=args.partition_config,
            host_fallback=args.host_fallback,
            progress=progress,
        )
    finally:
        bar.close()
    prepare_s = time.perf_counter() - start
    feeds = _read_inputs(args.input or [], predictor, getattr(args, "shapes", None))
    outputs = predictor.run(feeds)  # the first run: warms up
    start = time.perf_counter()
    for _ in range(args.repeat):
        outputs = predictor.run(feeds)
    run_s = (time.perf_counter() - start) / max(args.repeat, 1)
    how = "loaded from the cache" if predictor.loaded_from_cache else "compiled"
    print(f"model: {args.model}   subgraphs: {len(predictor.compilations)}   host nodes: {predictor.host_node_count}")
    print(f"token: {predictor.token}")
    for name, x in zip(predictor.input_names, [feeds[n] for n in predictor.input_names]):
        print(f"input  {name}: {x.dtype}{list(x.shape)}")
    for name, y in zip(predictor.output_names, outputs):
        flat = np.asarray(y).ravel()
        head = ", ".join(f"{v:.6g}" if flat.dtype.kind == "f" else str(v) for v in flat[:6])
        print(f"output {name}: {y.dtype}{list(y.shape)} [{head}{', ...' if flat.size > 6 else ''}]")
    print(f"prepare:   {prepare_s * 1000:9.1f} ms ({how})")
    stats = [s for c in predictor.compilations for s in c.kernel_stats]
    if stats:
        found, built = sum(s.hits for s in stats), sum(s.misses for s in stats)
        print(f"kernels:   {found} from the kernel cache, {built} built")
    print(f"inference: {run_s * 1000:9.1f} ms (mean of {args.repeat})")
    return 0


def _placement(graph: ImportedGraph, plan: Plan) -> dict[int, str]:
    where: dict[int, str] = {}
    for step in plan:
        if step.on_host:
            where[id(step.unit)] = "host"
        else:
            for unit in step.units:
                where[id(unit)] = f"subgraph {step.index}"
    for unit in graph.units:
        where.setdefault(id(unit), "folded at import" if unit.folded else "subgraph (no operations)")
    return where


def cmd_info(args: argparse.Namespace) -> int:
    config = PartitionConfig.load(args.partition_config) if args.partition_config else None
    graph = ImportedGraph(load_model(args.model), ImportOptions(host_fallback=args.host_fallback, host_ops=config))
    plan = make_plan(graph)
    where = _placement(graph, plan)
    if args.dot:
        print(to_dot(graph, where))
        return 0
    subgraphs = plan.segments
    print(f"model: {args.model}   opset: {graph.opset}   nodes: {len(graph.model.graph.node)}")
    print(f"subgraphs: {len(subgraphs)}   host nodes: {len(graph.host_units)}")
    for unit in graph.units:
        ops = ", ".join(op.type.name for op in unit.ops)
        detail = f"  ({unit.host})" if unit.host else (f"  -> {ops}" if ops else "")
        print(f"  {unit.label}: {where[id(unit)]}{detail}")
    return 0


_COLOURS = ["lightblue", "palegreen", "gold", "salmon", "plum", "orange", "cyan", "khaki"]


def to_dot(graph: ImportedGraph, where: dict[int, str]) -> str:
    """The ONNX nodes as a DOT graph, filled by subgraph (host nodes grey, folded nodes white)."""
    lines = ["digraph G {", "  node [style=filled, shape=box];"]
    producer: dict[str, Unit] = {}
    for unit in graph.units:
        for name in unit.node.output:
            producer[name] = unit
    for k, unit in enumerate(graph.units):
        place = where[id(unit)]
        if place.startswith("subgraph ") and place[9:].isdigit():
            colour = _COLOURS[int(place[9:]) % len(_COLOURS)]
        else:
            colour = "grey" if place == "host" else "white"
        label = f"{unit.node.op_type}\\n{place}"
        lines.append(f'  n{k} [label="{label}", fillcolor={colour}];')
    index = {id(u): k for k, u in enumerate(graph.units)}
    for k, unit in enumerate(graph.units):
        for name in unit.node.input:
            if name in producer and producer[name] is not unit:
                lines.append(f'  n{index[id(producer[name])]} -> n{k} [label="{name}"];')
    lines.append("}")
    return "\n".join(lines)
