"""The errors, options and graph metadata of :mod:`nnadapter_tvm.onnxruntime`, under onnxruntime's names: its
errors (``Fail``, ``InvalidArgument`` ...), ``SessionOptions`` and ``RunOptions`` (``_ACCEPTED_NO_EFFECT``: the
options accepted that change nothing; ``_REFUSED``: those refused), ``NodeArg`` and ``ModelMetadata``.

Import them from :mod:`nnadapter_tvm.onnxruntime`, which re-exports them: this module is private.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from nnadapter_tvm.types import NNAdapterError, ResultCode

# ---------------------------------------------------------------- errors


class OrtError(NNAdapterError):
    """An error worded as onnxruntime words it: ``[ONNXRuntimeError] : <code> : <NAME> : <message>``."""

    ort_code = 1
    ort_name = "FAIL"

    def __init__(self, message: str, code: ResultCode = ResultCode.INVALID_PARAMETER):
        super().__init__(code, message)

    def __str__(self) -> str:
        return f"[ONNXRuntimeError] : {self.ort_code} : {self.ort_name} : {self.args[0]}"


class Fail(OrtError):
    """onnxruntime's ``Fail``: the model could not be compiled or run."""


class InvalidArgument(OrtError):
    """onnxruntime's ``InvalidArgument``: a wrong input name, type, rank or dimension, a wrong output name."""

    ort_code = 2
    ort_name = "INVALID_ARGUMENT"


class NoSuchFile(OrtError):
    ort_code = 3
    ort_name = "NO_SUCHFILE"


class MissingInputs(NNAdapterError, ValueError):
    """Required inputs absent from the feed: onnxruntime raises a ``ValueError`` with this text."""

    def __init__(self, message: str):
        super().__init__(ResultCode.INVALID_PARAMETER, message)

    def __str__(self) -> str:
        return str(self.args[0])


# ---------------------------------------------------------------- options


class GraphOptimizationLevel(enum.IntEnum):
    """Accepted for compatibility; TVM's passes and the default CPU schedules run whatever the level."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


# Options an application may set that change nothing here (defaults as onnxruntime's).
_ACCEPTED_NO_EFFECT: dict[str, Any] = {
    "inter_op_num_threads": 0,  # one TVM worker pool serves every operator
    "graph_optimization_level": GraphOptimizationLevel.ORT_ENABLE_ALL,
    "execution_mode": ExecutionMode.ORT_SEQUENTIAL,
    "execution_order": ExecutionOrder.DEFAULT,
    "enable_cpu_mem_arena": True,
    "enable_mem_pattern": True,
    "enable_mem_reuse": True,
    "use_deterministic_compute": False,
    "use_per_session_threads": True,
    "log_severity_level": -1,
    "log_verbosity_level": 0,
    "logid": "",
    "profile_file_prefix": "onnxruntime_profile_",
}
# Options that would change results or write files: refused (when set to anything but their default).
_REFUSED: dict[str, Any] = {"enable_profiling": False, "optimized_model_filepath": ""}


class SessionOptions:
    """onnxruntime's session options. ``intra_op_num_threads`` > 0 sets ``TVM_NUM_THREADS``; see the module doc."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {"intra_op_num_threads": 0, **_ACCEPTED_NO_EFFECT, **_REFUSED})
        object.__setattr__(self, "_config", {})
        object.__setattr__(self, "_refused_calls", [])

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"'SessionOptions' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._values:  # as onnxruntime: a misspelt option is an error, not silently ignored
            raise AttributeError(f"'SessionOptions' object has no attribute '{name}'")
        self._values[name] = value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._values})

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Kept and returned by ``get_session_config_entry``; no entry changes what runs."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def _refuse(self, name: str) -> None:
        self._refused_calls.append(name)

    def register_custom_ops_library(self, path: str) -> None:
        self._refuse("register_custom_ops_library")

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self._refuse("add_free_dimension_override_by_name")

    def add_free_dimension_override_by_denotation(self, name: str, value: int) -> None:
        self._refuse("add_free_dimension_override_by_denotation")

    def add_initializer(self, name: str, value: Any) -> None:
        self._refuse("add_initializer")

    def add_external_initializers(self, names: Any, values: Any) -> None:
        self._refuse("add_external_initializers")

    def _check(self) -> None:
        """Refuse, by name, the options this runtime cannot honour."""
        refused = list(self._refused_calls)
        refused += [f"{k}={self._values[k]!r}" for k, default in _REFUSED.items() if self._values[k] != default]
        if refused:
            raise InvalidArgument(
                f"SessionOptions: {', '.join(refused)} not supported by nnadapter_tvm.onnxruntime "
                "(see its module documentation for the options it honours)"
            )
        threads = self._values["intra_op_num_threads"]
        if not isinstance(threads, int) or threads < 0:
            raise InvalidArgument(f"SessionOptions.intra_op_num_threads must be an integer >= 0, got {threads!r}")


class RunOptions:
    """Accepted by ``run``; ``terminate`` and the log levels change nothing (a run is not interruptible)."""

    def __init__(self) -> None:
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"RunOptions does not have configuration with key: {key}")
        return self._config[key]


# ---------------------------------------------------------------- metadata


_TYPE_NAMES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.float16): "float16",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.bool_): "bool",
    np.dtype(np.str_): "string",
    np.dtype(object): "string",
}


def _type_string(dtype: np.dtype | None) -> str:
    """onnxruntime's type string: ``tensor(float)``, ``tensor(int64)`` ..."""
    if dtype is None:
        return "tensor(undefined)"
    return f"tensor({_TYPE_NAMES.get(np.dtype(dtype), np.dtype(dtype).name)})"


class NodeArg:
    """A graph input or output as onnxruntime describes it: ``name``, ``shape`` (ints, dim_param strings, None
    where unknown), ``type`` (``tensor(float)`` ...)."""

    def __init__(self, name: str, shape: list, type: str):
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


def _node_arg(value_info: Any) -> NodeArg:
    from onnx import helper

    tensor = value_info.type.tensor_type
    dtype = None
    if tensor.elem_type:
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        except (KeyError, ValueError, TypeError):
            dtype = None
    type_name = _type_string(dtype) if dtype is not None or not tensor.elem_type else f"tensor({tensor.elem_type})"
    if value_info.type.HasField("sequence_type"):
        type_name = "seq(" + type_name + ")"
    shape: list = []
    if tensor.HasField("shape"):
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            elif dim.HasField("dim_param"):
                shape.append(dim.dim_param)
            else:
                shape.append(None)
    return NodeArg(value_info.name, shape, type_name)


class ModelMetadata:
    """``producer_name``, ``graph_name``, ``domain``, ``description``, ``graph_description``, ``version``,
    ``custom_metadata_map``: as onnxruntime reads them from the model."""

    def __init__(self, model: Any):
        self.producer_name = model.producer_name
        self.graph_name = model.graph.name
        self.domain = model.domain
        self.description = model.doc_string
        self.graph_description = model.graph.doc_string
        # onnxruntime reports INT64_MAX for a model that sets no version.
        self.version = int(model.model_version) if model.HasField("model_version") else 2**63 - 1
        self.custom_metadata_map = {p.key: p.value for p in model.metadata_props}
