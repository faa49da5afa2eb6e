"""Child process: export a Paddle inference model to ONNX bytes with paddle2onnx.

Run as a script by ``nnadapter_tvm.frontends.paddle.to_onnx`` (``python _export.py MODEL PARAMS OPSET OUT``), in
this interpreter or in the one ``NNADAPTER_TVM_PADDLE_PYTHON`` names. It imports nothing of nnadapter_tvm, so that
interpreter needs only paddlepaddle and paddle2onnx. Why a separate process: paddle2onnx 2.1.0 declares
``onnx<=1.17`` while this project runs onnx 1.23; ``paddle2onnx.export(save_file=None)`` returns the model bytes
from its C++ exporter without importing onnx, onnxoptimizer or polygraphy, so it runs beside any onnx, or in an
interpreter of its own. A crash or a stray global flag of paddle's stays in the child as well.

For a ``.pdmodel`` program it also writes ``OUT.names.json``: the program's own input and output names, which
paddle2onnx's translation to PIR does not keep. Exit status: 0 with the model written to OUT; 3 when paddle or
paddle2onnx cannot be imported; 1 when the export failed (the reason on stderr).
"""

import os
import sys


def main(argv: list) -> int:
    model_file, params_file, opset, out = argv
    os.environ.setdefault("GLOG_minloglevel", "2")  # paddle's C++ logging: warnings and up
    try:
        import paddle2onnx
    except Exception as err:  # ImportError, or paddle's own version check (ValueError)
        print(f"cannot import paddle2onnx: {type(err).__name__}: {err}", file=sys.stderr)
        return 3
    try:
        data = paddle2onnx.export(
            model_file,
            params_file,
            save_file=None,  # bytes back, and no import of onnx / onnxoptimizer / polygraphy
            opset_version=int(opset),
            auto_upgrade_opset=True,
            enable_onnx_checker=True,
            enable_optimize=True,
        )
    except Exception as err:  # paddle2onnx logs the cause and then fails on its unset result
        print(f"paddle2onnx.export failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if not isinstance(data, bytes) or not data:
        print("paddle2onnx.export returned no model", file=sys.stderr)
        return 1
    with open(out, "wb") as f:
        f.write(data)
    if model_file.endswith(".pdmodel"):
        # paddle2onnx translates an old program to PIR first, which renames its outputs (fetch_name_<k>); Paddle's
        # own predictor keeps the program's names. Tell the parent what they are.
        import json

        import paddle

        prefix = model_file[: -len(".pdmodel")]
        with paddle.pir_utils.OldIrGuard():
            exe = paddle.static.Executor(paddle.CPUPlace())
            _, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
        with open(out + ".names.json", "w") as f:
            json.dump({"inputs": list(feeds), "outputs": [v.name for v in fetches]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
