"""Paddle Lite's Python API over nnadapter-tvm: ``from nnadapter_tvm.paddle_lite import *`` in place of
``from paddlelite.lite import *``.

The surface Paddle Lite applications use with NNAdapter: :class:`CxxConfig` (a Paddle inference model: a
directory, or the program and params files ``paddle.jit.save`` / ``paddle.static.save_inference_model`` write)
and :class:`MobileConfig` (one model file), the spec's NNAdapter calls on both (``check_nnadapter_device_name``,
``set_nnadapter_device_names``, ``set_nnadapter_context_properties``, ``set_nnadapter_model_cache_dir``,
``set_nnadapter_model_cache_buffers``, ``set_nnadapter_subgraph_partition_config_path`` / ``_buffer``),
:func:`create_paddle_predictor`, and the predictor's :class:`Tensor` handles (``get_input(i)``,
``get_output(i)``, ``resize``, ``from_numpy`` / ``numpy``, ``shape()``, the ``set_float_data`` family).

How it runs: a Paddle model is exported to ONNX by paddle2onnx (:mod:`nnadapter_tvm.frontends.paddle`) and run by
:class:`~nnadapter_tvm.Predictor` on the NNAdapter devices named (``llvm``, ``arm``, ``cuda``, ``opencl``; none
named means the host CPU, ``llvm``, as Paddle Lite runs on its CPU kernels). Operations no device supports run
on the host, as Paddle Lite runs them on its CPU kernels. An ``.onnx`` file is accepted as a model too.

Partition configs: lines ``op_type:in1,in2:out1`` as the spec describes; a Paddle op type (``conv2d``) keeps on
the host the ONNX nodes paddle2onnx made of that op (see ``translate_partition_config``), an ONNX op type
(``Conv``) the ONNX nodes of that type. Paddle's names for the model's inputs, outputs and parameters are kept;
its intermediate variables' names are not (paddle2onnx names them ``p2o.pd_op.<op>.<n>.<k>``).

Model cache: ``set_nnadapter_model_cache_dir`` keeps each compiled subgraph as ``<dir>/<token>.nnc`` (and the
exported ONNX model under ``<dir>/paddle2onnx/``); ``set_nnadapter_model_cache_buffers(token, buffer)`` gives a
``.nnc`` from memory (for instance decrypted by the application): it is used for the subgraph of that token.
The tokens are the predictor's ``tokens``. A cache holds native code loaded into the process: it must be trusted.

Accepted with no effect (documented, not silent): ``set_power_mode``, ``set_valid_places`` (the devices are the
NNAdapter device names), ``set_nnadapter_dynamic_shape_info`` (shapes may change from run to run anyway).
``set_threads(n)`` becomes the context property ``TVM_NUM_THREADS=n``. Calls of Paddle Lite's API with no meaning
here (OpenCL tuning files, Metal, MLU, mixed precision quantization, saving optimized models, ``.nb`` models)
raise :class:`UnsupportedCall`, an ``NNAdapterError`` naming the call.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from nnadapter_tvm._paddle_lite_types import (
    DataLayoutType,
    Place,
    PowerMode,
    PrecisionType,
    TargetType,
    Tensor,
    UnsupportedCall,
    _unsupported,
)
from nnadapter_tvm.device import Device
from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.targets import DRIVERS
from nnadapter_tvm.types import NNAdapterError, ResultCode
from nnadapter_tvm.version import __version__ as _version

__all__ = [
    "CxxConfig",
    "CxxPredictor",
    "DataLayoutType",
    "LightPredictor",
    "MobileConfig",
    "Opt",
    "PaddlePredictor",
    "Place",
    "PowerMode",
    "PrecisionType",
    "TargetType",
    "Tensor",
    "UnsupportedCall",
    "create_paddle_predictor",
]


# ---------------------------------------------------------------- configs


class _Config:
    """What CxxConfig and MobileConfig share: threads, power mode, and the NNAdapter calls of the spec."""

    def __init__(self) -> None:
        self._model_dir = ""
        self._model_file = ""
        self._param_file = ""
        self._model_buffer: bytes | None = None
        self._param_buffer: bytes | None = None
        self._threads = 0
        self._power_mode = PowerMode.LITE_POWER_NO_BIND
        self._valid_places: list[Place] = []
        self._device_names: list[str] = []
        self._context_properties = ""
        self._cache_dir = ""
        self._cache_buffers: dict[str, bytes] = {}
        self._partition_path = ""
        self._partition_buffer = ""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unsupported(type(self).__name__, name)

    # -- model
    def set_model_dir(self, model_dir: str) -> None:
        """A directory holding a Paddle inference model (``inference.json`` / ``.pdmodel`` + ``.pdiparams``)."""
        self._model_dir = os.fspath(model_dir)

    def model_dir(self) -> str:
        return self._model_dir

    def is_model_from_memory(self) -> bool:
        return self._model_buffer is not None

    # -- threads and power
    def set_threads(self, threads: int) -> None:
        """Worker threads of the TVM runtime (``TVM_NUM_THREADS``; process-wide); 0 leaves TVM's default."""
        check(int(threads) >= 0, f"{type(self).__name__}.set_threads: threads is {threads}, expected >= 0")
        self._threads = int(threads)

    def threads(self) -> int:
        return self._threads

    def set_power_mode(self, mode: PowerMode) -> None:
        """Accepted, no effect: the TVM runtime binds no cores."""
        self._power_mode = PowerMode(mode)

    def power_mode(self) -> PowerMode:
        return self._power_mode

    # -- NNAdapter (the spec's "Paddle Lite 为 NNAdapter 新增的接口")
    def check_nnadapter_device_name(self, device_name: str) -> bool:
        """Whether the NNAdapter device ``device_name`` is available: known, and able to run in this process."""
        if not Device.check(device_name):
            return False
        ok, _ = DRIVERS[device_name].can_run_here()
        return bool(ok)

    def set_nnadapter_device_names(self, device_names: Sequence[str]) -> None:
        """The devices the model runs on, in order of preference (``llvm``, ``arm``, ``cuda``, ``opencl``)."""
        if isinstance(device_names, str):
            device_names = [device_names]
        names = [str(n) for n in device_names]
        for name in names:
            check(
                Device.check(name),
                f"{type(self).__name__}.set_nnadapter_device_names: no NNAdapter device named {name!r}; "
                f"expected one of {list(DRIVERS)}",
                ResultCode.DEVICE_NOT_FOUND,
            )
        self._device_names = names

    def nnadapter_device_names(self) -> list[str]:
        return list(self._device_names)

    def set_nnadapter_context_properties(self, context_properties: str) -> None:
        """``KEY=VALUE;`` pairs passed to the devices (``nnadapter-tvm devices`` lists them)."""
        self._context_properties = str(context_properties)

    def nnadapter_context_properties(self) -> str:
        return self._context_properties

    def set_nnadapter_model_cache_dir(self, model_cache_dir: str) -> None:
        """Where compiled subgraphs are kept as ``<token>.nnc`` and loaded from by later predictors."""
        self._cache_dir = os.fspath(model_cache_dir)

    def nnadapter_model_cache_dir(self) -> str:
        return self._cache_dir

    def set_nnadapter_model_cache_buffers(self, model_cache_token: str, model_cache_buffer: bytes | Sequence) -> None:
        """A compiled subgraph (the bytes of a ``.nnc``) for the subgraph whose token is ``model_cache_token``."""
        token = str(model_cache_token)
        check(
            len(token) == 32 and all(c in "0123456789abcdef" for c in token),
            f"{type(self).__name__}.set_nnadapter_model_cache_buffers: model_cache_token {token!r} is not a "
            "model token (32 lowercase hex digits)",
        )
        buffer = bytes(model_cache_buffer)
        check(
            len(buffer) > 0,
            f"{type(self).__name__}.set_nnadapter_model_cache_buffers: model_cache_buffer of {token} is empty",
        )
        self._cache_buffers[token] = buffer

    def set_nnadapter_subgraph_partition_config_path(self, subgraph_partition_config_path: str) -> None:
        """A file of lines ``op_type:inputs:outputs`` naming operations kept on the host (the spec's rules)."""
        self._partition_path = os.fspath(subgraph_partition_config_path)

    def nnadapter_subgraph_partition_config_path(self) -> str:
        return self._partition_path

    def set_nnadapter_subgraph_partition_config_buffer(self, subgraph_partition_config_buffer: str) -> None:
        """The partition config's text itself (for configs kept encrypted, for instance)."""
        self._partition_buffer = str(subgraph_partition_config_buffer)

    def nnadapter_subgraph_partition_config_buffer(self) -> str:
        return self._partition_buffer

    def set_nnadapter_dynamic_shape_info(self, dynamic_shape_info: Any) -> None:
        """Accepted, no effect: input shapes may change from run to run without being declared."""

    def set_valid_places(self, places: Sequence[Place]) -> None:
        """Accepted, no effect: the devices are the NNAdapter device names (none named: the host CPU)."""
        self._valid_places = list(places)

    # -- what the predictor reads
    def _partition_text(self) -> str | None:
        if self._partition_buffer:
            return self._partition_buffer
        if self._partition_path:
            if not os.path.isfile(self._partition_path):
                fail(f"subgraph partition config file {self._partition_path} does not exist")
            with open(self._partition_path, encoding="utf-8") as f:
                return f.read()
        return None

    def _properties(self) -> str:
        properties = self._context_properties.strip()
        if self._threads > 0 and "TVM_NUM_THREADS" not in properties:
            if properties and not properties.endswith(";"):
                properties += ";"
            properties += f"TVM_NUM_THREADS={self._threads};"
        return properties


