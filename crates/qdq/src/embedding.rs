//! Int8 embedding tables ([`Embeddings::Int8`]): a float table that only Gathers read (on axis 0) is stored as int8
//! with one symmetric scale per column; each Gather reads the int8 table and a DequantizeLinear after it (axis -1:
//! the table's columns are the last dimension of the gathered rows) restores the float rows. Only the rows a batch
//! uses are dequantized, and the file holds one byte per value instead of four (MiniLM's word embeddings are half
//! of its FP32 size). In ONNX Runtime's CPU layout (`contrib_ops`) the rows are restored by `Cast` to float and `Mul`
//! by the column scales instead: the same values (a zero point of 0 makes both `q · s`), and ONNX Runtime's CPU EP
//! runs its per-axis DequantizeLinear element by element, several times slower than the two vectorised ops
//! ([`RowDequantize`]).

use onnx_ir::proto::tensor_proto::DataType;
use onnx_ir::proto::{GraphProto, NodeProto, TensorProto};
use onnx_ir::{GraphExt, GraphIndex, NameSet, NodeExt, attr_int, get_attr_int, node};

use crate::error::{Error, Result};
use crate::policy::{Embeddings, Policy};
use crate::scale::{QuantSpec, QuantType, compute_scale_zp};
use crate::types::Consumer;

/// Symmetric int8 over the full [-127, 127]: the table is a weight, every value is known.
const SPEC: QuantSpec = QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: false };

/// One embedding table stored as int8.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EmbeddingTable {
    /// The float initializer replaced.
    pub table: String,
    /// The Gathers that read it (input 0).
    pub gathers: Vec<Consumer>,
    /// One scale per column (the table's axis 1).
    pub scales: Vec<f32>,
    /// How the gathered rows are brought back to float.
    pub rows: RowDequantize,
}

/// The nodes that turn a Gather's int8 rows back into float: both compute `q · scale[column]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowDequantize {
    /// `DequantizeLinear` on axis -1 with a zero point of 0: the QDQ form every EP reads.
    DequantizeLinear,
    /// `Cast` to float, then `Mul` by the `[columns]` scales: what ONNX Runtime's CPU EP runs fastest (its per-axis
    /// DequantizeLinear took 0.6-1.3 ms for MiniLM's three lookups of 256 rows, Cast + Mul 0.1-0.35 ms).
    CastMul,
    /// One `DequantizeLinear` of the whole table (axis 1) before its Gathers, which read the float table: a constant
    /// an EP folds at load (`embeddings = int8-table`).
    Table,
}

/// The tables `policy` stores as int8: float 2-D initializers (also those an old exporter listed as graph inputs:
/// constants all the same; not excluded by `exclude_tensors`)
/// whose every reader is a Gather on axis 0 with an output that the node lists pass.
pub(crate) fn plan_tables(ix: &GraphIndex, policy: &Policy) -> Result<Vec<EmbeddingTable>> {
    let rows = match (policy.embeddings, policy.contrib_ops) {
        (Embeddings::Float, _) => return Ok(vec![]),
        (Embeddings::Int8Table, _) => RowDequantize::Table,
        (Embeddings::Int8, true) => RowDequantize::CastMul,
        (Embeddings::Int8, false) => RowDequantize::DequantizeLinear,
    };
    let m = policy.matchers()?;
    let g = ix.graph();
    let mut tables = vec![];
    for init in &g.initializer {
        let t = init.name();
        let float_2d = init.data_type() == DataType::Float as i32 && init.dims.len() == 2;
        if !float_2d || m.tensor_excluded(t) {
            continue;
        }
        let readers = ix.readers(t);
        let gathers_only = !readers.is_empty()
            && readers.iter().all(|&(n, slot)| {
                let n = ix.node(n);
                // A Gather without an output (a malformed file) gathers nothing to dequantize.
                n.op_type() == "Gather"
                    && slot == 0
                    && !n.output.is_empty()
                    && gather_axis(n) == Some(0)
                    && m.node_selected(n.name())
            });
        if !gathers_only {
            continue;
        }
        let gathers = readers
            .iter()
            .map(|&(n, slot)| Consumer { node: n, node_name: ix.node(n).name().to_owned(), slot })
            .collect();
        tables.push(EmbeddingTable { table: t.to_owned(), gathers, scales: column_scales(init)?, rows });
    }
    Ok(tables)
}

/// A Gather's axis (default 0); `None` if the attribute is malformed.
fn gather_axis(n: &NodeProto) -> Option<i64> {
    get_attr_int(n, "axis").ok().map(|a| a.unwrap_or(0))
}

