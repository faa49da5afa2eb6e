"""Running a plan: its compiled segments, its host steps (onnx's reference evaluator) and its control
nodes (If, Loop and Scan, run on the host around the plans of their bodies, as Paddle Lite runs
``conditional_block`` and ``while`` around its NNAdapter subgraphs).

The importer made the plan (``frontends.onnx.plan``) and the Predictor compiled its segments; here it
only runs. Values travel between steps keyed by ``id(Value)``; a value stays where the compiled code
left it (a tensor on its device) until a host step reads a view of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.execution import host_copy, host_view, run_arrays
from nnadapter_tvm.frontends.onnx.control_unit import Body, ControlUnit
from nnadapter_tvm.frontends.onnx.host import HostNode
from nnadapter_tvm.frontends.onnx.plan import HostStep, Plan
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import ResultCode


def run_plan(plan: Plan, arrays: Sequence, on_device: bool = False) -> list:
    """Run ``plan`` on its graph's inputs (numpy arrays, or tensors; every segment compiled); its outputs
    in order. Between segments a value stays where the compiled code left it (a tensor on its device: a
    next segment on that device reads it without a copy); a host step reads a view of it. The outputs
    are numpy arrays the caller owns (a tensor's one copy), or with ``on_device`` the values as they are
    (a control node's body hands them to its next iteration)."""
    route = plan.runner_state
    if route is None:
        route = plan.runner_state = _Route(plan)
    env = dict(route.consts)
    env.update(zip(route.inputs, arrays))
    for runner, step, reads, writes in route.steps:
        if runner is not None:
            results = runner.run([host_view(env[k]) for k in reads])
        else:
            results = run_arrays(step.compilation, [env[k] for k in reads], on_device=True)
        env.update(zip(writes, results))
    if on_device:
        return [env[k] for k in route.outputs]
    return [host_copy(env[k]) for k in route.outputs]


class _Route:
    """Where each step of a plan reads its inputs and writes its outputs (keys of the values by id), the
    constants it reads, and the runner of each host step: worked out once per plan, not on every run (a
    loop body runs often)."""

    def __init__(self, plan: Plan):
        graph = plan.graph
        self.consts: dict[int, np.ndarray] = {}
        self.inputs = [id(v) for v in graph.inputs]
        self.steps: list[tuple] = []
        for step in plan.steps:
            if isinstance(step, HostStep):
                unit = step.unit
                runner = ControlNode(unit) if isinstance(unit, ControlUnit) else HostNode(unit.node, graph.opset)
                reads, writes = unit.inputs, unit.outputs
            else:
                runner, reads, writes = None, step.inputs, step.outputs
            self.steps.append((runner, step, [self._key(v) for v in reads], [id(v) for v in writes]))
        self.outputs = [self._key(v) for v in graph.outputs]

    def _key(self, value: Value) -> int:
        if value.is_const:
            self.consts[id(value)] = value.const
        return id(value)


class ControlNode:
    """Runs a ``ControlUnit``: ``run(inputs)`` takes the unit's inputs and gives its outputs."""

    def __init__(self, unit: ControlUnit):
        self.unit = unit
        self.node = unit.node
        self.label = unit.label

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        given: list[np.ndarray | None] = [None] * len(self.unit.node.input)
        for slot, array in zip(self.unit.slots, inputs):
            given[slot] = np.asarray(array)
        op = self.unit.node.op_type
        if op == "If":
            return self._if(given, inputs)
        if op == "Loop":
            return self._loop(given, inputs)
        return self._scan(given, inputs)

    def _body(self, body: Body, own: list, inputs: Sequence[np.ndarray]) -> list:
        """The body's outputs as its plan left them: tensors stay on their device (a next iteration,
        or the subgraph after the node, reads them without a copy); see ``host_view``/``host_copy``."""
        return run_plan(body.plan, [*own, *(inputs[k] for k in body.captured)], on_device=True)

    def _scalar(self, array: np.ndarray, what: str) -> np.generic:
        if array.size != 1:
            fail(f"{self.label}: {what} must hold one element, got shape {list(array.shape)}")
        return array.reshape(-1)[0]

    def _if(self, given: list, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        cond = bool(self._scalar(given[0], "the condition"))
        body = self.unit.bodies["then_branch" if cond else "else_branch"]
        if body.graph is None:
            fail(f"{self.label}: its {body.attr} cannot run: {body.error}", ResultCode.FEATURE_NOT_SUPPORTED)
        return self._body(body, [], inputs)[: len(self.unit.outputs)]  # on the device, as the branch left them

    def _loop(self, given: list, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        unrolled = self.unit.unrolled
        first = self.unit.bodies["body#0" if unrolled else "body"]
        trip = given[0] if len(given) > 0 else None
        cond = given[1] if len(given) > 1 else None
        limit = None if trip is None else int(self._scalar(trip, "the trip count M"))
        if unrolled:  # one body per iteration, made for the constant trip count
            limit = unrolled
        keep = True if cond is None else bool(self._scalar(cond, "the condition"))
        carried = list(given[2:])  # then the body's outputs as they are: on the device between iterations
        n = len(carried)
        k_scans = len(first.graph.outputs) - 1 - n
        scans: list[list[np.ndarray]] = [[] for _ in range(k_scans)]
        i = 0
        # As onnxruntime: an absent condition starts true and, like a given one, is updated by the body.
        while keep and (limit is None or i < limit):
            if unrolled:  # the iteration number is a constant of body #i
                outs = self._body(self.unit.bodies[f"body#{i}"], [np.array(keep), *carried], inputs)
            else:
                outs = self._body(first, [np.array(i, np.int64), np.array(keep), *carried], inputs)
            keep = bool(self._scalar(host_view(outs[0]), "the body's condition output"))
            carried = outs[1 : n + 1]
            for k in range(k_scans):
                scans[k].append(host_view(outs[1 + n + k]))  # a view: each iteration's tensor is its own
            i += 1
        results = [host_copy(c) for c in carried] + [
            self._stack(s, first.graph.outputs[1 + n + k], 0, False, n + k) for k, s in enumerate(scans)
        ]
        return results[: len(self.unit.outputs)]

    def _scan(self, given: list, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        body = self.unit.bodies["body"]
        attrs = {a.name: a for a in self.unit.node.attribute}
        m = attrs["num_scan_inputs"].i
        if self.unit.opset >= 9:
            return self._scan9(body, attrs, given, inputs, m)
        # Scan-8: every state and scan input has a batch axis 0; each batch entry scans on its own.
        lengths = given[0]
        values = given[1:]
        batch = values[0].shape[0]
        per_batch = []
        for b in range(batch):
            count = None if lengths is None else int(lengths.reshape(-1)[b])
            per_batch.append(self._scan9(body, attrs, [v[b] for v in values], inputs, m, count))
        results = []
        for k in range(len(per_batch[0])):
            parts = [p[k] for p in per_batch]
            longest = max(p.shape[0] for p in parts) if k >= len(values) - m else None
            if longest is not None:  # shorter sequences are padded with zeros past their length
                parts = [np.concatenate([p, np.zeros((longest - p.shape[0], *p.shape[1:]), p.dtype)]) for p in parts]
            results.append(np.stack(parts))
        return results

    def _scan9(
        self, body: Body, attrs: dict, given: list, inputs: Sequence[np.ndarray], m: int, count: int | None = None
    ) -> list[np.ndarray]:
        n = len(given) - m
        states, xs = [np.asarray(a) for a in given[:n]], [np.asarray(a) for a in given[n:]]
        batched = self.unit.opset < 9
        in_axes = [0] * m if batched else [a % x.ndim for a, x in zip(self._ints(attrs, "scan_input_axes", m), xs)]
        key = "directions" if batched else "scan_input_directions"
        in_dirs = self._ints(attrs, key, m)
        lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
        if len(lengths) > 1:
            fail(
                f"{self.label}: the scan inputs have different sequence lengths {sorted(lengths)} along their scan axes"
            )
        length = lengths.pop() if lengths else 0
        if count is not None:
            length = min(length, count)
        k_scans = len(body.graph.outputs) - n
        scans: list[list[np.ndarray]] = [[] for _ in range(k_scans)]
        for t in range(length):
            slices = [np.take(x, length - 1 - t if d else t, axis=a) for x, a, d in zip(xs, in_axes, in_dirs)]
            outs = self._body(body, [*states, *slices], inputs)
            states = outs[:n]  # on the device between iterations
            for k in range(k_scans):
                scans[k].append(host_view(outs[n + k]))
        out_axes = [0] * k_scans if batched else self._ints(attrs, "scan_output_axes", k_scans)
        out_dirs = [0] * k_scans if batched else self._ints(attrs, "scan_output_directions", k_scans)
        stacked = [
            self._stack(s, body.graph.outputs[n + k], out_axes[k], bool(out_dirs[k]), n + k)
            for k, s in enumerate(scans)
        ]
        return [host_copy(s) for s in states] + stacked

    def _output_name(self, k: int) -> str:
        names = self.unit.node.output
        return names[k] if k < len(names) else f"#{k}"

    @staticmethod
    def _ints(attrs: dict, key: str, count: int) -> list[int]:
        return list(attrs[key].ints) if key in attrs else [0] * count

    def _stack(self, parts: list[np.ndarray], value: Value, axis: int, reverse: bool, k: int) -> np.ndarray:
        """Per-iteration scan outputs stacked on a new ``axis`` (the last iteration first when ``reverse``)."""
        if not parts:  # no iteration: an empty tensor of the element's shape where it is known
            shape = [0 if d is None else d for d in (value.shape or ())]
            rank = len(shape) + 1
            shape.insert(axis % rank, 0)
            return np.zeros(shape, value.dtype)
        if reverse:
            parts = parts[::-1]
        shapes = {p.shape for p in parts}
        if len(shapes) > 1:
            fail(
                f"{self.label}: scan output {k} ('{self._output_name(k)}') changes shape across iterations "
                f"({sorted(shapes)}): its iterations cannot be stacked"
            )
        rank = parts[0].ndim + 1
        return np.stack(parts, axis=axis % rank)
