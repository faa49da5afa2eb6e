"""``Compilation``: a model compiled for the context's devices, or loaded from a cache."""

from __future__ import annotations

import errno
import json
import logging
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import tvm_ffi

from nnadapter_tvm import extensions
from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import TVM_ERRORS, check, fail, tvm_error_text
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime import cache, kernel_cache, phases, weights
from nnadapter_tvm.runtime.partition import assign_devices, split_by_device
from nnadapter_tvm.runtime.runtime_check import RuntimeCheck
from nnadapter_tvm.targets import DRIVERS, Driver, Program
from nnadapter_tvm.types import NNAdapterError, OperandType, ResultCode

log = logging.getLogger("nnadapter_tvm")
_COMPILE_LOCK = threading.Lock()


class Compilation:
    """``NNAdapterCompilation``; the spec's three cache cases hold exactly:

    1. ``cache_buffer`` given: it is loaded and ``model`` ignored;
    2. ``cache_token`` and ``cache_dir`` given: ``<cache_dir>/<cache_token>.nnc`` is loaded if
       present, else the model is compiled and the file written;
    3. neither: the model is compiled and nothing is written.

    A damaged or foreign cache is reported and recompiled when a model is at hand, and an
    error when not.
    """

    def __init__(
        self,
        model: Model | None,
        context: Context,
        cache_token: str | None = None,
        cache_buffer: bytes | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        check(isinstance(context, Context), f"Compilation needs a Context, got {context!r}")
        check(model is None or isinstance(model, Model), f"Compilation's model must be a Model or None, got {model!r}")
        if cache_token is not None:
            cache.validate_token(cache_token)
        check(
            model is not None or cache_buffer is not None or (cache_token and cache_dir),
            "Compilation needs a model, a cache buffer, or a cache token with a cache directory",
        )
        self.model = model
        self.context = context
        self.cache_token = cache_token
        self.cache_buffer = None if cache_buffer is None else bytes(cache_buffer)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.finished = False
        self.loaded_from_cache = False
        self.compile_seconds: float | None = None
        self.compile_phases: phases.PhaseTimes | None = None  # wall and CPU seconds per phase of the compile
        self.load_seconds: float | None = None
        # Per subgraph built with the kernel cache: the kernels it found and built (runtime.kernel_cache).
        self.kernel_stats: list[kernel_cache.Stats] = []
        self._buffer: bytes | mmap.mmap | None = None  # a cache file loaded stays mapped, not copied
        self._steps: list[_Step] = []
        self._model_inputs: list[int] = []
        self._model_outputs: list[int] = []
        self._input_types: list[OperandType] = []
        self._output_types: list[OperandType] = []
        self._signature: list | None = None
        self._named = False
        self._direct = False

    # -- the three cases --------------------------------------------------------------
    def finish(self) -> None:
        check(not self.finished, "Compilation.finish() was already called")
        if self.cache_buffer is not None:
            self._load_or_compile(lambda: self.cache_buffer, "cache buffer", write_to=None)
        elif self.cache_token and self.cache_dir:
            path = cache.cache_path(self.cache_dir, self.cache_token)
            if os.path.lexists(path):
                self._load_or_compile(lambda: cache.map_file(path), path, write_to=path)
            else:
                if self.model is None:
                    fail(f"no cache file {path} and no model to compile")
                self._compile()
                _write_cache(path, self._buffer)
        else:
            self._compile()
        self.finished = True

    def _load_or_compile(self, read: Callable[[], bytes], source: str, write_to: str | None) -> None:
        try:
            self._load(read(), source)
        except cache.CacheError as err:
            if self.model is None:
                raise
            log.warning("%s; recompiling the model", err)
            self._compile()
            if write_to:
                _write_cache(write_to, self._buffer)

    # -- compile ------------------------------------------------------------------------
    def _compile(self) -> None:
        # Every phase of this compile in compile_phases, and in any recorder of the caller's (runtime.phases).
        with phases.recording() as times:
            self._compile_model()
        self.compile_phases = times

    def _compile_model(self) -> None:
        # Imported here: a process that only loads caches never needs the converters.
        from nnadapter_tvm.runtime.convert import convert_subgraph

        model = self.model
        check(model is not None and model.finished, "the model must be finished (Model.finish()) before compiling")
        start = time.perf_counter()
        props = self.context.properties
        subgraphs = split_by_device(model, assign_devices(model, self.context))
        codegen = cache.json_properties(self.context.codegen_properties())
        out_dims: dict[int, list[int]] = {}
        steps, blobs, records = [], [], []
        for sub in subgraphs:
            driver = self.context.devices[sub.device_index].driver
            # Relax's BlockBuilder and TVM's build keep process-wide state: one compile at a time.
            checks: list[RuntimeCheck] = []
            with _COMPILE_LOCK:
                with phases.phase(phases.CONVERT):
                    mod, dims = convert_subgraph(sub.inputs, sub.outputs, sub.operations, checks)
                out_dims.update({o.index: d for o, d in zip(sub.outputs, dims)})
                try:
                    kernels = driver.kernel_cache(props, self.context.cache_key)
                    executable = driver.build(mod, props, kernels)
                    if kernels is not None:
                        self.kernel_stats.append(kernels.stats)
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
            step = _Step(driver, [o.index for o in sub.inputs], [o.index for o in sub.outputs], blob, checks)
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
                packed, record.weights = weights.pack(lifted)
                record.weights_blob = len(blobs)
                blobs.append(packed)
                step.weights = weights.views(packed, record.weights)
            records.append(record)
        self._steps = steps
        self._model_inputs = [o.index for o in model.inputs]
        self._model_outputs = [o.index for o in model.outputs]
        self._input_types = [o.type.copy() for o in model.inputs]
        self._output_types = [o.type.copy(dimensions=out_dims.get(o.index, o.type.dimensions)) for o in model.outputs]
        with phases.phase(phases.LOAD):
            self._load_runnable_programs()
        self.compile_seconds = time.perf_counter() - start
        manifest = cache.Manifest(
            input_types=self._input_types,
            output_types=self._output_types,
            model_inputs=self._model_inputs,
            model_outputs=self._model_outputs,
            subgraphs=records,
            token=self.cache_token,
            compile_seconds=self.compile_seconds,
            extensions=extensions.used_by([op.type for op in model.operations]),
        )
        with phases.phase(phases.CACHE):
            self._buffer = cache.pack(manifest.to_json(), blobs, key=self.context.cache_key)

    # -- load ---------------------------------------------------------------------------
    def _load(self, data: bytes, source: str) -> None:
        start = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-") as staging:
                self._load_staged(data, source, staging)
        finally:
            if isinstance(data, cache.MappedFile):
                data.release()  # its descriptor served the staging; the mapping stays
        self.load_seconds = time.perf_counter() - start

    def _load_staged(self, data: bytes, source: str, staging: str) -> None:
        container, paths = _verify_and_stage(data, source, self.context.cache_key, staging)
        manifest = cache.Manifest.from_json(container.meta, source)
        manifest.check_origin(source, self.cache_token)
        extensions.check_available(manifest.extensions, source)
        props = self.context.properties
        names = [d.name for d in self.context.devices]
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
            steps.append(_Step(driver, record.inputs, record.outputs, container.blobs[record.blob], record.checks))
            steps[-1].path = paths.get(record.blob)
            steps[-1].weights = _weight_views(container, record, source, copy=not self.context.weights_in_place)
        if self.model is not None and not _same_io(self.model, manifest.input_types, manifest.output_types):
            raise cache.CacheError(f"{source}: its inputs/outputs differ from the model's")
        self._steps, self._model_inputs, self._model_outputs = steps, manifest.model_inputs, manifest.model_outputs
        self._input_types, self._output_types = manifest.input_types, manifest.output_types
        try:
            self._load_runnable_programs()
        except NNAdapterError as err:
            raise cache.CacheError(f"{source}: {err.args[0]}") from None
        finally:
            for step in steps:
                step.path = None  # the staging directory goes; a later load writes the blob again
        self._buffer = data if isinstance(data, (bytes, mmap.mmap)) else bytes(data)
        self.loaded_from_cache = True
        self.compile_seconds = manifest.compile_seconds

    def _load_runnable_programs(self) -> None:
        """Load now what can run in this process; the rest (e.g. aarch64 code on x86) only ships."""
        self._signature = None
        self._named = any(t.dimension_names for t in self._input_types)
        # One subgraph taking the model's inputs and giving its outputs in order: run without the routing.
        self._direct = (
            len(self._steps) == 1
            and self._steps[0].inputs == self._model_inputs
            and self._steps[0].outputs == self._model_outputs
        )
        for step in self._steps:
            if step.driver.can_run_here()[0]:
                step.load(self.context.properties)

    # -- execution ----------------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray | tvm_ffi.Tensor]) -> list[tvm_ffi.Tensor]:
        """Run the subgraphs in order, handing tensors across (one device's stay on it); returns the
        model outputs as the tensors the last subgraphs gave (the caller copies them out, once)."""
        if not self.finished:
            self._check_finished("execution")
        if self._direct:
            step = self._steps[0]
            program = step.program or self._load_step(step)
            try:
                return program.run(inputs)
            except (*TVM_ERRORS, MemoryError) as err:
                raise step.execution_error(inputs, err) from None
        values: dict[int, object] = dict(zip(self._model_inputs, inputs))
        for step in self._steps:
            program = step.program or self._load_step(step)
            arguments = [values[k] for k in step.inputs]
            try:
                results = program.run(arguments)
            except (*TVM_ERRORS, MemoryError) as err:
                raise step.execution_error(arguments, err) from None
            values.update(zip(step.outputs, results))
        return [values[k] for k in self._model_outputs]

    def _load_step(self, step: _Step) -> Program:
        """The program of a subgraph not loaded at finish(): loaded now if it can run here."""
        ok, why = step.driver.can_run_here()
        if not ok:
            fail(
                f"device {step.driver.name} cannot run in this process ({why}); "
                "its compiled cache can be deployed to such a device",
                ResultCode.DEVICE_NOT_FOUND,
            )
        step.load(self.context.properties)
        return step.program

    @property
    def devices_used(self) -> list[str]:
        """The device of each subgraph, in execution order."""
        return [step.driver.name for step in self._steps]

    @property
    def programs(self) -> list[Program]:
        """The loaded program of each subgraph, in execution order (for tools: the profiler instruments
        their VMs)."""
        return [step.program for step in self._steps]

    # -- queries ------------------------------------------------------------------------
    def _check_finished(self, what: str) -> None:
        check(self.finished, f"{what} needs Compilation.finish() first")

    def query_inputs_and_outputs(self) -> tuple[list[OperandType], list[OperandType]]:
        self._check_finished("query_inputs_and_outputs()")
        return [t.copy() for t in self._input_types], [t.copy() for t in self._output_types]

    def serialize(self) -> bytes:
        """The cache buffer: pass it back as ``cache_buffer`` to skip compiling."""
        self._check_finished("serialize()")
        if not isinstance(self._buffer, bytes):
            self._buffer = bytes(self._buffer)  # a mapped cache file: copied when first asked for
        return self._buffer

    @property
    def input_types(self) -> list[OperandType]:
        return self._input_types

    @property
    def input_signature(self) -> list[tuple[np.dtype, tuple[int, ...] | None, tuple[int, ...]]]:
        """Per input: its element type, its dimensions when all are known (else None), its dimensions
        (UNKNOWN where open); what a run's quick check of numpy inputs compares against."""
        signature = self._signature
        if signature is None:
            signature = self._signature = [
                (np.dtype(t.dtype), tuple(t.dimensions) if t.is_static() else None, tuple(t.dimensions))
                for t in self._input_types
            ]
        return signature

    @property
    def named_dimensions(self) -> bool:
        """Whether some inputs' UNKNOWN dimensions bear names (each run checks they agree)."""
        return self._named

    @property
    def output_types(self) -> list[OperandType]:
        return self._output_types

    def destroy(self) -> None:
        self._steps = []
        self.finished = False

    def __enter__(self) -> Compilation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


class _Step:
    """One subgraph: its device, the operand keys it reads and writes, its module."""

    def __init__(
        self, driver: Driver, inputs: list[int], outputs: list[int], blob: bytes, checks: Sequence[RuntimeCheck] = ()
    ):
        self.driver, self.inputs, self.outputs, self.blob = driver, inputs, outputs, blob
        self.checks = list(checks)
        self.program: Program | None = None
        self.path: str | None = None  # the blob already written out, while a cached load stages it
        self.weights: list[np.ndarray] | None = None  # main's last parameter (runtime.weights)

    def execution_error(self, arguments: Sequence[object], err: BaseException) -> NNAdapterError:
        """What a failed run of this subgraph means: a runtime check of an operation that the inputs'
        dimensions violate (INVALID_DIMENSIONS, the operation's own message), memory that could not be
        allocated (OUT_OF_MEMORY: a dimension known only at execution made a tensor too big), or else
        TVM's own message (INVALID_DIMENSIONS: the shapes the compiled code asserts did not hold)."""
        shapes = [[int(d) for d in getattr(x, "shape", ())] for x in arguments]
        text = tvm_error_text(err)
        failed = next((c for c in self.checks if c.fails_for(shapes)), None) or RuntimeCheck.numbered(self.checks, text)
        if failed is not None:
            return NNAdapterError(
                ResultCode.INVALID_DIMENSIONS, f"{failed.message} (input dimensions at execution: {shapes})"
            )
        if isinstance(err, MemoryError) or "bad_alloc" in text or "out of memory" in text.lower():
            return NNAdapterError(
                ResultCode.OUT_OF_MEMORY,
                f"execution on {self.driver.name} ran out of memory ({text}): the dimensions given at execution "
                f"{shapes} make a tensor larger than this machine can allocate",
            )
        return NNAdapterError(ResultCode.INVALID_DIMENSIONS, f"execution failed: {text} (input dimensions {shapes})")

    def load(self, props: dict) -> None:
        # The file a cached load staged, else the library's bytes (the driver writes them out for dlopen).
        try:
            self.program = self.driver.load(self.path or memoryview(self.blob), props, self.weights)
        except (*TVM_ERRORS, OSError) as err:
            fail(
                f"the {self.driver.name} module does not load: {tvm_error_text(err)}",
                ResultCode.DEVICE_INTERNAL_ERROR,
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


def _write_cache(path: str, data: bytes) -> None:
    try:
        with phases.phase(phases.CACHE):
            cache.write_atomic(path, data)
    except OSError as err:
        code = ResultCode.OUT_OF_MEMORY if err.errno == errno.ENOSPC else ResultCode.DEVICE_INTERNAL_ERROR
        fail(f"writing the cache file {path} failed: {err.strerror or err} (nothing was left behind)", code)


def _same_io(model: Model, input_types: list[OperandType], output_types: list[OperandType]) -> bool:
    def key(t: OperandType) -> tuple:
        return (t.precision, len(t.dimensions), t.scale, t.zero_point)

    return [key(o.type) for o in model.inputs] == [key(t) for t in input_types] and [
        key(o.type) for o in model.outputs
    ] == [key(t) for t in output_types]
