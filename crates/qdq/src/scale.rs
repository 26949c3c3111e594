//! Scale / zero-point maths, matching `onnxruntime.quantization.quant_utils.compute_scale_zp`.
//!
//! Facts reproduced (not code): the range is first widened to contain 0; symmetric
//! quantization uses `absmax = max(|min|, |max|)` on both sides and the symmetric integer
//! range (int8: [-127, 127]); `reduce_range` uses the 7-bit ranges (uint8 [0, 127],
//! int8 [-64, 64]); scale = (max - min) / (qmax - qmin) computed in f64 and stored as f32;
//! a scale below `f32::MIN_POSITIVE` becomes 1 with zero point 0; the asymmetric zero point is
//! `round(qmin - min / scale)` with ties to even (numpy's `round`).

use serde::{Deserialize, Serialize};

/// The 8-bit type a tensor is quantized to: an integer, or (opset 19) an E4M3 float whose zero point is 0.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QuantType {
    /// Signed 8-bit (`INT8`).
    Int8,
    /// Unsigned 8-bit (`UINT8`).
    UInt8,
    /// Signed 16-bit (`INT16`, opset 21): activations of NPUs that take 16-bit activations with 8-bit weights.
    Int16,
    /// `FLOAT8E4M3FN` (NVIDIA Hopper / Ada, TensorRT): 4 exponent bits (bias 7), 3 mantissa bits, largest finite
    /// value 448, no infinities.
    Float8E4M3Fn,
    /// `FLOAT8E4M3FNUZ` (AMD MI300, MIGraphX): bias 8, largest finite value 240, one zero, no infinities.
    Float8E4M3Fnuz,
}

impl QuantType {
    /// `(qmin, qmax)` for this type; `symmetric` selects the symmetric int8 range [-127, 127]
    /// and `reduce_range` the 7-bit range (which takes precedence, as in ORT). A float8 type's is its largest finite
    /// value either side (symmetric always; `reduce_range` is an integer kernels' matter): a symmetric range
    /// `[-T, T]` then gets scale `T / max`, so `T` lands on the format's largest value.
    pub fn range(self, symmetric: bool, reduce_range: bool) -> (i32, i32) {
        match (self, reduce_range, symmetric) {
            (QuantType::Float8E4M3Fn | QuantType::Float8E4M3Fnuz, _, _) => {
                let max = self.float8().map_or(0, |f| f.max() as i32);
                (-max, max)
            }
            (QuantType::Int8, true, _) => (-64, 64),
            (QuantType::UInt8, true, _) => (0, 127),
            (QuantType::Int8, false, true) => (-127, 127),
            (QuantType::Int8, false, false) => (-128, 127),
            (QuantType::UInt8, false, _) => (0, 255),
            (QuantType::Int16, _, true) => (-32767, 32767),
            (QuantType::Int16, _, false) => (-32768, 32767),
        }
    }

    /// ONNX element type (INT8, UINT8, FLOAT8E4M3FN, FLOAT8E4M3FNUZ).
    pub fn data_type(self) -> onnx_ir::DataType {
        match self {
            QuantType::Int8 => onnx_ir::DataType::Int8,
            QuantType::UInt8 => onnx_ir::DataType::Uint8,
            QuantType::Int16 => onnx_ir::DataType::Int16,
            QuantType::Float8E4M3Fn => onnx_ir::DataType::Float8e4m3fn,
            QuantType::Float8E4M3Fnuz => onnx_ir::DataType::Float8e4m3fnuz,
        }
    }

    /// ONNX `TensorProto.DataType` code (INT8 = 3, UINT8 = 2, INT16 = 5, FLOAT8E4M3FN = 17, FLOAT8E4M3FNUZ = 18).
    pub fn onnx_code(self) -> i32 {
        self.data_type() as i32
    }

    /// The type of an ONNX `TensorProto.DataType` code, if it is one of these.
    pub fn from_onnx_code(code: i32) -> Option<QuantType> {
        [QuantType::Int8, QuantType::UInt8, QuantType::Int16, QuantType::Float8E4M3Fn, QuantType::Float8E4M3Fnuz]
            .into_iter()
            .find(|t| t.onnx_code() == code)
    }

