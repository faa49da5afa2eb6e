"""Minimizing an ONNX fuzzer's difference: the first node whose output differs while its inputs agree,
run alone on the values that reached it (part of tests/fuzz_onnx/).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .cases import Case, _ancestors
from .run import reference, run_case


def _value_info(name: str, array: np.ndarray, symbolic: bool = False) -> onnx.ValueInfoProto:
    dims: list = list(array.shape)
    if symbolic and dims:
        dims[0] = f"N{dims[0]}"
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), dims)


def minimize(case: Case, output: str, status: str = "differs") -> Case:
    """The smallest case that still fails (``status``: differs, or error): the first node (in order)
    that fails alone on the reference's values of its inputs; else the ancestors of ``output``.  An
    error fails the whole compilation, so every node of the graph is a suspect there."""
    model = _ancestors(case.model, output) if status != "error" else case.model
    feeds = {i.name: case.feeds[i.name] for i in model.graph.input}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    # Every intermediate as an output, on the reference side only: its values feed the single-node cases.
    everything = onnx.ModelProto()
    everything.CopyFrom(model)
    del everything.graph.output[:]
    names = [o for n in model.graph.node for o in n.output if o]
    everything.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names)
    try:
        values = dict(zip(names, reference(everything, feeds)[0]))
    except Exception:
        values = {}
    values.update(feeds)
    if values:
        # A node that fails the same way first; else (a difference) one the oracles disagree on,
        # as an open bug the spec decides may be (Clip's default bounds).
        for wanted in (status, "ambiguous") if status == "differs" else (status,):
            for node in model.graph.node:
                single = _single(model, node, values, inits, wanted)
                if single is not None:
                    return single
    return Case(model, feeds, {output: case.depths.get(output, 1)})


def node_case(
    model: onnx.ModelProto, node: onnx.NodeProto, values: dict, inits: dict, symbolic: bool = False
) -> Case | None:
    """``node`` of ``model`` alone, fed ``values`` of its inputs (``inits``: the model's initializers it
    reads), its outputs typed as ``values`` holds them (leading dims as dim_params with ``symbolic``);
    None where an input's value is missing."""
    if not all(i in values or i in inits or not i for i in node.input):
        return None
    ins = [i for i in node.input if i and i not in inits]
    single_inits = [numpy_helper.from_array(inits[i], i) for i in node.input if i in inits]
    outs = [o for o in node.output if o and o in values]
    graph = helper.make_graph(
        [node],
        "minimized",
        [_value_info(i, np.asarray(values[i]), symbolic) for i in ins],
        [_value_info(o, np.asarray(values[o])) for o in outs],
        initializer=single_inits,
    )
    m = helper.make_model(graph, opset_imports=model.opset_import)
    m.ir_version = model.ir_version
    return Case(m, {i: np.asarray(values[i]) for i in ins}, dict.fromkeys(outs, 1))


def _single(model: onnx.ModelProto, node: onnx.NodeProto, values: dict, inits: dict, status: str) -> Case | None:
    """``node`` alone on ``values`` (static inputs, then leading dims as dim_params), if it gives an
    output of ``status`` so."""
    import nnadapter_tvm as nna

    for symbolic in (False, True):
        single = node_case(model, node, values, inits, symbolic)
        if single is None:
            return None
        try:
            outcome = run_case(single)
        except nna.NNAdapterError:
            continue
        if any(o.status == status for o in outcome.values()):
            return single
    return None
