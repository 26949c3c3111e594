//! GPTQ-style rounding of 8-bit integer weights (Frantar et al., "GPTQ", 2023; the optimal-brain-compression update).
//!
//! Round-to-nearest rounds every weight of a MatMul `Y = X W` (`W` `[in, out]`) on its own. What matters is the
//! output's error `‖X (W - Ŵ)‖²`, whose curvature over row `k` of `W` is the input's Gram matrix `H = XᵀX`: rows
//! are rounded one after the other, and the error each rounding makes is pushed into the rows not rounded yet along
//! `H⁻¹`, where the inputs' correlation lets them cancel it. The grid stays the one round-to-nearest uses (the
//! policy's scales, one per output column, from the float weight's own range), so the weight's quantization
//! parameters do not change: only which integer each weight takes.
//!
//! The result is written back as float weights lying on that grid, and the column's extreme values (the ones its
//! scale and zero point are computed from) are kept as they were, so [`crate::plan`] computes the same parameters
//! again and quantizes each rounded weight to exactly the integer chosen here. A model so rounded is still an FP32
//! model: every later step (calibration, placement, evaluation) takes it as it takes any other.
//!
//! With `bounded_pairs`, each integer is chosen within what the limit leaves beside its pair's other integer (rows
//! `2j` and `2j + 1`, [`crate::scale::bound_pairs`]) when that one is chosen already, and the bound's cost is pushed
//! into the rows left like any rounding error.
//!
//! Statistics: one [`Gram`] per activation a rounded weight's MatMuls read ([`rounding_sites`]), collected by the
//! pipeline over the calibration data of the model as it will be quantized (after smoothing).

use std::collections::BTreeMap;

use faer::linalg::solvers::DenseSolveCore;
use faer::{Accum, Mat, MatRef, Par, Side};
use ndarray::Array2;
use onnx_ir::{GraphExt, GraphIndex, Model};

use crate::error::{Error, Result};
use crate::params::weight_params;
use crate::patterns;
use crate::policy::{Policy, WeightRounding};
use crate::scale::{PAIR_LIMIT, ScaleZp, bound_pairs, quantize_value};

/// Model metadata key recording that a model's weights were rounded by GPTQ (and for which grid), so `quantize` can
/// tell a rounded model from the original.
pub const ROUNDING_METADATA_KEY: &str = "qdq.weight_rounding";

/// The rounding recorded in a model's metadata by [`round_weights`], if any (e.g. `gptq; weights=37; bits=7`).
pub fn rounding_record(model: &Model) -> Option<&str> {
    model.proto.metadata_props.iter().find(|e| e.key() == ROUNDING_METADATA_KEY).map(|e| e.value())
}

/// Dampening added to the Gram matrix's diagonal, as a share of its mean (GPTQ's `percdamp`): keeps the inverse
/// defined where channels are (nearly) dead or collinear.
pub const DAMPENING: f64 = 0.01;

/// Rows summed in single precision before the partial sum is added to the double-precision total.
const FLUSH_ROWS: usize = 1 << 14;

/// The running sum `Σ xᵀx` over the rows (every position of every feature) of one activation's last axis.
#[derive(Debug, Clone)]
pub struct Gram {
    sum: Mat<f64>,
    /// The last rows' sum, in f32 (one GEMM accumulating per batch), not yet in `sum`.
    part: Mat<f32>,
    part_rows: usize,
    rows: u64,
}

impl Gram {
    /// An empty sum over `channels` channels.
    pub fn new(channels: usize) -> Self {
        Gram { sum: Mat::zeros(channels, channels), part: Mat::zeros(channels, channels), part_rows: 0, rows: 0 }
    }

    /// The channels (the length of the last axis).
    pub fn channels(&self) -> usize {
        self.sum.nrows()
    }

