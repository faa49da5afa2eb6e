"""ONNX op converters, one file per op family; each converter emits NNAdapter standard operations."""
