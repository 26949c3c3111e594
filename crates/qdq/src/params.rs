//! Quantization parameters of one selected tensor: what kind of tensor it is, its range (calibrated, analytic or
//! from its values) and the scales / zero points that follow.

use onnx_ir::GraphIndex;
use std::collections::BTreeSet;

use onnx_ir::proto::{NodeProto, TensorProto};

use crate::error::{Error, Result};
use crate::patterns;
use crate::policy::{Policy, SoftmaxRange, VariableB};
use crate::scale::{PAIR_LIMIT, QuantSpec, QuantType, ScaleZp, compute_scale_zp};
use crate::select::Selection;
use crate::shift;
use crate::types::{Ranges, TensorKind};

/// The parameters of one tensor's pairs.
pub(crate) struct TensorParams {
    pub kind: TensorKind,
    pub qtype: QuantType,
    /// One per tensor, or one per channel along `axis`.
    pub params: Vec<ScaleZp>,
    pub axis: Option<usize>,
    /// `Some(c)`: the pairs quantize `tensor - c` ([`SoftmaxRange::Shifted`]).
    pub shift: Option<f32>,
    /// A weight's axes along which its int8 pairs are bounded ([`pair_axes`]).
    pub pair_axes: Vec<usize>,
}

pub(crate) fn check_range(tensor: &str, (min, max): (f32, f32)) -> Result<()> {
    if min.is_finite() && max.is_finite() && min <= max {
        Ok(())
    } else {
        Err(Error::BadRange { tensor: tensor.to_string(), min, max })
    }
}

fn scale_zp(tensor: &str, min: f32, max: f32, spec: QuantSpec) -> ScaleZp {
    let p = compute_scale_zp(min, max, spec);
    if p.degenerate {
        tracing::warn!(tensor, min, max, "range too small to quantize; using scale 1, zero point 0");
    }
    p
}

