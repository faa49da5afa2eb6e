"""Compiling an NNAdapter model: the device split, each subgraph converted to Relax, built by its
target's driver (through the kernel cache), exported, and packed with its manifest into the ``.nnc``
bytes; the programs that can run here are loaded."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import threading
import time

from nnadapter_tvm import extensions
from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import TVM_ERRORS, check, fail, tvm_error_text
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime import cache, kernel_cache, phases, weights
from nnadapter_tvm.runtime.partition import assign_devices, split_by_device
from nnadapter_tvm.runtime.runtime_check import RuntimeCheck
from nnadapter_tvm.runtime.steps import CompiledModel, Step, load_programs
from nnadapter_tvm.types import ResultCode

#: Relax's BlockBuilder and TVM's build keep process-wide state: one conversion and build at a time.
COMPILE_LOCK = threading.Lock()


def compile_model(
    model: Model, context: Context, cache_token: str | None, kernel_stats: list[kernel_cache.Stats]
) -> CompiledModel:
    """``model`` compiled for ``context``'s devices; each subgraph built with the kernel cache appends
    the kernels it found and built to ``kernel_stats``."""
    # Imported here: a process that only loads caches never needs the converters.
    from nnadapter_tvm.runtime.convert import convert_subgraph

    check(model is not None and model.finished, "the model must be finished (Model.finish()) before compiling")
    start = time.perf_counter()
    props = context.properties
    subgraphs = split_by_device(model, assign_devices(model, context))
    codegen = cache.json_properties(context.codegen_properties())
    out_dims: dict[int, list[int]] = {}
    steps, blobs, records = [], [], []
    for sub in subgraphs:
        driver = context.devices[sub.device_index].driver
        checks: list[RuntimeCheck] = []
        with COMPILE_LOCK:
            with phases.phase(phases.CONVERT):
                mod, dims = convert_subgraph(sub.inputs, sub.outputs, sub.operations, checks)
            out_dims.update({o.index: d for o, d in zip(sub.outputs, dims)})
            try:
                kernels = driver.kernel_cache(props, context.cache_key)
                executable = driver.build(mod, props, kernels)
                if kernels is not None:
                    kernel_stats.append(kernels.stats)
            except TVM_ERRORS as err:
                fail(
                    f"TVM failed to build for {driver.name}: {tvm_error_text(err)}",
                    ResultCode.DEVICE_INTERNAL_ERROR,
                )
        lifted = getattr(executable, "weights", None)  # kept out of the module (runtime.weights)
        with phases.phase(phases.EXPORT), tempfile.TemporaryDirectory(prefix="nnadapter-tvm-") as tmp:
            path = os.path.join(tmp, "module.so")
            try:
                driver.export(executable, path)
            except (*TVM_ERRORS, OSError) as err:
                fail(
                    f"exporting the {driver.name} module failed: {tvm_error_text(err)}",
                    ResultCode.DEVICE_INTERNAL_ERROR,
                )
            blob = cache.read_file(path)
        step = Step(driver, [o.index for o in sub.inputs], [o.index for o in sub.outputs], blob, checks)
        steps.append(step)
        blobs.append(blob)
        record = cache.SubgraphRecord(
            device=driver.name,
            target=str(driver.tvm_target(props)),
            target_key=json.loads(json.dumps(driver.target_key(props))),  # as a load reads it back
            blob=len(blobs) - 1,
            inputs=step.inputs,
            outputs=step.outputs,
            properties=codegen,
            checks=checks,
        )
        if lifted:
            pieces, record.weights = weights.pack(lifted)
            record.weights_blob = len(blobs)
            blobs.append(pieces)
            step.weights = list(lifted)
        records.append(record)
    input_types = [o.type.copy() for o in model.inputs]
    output_types = [o.type.copy(dimensions=out_dims.get(o.index, o.type.dimensions)) for o in model.outputs]
    with phases.phase(phases.LOAD):
        load_programs(steps, props)
    compiled = CompiledModel(
        steps,
        [o.index for o in model.inputs],
        [o.index for o in model.outputs],
        input_types,
        output_types,
        b"",
        compile_seconds=time.perf_counter() - start,
    )
    manifest = cache.Manifest(
        input_types=input_types,
        output_types=output_types,
        model_inputs=compiled.model_inputs,
        model_outputs=compiled.model_outputs,
        subgraphs=records,
        token=cache_token,
        compile_seconds=compiled.compile_seconds,
        extensions=extensions.used_by([op.type for op in model.operations]),
    )
    with phases.phase(phases.CACHE):
        compiled.buffer = cache.pack_pieces(manifest.to_json(), blobs, key=context.cache_key)
    return compiled


def write_cache(path: str, data: bytes | cache.Pieces) -> None:
    """The ``.nnc`` written to ``path`` whole or not at all (``cache.write_atomic``)."""
    try:
        with phases.phase(phases.CACHE):
            cache.write_atomic(path, data)
    except OSError as err:
        code = ResultCode.OUT_OF_MEMORY if err.errno == errno.ENOSPC else ResultCode.DEVICE_INTERNAL_ERROR
        fail(f"writing the cache file {path} failed: {err.strerror or err} (nothing was left behind)", code)