class CxxConfig(_Config):
    """Paddle Lite's ``CxxConfig``: a Paddle inference model by directory, by files, or from memory."""

    def set_model_file(self, model_file: str) -> None:
        """The program file: Paddle 3's ``.json``, a ``.pdmodel``, or an ``.onnx`` model."""
        self._model_file = os.fspath(model_file)

    def model_file(self) -> str:
        return self._model_file

    def set_param_file(self, param_file: str) -> None:
        """The parameters file (``.pdiparams``); by default the one beside the program file."""
        self._param_file = os.fspath(param_file)

    def param_file(self) -> str:
        return self._param_file

    def set_model_buffer(self, model_buffer: bytes, param_buffer: bytes) -> None:
        """The program (``.json`` or ``.pdmodel`` bytes) and the parameters (``.pdiparams`` bytes) from memory."""
        self._model_buffer, self._param_buffer = bytes(model_buffer), bytes(param_buffer)


class MobileConfig(_Config):
    """Paddle Lite's ``MobileConfig``: one model file. Paddle Lite's ``.nb`` format cannot be read here; a Paddle
    program file (its ``.pdiparams`` beside it) or an ``.onnx`` model can."""

    def set_model_from_file(self, model_file: str) -> None:
        path = os.fspath(model_file)
        if path.endswith(".nb"):
            raise UnsupportedCall(
                f"MobileConfig.set_model_from_file({path!r}): .nb models are Paddle Lite's own optimized format, "
                "which nnadapter-tvm cannot read; give the Paddle inference model it was made from "
                "(.json or .pdmodel, with its .pdiparams) or an .onnx model"
            )
        self._model_file = path

    def set_model_from_buffer(self, model_buffer: bytes) -> None:
        """An ONNX model's bytes (Paddle Lite's ``.nb`` bytes cannot be read)."""
        self._model_buffer = bytes(model_buffer)
        self._param_buffer = None