    /// Rows folded in so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Folds one batch of `tensor` (`data` of `shape`, row-major; the last axis the channels) in. Rows holding NaN or
    /// ±Inf are left out (as calibration leaves such values out; [`Gram::rows`] does not count them). A tensor whose
    /// last axis is not [`Gram::channels`] long is an error naming it.
    pub fn observe(&mut self, tensor: &str, data: &[f32], shape: &[usize]) -> Result<()> {
        let channels = self.channels();
        let len: usize = shape.iter().product();
        if shape.last() != Some(&channels) || data.len() < len || channels == 0 {
            return Err(Error::BadActivation {
                tensor: tensor.to_owned(),
                reason: format!("shape {shape:?}: expected {channels} channels on the last axis"),
            });
        }
        let data = &data[..len];
        let finite: Vec<f32>;
        let data = if data.iter().all(|v| v.is_finite()) {
            data
        } else {
            finite =
                data.chunks_exact(channels).filter(|r| r.iter().all(|v| v.is_finite())).flatten().copied().collect();
            &finite
        };
        let rows = data.len() / channels;
        for start in (0..rows).step_by(FLUSH_ROWS) {
            let n = FLUSH_ROWS.min(rows - start);
            let x = MatRef::from_row_major_slice(&data[start * channels..(start + n) * channels], n, channels);
            faer::linalg::matmul::matmul(self.part.as_mut(), Accum::Add, x.transpose(), x, 1.0f32, Par::rayon(0));
            self.part_rows += n;
            if self.part_rows >= FLUSH_ROWS {
                self.flush();
            }
        }
        self.rows += rows as u64;
        Ok(())
    }

    /// `Σ xᵀx / rows`: the inputs' second moment, the curvature of a MatMul's output error in its weight's rows.
    pub fn second_moment(&self) -> Array2<f64> {
        let m = self.moment();
        Array2::from_shape_fn((m.nrows(), m.ncols()), |(i, j)| m[(i, j)])
    }

    /// [`Gram::second_moment`] as a faer matrix.
    fn moment(&self) -> Mat<f64> {
        let rows = self.rows.max(1) as f64;
        let (sum, part) = (&self.sum, &self.part);
        Mat::from_fn(sum.nrows(), sum.ncols(), |i, j| (sum[(i, j)] + f64::from(part[(i, j)])) / rows)
    }

    /// Moves the single-precision partial sum into the total.
    fn flush(&mut self) {
        let part = &self.part;
        self.sum += Mat::<f64>::from_fn(part.nrows(), part.ncols(), |i, j| f64::from(part[(i, j)]));
        self.part.fill(0.0);
        self.part_rows = 0;
    }

    /// Adds the sum of another tensor (`tensor`, for the error) over the same channels.
    pub fn merge(&mut self, tensor: &str, other: &Gram) -> Result<()> {
        if other.channels() != self.channels() {
            let reason = format!("has {} channels where {} were expected", other.channels(), self.channels());
            return Err(Error::BadActivation { tensor: tensor.to_owned(), reason });
        }
        let (sum, part) = (&other.sum, &other.part);
        self.sum += Mat::<f64>::from_fn(sum.nrows(), sum.ncols(), |i, j| sum[(i, j)] + f64::from(part[(i, j)]));
        self.rows += other.rows;
        Ok(())
    }
}

/// A weight rounding can improve: a 2-D float initializer that the policy's MatMul-like nodes read as B (and nothing
/// else reads), with the activations they multiply it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundingSite {
    /// The weight initializer.
    pub weight: String,
    /// The activations its MatMuls read as A (one for most; one per layer for a weight layers share).
    pub inputs: Vec<String>,
    /// Channels the MatMuls contract (the length of the inputs' last axis).
    pub channels: usize,
    /// The output-channel axis of the weight: 1 for `[in, out]`, 0 for a transposed (`transB`) `[out, in]`.
    pub axis: usize,
}

/// The weights `policy` has rounded by GPTQ ([`WeightRounding::Gptq`] with integer weights): every 2-D float weight
/// whose readers are all constant-weight MatMul-like nodes the policy selects, contracting the same axis.
pub fn rounding_sites(model: &Model, policy: &Policy) -> Result<Vec<RoundingSite>> {
    if policy.weight_rounding != WeightRounding::Gptq || !policy.precision.is_integer() {
        return Ok(vec![]);
    }
    if !policy.op_types.iter().any(|o| crate::types::MATMUL_OPS.contains(&o.as_str())) {
        return Ok(vec![]);
    }
    let m = policy.matchers()?;
    let ix = GraphIndex::new(model.graph());
    let mut sites: BTreeMap<String, Option<RoundingSite>> = BTreeMap::new();
    for i in 0..ix.graph().node.len() {
        let Some(mm) = patterns::const_weight_matmul(&ix, i, &m) else { continue };
        let n = ix.node(i);
        let Some(axis) = patterns::matmul_rule(n).and_then(|r| r.weight_axis) else { continue };
        let weight = n.input[1].clone();
        let entry = sites
            .entry(weight.clone())
            .or_insert_with(|| Some(RoundingSite { weight: weight.clone(), inputs: vec![], channels: mm.rows, axis }));
        match entry {
            Some(s) if s.axis == axis && s.channels == mm.rows => {
                if !s.inputs.iter().any(|x| x == mm.input) {
                    s.inputs.push(mm.input.to_owned());
                }
            }
            // Read two ways: left as it is.
            _ => *entry = None,
        }
    }
    // A weight something else reads too (or reads as A) keeps its values.
    let only_matmuls = |s: &RoundingSite| {
        ix.readers(&s.weight).iter().all(|&(r, slot)| {
            slot == 1 && patterns::const_weight_matmul(&ix, r, &m).is_some_and(|mm| mm.rows == s.channels)
        }) && !ix.is_graph_output(&s.weight)
    };
    Ok(sites.into_values().flatten().filter(only_matmuls).collect())
}

