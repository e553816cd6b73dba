"""More data-movement ops (ONNX semantics)."""
