"""``Compilation``: a model compiled for the context's device, or loaded from a cache."""

from __future__ import annotations

import logging
import os
import tempfile
import time

from nnadapter_tvm import cache
from nnadapter_tvm.context import Context
from nnadapter_tvm.convert import convert_model
from nnadapter_tvm.errors import TVM_ERRORS, check, fail
from nnadapter_tvm.model import Model
from nnadapter_tvm.targets import DRIVERS, Driver, Program
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
        self.load_seconds: float | None = None
        self._buffer: bytes | None = None
        self._program: Program | None = None
        self._driver: Driver | None = None
        self._input_types: list[OperandType] = []
        self._output_types: list[OperandType] = []

    # -- the three cases --------------------------------------------------------------
    def finish(self) -> None:
        check(not self.finished, "Compilation.finish() was already called")
        if self.cache_buffer is not None:
            self._load_or_compile(self.cache_buffer, "cache buffer", write_to=None)
        elif self.cache_token and self.cache_dir:
            path = cache.cache_path(self.cache_dir, self.cache_token)
            if os.path.isfile(path):
                self._load_or_compile(cache.read_file(path), path, write_to=path)
            else:
                if self.model is None:
                    fail(f"no cache file {path} and no model to compile")
                self._compile()
                cache.write_atomic(path, self._buffer)
        else:
            self._compile()
        self.finished = True

    def _load_or_compile(self, data: bytes, source: str, write_to: str | None) -> None:
        try:
            self._load(data, source)
        except cache.CacheError as err:
            if self.model is None:
                raise
            log.warning("%s; recompiling the model", err)
            self._compile()
            if write_to:
                cache.write_atomic(write_to, self._buffer)

    # -- compile ------------------------------------------------------------------------
    def _device_driver(self) -> Driver:
        return self.context.devices[0].driver

    def _compile(self) -> None:
        model = self.model
        check(model is not None and model.finished, "the model must be finished (Model.finish()) before compiling")
        start = time.perf_counter()
        driver = self._device_driver()
        props = self.context.properties
        unsupported = sorted({op.type.name for op in model.operations if not driver.supports(op.type, props)})
        if unsupported:
            fail(f"device {driver.name} does not support: {', '.join(unsupported)}", ResultCode.FEATURE_NOT_SUPPORTED)
        mod, out_dims = convert_model(model)
        try:
            executable = driver.build(mod, props)
        except TVM_ERRORS as err:
            fail(
                f"TVM failed to build for {driver.name}: {str(err).strip().splitlines()[-1]}",
                ResultCode.DEVICE_INTERNAL_ERROR,
            )
        self._input_types = [o.type.copy() for o in model.inputs]
        self._output_types = [o.type.copy(dimensions=dims) for o, dims in zip(model.outputs, out_dims)]
        with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-") as tmp:
            path = os.path.join(tmp, "module.so")
            driver.export(executable, path)
            blob = cache.read_file(path)
            self._program = driver.load(path, props)
        self._driver = driver
        self.compile_seconds = time.perf_counter() - start
        meta = {
            "input_types": [t.to_dict() for t in self._input_types],
            "output_types": [t.to_dict() for t in self._output_types],
            "library": cache.library_versions(),
            "compile_seconds": self.compile_seconds,
            "subgraphs": [
                {
                    "device": driver.name,
                    "target": str(driver.tvm_target(props)),
                    "properties": {k: _jsonable(v) for k, v in self.context.codegen_properties().items()},
                    "blob": 0,
                }
            ],
        }
        self._buffer = cache.pack(meta, [blob])

    # -- load ---------------------------------------------------------------------------
    def _load(self, data: bytes, source: str) -> None:
        start = time.perf_counter()
        container = cache.unpack(data, source)
        meta = container.meta
        try:
            library = meta["library"]
            subgraphs = meta["subgraphs"]
            input_types = [OperandType.from_dict(d) for d in meta["input_types"]]
            output_types = [OperandType.from_dict(d) for d in meta["output_types"]]
        except (KeyError, TypeError, ValueError) as err:
            raise cache.CacheError(f"{source}: malformed metadata ({err})") from None
        versions = cache.library_versions()
        if library != versions:
            raise cache.CacheError(f"{source}: built with {library}, this process has {versions}")
        if len(subgraphs) != 1:
            raise cache.CacheError(f"{source}: {len(subgraphs)} subgraphs; this build runs single-device caches")
        sub = subgraphs[0]
        names = [d.name for d in self.context.devices]
        driver = DRIVERS.get(sub.get("device"))
        if driver is None or driver.name not in names:
            raise cache.CacheError(f"{source}: built for device {sub.get('device')!r}, the context has {names}")
        props = self.context.properties
        if str(driver.tvm_target(props)) != sub.get("target"):
            raise cache.CacheError(
                f"{source}: built for target {sub.get('target')}, the context targets {driver.tvm_target(props)}"
            )
        if self.model is not None and not _same_io(self.model, input_types, output_types):
            raise cache.CacheError(f"{source}: its inputs/outputs differ from the model's")
        with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-") as tmp:
            path = os.path.join(tmp, "module.so")
            with open(path, "wb") as f:
                f.write(container.blobs[int(sub["blob"])])
            try:
                self._program = driver.load(path, props)
            except TVM_ERRORS as err:
                raise cache.CacheError(f"{source}: module does not load: {str(err).strip().splitlines()[-1]}") from None
        self._driver = driver
        self._input_types, self._output_types = input_types, output_types
        self._buffer = bytes(data)
        self.loaded_from_cache = True
        self.compile_seconds = meta.get("compile_seconds")
        self.load_seconds = time.perf_counter() - start

    # -- queries ------------------------------------------------------------------------
    def _check_finished(self, what: str) -> None:
        check(self.finished, f"{what} needs Compilation.finish() first")

    def query_inputs_and_outputs(self) -> tuple[list[OperandType], list[OperandType]]:
        self._check_finished("query_inputs_and_outputs()")
        return [t.copy() for t in self._input_types], [t.copy() for t in self._output_types]

    def serialize(self) -> bytes:
        """The cache buffer: pass it back as ``cache_buffer`` to skip compiling."""
        self._check_finished("serialize()")
        return self._buffer

    @property
    def program(self) -> Program:
        self._check_finished("execution")
        return self._program

    @property
    def input_types(self) -> list[OperandType]:
        return self._input_types

    @property
    def output_types(self) -> list[OperandType]:
        return self._output_types

    def destroy(self) -> None:
        self._program = None
        self.finished = False

    def __enter__(self) -> Compilation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def _jsonable(value: object) -> object:
    return list(value) if isinstance(value, (list, tuple)) else value


def _same_io(model: Model, input_types: list[OperandType], output_types: list[OperandType]) -> bool:
    def key(t: OperandType) -> tuple:
        return (t.precision, len(t.dimensions), t.scale, t.zero_point)

    return [key(o.type) for o in model.inputs] == [key(t) for t in input_types] and [
        key(o.type) for o in model.outputs
    ] == [key(t) for t in output_types]
