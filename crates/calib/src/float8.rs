//! The E4M3 float8 formats: what a float8 Q/DQ pair does to a value, for the `fp8-mse` range method and for checking
//! a float8 model against ONNX Runtime.
//!
//! ONNX's `QuantizeLinear` (opset 19, `saturate = 1`, the default) computes `x / scale`, rounds it to the nearest
//! value of the format (ties to even) and saturates what lies beyond the largest finite value to it; the conversion
//! itself is the `microfloat` crate's (modelled on `ml_dtypes`, whose out-of-range values become NaN: saturated here
//! first).

use serde::{Deserialize, Serialize};

/// An E4M3 float8 format: 1 sign, 4 exponent and 3 mantissa bits, no infinities.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Float8 {
    /// `FLOAT8E4M3FN` (NVIDIA Hopper / Ada): bias 7, largest finite 448, smallest subnormal 2^-9.
    #[default]
    E4M3Fn,
    /// `FLOAT8E4M3FNUZ` (AMD MI300): bias 8, largest finite 240, smallest subnormal 2^-10, one zero.
    E4M3Fnuz,
}

impl Float8 {
    /// The largest finite value.
    pub fn max(self) -> f32 {
        match self {
            Float8::E4M3Fn => 448.0,
            Float8::E4M3Fnuz => 240.0,
        }
    }

    /// The exponent of the smallest normal value (values below it are subnormal, spaced as the binade above).
    fn min_normal_exp(self) -> i32 {
        match self {
            Float8::E4M3Fn => -6,
            Float8::E4M3Fnuz => -7,
        }
    }

    /// The format's byte for `x` (after saturating to `±max`; NaN stays NaN).
    pub fn to_bits(self, x: f32) -> u8 {
        let x = if x.is_nan() { x } else { x.clamp(-self.max(), self.max()) };
        match self {
            Float8::E4M3Fn => microfloat::f8e4m3fn::from_f32(x).to_bits(),
            Float8::E4M3Fnuz => microfloat::f8e4m3fnuz::from_f32(x).to_bits(),
        }
    }

    /// The value of the format's byte `b`.
    pub fn from_bits(self, b: u8) -> f32 {
        match self {
            Float8::E4M3Fn => microfloat::f8e4m3fn::from_bits(b).to_f32(),
            Float8::E4M3Fnuz => microfloat::f8e4m3fnuz::from_bits(b).to_f32(),
        }
    }

    /// `DequantizeLinear(QuantizeLinear(x, scale), scale)` with zero point 0.0: `x / scale` to the nearest value of
    /// the format (ties to even), saturated, times `scale`.
    pub fn fake_quantize(self, x: f32, scale: f32) -> f32 {
        self.from_bits(self.to_bits(x / scale)) * scale
    }

    /// The spacing of the format's values around `|y|` (in the format's units, `y` inside `[0, max]`): 2^(e - 3) in
    /// the binade [2^e, 2^(e + 1)), the smallest normal binade's spacing below it.
    pub fn spacing(self, y: f64) -> f64 {
        let e = if y > 0.0 { y.log2().floor() as i32 } else { i32::MIN };
        2f64.powi(e.max(self.min_normal_exp()) - 3)
    }
}

impl std::fmt::Display for Float8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Float8::E4M3Fn => "e4m3fn",
            Float8::E4M3Fnuz => "e4m3fnuz",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formats' landmarks, as the ONNX specification tabulates them.
    #[test]
    fn landmarks_of_both_formats() {
        for (f, max, min_sub, max_bits) in
            [(Float8::E4M3Fn, 448.0, 2f32.powi(-9), 0x7e), (Float8::E4M3Fnuz, 240.0, 2f32.powi(-10), 0x7f)]
        {
            assert_eq!(f.fake_quantize(1e6, 1.0), max, "{f} saturates");
            assert_eq!(f.fake_quantize(-1e6, 1.0), -max, "{f} saturates");
            assert_eq!(f.to_bits(max), max_bits);
            assert_eq!(f.fake_quantize(min_sub, 1.0), min_sub, "{f}'s smallest subnormal");
            assert_eq!(f.fake_quantize(min_sub * 0.49, 1.0), 0.0, "{f} flushes below half of it");
            assert_eq!(f.fake_quantize(min_sub * 0.51, 1.0), min_sub, "{f} rounds up above half of it");
            assert_eq!(f.to_bits(0.0), 0, "{f}: 0.0 is the byte 0");
        }
        // 1.0625 lies halfway between 1 and 1.125: ties to the even mantissa (1.0); 1.1875 to 1.25.
        assert_eq!(Float8::E4M3Fn.fake_quantize(1.0625, 1.0), 1.0);
        assert_eq!(Float8::E4M3Fn.fake_quantize(1.1875, 1.0), 1.25);
        // The check against ONNX Runtime: scale 0.01 maps 10.0 to 448 (4.48).
        assert_eq!(Float8::E4M3Fn.fake_quantize(10.0, 0.01), 4.48);
    }

    #[test]
    fn spacing_is_the_distance_between_neighbours() {
        for f in [Float8::E4M3Fn, Float8::E4M3Fnuz] {
            for b in 1u8..0x7e {
                let (lo, hi) = (f.from_bits(b), f.from_bits(b + 1));
                assert_eq!(f.spacing(f64::from(lo)), f64::from(hi - lo), "{f} at {lo}");
            }
        }
    }
}
