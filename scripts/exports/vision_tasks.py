"""Segmentation and detection exports: torchvision's segmentation models and detectors by the
TorchScript exporter at the opsets their documentation uses (detectors: opset 11, a list of one image
[3, H, W]), height and width symbolic; an ultralytics YOLOv8n by its own ``export(format="onnx",
dynamic=True)``.  Score thresholds are 0 so that random weights still give a full set of boxes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from exports.torch_models import _seeded


def write_segmentation(name: str) -> Callable[[Path, str], None]:
    def write(path: Path, exporter: str) -> None:
        torch = _seeded()
        import torchvision

        model = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, num_classes=5)
        model = model.eval()

        class Logits(torch.nn.Module):  # the dict's "out" alone
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x):
                return self.model(x)["out"]

        x = torch.randn(1, 3, 224, 224)
        axes = {"input": {0: "batch", 2: "height", 3: "width"}, "out": {0: "batch", 2: "height", 3: "width"}}
        with torch.no_grad():
            torch.onnx.export(
                Logits().eval(), (x,), str(path), input_names=["input"], output_names=["out"], dynamic_axes=axes,
                opset_version=17, dynamo=False,
            )  # fmt: skip

    return write


# torchvision's detectors return boxes, labels and scores (RetinaNet and SSD: boxes, scores, labels).
DETECTION_OUTPUTS = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": ["boxes", "labels", "scores"],
    "retinanet_resnet50_fpn": ["boxes", "scores", "labels"],
    "ssdlite320_mobilenet_v3_large": ["boxes", "scores", "labels"],
    "maskrcnn_resnet50_fpn": ["boxes", "labels", "scores", "masks"],
}


def write_detector(name: str) -> Callable[[Path, str], None]:
    def write(path: Path, exporter: str) -> None:
        torch = _seeded()
        import torchvision

        options = {"weights": None, "weights_backbone": None}
        options["box_score_thresh" if "rcnn" in name else "score_thresh"] = 0.0
        model = getattr(torchvision.models.detection, name)(**options).eval()
        outputs = DETECTION_OUTPUTS[name]
        axes = {"images": {1: "height", 2: "width"}, **{o: {0: "detections"} for o in outputs}}
        torch.onnx.export(
            model, ([torch.rand(3, 320, 320)],), str(path), input_names=["images"], output_names=outputs,
            dynamic_axes=axes, opset_version=11, dynamo=False,
        )  # fmt: skip

    return write


def write_yolo(path: Path, exporter: str) -> None:
    """ultralytics' YOLOv8n built from its yaml (random weights, nothing downloaded), exported by
    ultralytics itself with dynamic batch, height and width."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    _seeded()
    from ultralytics import YOLO

    with tempfile.TemporaryDirectory() as work:
        cwd = os.getcwd()
        os.chdir(work)
        try:
            written = YOLO("yolov8n.yaml").export(format="onnx", dynamic=True, imgsz=320, simplify=False, opset=17)
        finally:
            os.chdir(cwd)
        shutil.move(os.path.join(work, written) if not os.path.isabs(written) else written, path)
