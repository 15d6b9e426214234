"""The ONNX side of sonnx: importer (prepare, SingaRep), exporter (to_onnx), registry."""