/// What rounding did to one weight: the output error `tr(ΔWᵀ H ΔW) / rows` (mean squared error of `X W` per row of
/// `X`, summed over the outputs) of round-to-nearest and of GPTQ.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RoundedWeight {
    pub weight: String,
    pub nearest_error: f64,
    pub gptq_error: f64,
}

/// Rounds every site's weight by GPTQ against the Gram matrices of its inputs (`grams`, keyed by activation), in
/// `model` itself. The weights are replaced by float values on the policy's integer grid ([`crate::plan`] quantizes
/// them exactly). A weight whose inputs held no finite row is left as it is (round-to-nearest then) and not
/// returned; one whose inputs have no Gram matrix is an error naming it.
pub fn round_weights(
    model: &mut Model,
    policy: &Policy,
    sites: &[RoundingSite],
    grams: &BTreeMap<String, Gram>,
) -> Result<Vec<RoundedWeight>> {
    let spec = policy.weight_spec();
    let (qmin, qmax) = spec.qtype.range(spec.symmetric, spec.reduce_range);
    let mut out = Vec::with_capacity(sites.len());
    for site in sites {
        let mut h = Gram::new(site.channels);
        for x in &site.inputs {
            let g = grams.get(x).ok_or_else(|| Error::Missing { name: x.clone(), what: "Gram matrix (GPTQ)" })?;
            h.merge(x, g)?;
        }
        if h.rows() == 0 {
            continue;
        }
        let g = model.graph();
        let init = g
            .initializer(&site.weight)
            .ok_or_else(|| Error::Missing { name: site.weight.clone(), what: "weight initializer (GPTQ)" })?;
        // 2-D weights: the contracted axis is the other one.
        let pair_axes = if policy.bounded_pairs { vec![1 - site.axis] } else { vec![] };
        let (params, axis) = weight_params(init, Some(site.axis).filter(|_| policy.per_channel), spec, &pair_axes)?;
        let w = onnx_ir::tensor_to_array::<f32>(init)?;
        let dims = w.shape().to_vec();
        // As [in, out]: rows are the contracted channels.
        let w = w.into_dimensionality::<ndarray::Ix2>().map_err(|_| Error::BadWeight {
            tensor: site.weight.clone(),
            reason: format!("shape {dims:?}: GPTQ rounds 2-D weights"),
        })?;
        let w = if site.axis == 0 { w.t().to_owned() } else { w };
        let bounded = policy.bounded_pairs;
        let grid = Grid { params, per_channel: axis.is_some(), symmetric: spec.symmetric, qmin, qmax, bounded };
        let (rounded, nearest_error, gptq_error) = gptq(&w, &h, &grid, &site.weight)?;
        let rounded = if site.axis == 0 { rounded.t().as_standard_layout().to_owned() } else { rounded };
        let values: Vec<f32> = rounded.into_iter().collect();
        let t = onnx_ir::tensor_from_vec::<f32>(&site.weight, &dims, values)?;
        model.graph_mut().add_initializer(t);
        out.push(RoundedWeight { weight: site.weight.clone(), nearest_error, gptq_error });
    }
    // Recorded even when every input was non-finite: the model went through rounding, and `quantize` takes it.
    if !sites.is_empty() {
        let bits = if spec.reduce_range { 7 } else { 8 };
        let (n, per_channel, bounded) = (out.len(), policy.per_channel, policy.bounded_pairs);
        let record = format!("gptq; weights={n}; bits={bits}; per_channel={per_channel}; bounded_pairs={bounded}");
        model.proto.metadata_props.retain(|e| e.key() != ROUNDING_METADATA_KEY);
        model.proto.metadata_props.push(onnx_ir::proto::StringStringEntryProto {
            key: Some(ROUNDING_METADATA_KEY.into()),
            value: Some(record),
        });
    }
    Ok(out)
}

