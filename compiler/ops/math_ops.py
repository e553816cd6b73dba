"""More elementwise and reduction ops (ONNX semantics)."""
