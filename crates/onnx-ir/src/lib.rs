//! onnx-ir (not built yet).
