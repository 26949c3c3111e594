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
