"""An onnxruntime drop-in: ``import nnadapter_tvm.onnxruntime as ort`` runs an application's ONNX models on TVM.

The surface applications use (``InferenceSession``, ``SessionOptions``, ``get_inputs`` / ``get_outputs``,
``run`` ...) over :class:`nnadapter_tvm.Predictor`, with onnxruntime's names, shapes, type strings and error
messages, so that code written for onnxruntime runs unchanged once its import is swapped.

Providers: ``"NNAdapterExecutionProvider"`` takes the options ``devices`` (a list or a comma-separated string of
device names, default ``llvm``), ``context_properties`` (``KEY=VALUE;`` pairs, see the README),
``cache_dir`` (where compiled models are kept; ``None`` or ``""`` turns caching off), ``partition_config`` (a
Paddle Lite partition config, a file or its text) and ``host_fallback`` (default ``True``: nodes no device
supports run on the host, as onnxruntime would run them; ``False`` makes them an error). ``"CPUExecutionProvider"``
means the ``llvm`` device. Other providers (CUDA, TensorRT ...) are skipped with a warning, as onnxruntime skips a
provider it does not have; with none left, the CPU provider is used.

Caching is on by default: the first session of a model compiles it into the user cache directory
(``$NNADAPTER_TVM_CACHE_DIR``, else ``$XDG_CACHE_HOME/nnadapter-tvm``, else ``~/.cache/nnadapter-tvm``, as
``nnadapter-tvm run`` does) and later sessions, in this process or another, load it from there. The
environment variable ``NNADAPTER_TVM_CACHE=0`` (or ``off``, ``false``, ``no``) or the provider option
``cache_dir=None`` turns caching off. A cache directory holds native code that is loaded into the process: it
must be trusted (README, "The cache and its trust model"). A progress bar shows the first compile when stderr
is a terminal.

``SessionOptions``: ``intra_op_num_threads`` (> 0) becomes the context property ``TVM_NUM_THREADS`` (the TVM
runtime's worker pool is process-wide). The options in ``_ACCEPTED_NO_EFFECT`` (``_onnxruntime_types.py``) are
accepted and change nothing; those that would change results or files (profiling, an optimized-model path,
custom-op libraries, dimension overrides, initializers given from outside) are refused by name when the session
is made.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nnadapter_tvm._onnxruntime_types import (
    ExecutionMode,
    ExecutionOrder,
    Fail,
    GraphOptimizationLevel,
    InvalidArgument,
    MissingInputs,
    ModelMetadata,
    NodeArg,
    NoSuchFile,
    OrtError,
    RunOptions,
    SessionOptions,
    _node_arg,
    _type_string,
)
from nnadapter_tvm.types import NNAdapterError
from nnadapter_tvm.version import __version__ as _nnadapter_tvm_version

#: The onnxruntime API release this module follows, with our own version as a PEP 440 local label
#: (applications that compare ``onnxruntime.__version__`` see a recent onnxruntime).
__version__ = f"1.17.0+nnadapter.tvm.{_nnadapter_tvm_version}"

NNADAPTER_PROVIDER = "NNAdapterExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
_PROVIDERS = (NNADAPTER_PROVIDER, CPU_PROVIDER)
_NNADAPTER_OPTIONS = ("devices", "context_properties", "cache_dir", "partition_config", "host_fallback")
_OFF = ("0", "off", "false", "no")


# ---------------------------------------------------------------- module functions


def get_available_providers() -> list[str]:
    return list(_PROVIDERS)


def get_all_providers() -> list[str]:
    return list(_PROVIDERS)


def get_device() -> str:
    """onnxruntime's build device: ``CPU`` (the GPU devices are reached through the NNAdapter provider)."""
    return "CPU"


def get_version_string() -> str:
    return __version__