    /// A float8 type (quantized by the `QuantizeLinear` of opset 19, saturating; zero point 0.0).
    pub fn is_float8(self) -> bool {
        self.float8().is_some()
    }

    /// The float8 format of a float8 type (its grid, largest value and encoding).
    pub fn float8(self) -> Option<calib::Float8> {
        match self {
            QuantType::Float8E4M3Fn => Some(calib::Float8::E4M3Fn),
            QuantType::Float8E4M3Fnuz => Some(calib::Float8::E4M3Fnuz),
            QuantType::Int8 | QuantType::UInt8 | QuantType::Int16 => None,
        }
    }

    /// Its name as tables print it: `int8`, `uint8`, `int16`, `e4m3fn`, `e4m3fnuz`.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Int8 => "int8",
            QuantType::UInt8 => "uint8",
            QuantType::Int16 => "int16",
            QuantType::Float8E4M3Fn => "e4m3fn",
            QuantType::Float8E4M3Fnuz => "e4m3fnuz",
        }
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a range is turned into a scale and zero point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantSpec {
    /// Target integer type.
    pub qtype: QuantType,
    /// Symmetric range around 0 (zero point at the middle of the integer range).
    pub symmetric: bool,
    /// 7-bit range (for hardware without VNNI-style saturation safety).
    pub reduce_range: bool,
}

/// Scale and zero point for one tensor (or one channel).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleZp {
    /// Quantization step; always finite and > 0.
    pub scale: f32,
    /// Zero point, inside the integer range of the type.
    pub zero_point: i32,
    /// True when the range was empty or too small and scale 1 / zero point 0 was used.
    pub degenerate: bool,
}

/// Computes scale and zero point for the real range `[min, max]` (see module docs).
///
/// Non-finite or inverted ranges are the caller's problem to reject; here `min > max` is
/// treated like the ORT code does (the range is still widened to contain 0).
pub fn compute_scale_zp(min: f32, max: f32, spec: QuantSpec) -> ScaleZp {
    let (qmin, qmax) = spec.qtype.range(spec.symmetric, spec.reduce_range);
    let mut rmin = min.min(0.0);
    let mut rmax = max.max(0.0);
    // A float8 zero point is 0.0: always symmetric.
    let symmetric = spec.symmetric || spec.qtype.is_float8();
    if symmetric {
        let absmax = rmin.abs().max(rmax.abs());
        rmin = -absmax;
        rmax = absmax;
    }
    let scale = (f64::from(rmax) - f64::from(rmin)) / (f64::from(qmax) - f64::from(qmin));
    // NaN-safe: a NaN scale also takes the degenerate branch.
    if scale.is_nan() || scale < f64::from(f32::MIN_POSITIVE) {
        return ScaleZp { scale: 1.0, zero_point: 0, degenerate: true };
    }
    let zero_point = if symmetric {
        // (qmin + qmax) / 2 is an integer or .5 exactly; ORT rounds it half-to-even.
        (f64::from(qmin + qmax) / 2.0).round_ties_even() as i32
    } else {
        (f64::from(qmin) - f64::from(rmin) / scale).round_ties_even().clamp(f64::from(qmin), f64::from(qmax)) as i32
    };
    ScaleZp { scale: scale as f32, zero_point, degenerate: false }
}

/// Quantizes one value: `clamp(round_ties_even(x / scale) + zp, qmin, qmax)`.
pub fn quantize_value(x: f32, p: ScaleZp, qmin: i32, qmax: i32) -> i32 {
    let q = (f64::from(x) / f64::from(p.scale)).round_ties_even() + f64::from(p.zero_point);
    q.clamp(f64::from(qmin), f64::from(qmax)) as i32
}

/// The largest `|a| + |b|` two adjacent int8 weights along the contracted axis may have when the activations are
/// uint8: x86's `VPMADDUBSW` (ONNX Runtime's u8 x s8 kernels on CPUs without VNNI) adds each such pair of products in
/// a saturating 16-bit sum, and `255 · 128 = 32,640` fits where `255 · 129` does not.
pub const PAIR_LIMIT: i32 = 128;