# ---------------------------------------------------------------- the predictor


class PaddlePredictor:
    """Paddle Lite's ``CxxPredictor`` / ``LightPredictor``: made by :func:`create_paddle_predictor`.

    ``predictor``: the :class:`~nnadapter_tvm.Predictor` that runs the model (its ``tokens``, ``compilations``,
    ``loaded_from_cache``); ``onnx_model``: the bytes of the ONNX model it runs (exported from Paddle's)."""

    def __init__(self, config: _Config):
        from nnadapter_tvm.session.predictor import Predictor

        self._buffers_dir: tempfile.TemporaryDirectory | None = None
        self.onnx_model, paddle_source = self._load(config)
        partition = config._partition_text()
        if partition is not None and paddle_source:
            import onnx

            from nnadapter_tvm.frontends.paddle import translate_partition_config

            partition = translate_partition_config(partition, onnx.load_model_from_string(self.onnx_model))
        if partition is not None and "\n" not in partition:
            partition += "\n"  # text, never taken for a file name
        cache_dir = config._cache_dir or None
        if config._cache_buffers:
            cache_dir = self._place_cache_buffers(config._cache_buffers, cache_dir)
        self.predictor = Predictor(
            self.onnx_model,
            devices=config._device_names or ["llvm"],
            context_properties=config._properties(),
            cache_dir=cache_dir,
            partition_config=partition,
            host_fallback=True,  # as Paddle Lite runs what the device lacks on its CPU kernels
        )
        by_name = {p.name: p for p in self.predictor.inputs}
        self._inputs = [
            Tensor(n, None if by_name[n].dtype is None else np.dtype(by_name[n].dtype), True)
            for n in self.predictor.input_names
        ]
        self._outputs = [Tensor(n, None, False) for n in self.predictor.output_names]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        if name in ("save_optimized_model", "save_optimized_pb_model"):
            raise UnsupportedCall(
                f"PaddlePredictor.{name}: Paddle Lite's optimized formats are not written here; the compiled "
                "subgraphs are kept by set_nnadapter_model_cache_dir (.nnc files)"
            )
        raise UnsupportedCall(f"PaddlePredictor.{name}: no such call in nnadapter-tvm's Paddle Lite API")

    def _load(self, config: _Config) -> tuple[bytes, bool]:
        """The ONNX model's bytes, and whether they were exported from a Paddle model."""
        from nnadapter_tvm.frontends import paddle

        cache_dir = config._cache_dir or None
        if config._model_buffer is not None:
            if config._param_buffer is None:  # MobileConfig.set_model_from_buffer: ONNX bytes
                _check_onnx_bytes(config._model_buffer)
                return config._model_buffer, False
            with tempfile.TemporaryDirectory(prefix="nnadapter-tvm-paddle-") as tmp:
                suffix = ".json" if config._model_buffer.lstrip()[:1] == b"{" else ".pdmodel"
                program = os.path.join(tmp, "model" + suffix)
                with open(program, "wb") as f:
                    f.write(config._model_buffer)
                with open(os.path.join(tmp, "model.pdiparams"), "wb") as f:
                    f.write(config._param_buffer)
                return paddle.to_onnx(paddle.locate(program), cache_dir), True
        path = config._model_file or config._model_dir
        if not path:
            fail(
                f"create_paddle_predictor: {type(config).__name__} names no model (set_model_dir, set_model_file"
                f"{'/set_param_file' if isinstance(config, CxxConfig) else ' / set_model_from_file'})"
            )
        if os.path.isfile(path) and path.lower().endswith(".onnx"):
            with open(path, "rb") as f:
                return f.read(), False
        model = paddle.locate(path, config._param_file or None)
        return paddle.to_onnx(model, cache_dir), True

    def _place_cache_buffers(self, buffers: dict[str, bytes], cache_dir: str | None) -> str:
        """A cache directory holding ``<token>.nnc`` for each buffer given: the configured one (a buffer does not
        replace a file already there), else a directory of this predictor's own, removed with it."""
        if cache_dir is None:
            self._buffers_dir = tempfile.TemporaryDirectory(prefix="nnadapter-tvm-cache-buffers-")
            cache_dir = self._buffers_dir.name
        os.makedirs(cache_dir, exist_ok=True)
        for token, buffer in buffers.items():
            path = os.path.join(cache_dir, f"{token}.nnc")
            if not os.path.exists(path):
                partial = f"{path}.{os.getpid()}.tmp"
                with open(partial, "wb") as f:
                    f.write(buffer)
                os.replace(partial, path)
        return cache_dir

    # -- Paddle Lite's predictor surface
    def get_input_names(self) -> list[str]:
        return [t.name() for t in self._inputs]

    def get_output_names(self) -> list[str]:
        return [t.name() for t in self._outputs]

    def get_input(self, index: int) -> Tensor:
        check(
            0 <= index < len(self._inputs),
            f"PaddlePredictor.get_input: index {index} out of range, the model has {len(self._inputs)} inputs",
        )
        return self._inputs[index]

    def get_output(self, index: int) -> Tensor:
        check(
            0 <= index < len(self._outputs),
            f"PaddlePredictor.get_output: index {index} out of range, the model has {len(self._outputs)} outputs",
        )
        return self._outputs[index]

    def get_input_by_name(self, name: str) -> Tensor:
        names = self.get_input_names()
        check(name in names, f"PaddlePredictor.get_input_by_name: no input named {name!r}; the inputs are {names}")
        return self._inputs[names.index(name)]

    def get_output_by_name(self, name: str) -> Tensor:
        names = self.get_output_names()
        check(name in names, f"PaddlePredictor.get_output_by_name: no output named {name!r}; the outputs are {names}")
        return self._outputs[names.index(name)]

    def run(self) -> None:
        """Runs the model on the inputs' data; the outputs' tensors then hold the results."""
        feeds = []
        for k, tensor in enumerate(self._inputs):
            check(
                tensor._data is not None,
                f"PaddlePredictor.run: input {k} ({tensor.name()!r}) holds no data; call from_numpy, or resize "
                "and set_float_data, first",
            )
            feeds.append(tensor._data)
        for tensor, value in zip(self._outputs, self.predictor.run(feeds)):
            tensor._data = np.asarray(value)
            tensor._shape = list(tensor._data.shape)

    def get_version(self) -> str:
        return f"nnadapter-tvm {_version}"

    @property
    def tokens(self) -> list[str]:
        """The model tokens of the compiled subgraphs (for ``set_nnadapter_model_cache_buffers``)."""
        return list(self.predictor.tokens)


