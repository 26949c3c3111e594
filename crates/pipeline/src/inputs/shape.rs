//! The fixed dimensions a model declares for its token inputs: exported with static shapes, it runs nothing else.

use std::path::Path;

use crate::error::{Error, Result};

/// Fixed dimensions a model declares for its token inputs (its `[batch, sequence]` integer inputs): exported with
/// static shapes, it runs nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeclaredShape {
    pub batch: Option<usize>,
    pub seq_len: Option<usize>,
}

impl DeclaredShape {
    /// What the graph inputs of `model` declare: a dimension any `[batch, sequence]` integer input fixes (the others
    /// leaving it dynamic). Names the inputs in an error when two fix it to different values.
    pub fn of(model: &onnx_ir::Model, path: &Path) -> Result<DeclaredShape> {
        let g = model.graph();
        let mut dims: Vec<(&str, [Option<i64>; 2])> = Vec::new();
        for v in g.input.iter().filter(|v| !onnx_ir::GraphExt::is_initializer(g, v.name())) {
            let integer = onnx_ir::declared_elem_type(v)
                .is_some_and(|e| [onnx_ir::DataType::Int64, onnx_ir::DataType::Int32].map(|d| d as i32).contains(&e));
            let Some(shape) = onnx_ir::declared_dims(v).filter(|s| s.len() == 2 && integer) else {
                continue;
            };
            let fixed = |i: usize| match shape[i] {
                Ok(v) if v > 0 => Some(v),
                _ => None,
            };
            dims.push((v.name(), [fixed(0), fixed(1)]));
        }
        let agreed = |axis: usize, what: &str| -> Result<Option<usize>> {
            let mut fixed: Vec<i64> = dims.iter().filter_map(|(_, d)| d[axis]).collect();
            fixed.sort_unstable();
            fixed.dedup();
            match fixed.as_slice() {
                [] => Ok(None),
                [d] => Ok(Some(*d as usize)),
                _ => Err(Error::Input {
                    path: path.to_path_buf(),
                    reason: format!(
                        "the token inputs declare different {what} dimensions: {}",
                        dims.iter()
                            .map(|(n, d)| format!("`{n}` {}", d[axis].map_or("dynamic".to_owned(), |v| v.to_string())))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
            }
        };
        Ok(DeclaredShape { batch: agreed(0, "batch")?, seq_len: agreed(1, "sequence")? })
    }
}

/// The names a model gives the batch and sequence dimensions of its token inputs (its `[batch, sequence]` integer
/// inputs, e.g. `batch_size` and `sequence_length`), where they are symbolic: what an EP that needs static shapes
/// has fixed by name ([`runtime::SessionConfig::dim_overrides`]).
pub fn symbolic_dims(model: &onnx_ir::Model) -> Vec<[Option<String>; 2]> {
    let g = model.graph();
    g.input
        .iter()
        .filter(|v| !onnx_ir::GraphExt::is_initializer(g, v.name()))
        .filter(|v| {
            onnx_ir::declared_elem_type(v)
                .is_some_and(|e| [onnx_ir::DataType::Int64, onnx_ir::DataType::Int32].map(|d| d as i32).contains(&e))
        })
        .filter_map(onnx_ir::declared_dims)
        .filter(|d| d.len() == 2)
        .map(|d| [0, 1].map(|i| d[i].clone().err().filter(|n| !n.is_empty())))
        .collect()
}
