"""ONNX's backend interface (``onnx.backend.base.Backend``) over ``Predictor``, so onnx's own test
suite runs against nnadapter-tvm.  The default is the TVM path alone; ``host_fallback=True`` opts in
to running unsupported nodes on the host."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from nnadapter_tvm.frontends.onnx.predictor import Predictor

_DEVICES = {"CPU": "llvm"}


class NNAdapterRep(BackendRep):
    def __init__(self, predictor: Predictor):
        self.predictor = predictor

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return tuple(self.predictor.run(inputs))


class NNAdapterBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in _DEVICES

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> NNAdapterRep:
        super().prepare(model, device, **kwargs)
        devices: Sequence[str] = kwargs.pop("devices", [_DEVICES[device.split(":")[0].upper()]])
        return NNAdapterRep(Predictor(model, devices=devices, **kwargs))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None, **kwargs: Any):
        raise NotImplementedError("run_node: build a one-node model and use prepare()")


prepare = NNAdapterBackend.prepare
run_model = NNAdapterBackend.run_model
supports_device = NNAdapterBackend.supports_device