def set_default_logger_severity(severity: int) -> None:
    """Accepted; this module logs nothing but warnings."""


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted; this module logs nothing but warnings."""


def set_seed(seed: int) -> None:
    """Accepted; no operation here draws random numbers from a session seed."""


def cache_dir_default() -> str | None:
    """Where sessions cache compiled models unless told otherwise; None when ``NNADAPTER_TVM_CACHE`` is off."""
    if os.environ.get("NNADAPTER_TVM_CACHE", "").strip().lower() in _OFF:
        return None
    from nnadapter_tvm.runtime.cache import default_cache_dir

    return default_cache_dir()


# ---------------------------------------------------------------- the session


def _normalize_providers(
    providers: Sequence[Any] | None, provider_options: Sequence[Mapping] | None
) -> list[tuple[str, dict]]:
    """(name, options) pairs of the providers this module has, in the order given."""
    if not providers:
        return [(CPU_PROVIDER, {})]
    pairs: list[tuple[str, dict]] = []
    for k, item in enumerate(providers):
        if isinstance(item, (tuple, list)):
            if len(item) != 2:
                raise InvalidArgument(f"provider {item!r} must be a name or a (name, options) pair")
            name, options = item
        else:
            name, options = item, {}
        if provider_options is not None:
            if len(provider_options) != len(providers):
                raise InvalidArgument("'providers' and 'provider_options' should be the same length if both are given.")
            options = {**options, **provider_options[k]}
        if name not in _PROVIDERS:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names."
                f"Available providers: '{', '.join(_PROVIDERS)}'",
                stacklevel=3,
            )
            continue
        pairs.append((str(name), dict(options)))
    return pairs or [(CPU_PROVIDER, {})]


def _devices(value: Any) -> list[str]:
    if isinstance(value, str):
        return [d.strip() for d in value.split(",") if d.strip()]
    return [str(d) for d in value]


def _flag(value: Any) -> bool:
    return str(value).strip().lower() not in _OFF


class _TerminalProgress:
    """The CLI's tqdm bar for a compile, drawn only when stderr is a terminal and only once compiling starts (a
    session that loads from the cache shows nothing)."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __call__(self, done: int, total: int, subgraph: Any) -> None:
        if self.bar is None:
            if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
                return
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="subgraph", desc="nnadapter-tvm: compiling", leave=False)
        self.bar.total = total
        self.bar.n = done
        self.bar.set_postfix_str(f"subgraph {min(done + 1, total)}/{total}: {subgraph.operation_count} operations")
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class InferenceSession:
    """onnxruntime's ``InferenceSession`` over a :class:`~nnadapter_tvm.Predictor` (compiled, or loaded from the
    cache, when made). ``path_or_bytes``: a path or the serialized model. See the module doc for providers."""

    def __init__(
        self,
        path_or_bytes: str | os.PathLike | bytes,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping] | None = None,
        **kwargs: Any,
    ):
        import onnx

        from nnadapter_tvm.session.predictor import Predictor

        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._sess_options._check()
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            source: str | bytes = bytes(path_or_bytes)
            self._model_path = None
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            source = os.fspath(path_or_bytes)
            self._model_path = source
            if not os.path.isfile(source):
                raise NoSuchFile(f"Load model from {source} failed:Load model {source} failed. File doesn't exist")
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")

        pairs = _normalize_providers(providers, provider_options)
        devices: list[str] = []
        properties = ""
        cache_dir = cache_dir_default()
        partition_config = None
        host_fallback = True
        for name, options in pairs:
            if name == NNADAPTER_PROVIDER:
                unknown = sorted(set(options) - set(_NNADAPTER_OPTIONS))
                if unknown:
                    raise InvalidArgument(
                        f"{NNADAPTER_PROVIDER}: unknown option(s) {unknown}; it takes {list(_NNADAPTER_OPTIONS)}"
                    )
                devices += [d for d in _devices(options.get("devices", ["llvm"])) if d not in devices]
                properties = str(options.get("context_properties", "") or "")
                if "cache_dir" in options:
                    cache_dir = options["cache_dir"] or None
                partition_config = options.get("partition_config") or None
                host_fallback = _flag(options.get("host_fallback", True))
            elif "llvm" not in devices:  # CPUExecutionProvider; its onnxruntime options have no meaning here
                devices.append("llvm")
        threads = self._sess_options.intra_op_num_threads
        if threads > 0 and "TVM_NUM_THREADS" not in properties:
            properties = f"{properties.rstrip()}{'' if not properties or properties.rstrip().endswith(';') else ';'}"
            properties += f"TVM_NUM_THREADS={threads};"
        self._providers = [name for name, _ in pairs]
        self._provider_options = {name: {k: str(v) for k, v in options.items()} for name, options in pairs}
        self.devices, self.context_properties, self.cache_dir = devices, properties, cache_dir

        try:
            self._model = (
                onnx.load_model_from_string(source)
                if isinstance(source, bytes)
                else onnx.load(source, load_external_data=False)
            )
        except Exception as err:  # onnx raises DecodeError and others for a file that is not a model
            raise Fail(f"Load model failed: {err}") from err

        progress = _TerminalProgress()
        try:
            self._predictor = Predictor(
                source,
                devices=devices,
                context_properties=properties,
                cache_dir=cache_dir,
                partition_config=partition_config,
                host_fallback=host_fallback,
                progress=progress,
            )
        except OrtError:
            raise
        except NNAdapterError as err:
            raise Fail(str(err.args[0]), err.code) from err
        finally:
            progress.close()

        self._inputs = self._node_args(self._model.graph.input, self._predictor.input_names)
        self._outputs = self._node_args(self._model.graph.output, self._predictor.output_names, infer=True)
        self._declared = {p.name: p for p in self._predictor.inputs}

    def _node_args(self, values: Sequence[Any], names: list[str], infer: bool = False) -> list[NodeArg]:
        by_name = {v.name: v for v in values}
        if infer and any(not v.type.tensor_type.HasField("shape") for v in values):
            # onnxruntime reports inferred shapes for outputs the model leaves open.
            import onnx

            try:
                inferred = onnx.shape_inference.infer_shapes(self._model)
                by_name.update({v.name: v for v in inferred.graph.output if v.type.tensor_type.HasField("shape")})
            except Exception:  # inference is best effort: the declared types stand
                pass
        return [_node_arg(by_name[n]) for n in names if n in by_name]

    # -- what applications ask of a session

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """None: initializers that are also graph inputs are folded as constants at import."""
        return []

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._model)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self._provider_options.items()}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    @property
    def predictor(self) -> Any:
        """The :class:`~nnadapter_tvm.Predictor` behind the session (its token, cache state, timings)."""
        return self._predictor

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[np.ndarray]:
        """The outputs named (all, in the graph's order, for ``None`` or ``[]``), for the inputs fed by name."""
        all_names = self._predictor.output_names
        wanted = list(output_names) if output_names else list(all_names)
        for name in wanted:
            if name not in all_names:
                raise InvalidArgument(f"Invalid output name:{name}")
        arrays = self._check_feed(input_feed)
        try:
            outputs = self._predictor.run(arrays)
        except OrtError:
            raise
        except NNAdapterError as err:
            raise Fail(str(err.args[0]), err.code) from err
        by_name = dict(zip(all_names, outputs))
        return [by_name[n] for n in wanted]

    def _check_feed(self, input_feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The feed as the predictor takes it; wrong names, types and shapes fail with onnxruntime's words."""
        names = self._predictor.input_names
        missing = [n for n in names if n not in input_feed]
        if missing:
            raise MissingInputs(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")
        for name in input_feed:
            if name not in self._declared:
                raise InvalidArgument(f"Invalid input name: {name}")
        arrays: dict[str, np.ndarray] = {}
        for name in names:
            port = self._declared[name]
            value = input_feed[name]
            # Like onnxruntime, a list or scalar takes the input's type; an array must already have it.
            array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=port.dtype)
            if port.dtype is not None and array.dtype != port.dtype:
                raise InvalidArgument(
                    f"Unexpected input data type. Actual: ({_type_string(array.dtype)}) , "
                    f"expected: ({_type_string(port.dtype)})"
                )
            if port.shape is not None:
                if array.ndim != len(port.shape):
                    raise InvalidArgument(
                        f"Invalid rank for input: {name} Got: {array.ndim} Expected: {len(port.shape)} "
                        "Please fix either the inputs/outputs or the model."
                    )
                bad = [
                    (k, got, want)
                    for k, (got, want) in enumerate(zip(array.shape, port.shape))
                    if want is not None and got != want
                ]
                if bad:
                    lines = "".join(f" index: {k} Got: {got} Expected: {want}\n" for k, got, want in bad)
                    raise InvalidArgument(
                        f"Got invalid dimensions for input: {name} for the following indices\n{lines}"
                        " Please fix either the inputs/outputs or the model."
                    )
            arrays[name] = array
        return arrays


__all__ = [
    "CPU_PROVIDER",
    "NNADAPTER_PROVIDER",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgument",
    "MissingInputs",
    "ModelMetadata",
    "NoSuchFile",
    "NodeArg",
    "OrtError",
    "RunOptions",
    "SessionOptions",
    "__version__",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "get_version_string",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_seed",
]
