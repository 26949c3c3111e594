//! `onnx-ir`: ONNX models as prost-generated protobuf types, plus loading/saving (with
//! external data), graph queries and edits, tensor <-> ndarray conversion, and (feature `test-support`) a seeded
//! tiny-BERT builder for tests.
//!
//! Invariants:
//! - A [`Model`] returned by [`Model::load`] / [`Model::from_bytes`] holds all tensor data in
//!   memory, with non-negative dims and data lengths matching the dims.
//! - Saving never writes a partial file: output goes to a temporary file that is renamed.
//! - Decoding then re-encoding an unmodified model reproduces the original bytes when the
//!   writer used canonical protobuf field order (as the reference `onnx` package does).
//! - Bad input gives an [`Error`] naming the file, tensor, node or attribute; never a panic.
//!
//! What it offers the crates that use it: `Model` (`load`; `load_graph_only`, which checks external data without
//! reading it, for work that needs the graph only; `save`, which writes the large tensors to `<file>.data` by itself
//! when the model would pass protobuf's 2 GiB inline, without holding the weights twice; `save_with` a chosen side
//! file; `to_bytes`), `GraphExt` (edits and one-off queries; `name_nodes` gives unnamed and repeated nodes names of
//! their own, which the pipeline calls on every model it quantizes or debugs, since qdq's passes find and report nodes
//! by name and pass over an unnamed one), `GraphIndex` (producers, readers, initializers, names; built once per pass),
//! `fold_constants` (what is constant by construction, `Constant` nodes and `Identity` / `Transpose` / `Cast` /
//! `Reshape` / `DequantizeLinear` of initializers, made initializers: an exporter's unfolded weights become weights;
//! `constant_value` reads a `Constant` node in any of its forms), `upcast_float16` (a model converted to float16
//! computes in float32 again, exactly: what calibration and placement work on), `upgrade_default_opset` (an export
//! older than opset 13 carried over to 13..19, each node in the new opset's form of the same computation: per-channel
//! Q/DQ needs 13, float8 Q/DQ 19), `ranks` (each tensor's rank where declared shapes, constants and the ops' rank rules
//! prove it) and `annotate_shape_preserving` (every float `Softmax`'s input and output declared with one shared set of
//! fresh symbols, so ONNX Runtime's planner may run it in place; `Plan::apply` and the dynamic mode call it),
//! node/attribute/tensor builders (`value_info` and its readers `declared_dims` / `declared_elem_type`, which the
//! crates read declared shapes and types through).

/// Generated ONNX protobuf types (`proto/onnx.proto`).
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

mod build;
mod error;
mod fold;
mod graph;
mod index;
mod model;
mod opset;
mod rank;
mod tensor;
#[cfg(feature = "test-support")]
pub mod tiny_bert;
mod upcast;

pub use build::{
    NodeExt, attr_float, attr_floats, attr_graph, attr_int, attr_ints, attr_string, attr_strings, attr_tensor,
    get_attr, get_attr_float, get_attr_int, get_attr_ints, get_attr_string, get_attr_tensor, node,
};
pub use error::{Error, Result};
pub use fold::{FOLDED_OPS, Folded, constant_value, fold_constants};
pub use graph::{GraphExt, NameSet, declared_dims, declared_elem_type, subgraphs, value_info};
pub use index::GraphIndex;
pub use model::{EXTERNAL_ALIGNMENT, ExternalDataOptions, Model, PROTOBUF_LIMIT, SaveOptions, Saved};
pub use opset::{OLDEST_UPGRADABLE_OPSET, OPSET_TARGETS, OpsetUpgrade, upgrade_default_opset};
pub use proto::tensor_proto::DataType;
pub use rank::{SHAPE_PRESERVING_IN_PLACE, annotate_shape_preserving, ranks};
pub use tensor::{
    Element, F32Values, array_to_tensor, data_type_name, f32_values, raw_byte_len, tensor_from_raw, tensor_from_vec,
    tensor_shape, tensor_to_array,
};
pub use upcast::{Upcast, upcast_float16};