pub(crate) fn min_max(values: impl Iterator<Item = f32>) -> (f32, f32) {
    values.fold((0.0f32, 0.0f32), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// Per-channel (along `axis` of a 2-D weight: 1 for a MatMul's `[in, out]`, 0 for a transposed `[out, in]`) or,
/// with `axis` `None` or a weight of another rank, per-tensor symmetric parameters. With `pair_axes` (bounded pairs,
/// [`crate::scale::bound_pairs`]) a range is widened until its largest pair sum along those axes lands on
/// [`PAIR_LIMIT`]: round-to-nearest then keeps every pair within the limit, and no weight is clipped.
pub(crate) fn weight_params(
    w: &TensorProto,
    axis: Option<usize>,
    spec: QuantSpec,
    pair_axes: &[usize],
) -> Result<(Vec<ScaleZp>, Option<usize>)> {
    let a = onnx_ir::tensor_to_array::<f32>(w)?;
    if let Some(bad) = a.iter().find(|v| !v.is_finite()) {
        return Err(Error::BadWeight {
            tensor: w.name().to_string(),
            reason: format!("contains non-finite value {bad}"),
        });
    }
    let qmax = spec.qtype.range(spec.symmetric, spec.reduce_range).1 as f32;
    // The magnitude a largest pair sum `p` asks for: `p` lands on the limit.
    let widened = |(lo, hi): (f32, f32), p: f32| {
        let t = (p * qmax / PAIR_LIMIT as f32).max(lo.abs()).max(hi.abs());
        if t > lo.abs().max(hi.abs()) { (-t, t) } else { (lo, hi) }
    };
    if let Some(axis) = axis.filter(|&x| a.ndim() == 2 && x < 2) {
        let along = pair_axes.contains(&(1 - axis));
        let params = a
            .axis_iter(ndarray::Axis(axis))
            .map(|col| {
                let p = if along { max_pair_sum(col.view(), 0) } else { 0.0 };
                let (lo, hi) = widened(min_max(col.iter().copied()), p);
                scale_zp(w.name(), lo, hi, spec)
            })
            .collect();
        Ok((params, Some(axis)))
    } else {
        let p = pair_axes.iter().map(|&ax| max_pair_sum(a.view(), ax)).fold(0.0, f32::max);
        let (lo, hi) = widened(min_max(a.iter().copied()), p);
        Ok((vec![scale_zp(w.name(), lo, hi, spec)], None))
    }
}

/// The largest `|a| + |b|` of the pairs `(2j, 2j + 1)` along `axis` of `a`.
pub(crate) fn max_pair_sum<D: ndarray::Dimension>(a: ndarray::ArrayView<f32, D>, axis: usize) -> f32 {
    if axis >= a.ndim() {
        return 0.0;
    }
    let mut best = 0.0f32;
    for lane in a.lanes(ndarray::Axis(axis)) {
        for j in (0..lane.len().saturating_sub(1)).step_by(2) {
            best = best.max(lane[j].abs() + lane[j + 1].abs());
        }
    }
    best
}

/// The channel axis of constant `t` as the B of the selected MatMul-like nodes reading it: `Some(None)` when they
/// disagree (per-tensor), `None` when none reads it as B.
fn weight_axis(ix: &GraphIndex, sel: &Selection, t: &str) -> Option<Option<usize>> {
    let mut axes = sel.receivers(t).iter().filter_map(|&i| {
        let n = ix.node(i);
        let rule = patterns::matmul_rule(n).filter(|_| n.input[1] == t)?;
        Some(rule.weight_axis)
    });
    let first = axes.next()?;
    Some(if axes.all(|a| a == first) { first } else { None })
}

/// The axes of a weight of rank `rank` along which its int8 pairs are bounded ([`crate::scale::bound_pairs`]) for the
/// MatMul-like `readers` under `policy` (`bounded_pairs`): each reader's contracted axis, or every axis when a reader's
/// is unknown. Empty when the policy does not bound pairs.
pub(crate) fn pair_axes<'n>(readers: impl Iterator<Item = &'n NodeProto>, rank: usize, policy: &Policy) -> Vec<usize> {
    if !policy.bounded_pairs || !policy.precision.is_integer() {
        return vec![];
    }
    let mut axes = BTreeSet::new();
    for n in readers {
        match patterns::b_contracted_axis(n, rank) {
            Some(a) => axes.insert(a),
            None => return (0..rank).collect(),
        };
    }
    axes.into_iter().collect()
}

/// A constant: a weight when a selected MatMul-like op reads it as B (policy weight spec, per-channel along the op's
/// output-channel axis if asked), otherwise quantized like an activation over its own min/max.
fn constant_params(ix: &GraphIndex, sel: &Selection, init: &TensorProto, policy: &Policy) -> Result<TensorParams> {
    let t = init.name();
    if let Some(axis) = weight_axis(ix, sel, t) {
        let spec = policy.weight_spec();
        let readers = sel.receivers(t).iter().map(|&i| ix.node(i)).filter(|n| n.input.get(1).is_some_and(|b| b == t));
        let pair_axes = pair_axes(readers, init.dims.len(), policy);
        let (params, axis) = weight_params(init, axis.filter(|_| policy.per_channel), spec, &pair_axes)?;
        let (kind, qtype, shift) = (TensorKind::Weight, spec.qtype, None);
        return Ok(TensorParams { kind, qtype, params, axis, shift, pair_axes });
    }
    let a = onnx_ir::tensor_to_array::<f32>(init)?;
    let (lo, hi) = min_max(a.iter().copied());
    check_range(t, (lo, hi))?;
    let spec = policy.activation_spec();
    let params = vec![scale_zp(t, lo, hi, spec)];
    let (kind, qtype, shift, pair_axes) = (TensorKind::Constant, spec.qtype, None, vec![]);
    Ok(TensorParams { kind, qtype, params, axis: None, shift, pair_axes })
}

/// A range and the shift its pairs quantize by, if any.
type RangeAndShift = (Option<(f32, f32)>, Option<f32>);

/// An activation's range: analytic for Softmax outputs under `softmax_range = full | shifted` (with the shift,
/// see [`shift::softmax_range`]), else the calibrated one. `None`: no range.
fn activation_range(
    ix: &GraphIndex,
    sel: &Selection,
    t: &str,
    ranges: &Ranges,
    policy: &Policy,
) -> Result<RangeAndShift> {
    let softmax_out = patterns::is_softmax_output(ix, t);
    // A float8 pair is finest near 0, where most probabilities are: it takes [0, 1] as it is, unshifted.
    let float8 = !policy.precision.is_integer();
    Ok(match policy.softmax_range {
        SoftmaxRange::Shifted if softmax_out && !float8 => {
            let (range, shift) = shift::softmax_range(ix, t, sel.receivers(t), policy)?;
            (Some(range), shift)
        }
        SoftmaxRange::Full | SoftmaxRange::Shifted | SoftmaxRange::FullUint8 if softmax_out => (Some((0.0, 1.0)), None),
        _ => (ranges.get(t).copied(), None),
    })
}

/// How activation `t` is quantized: as the policy's activations, except attention probabilities under
/// `softmax_range = full-uint8` (uint8, zero point 0) and, under `variable_a` / `variable_b = int8-symmetric`, a
/// tensor a selected MatMul whose B is not a constant reads as that operand (int8, zero point 0), unless the pairs are
/// float8.
fn activation_spec(ix: &GraphIndex, sel: &Selection, t: &str, policy: &Policy) -> QuantSpec {
    let spec = policy.activation_spec();
    if spec.qtype.is_float8() {
        return spec;
    }
    if policy.softmax_range == SoftmaxRange::FullUint8 && patterns::is_softmax_output(ix, t) {
        return QuantSpec { qtype: QuantType::UInt8, symmetric: false, reduce_range: false };
    }
    // The operands (0: A, 1: B) of selected MatMuls of two variables that read `t`.
    let read_as = |slot: usize| {
        sel.receivers(t).iter().map(|&i| ix.node(i)).any(|n| {
            patterns::matmul_rule(n).is_some()
                && n.input.get(slot).is_some_and(|x| x == t)
                && n.input.get(1).is_some_and(|b| !ix.is_initializer(b))
        })
    };
    let symmetric = [(policy.variable_a, 0), (policy.variable_b, 1)]
        .into_iter()
        .any(|(kind, slot)| kind == VariableB::Int8Symmetric && read_as(slot));
    if symmetric {
        return QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: false };
    }
    spec
}

/// The parameters of selected tensor `t`; `None` for an activation without a range.
pub(crate) fn tensor_params(
    ix: &GraphIndex,
    sel: &Selection,
    t: &str,
    ranges: &Ranges,
    policy: &Policy,
) -> Result<Option<TensorParams>> {
    if let Some(init) = ix.initializer(t) {
        return constant_params(ix, sel, init, policy).map(Some);
    }
    let (range, shift) = activation_range(ix, sel, t, ranges, policy)?;
    let Some(range) = range else { return Ok(None) };
    check_range(t, range)?;
    let spec = activation_spec(ix, sel, t, policy);
    let params = vec![scale_zp(t, range.0, range.1, spec)];
    let (kind, qtype, pair_axes) = (TensorKind::Activation, spec.qtype, vec![]);
    Ok(Some(TensorParams { kind, qtype, params, axis: None, shift, pair_axes }))
}