/// The integer grid of one weight: its scale and zero point per output column (or one for all).
struct Grid {
    params: Vec<ScaleZp>,
    per_channel: bool,
    symmetric: bool,
    qmin: i32,
    qmax: i32,
    /// Adjacent rows' integers bounded ([`crate::scale::bound_pairs`]).
    bounded: bool,
}

impl Grid {
    fn of(&self, column: usize) -> ScaleZp {
        self.params[if self.per_channel { column } else { 0 }]
    }

    /// The integer nearest `x` on the grid of `column`; with a bound, at most what the limit leaves beside the
    /// pair's other integer (`partner`, when it is chosen already).
    fn nearest_int(&self, x: f64, column: usize, partner: Option<i32>) -> i32 {
        let q = quantize_value(x as f32, self.of(column), self.qmin, self.qmax);
        match partner.filter(|_| self.bounded) {
            Some(other) => {
                let room = (PAIR_LIMIT - other.abs()).max(0);
                q.clamp(-room, room)
            }
            None => q,
        }
    }

    fn value(&self, q: i32, column: usize) -> f64 {
        let p = self.of(column);
        f64::from((q - p.zero_point) as f32 * p.scale)
    }

    /// Round-to-nearest of all of `w` (`[in, out]`), pairs bounded as [`crate::plan`] bounds them.
    fn nearest_all(&self, w: &Array2<f32>) -> Array2<f32> {
        let (rows, cols) = w.dim();
        let mut q: Vec<i8> =
            w.indexed_iter().map(|((_, c), &v)| self.nearest_int(f64::from(v), c, None) as i8).collect();
        if self.bounded {
            bound_pairs(&mut q, &[rows, cols], 0);
        }
        Array2::from_shape_fn((rows, cols), |(r, c)| self.value(i32::from(q[r * cols + c]), c) as f32)
    }
}

/// GPTQ on `w` (`[in, out]`) with the Gram matrix `h` of its input: the rounded weight (on `grid`, each column's
/// (or the tensor's) minimum and maximum kept exactly), and the output error of round-to-nearest and of the result.
fn gptq(w: &Array2<f32>, h: &Gram, grid: &Grid, name: &str) -> Result<(Array2<f32>, f64, f64)> {
    let (rows, cols) = w.dim();
    let hn = hessian(h);
    // The range ends the parameters come from stay exact, so the same parameters come out of the rounded weight.
    let keep = range_ends(w, grid);
    // Rows with the largest curvature first (GPTQ's "act order"): their errors are spread over the most rows.
    let mut order: Vec<usize> = (0..rows).collect();
    order.sort_by(|&a, &b| hn[(b, b)].total_cmp(&hn[(a, a)]));
    let hp = Mat::<f64>::from_fn(rows, rows, |i, j| hn[(order[i], order[j])]);
    let u = inverse_factor(&hp).ok_or_else(|| Error::BadWeight {
        tensor: name.to_owned(),
        reason: "its input's Gram matrix could not be factored even dampened (GPTQ)".into(),
    })?;
    // Working copy in processing order, f64.
    let mut work: Vec<Vec<f64>> = order.iter().map(|&r| w.row(r).iter().map(|&v| f64::from(v)).collect()).collect();
    // The integers chosen so far, by original row (the kept ends from the start: their partners must leave room).
    let mut ints: Array2<Option<i32>> = Array2::from_shape_fn((rows, cols), |(r, c)| {
        keep[(r, c)].then(|| grid.nearest_int(f64::from(w[(r, c)]), c, None))
    });
    let mut err = vec![0.0f64; cols];
    for k in 0..rows {
        let d = u[(k, k)];
        let r = order[k];
        let partner = r ^ 1;
        for (c, e) in err.iter_mut().enumerate() {
            let x = work[k][c];
            let q = if keep[(r, c)] {
                f64::from(w[(r, c)])
            } else {
                let other = if partner < rows { ints[(partner, c)] } else { None };
                let q = grid.nearest_int(x, c, other);
                ints[(r, c)] = Some(q);
                grid.value(q, c)
            };
            *e = (x - q) / d;
            work[k][c] = q;
        }
        let rest = &mut work[k + 1..];
        for (j, row) in rest.iter_mut().enumerate() {
            let f = u[(k, k + 1 + j)];
            if f != 0.0 {
                row.iter_mut().zip(&err).for_each(|(v, e)| *v -= f * e);
            }
        }
    }
    let mut rounded = Array2::<f32>::zeros((rows, cols));
    for (k, &r) in order.iter().enumerate() {
        for c in 0..cols {
            rounded[(r, c)] = work[k][c] as f32;
        }
    }
    let nearest = grid.nearest_all(w);
    let errors = (output_error(w, &nearest, &hn), output_error(w, &rounded, &hn));
    Ok((rounded, errors.0, errors.1))
}

