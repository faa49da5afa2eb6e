"""ONNX's backend interface (``onnx.backend.base.Backend``) over ``Predictor``, so onnx's own test
suite runs against nnadapter-tvm.  The default is the TVM path alone; ``host_fallback=True`` opts in
to running unsupported nodes on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from nnadapter_tvm.session.predictor import Predictor
from nnadapter_tvm.types import NNAdapterError

_DEVICES = {"CPU": "llvm"}
# Parameters are small (shapes, pads, scales); a large input is data, and baking it in would compile per input.
MAX_SPECIALISED_ELEMENTS = 4096


class NNAdapterRep(BackendRep):
    """A prepared model. When converters need some graph inputs as constants (shape parameters that
    NNAdapter operations take as attributes: a Reshape's shape, a Pad's pads, ...), the model is
    specialised on the values fed for them: compiled at the first run, and again for new values."""

    def __init__(self, model: onnx.ModelProto, options: dict, predictor: Predictor | None, specialise: list[str]):
        self.model = model
        self.options = options
        self.predictor = predictor
        self.specialise = specialise
        self._specialised: dict[tuple, Predictor] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if self.predictor is not None:
            return tuple(self.predictor.run(inputs))
        names = _input_names(self.model)
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(names, inputs))
        missing = [n for n in self.specialise if n not in feeds]
        if missing:
            raise ValueError(f"inputs {missing} were not given")
        key = tuple(
            (n, np.asarray(feeds[n]).dtype.str, np.shape(feeds[n]), np.asarray(feeds[n]).tobytes())
            for n in self.specialise
        )
        if key not in self._specialised:
            self._specialised[key] = self._build(feeds)
        rest = {n: v for n, v in feeds.items() if n not in self.specialise}
        return tuple(self._specialised[key].run(rest))

    def _build(self, feeds: dict[str, np.ndarray]) -> Predictor:
        # A converter stops at the first parameter it needs: bind more until none is missing.
        for _ in range(len(feeds)):
            bound = {n: np.asarray(feeds[n]) for n in self.specialise}
            try:
                return Predictor(bind_inputs(self.model, bound), **self.options)
            except NNAdapterError as err:
                more = [
                    n
                    for n in getattr(err, "needs_constant", [])
                    if n in feeds and n not in self.specialise and np.size(feeds[n]) <= MAX_SPECIALISED_ELEMENTS
                ]
                if not more:
                    raise
                self.specialise = self.specialise + more
        raise AssertionError("unreachable: every input bound")


def _input_names(model: onnx.ModelProto) -> list[str]:
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def bind_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with the graph inputs in ``values`` turned into initializers holding those values."""
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    kept = [i for i in bound.graph.input if i.name not in values]
    del bound.graph.input[:]
    bound.graph.input.extend(kept)
    bound.graph.initializer.extend(onnx.numpy_helper.from_array(v, n) for n, v in values.items())
    return bound


class NNAdapterBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in _DEVICES

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> NNAdapterRep:
        super().prepare(model, device, **kwargs)
        options = dict(kwargs)
        options.setdefault("devices", [_DEVICES[device.split(":")[0].upper()]])
        try:
            return NNAdapterRep(model, options, Predictor(model, **options), [])
        except NNAdapterError as err:
            specialise = getattr(err, "needs_constant", None)
            if not specialise:
                raise
            return NNAdapterRep(model, options, None, specialise)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None, **kwargs: Any):
        raise NotImplementedError("run_node: build a one-node model and use prepare()")


prepare = NNAdapterBackend.prepare
run_model = NNAdapterBackend.run_model
supports_device = NNAdapterBackend.supports_device
