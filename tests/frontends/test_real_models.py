"""Models that real applications ship (from their wheels on PyPI, with their real weights), each imported
and compiled once, then run at several input sizes against onnxruntime (rtol 1e-3).

- rapidocr_onnxruntime: PaddleOCR's PP-OCRv4 text detector and recognizer and the direction classifier,
  exported by paddle2onnx (batch, height and width dynamic; shapes computed in the graph).
- ddddocr: a captcha recognizer (convolutions, a bidirectional LSTM, a width known only at run time),
  a YOLO-style detector, and the dynamically quantized recognizer of the old release (com.microsoft ops).
- silero-vad: a voice-activity detector in six exports (an If on the sample rate around the whole model,
  Ifs in the decoder, an LSTM, float16 weights, a sequence export).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from real_models import model_path

import nnadapter_tvm as nna

pytestmark = pytest.mark.slow


def _feeds(path, sizes: list[dict], seed: int = 0) -> list[dict]:
    """Random inputs of the given shapes (images in [0, 1), audio in [-0.5, 0.5)); integer scalars
    (silero's sample rate) take the value in ``sizes``."""
    model = onnx.load(str(path), load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init]
    rng = np.random.default_rng(seed)
    feeds = []
    for size in sizes:
        feed = {}
        for info in inputs:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
            spec = size[info.name]
            if isinstance(spec, tuple):
                feed[info.name] = (rng.random(spec) - (0.5 if info.name in ("input",) else 0.0)).astype(dtype)
                if info.name in ("state", "h", "c"):
                    feed[info.name] = np.zeros(spec, dtype)
            else:
                feed[info.name] = np.array(spec, dtype)
        feeds.append(feed)
    return feeds


def check_against_onnxruntime(path, sizes: list[dict], rtol: float = 1e-3, atol: float = 1e-4, **options) -> None:
    predictor = nna.Predictor(str(path), devices=["llvm"], **options)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in _feeds(path, sizes):
        ours = predictor.run(feed)
        theirs = session.run(None, feed)
        shapes = {k: v.shape for k, v in feed.items()}
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert a.shape == b.shape, f"output {k} for inputs {shapes}: {a.shape} against {b.shape}"
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {k} for inputs {shapes}")


# -- PaddleOCR (rapidocr_onnxruntime) ------------------------------------------------------------


def test_ppocr_direction_classifier() -> None:
    path = model_path("rapidocr_onnxruntime", "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    sizes = [{"x": (1, 3, 48, 192)}, {"x": (2, 3, 48, 100)}, {"x": (3, 3, 48, 320)}]
    check_against_onnxruntime(path, sizes)


def test_ppocr_v4_text_detector() -> None:
    path = model_path("rapidocr_onnxruntime", "ch_PP-OCRv4_det_infer.onnx")
    sizes = [{"x": (1, 3, 64, 96)}, {"x": (1, 3, 160, 128)}, {"x": (2, 3, 96, 64)}]
    check_against_onnxruntime(path, sizes)


def test_ppocr_v4_text_recognizer() -> None:
    path = model_path("rapidocr_onnxruntime", "ch_PP-OCRv4_rec_infer.onnx")
    sizes = [{"x": (1, 3, 48, 160)}, {"x": (2, 3, 48, 96)}, {"x": (1, 3, 48, 320)}]
    check_against_onnxruntime(path, sizes)


# -- ddddocr ---------------------------------------------------------------------------------------


def test_ddddocr_captcha_recognizer_with_lstm() -> None:
    path = model_path("ddddocr", "common.onnx")
    sizes = [{"input1": (1, 1, 64, 64)}, {"input1": (1, 1, 64, 150)}, {"input1": (1, 1, 64, 224)}]
    check_against_onnxruntime(path, sizes)


def test_ddddocr_detector() -> None:
    path = model_path("ddddocr", "common_det.onnx")
    check_against_onnxruntime(path, [{"images": (1, 3, 416, 416)}])


def test_ddddocr_quantized_recognizer() -> None:
    """The dynamically quantized recognizer (ConvInteger blocks and com.microsoft's DynamicQuantizeLSTM) compiles
    whole; it reads the same characters as onnxruntime at three widths.  The scores differ by up to 1% of their
    magnitude: onnxruntime's LSTM kernel quantizes its input and state to uint8 at run time, where the import
    runs the float LSTM on the dequantized weights (docs/onnx.md, "com.microsoft")."""
    path = model_path("ddddocr", "common_old.onnx")
    predictor = nna.Predictor(str(path), devices=["llvm"])
    assert predictor.host_node_count == 0
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in _feeds(path, [{"input1": (1, 1, 64, w)} for w in (64, 150, 224)]):
        (ours,), (theirs,) = predictor.run(feed), session.run(None, feed)
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours.argmax(-1), theirs.argmax(-1))
        assert np.abs(ours - theirs).max() <= 0.02 * np.abs(theirs).max()


# -- silero-vad --------------------------------------------------------------------------------------

_VAD = [
    {"input": (1, 512), "state": (2, 1, 128), "sr": 16000},
    {"input": (2, 512), "state": (2, 2, 128), "sr": 16000},
    {"input": (1, 256), "state": (2, 1, 128), "sr": 8000},
]


@pytest.mark.parametrize("name", ["silero_vad.onnx", "silero_vad_op18_ifless.onnx"])
def test_silero_vad_with_an_if_on_the_sample_rate(name: str) -> None:
    check_against_onnxruntime(model_path("silero-vad", name), _VAD)


@pytest.mark.parametrize("name", ["silero_vad_16k_op15.onnx", "silero_vad_half.onnx"])
def test_silero_vad_16k_exports(name: str) -> None:
    sizes = [{k: v for k, v in s.items() if k != "sr" or "op15" in name} for s in _VAD[:2]]
    check_against_onnxruntime(model_path("silero-vad", name), sizes)


def test_silero_vad_sequence_export() -> None:
    path = model_path("silero-vad", "silero_vad_16k_sequence.onnx")
    sizes = [{"input": (t, 576), "h": (1, 1, 128), "c": (1, 1, 128)} for t in (1, 3, 8)]
    check_against_onnxruntime(path, sizes)


def test_silero_vad_openvino_export() -> None:
    path = model_path("silero-vad", "silero_vad_openvino_16k.onnx")
    check_against_onnxruntime(path, [{"input": (1, 576), "state": (2, 1, 128)}])
