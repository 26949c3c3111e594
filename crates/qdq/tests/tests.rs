//! The integration tests of qdq, one binary (one link, one run), a module per subject: placement, parameters, smoothing, ORT parity and CPU fusion.

mod common;

mod cpu_fusion;
mod dynamic;
mod embedding;
mod errors;
mod float8;
mod forms;
mod onnx_ir_tiny_bert;
mod outliers;
mod output_bias;
mod pairs;
mod parity;
mod placement;
mod qnn;
mod reference;
mod roles;
mod rounding;
mod smooth;
mod write_tiny;