/// `H / rows`, dead channels given a unit diagonal.
fn hessian(g: &Gram) -> Mat<f64> {
    let n = g.channels();
    let mut h = g.moment();
    for i in 0..n {
        if h[(i, i)] <= 0.0 {
            h[(i, i)] = 1.0;
        }
    }
    h
}

/// The upper Cholesky factor `U` of `(H + λI)⁻¹` (`= UᵀU`), λ [`DAMPENING`] times the mean diagonal (more if the
/// factorisation fails).
fn inverse_factor(h: &Mat<f64>) -> Option<Mat<f64>> {
    let n = h.nrows();
    let mean = (0..n).map(|i| h[(i, i)]).sum::<f64>() / n.max(1) as f64;
    for extra in [DAMPENING, 0.1, 1.0] {
        let damped = Mat::<f64>::from_fn(n, n, |i, j| h[(i, j)] + if i == j { extra * mean } else { 0.0 });
        let Ok(llt) = damped.llt(Side::Lower) else { continue };
        let inv = llt.inverse();
        if let Ok(f) = inv.llt(Side::Lower) {
            // H⁻¹ = L Lᵀ: U = Lᵀ.
            return Some(f.L().transpose().to_owned());
        }
    }
    None
}

/// Which weights the parameters come from, in each column (or, per tensor, in the weight): the largest magnitude of a
/// symmetric grid (on the grid: `±qmax · scale`), or with bounded pairs the pair whose sum widened the range
/// ([`crate::params::weight_params`]), else one minimum and one maximum.
fn range_ends(w: &Array2<f32>, grid: &Grid) -> Array2<bool> {
    let (rows, cols) = w.dim();
    let widen = grid.bounded.then_some(grid.qmax as f32 / PAIR_LIMIT as f32);
    let mut keep = Array2::from_elem((rows, cols), false);
    let ends = |cells: &mut dyn Iterator<Item = (usize, usize)>| {
        let (mut lo, mut hi, mut abs) = (None::<(usize, usize)>, None::<(usize, usize)>, None::<(usize, usize)>);
        let mut pair = (0.0f32, None::<(usize, usize)>);
        for (r, c) in cells {
            let v = w[(r, c)];
            if lo.is_none_or(|(a, b)| v < w[(a, b)]) {
                lo = Some((r, c));
            }
            if hi.is_none_or(|(a, b)| v > w[(a, b)]) {
                hi = Some((r, c));
            }
            if abs.is_none_or(|(a, b)| v.abs() > w[(a, b)].abs()) {
                abs = Some((r, c));
            }
            if r % 2 == 0 && r + 1 < rows && v.abs() + w[(r + 1, c)].abs() > pair.0 {
                pair = (v.abs() + w[(r + 1, c)].abs(), Some((r, c)));
            }
        }
        let top = abs.map_or(0.0, |(a, b)| w[(a, b)].abs());
        match (widen, pair.1) {
            (Some(f), Some((r, c))) if pair.0 * f > top => [Some((r, c)), Some((r + 1, c))],
            _ if grid.symmetric => [abs, None],
            _ => [lo, hi],
        }
    };
    let groups: Vec<[Option<(usize, usize)>; 2]> = if grid.per_channel {
        (0..cols).map(|c| ends(&mut (0..rows).map(move |r| (r, c)))).collect()
    } else {
        vec![ends(&mut (0..rows).flat_map(|r| (0..cols).map(move |c| (r, c))))]
    };
    for cell in groups.into_iter().flatten().flatten() {
        keep[cell] = true;
    }
    keep
}

/// `tr((W - Ŵ)ᵀ H (W - Ŵ))`: the squared output error per input row, summed over the outputs.
fn output_error(w: &Array2<f32>, q: &Array2<f32>, h: &Mat<f64>) -> f64 {
    let (rows, cols) = w.dim();
    let d = Mat::<f64>::from_fn(rows, cols, |r, c| f64::from(w[(r, c)]) - f64::from(q[(r, c)]));
    let mut hd = Mat::<f64>::zeros(rows, cols);
    faer::linalg::matmul::matmul(hd.as_mut(), Accum::Replace, h.as_ref(), d.as_ref(), 1.0, Par::Seq);
    let mut total = 0.0;
    for c in 0..cols {
        for r in 0..rows {
            total += d[(r, c)] * hd[(r, c)];
        }
    }
    total
}