def _check_onnx_bytes(data: bytes) -> None:
    import onnx

    try:
        onnx.load_model_from_string(data)
    except Exception as err:  # a DecodeError and others for bytes that are not an ONNX model
        raise UnsupportedCall(
            "MobileConfig.set_model_from_buffer: the buffer is not an ONNX model (Paddle Lite's .nb models "
            f"cannot be read by nnadapter-tvm): {err}"
        ) from err


# Paddle Lite's names for the predictors create_paddle_predictor makes from a CxxConfig and a MobileConfig.
CxxPredictor = LightPredictor = PaddlePredictor


class Opt:
    """Paddle Lite's model optimizer writes ``.nb`` models for its own runtime: nothing here reads them, and
    nothing needs them (a predictor takes the Paddle inference model itself)."""

    def __init__(self) -> None:
        raise UnsupportedCall(
            "Opt: Paddle Lite's .nb optimizer is not part of nnadapter-tvm; give the Paddle inference model to "
            "CxxConfig.set_model_dir (compiled subgraphs are kept by set_nnadapter_model_cache_dir)"
        )


def create_paddle_predictor(config: CxxConfig | MobileConfig) -> PaddlePredictor:
    """A predictor for the model ``config`` names: exported to ONNX if it is Paddle's, then compiled for the
    NNAdapter devices named (or loaded from the model cache)."""
    if not isinstance(config, _Config):
        raise NNAdapterError(
            ResultCode.INVALID_PARAMETER,
            f"create_paddle_predictor: config is a {type(config).__name__}, expected CxxConfig or MobileConfig",
        )
    return PaddlePredictor(config)
