"""Loading a compiled model from ``.nnc`` bytes: the checksum and signature verified while the modules that
can run here are staged for dlopen, the manifest checked against the context (devices, targets,
extensions) and the model, the weights viewed in place, the programs loaded. Anything wrong with the bytes
is a ``cache.CacheError`` (which a compilation with a model at hand answers by compiling it)."""

from __future__ import annotations

import json
import mmap
import os
import tempfile
import threading

import numpy as np

from nnadapter_tvm import extensions
from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import fail
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime import cache, weights
from nnadapter_tvm.runtime.steps import CompiledModel, Step, load_programs
from nnadapter_tvm.targets import DRIVERS
from nnadapter_tvm.types import NNAdapterError, OperandType, ResultCode


def load_cached(
    data: bytes | mmap.mmap, source: str, context: Context, cache_token: str | None, model: Model | None
) -> CompiledModel:
    """The compiled model in ``data`` (read from ``source``, named in errors) for ``context``; ``model``,
    where at hand, must have the same inputs and outputs. A mapped cache file's descriptor is released
    once its modules are staged (the mapping stays)."""
    try:
        with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-") as staging:
            return _load_staged(data, source, context, cache_token, model, staging)
    finally:
        if isinstance(data, cache.MappedFile):
            data.release()  # its descriptor served the staging; the mapping stays


def _load_staged(
    data: bytes | mmap.mmap, source: str, context: Context, cache_token: str | None, model: Model | None, staging: str
) -> CompiledModel:
    container, paths = _verify_and_stage(data, source, context.cache_key, staging)
    manifest = cache.Manifest.from_json(container.meta, source)
    manifest.check_origin(source, cache_token)
    extensions.check_available(manifest.extensions, source)
    props = context.properties
    names = [d.name for d in context.devices]
    steps = []
    for record in manifest.subgraphs:
        if record.device not in names:
            raise cache.CacheError(f"{source}: built for device {record.device!r}, the context has {names}")
        if not 0 <= record.blob < len(container.blobs):
            raise cache.CacheError(f"{source}: malformed metadata (no blob {record.blob})")
        driver = DRIVERS[record.device]
        # The recorded key equal to the context's means the same target; else (an older cache, a host
        # whose CPU LLVM names alike) the target itself decides, at the cost of importing TVM's compiler.
        if record.target_key is None or record.target_key != json.loads(json.dumps(driver.target_key(props))):
            target = str(driver.tvm_target(props))
            if target != record.target:
                raise cache.CacheError(f"{source}: built for target {record.target}, the context targets {target}")
        steps.append(Step(driver, record.inputs, record.outputs, container.blobs[record.blob], record.checks))
        steps[-1].path = paths.get(record.blob)
        steps[-1].weights = _weight_views(container, record, source, copy=not context.weights_in_place)
    if model is not None and not _same_io(model, manifest.input_types, manifest.output_types):
        raise cache.CacheError(f"{source}: its inputs/outputs differ from the model's")
    try:
        load_programs(steps, props)
    except NNAdapterError as err:
        raise cache.CacheError(f"{source}: {err.args[0]}") from None
    finally:
        for step in steps:
            step.path = None  # the staging directory goes; a later load writes the blob again
    return CompiledModel(
        steps,
        manifest.model_inputs,
        manifest.model_outputs,
        manifest.input_types,
        manifest.output_types,
        data if isinstance(data, (bytes, mmap.mmap)) else bytes(data),
        compile_seconds=manifest.compile_seconds,
    )


def _verify_and_stage(
    data: bytes | mmap.mmap, source: str, key: bytes | None, staging: str
) -> tuple[cache.Container, dict[int, str]]:
    """The container, and the blob of each subgraph that can run here written to a file in ``staging``
    (what dlopen needs), written while another thread computes the checksum (and the signature with a
    key): each is a pass over every byte (575 MB for vgg19), and both release the GIL. A mapped cache
    file's blob is copied by the kernel from the file the mapping reads (``cache.copy_out``). Nothing
    is loaded before the checks pass; where they fail, their error is the one raised."""
    failed: list[BaseException] = []

    def check() -> None:
        try:
            cache.verify(data, source, key)
        except BaseException as err:  # re-raised in the caller's thread below
            failed.append(err)

    thread = threading.Thread(target=check, name="nnadapter-tvm-verify", daemon=True)
    thread.start()
    paths: dict[int, str] = {}
    try:
        container = cache.unpack(data, source, key=key, integrity=False)
        for blob in _runnable_blobs(container):
            paths[blob] = os.path.join(staging, f"module{blob}.so")
            cache.copy_out(data, container.offsets[blob], len(container.blobs[blob]), paths[blob])
    except (cache.CacheError, OSError) as err:
        thread.join()
        if failed:
            raise failed[0] from None
        if isinstance(err, OSError):
            fail(
                f"{source}: staging its module for loading failed: {err.strerror or err}",
                ResultCode.DEVICE_INTERNAL_ERROR,
            )
        raise
    thread.join()
    if failed:
        raise failed[0]
    return container, paths


def _weight_views(
    container: cache.Container, record: cache.SubgraphRecord, source: str, copy: bool = False
) -> list[np.ndarray] | None:
    """The weights ``record``'s module takes, as arrays over the container's bytes (no copy), or with
    ``copy`` over an aligned copy of their blob (``CACHE_WEIGHTS_IN_PLACE=0``); None where the module
    keeps them. A record that does not fit its blob is a ``CacheError``."""
    if record.weights_blob is None:
        return None
    if not 0 <= record.weights_blob < len(container.blobs):
        raise cache.CacheError(f"{source}: malformed metadata (no weights blob {record.weights_blob})")
    blob = container.blobs[record.weights_blob]
    if copy:
        owned = weights.aligned_empty(len(blob))
        owned[:] = np.frombuffer(blob, np.uint8)
        blob = owned
    try:
        return weights.views(blob, weights.check_records(record.weights, len(blob)))
    except ValueError as err:
        raise cache.CacheError(f"{source}: malformed metadata ({err})") from None


def _runnable_blobs(container: cache.Container) -> list[int]:
    """The blobs of the subgraphs whose device can run here, read from metadata not yet checked (a
    malformed record stages nothing: the manifest's own parse reports it)."""
    blobs = []
    records = container.meta.get("subgraphs")
    for record in records if isinstance(records, list) else []:
        device = record.get("device") if isinstance(record, dict) else None
        driver = DRIVERS.get(device) if isinstance(device, str) else None
        blob = record.get("blob") if driver is not None else None
        if type(blob) is int and 0 <= blob < len(container.blobs) and blob not in blobs and driver.can_run_here()[0]:
            blobs.append(blob)
    return blobs


def _same_io(model: Model, input_types: list[OperandType], output_types: list[OperandType]) -> bool:
    def key(t: OperandType) -> tuple:
        return (t.precision, len(t.dimensions), t.scale, t.zero_point)

    return [key(o.type) for o in model.inputs] == [key(t) for t in input_types] and [
        key(o.type) for o in model.outputs
    ] == [key(t) for t in output_types]
