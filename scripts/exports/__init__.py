"""The exports ``scripts/make_exports.py`` writes and ``scripts/check_exports.py`` checks: ONNX files as
today's exporters write them, from the libraries on PyPI, with random weights (nothing from a model hub).

Each ``Export`` names the library modules it needs, the exporters it is written by, two input sizes to
feed it at and how its outputs compare with onnxruntime's ("tensors": element by element; "detections":
as a set of boxes, since near-equal scores may come in another order)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from exports import tabular, torch_models, vision_tasks
from exports.torch_models import BERT_SIZES, IMAGE_SIZES, write_torch

# A MiniLM-sized BERT (2 of its layers): 384 wide, 12 heads.
MINILM = {"num_hidden_layers": 2, "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536}


@dataclasses.dataclass
class Export:
    write: Callable[[Path, str], None]
    sizes: list[list[str]]
    exporters: tuple[str, ...] = ("ts", "dynamo")
    needs: tuple[str, ...] = ("torch", "onnxscript")
    compare: str = "tensors"
    light: bool = False  # in the small set for a quick local run (--light)


def _torchvision(name: str) -> Export:
    return Export(write_torch(torch_models._torchvision(name, 224)), IMAGE_SIZES, needs=("torchvision", "onnxscript"))


def _segmentation(name: str, light: bool = False) -> Export:
    sizes = [["input=1x3x224x224"], ["input=1x3x160x200"]]
    return Export(vision_tasks.write_segmentation(name), sizes, ("ts",), ("torchvision",), light=light)


def _detector(name: str, light: bool = False) -> Export:
    sizes = [["images=3x320x320"], ["images=3x256x384"]]
    return Export(vision_tasks.write_detector(name), sizes, ("ts",), ("torchvision",), "detections", light)


def _sklearn(name: str) -> Export:
    return Export(tabular.write_sklearn(name), [["X=1x10"], ["X=1000x10"]], ("skl2onnx",), ("skl2onnx",), light=True)


MODELS: dict[str, Export] = {
    # transformers
    "bert": Export(write_torch(torch_models._bert()), BERT_SIZES, needs=("transformers", "onnxscript")),
    "minilm": Export(
        write_torch(torch_models._bert(**MINILM)),
        BERT_SIZES,
        needs=("transformers", "onnxscript"),
        light=True,
    ),
    "gpt2_step": Export(
        write_torch(torch_models._GPT2Step.build),
        [torch_models.gpt2_shapes(32), torch_models.gpt2_shapes(100)],
        needs=("transformers", "onnxscript"),
    ),
    "vit": Export(
        write_torch(torch_models._vit),
        [["pixel_values=1x3x224x224"], ["pixel_values=2x3x224x224"]],
        needs=("transformers", "onnxscript"),
    ),
    "whisper_encoder": Export(
        write_torch(torch_models._whisper_encoder),
        [["input_features=1x80x3000"], ["input_features=2x80x3000"]],
        needs=("transformers", "onnxscript"),
    ),
    # torchvision classifiers
    "resnet18": _torchvision("resnet18"),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "convnext_tiny": _torchvision("convnext_tiny"),
    # segmentation and detection
    "lraspp_mobilenet_v3_large": _segmentation("lraspp_mobilenet_v3_large", light=True),
    "deeplabv3_mobilenet_v3_large": _segmentation("deeplabv3_mobilenet_v3_large"),
    "fcn_resnet50": _segmentation("fcn_resnet50"),
    "fasterrcnn_mobilenet_v3_large_320_fpn": _detector("fasterrcnn_mobilenet_v3_large_320_fpn", light=True),
    "retinanet_resnet50_fpn": _detector("retinanet_resnet50_fpn"),
    "ssdlite320_mobilenet_v3_large": _detector("ssdlite320_mobilenet_v3_large"),
    "maskrcnn_resnet50_fpn": _detector("maskrcnn_resnet50_fpn"),
    "yolov8n": Export(
        vision_tasks.write_yolo, [["images=1x3x320x320"], ["images=2x3x256x384"]], ("ultralytics",), ("ultralytics",)
    ),
    # scikit-learn and Keras
    "forest_classifier": _sklearn("forest_classifier"),
    "gbdt_regressor": _sklearn("gbdt_regressor"),
    "scaled_logistic": _sklearn("scaled_logistic"),
    "normalized_logistic": _sklearn("normalized_logistic"),
    "keras_mobilenet_v2": Export(
        tabular.write_keras, [["input=1x128x128x3"], ["input=3x128x128x3"]], ("tf2onnx",), ("tensorflow", "tf2onnx")
    ),
}
