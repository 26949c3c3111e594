//! The integration tests of onnx-ir, one binary (one link, one run), a module per subject: models, graphs, tensors, files.

mod common;

mod files_and_fixtures;
mod model_graph_tensors;
