"""``Compilation``: a model compiled for the context's devices, or loaded from a cache."""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Callable, Sequence

import numpy as np
import tvm_ffi

from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import TVM_ERRORS, check, fail
from nnadapter_tvm.model import Model
from nnadapter_tvm.runtime import cache, kernel_cache, phases
from nnadapter_tvm.runtime.compile import compile_model, write_cache
from nnadapter_tvm.runtime.load import load_cached
from nnadapter_tvm.runtime.steps import CompiledModel, Step
from nnadapter_tvm.targets import Program
from nnadapter_tvm.types import OperandType, ResultCode

log = logging.getLogger("nnadapter_tvm")


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
        # A cache file loaded stays mapped, not copied; a compile's container stays in pieces, not joined.
        self._buffer: bytes | mmap.mmap | cache.Pieces | None = None
        self._steps: list[Step] = []
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
                write_cache(path, self._buffer)
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
                write_cache(write_to, self._buffer)

    # -- compile and load (runtime.compile, runtime.load) ------------------------------------
    def _compile(self) -> None:
        # Every phase of this compile in compile_phases, and in any recorder of the caller's (runtime.phases).
        with phases.recording() as times:
            self._adopt(compile_model(self.model, self.context, self.cache_token, self.kernel_stats))
        self.compile_phases = times

    def _load(self, data: bytes, source: str) -> None:
        start = time.perf_counter()
        self._adopt(load_cached(data, source, self.context, self.cache_token, self.model))
        self.loaded_from_cache = True
        self.load_seconds = time.perf_counter() - start

    def _adopt(self, compiled: CompiledModel) -> None:
        self._steps, self._buffer = compiled.steps, compiled.buffer
        self._model_inputs, self._model_outputs = compiled.model_inputs, compiled.model_outputs
        self._input_types, self._output_types = compiled.input_types, compiled.output_types
        self.compile_seconds = compiled.compile_seconds
        self._signature = None
        self._named = any(t.dimension_names for t in self._input_types)
        # One subgraph taking the model's inputs and giving its outputs in order: run without the routing.
        self._direct = (
            len(self._steps) == 1
            and self._steps[0].inputs == self._model_inputs
            and self._steps[0].outputs == self._model_outputs
        )

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

    def _load_step(self, step: Step) -> Program:
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