/// One scale per column of a 2-D table, read in place (a table of gigabytes is not copied).
fn column_scales(init: &TensorProto) -> Result<Vec<f32>> {
    let (shape, values) = onnx_ir::f32_values(init)?;
    let cols = match shape.as_slice() {
        [_, c] => (*c).max(1),
        _ => {
            return Err(Error::BadWeight {
                tensor: init.name().to_owned(),
                reason: format!("shape {shape:?} is not 2-D"),
            });
        }
    };
    let mut amax = vec![0.0f32; cols];
    for (k, v) in values.enumerate() {
        if !v.is_finite() {
            let reason = format!("embedding table contains non-finite value {v}");
            return Err(Error::BadWeight { tensor: init.name().to_owned(), reason });
        }
        let m = &mut amax[k % cols];
        *m = m.max(v.abs());
    }
    Ok(amax.into_iter().map(|a| compute_scale_zp(-a, a, SPEC).scale).collect())
}

/// The whole int8 table `q` (with its `scale` and zero point) dequantized by one node before the first of `t`'s
/// Gathers, which read it as they read the float one ([`RowDequantize::Table`]): the node and where it goes.
fn dequantize_whole(
    g: &mut GraphProto,
    names: &mut NameSet,
    t: &EmbeddingTable,
    [q, scale, zp]: [&str; 3],
) -> Result<(usize, Vec<NodeProto>)> {
    let float = names.fresh(&format!("{}_dequantized", t.table));
    let dq_name = names.fresh(&format!("{}_DequantizeLinear", t.table));
    let dq = node("DequantizeLinear", &dq_name, &[q, scale, zp], &[&float]).with_attr(attr_int("axis", 1));
    for c in &t.gathers {
        g.rewire_input(c.node, 0, &float)?;
    }
    Ok((t.gathers.iter().map(|c| c.node).min().unwrap_or(0), vec![dq]))
}

/// Replaces each table by its int8 form and gives each of its Gathers the nodes that dequantize its rows
/// ([`RowDequantize`]; returned with the index of the node they must precede; the caller inserts them). Node indices
/// must be those the plan was made for.
pub(crate) fn apply_tables(
    g: &mut GraphProto,
    names: &mut NameSet,
    tables: &[EmbeddingTable],
) -> Result<Vec<(usize, Vec<NodeProto>)>> {
    let mut inserts = vec![];
    for t in tables {
        let init =
            g.initializer(&t.table).ok_or_else(|| Error::Missing { name: t.table.clone(), what: "initializer" })?;
        let q = names.fresh(&format!("{}_quantized", t.table));
        let qt = crate::scale::quantized_along(&q, init, &t.scales, 1, SPEC.qtype, SPEC.qtype.range(true, false), &[])?;
        let scale = names.fresh(&format!("{}_scale", t.table));
        let cols = [t.scales.len()];
        g.add_initializer(qt);
        g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&scale, &cols, t.scales.clone())?);
        let zp = (t.rows != RowDequantize::CastMul).then(|| names.fresh(&format!("{}_zero_point", t.table)));
        if let Some(zp) = &zp {
            g.add_initializer(onnx_ir::tensor_from_vec::<i8>(zp, &cols, vec![0; t.scales.len()])?);
        }
        if let (RowDequantize::Table, Some(zp)) = (t.rows, &zp) {
            inserts.push(dequantize_whole(g, names, t, [&q, &scale, zp])?);
            continue;
        }
        for c in &t.gathers {
            g.rewire_input(c.node, 0, &q)?;
            let gather = &mut g.node[c.node];
            let rows = gather.output[0].clone();
            let int8_rows = names.fresh(&format!("{rows}_int8"));
            gather.output[0] = int8_rows.clone();
            let nodes = match &zp {
                Some(zp) => {
                    let dq_name = names.fresh(&format!("{}_DequantizeLinear", c.node_name));
                    let dq = node("DequantizeLinear", &dq_name, &[&int8_rows, &scale, zp], &[&rows]);
                    vec![dq.with_attr(attr_int("axis", -1))]
                }
                None => {
                    let float_rows = names.fresh(&format!("{rows}_float"));
                    let cast_name = names.fresh(&format!("{}_Cast", c.node_name));
                    let cast = node("Cast", &cast_name, &[&int8_rows], &[&float_rows])
                        .with_attr(attr_int("to", DataType::Float as i64));
                    let mul_name = names.fresh(&format!("{}_Mul", c.node_name));
                    vec![cast, node("Mul", &mul_name, &[&float_rows, &scale], &[&rows])]
                }
            };
            inserts.push((c.node + 1, nodes));
        }
    }
    Ok(inserts)
}
