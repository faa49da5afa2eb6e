"""Paddle's side of tests/frontends/test_paddle.py, run as a child process (paddle stays out of the pytest process).

``python paddle_reference.py export OUTDIR [NAMES]``: saves the test models with ``paddle.jit.save`` under OUTDIR:
``cnn/`` (conv, batch norm, relu, max pool, fc, softmax; Paddle 3's ``.json`` program) and ``dyn/`` (conv, batch
norm, relu, average pool, fully convolutional with a global pool: height and width left open) and
``mobilenet_v3_small/`` (paddle.vision's, random weights). With the
environment variable ``FLAGS_enable_pir_api=0`` paddle writes the older ``.pdmodel`` program instead (NAMES: ``cnn``;
paddle 3.3's old-IR tracing refuses ``sigmoid`` in ``dyn``).

``python paddle_reference.py infer PROGRAM PARAMS IN.npz OUT.npz``: runs Paddle's own inference predictor
(``paddle.inference``) on each array of IN.npz (fed to the model's one input) and writes the first output of each
under the same key, with the input and output names under ``__names__``.
"""

from __future__ import annotations

import os
import sys

import numpy as np


def export(out: str, only: str = "") -> None:
    import paddle

    class Cnn(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv = paddle.nn.Conv2D(3, 8, 3, padding=1)
            self.bn = paddle.nn.BatchNorm2D(8)
            self.pool = paddle.nn.MaxPool2D(2)
            self.fc = paddle.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            y = self.pool(paddle.nn.functional.relu(self.bn(self.conv(x))))
            return paddle.nn.functional.softmax(self.fc(paddle.flatten(y, 1)))

    class Dyn(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = paddle.nn.Conv2D(3, 8, 3, padding=1)
            self.bn = paddle.nn.BatchNorm2D(8)
            self.pool = paddle.nn.AvgPool2D(2)
            self.conv2 = paddle.nn.Conv2D(8, 4, 3, padding=1)
            self.gap = paddle.nn.AdaptiveAvgPool2D(1)

        def forward(self, x):
            y = self.pool(paddle.nn.functional.relu(self.bn(self.conv1(x))))
            y = paddle.nn.functional.relu(self.conv2(y))
            # Two outputs: the feature map (its size follows the input's) and a pooled score.
            return y, paddle.nn.functional.sigmoid(paddle.flatten(self.gap(y), 1))

    paddle.seed(0)
    from paddle.vision.models import mobilenet_v3_small

    for name, layer, shape in (
        ("cnn", Cnn(), [None, 3, 16, 16]),
        ("dyn", Dyn(), [None, 3, None, None]),
        # A published architecture (depthwise convs, hardswish, squeeze-excitation), random weights: no download.
        ("mobilenet_v3_small", mobilenet_v3_small(pretrained=False, num_classes=10), [None, 3, None, None]),
    ):
        if only and name not in only.split(","):
            continue
        layer.eval()
        # Batch norm's running statistics: not the identity, so that the test sees them used.
        for sub in layer.sublayers():
            if isinstance(sub, paddle.nn.BatchNorm2D):
                sub._mean.set_value(paddle.uniform(sub._mean.shape, min=-0.5, max=0.5))
                sub._variance.set_value(paddle.uniform(sub._variance.shape, min=0.5, max=2.0))
        spec = [paddle.static.InputSpec(shape, "float32", "x")]
        paddle.jit.save(layer, os.path.join(out, name, "inference"), input_spec=spec)


def infer(program: str, params: str, inputs: str, outputs: str) -> None:
    import paddle.inference as pi

    config = pi.Config(program, params)
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    (input_name,) = predictor.get_input_names()
    results = {}
    for key, x in np.load(inputs).items():
        handle = predictor.get_input_handle(input_name)
        handle.reshape(list(x.shape))
        handle.copy_from_cpu(x)
        predictor.run()
        for k, name in enumerate(predictor.get_output_names()):
            results[f"{key}/{k}"] = predictor.get_output_handle(name).copy_to_cpu()
    names = [input_name, *predictor.get_output_names()]
    np.savez(outputs, __names__=np.array(names), **results)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    export(*args) if command == "export" else infer(*args)
