"""scikit-learn models through skl2onnx (ai.onnx.ml: trees, linear models, scalers, normalizers) and a
Keras classifier through tf2onnx, fitted on generated data (nothing downloaded), batch symbolic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

FEATURES = 10


def write_sklearn(name: str) -> Callable[[Path, str], None]:
    def write(path: Path, exporter: str) -> None:
        import numpy as np
        from skl2onnx import to_onnx
        from sklearn.datasets import make_classification, make_regression
        from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import Normalizer, StandardScaler

        if name == "gbdt_regressor":
            x, y = make_regression(300, FEATURES, random_state=0)
            model = GradientBoostingRegressor(n_estimators=30, random_state=0)
        else:
            x, y = make_classification(300, FEATURES, n_classes=3, n_informative=5, random_state=0)
            model = {
                "forest_classifier": RandomForestClassifier(20, max_depth=6, random_state=0),
                "scaled_logistic": make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)),
                "normalized_logistic": make_pipeline(Normalizer(), LogisticRegression(max_iter=300)),
            }[name]
        x = x.astype(np.float32)
        model.fit(x, y)
        last = model.steps[-1][1] if hasattr(model, "steps") else model
        options = {id(last): {"zipmap": False}} if hasattr(last, "predict_proba") else None
        onnx_model = to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
        path.write_bytes(onnx_model.SerializeToString())

    return write


def write_keras(path: Path, exporter: str) -> None:
    """A Keras MobileNetV2 classifier (random weights) by tf2onnx, its batch symbolic."""
    import keras
    import tensorflow as tf
    import tf2onnx

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(weights=None, input_shape=(128, 128, 3), classes=7)
    spec = (tf.TensorSpec((None, 128, 128, 3), tf.float32, name="input"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=15, output_path=str(path))