/// Lowers int8 values of `q` (row-major `shape`) so that each pair `(2j, 2j + 1)` along `axis` holds
/// `|a| + |b| <= PAIR_LIMIT`: of a pair over the limit the smaller magnitude is lowered (the larger may be the range
/// end the scale comes from). Returns how many values changed.
pub fn bound_pairs(q: &mut [i8], shape: &[usize], axis: usize) -> usize {
    let Some(&n) = shape.get(axis) else { return 0 };
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut changed = 0;
    for o in 0..outer {
        for j in (0..n.saturating_sub(1)).step_by(2) {
            for i in 0..inner {
                let a = (o * n + j) * inner + i;
                let b = a + inner;
                let (ma, mb) = (i32::from(q[a]).abs(), i32::from(q[b]).abs());
                if ma + mb <= PAIR_LIMIT {
                    continue;
                }
                // The larger stays: lower the other to what the limit leaves, keeping its sign.
                let (small, room) = if mb <= ma { (b, PAIR_LIMIT - ma) } else { (a, PAIR_LIMIT - mb) };
                q[small] = (room * i32::from(q[small]).signum()) as i8;
                changed += 1;
            }
        }
    }
    changed
}

/// `w` (float) as an 8-bit initializer `name` of `qtype`, zero point 0: one scale per slice along `axis`
/// (`scales.len()` = that dimension) or one for all (`scales.len()` = 1). An int8 value is `round(w / scale)` clamped
/// to `(qmin, qmax)`, then (int8) its pairs along each of `pair_axes` bounded ([`bound_pairs`]); a float8 one
/// `w / scale` rounded to the format and saturated, as `QuantizeLinear` does. Weights, embedding tables and
/// dynamic-mode weights.
pub(crate) fn quantized_along(
    name: &str,
    w: &onnx_ir::proto::TensorProto,
    scales: &[f32],
    axis: usize,
    qtype: QuantType,
    (qmin, qmax): (i32, i32),
    pair_axes: &[usize],
) -> crate::error::Result<onnx_ir::proto::TensorProto> {
    // Read in place: a weight of gigabytes is not copied to float first.
    let (shape, a) = onnx_ir::f32_values(w)?;
    // Elements of one slice along `axis` are `stride` apart in row-major order.
    let stride: usize = shape.iter().skip(axis + 1).product();
    let n = scales.len();
    let format = qtype.float8();
    let byte = |v: f32, scale: f32| match format {
        Some(f) => f.to_bits(v / scale),
        None => quantize_value(v, ScaleZp { scale, zero_point: 0, degenerate: false }, qmin, qmax) as i8 as u8,
    };
    // The values as the bytes of the initializer, built once.
    let mut raw: Vec<u8> =
        a.enumerate().map(|(k, v)| byte(v, scales[if n == 1 { 0 } else { (k / stride.max(1)) % n }])).collect();
    if format.is_none() && !pair_axes.is_empty() {
        let mut q: Vec<i8> = raw.iter().map(|&b| b as i8).collect();
        for &a in pair_axes {
            bound_pairs(&mut q, &shape, a);
        }
        raw = q.into_iter().map(|v| v as u8).collect();
    }
    // Weights and tables are symmetric int8 whatever the activations' integer type.
    let dt = if qtype.is_float8() { qtype.data_type() } else { onnx_ir::DataType::Int8 };
    Ok(onnx_ir::tensor_from_raw(name, &shape, dt, raw)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYM_I8: QuantSpec = QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: false };
    const ASYM_U8: QuantSpec = QuantSpec { qtype: QuantType::UInt8, symmetric: false, reduce_range: false };

    #[test]
    fn symmetric_int8_uses_absmax_over_127() {
        let p = compute_scale_zp(-2.54, 1.0, SYM_I8);
        assert!((p.scale - 0.02).abs() < 1e-7, "{p:?}");
        assert_eq!(p.zero_point, 0);
        let p = compute_scale_zp(-0.5, 12.7, SYM_I8);
        assert!((p.scale - 0.1).abs() < 1e-7);
    }

    #[test]
    fn range_is_widened_to_contain_zero() {
        // [2, 5.1] becomes [0, 5.1]: scale 5.1/255 = 0.02, zero point 0.
        let p = compute_scale_zp(2.0, 5.1, ASYM_U8);
        assert!((p.scale - 0.02).abs() < 1e-7);
        assert_eq!(p.zero_point, 0);
        // [-5.1, -1] becomes [-5.1, 0]: zero point at the top.
        let p = compute_scale_zp(-5.1, -1.0, ASYM_U8);
        assert_eq!(p.zero_point, 255);
    }

    #[test]
    fn asymmetric_uint8_zero_point() {
        // [-1, 3]: scale 4/255, zp = round(255/4) = round(63.75) = 64.
        let p = compute_scale_zp(-1.0, 3.0, ASYM_U8);
        assert!((f64::from(p.scale) - 4.0 / 255.0).abs() < 1e-9);
        assert_eq!(p.zero_point, 64);
        // [-1, 1]: zp = round(127.5) = 128 (ties to even).
        assert_eq!(compute_scale_zp(-1.0, 1.0, ASYM_U8).zero_point, 128);
        // [-3, 1] with 255 steps: zp = round(191.25) = 191.
        assert_eq!(compute_scale_zp(-3.0, 1.0, ASYM_U8).zero_point, 191);
    }

    #[test]
    fn reduce_range_uses_seven_bits() {
        let p = compute_scale_zp(-6.4, 6.4, QuantSpec { reduce_range: true, ..SYM_I8 });
        assert!((p.scale - 0.1).abs() < 1e-7); // 12.8 / 128
        assert_eq!(p.zero_point, 0);
        let p = compute_scale_zp(0.0, 12.7, QuantSpec { reduce_range: true, ..ASYM_U8 });
        assert!((p.scale - 0.1).abs() < 1e-7);
    }

    #[test]
    fn bound_pairs_lowers_the_smaller_of_each_pair_over_the_limit_along_its_axis() {
        // [3, 2] row-major: pairs along axis 0 are rows (0, 1) per column; row 2 has no partner.
        let mut q: Vec<i8> = vec![127, -100, 64, 90, 60, -64, 127, 127, 127];
        assert_eq!(bound_pairs(&mut q, &[3, 3], 0), 2);
        // Column 0: 127 + 90 -> 90 lowered to 1; column 1: -100 and 60 -> 60 lowered to 28; column 2: 64 + 64 stays.
        assert_eq!(q, vec![127, -100, 64, 1, 28, -64, 127, 127, 127]);
        // Along axis 1: pairs (0, 1) in each row, the third column alone; the larger magnitude keeps its value.
        let mut q: Vec<i8> = vec![-70, -70, 127, 5, -127, 127];
        assert_eq!(bound_pairs(&mut q, &[2, 3], 1), 2);
        assert_eq!(q, vec![-70, -58, 127, 1, -127, 127]);
        // A 3-D tensor along its middle axis, and an axis it does not have.
        let mut q: Vec<i8> = vec![100, 100, 100, 100, 1, 1, 1, 1];
        assert_eq!(bound_pairs(&mut q, &[2, 2, 2], 1), 2);
        assert_eq!(q, vec![100, 100, 28, 28, 1, 1, 1, 1]);
        assert_eq!(bound_pairs(&mut q, &[2, 2, 2], 3), 0);
    }

    #[test]
    fn zero_range_gives_unit_scale() {
        let p = compute_scale_zp(0.0, 0.0, SYM_I8);
        assert_eq!((p.scale, p.zero_point, p.degenerate), (1.0, 0, true));
        let p = compute_scale_zp(0.0, 1e-40, ASYM_U8);
        assert!(p.degenerate);
        let p = compute_scale_zp(f32::NAN, 1.0, ASYM_U8);
        assert!(p.scale.is_finite());
    }

    #[test]
    fn quantize_rounds_half_to_even_and_clamps() {
        let p = ScaleZp { scale: 0.5, zero_point: 0, degenerate: false };
        assert_eq!(quantize_value(0.25, p, -127, 127), 0); // 0.5 -> 0
        assert_eq!(quantize_value(0.75, p, -127, 127), 2); // 1.5 -> 2
        assert_eq!(quantize_value(1000.0, p, -127, 127), 127);
        assert_eq!(quantize_value(-1000.0, p, -127, 127), -127);
    }
}
