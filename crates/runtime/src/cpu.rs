//! What the CPU running this process offers ONNX Runtime's integer kernels.

/// The 8-bit dot-product instructions of this CPU that ONNX Runtime's CPU kernels (MLAS) use for integer GEMMs, by
/// name, or `None` when it has none.
///
/// With them (x86 AVX-512 VNNI or AVX-VNNI, Arm's dot product) an 8-bit GEMM multiplies and accumulates four byte
/// pairs per lane in one instruction; without them (x86 AVX2 alone) it takes a chain of widening multiply-adds, whose
/// 16-bit step can saturate (hence the `cpu` preset's 7-bit weights). INT8 speed-ups measured on one kind of CPU do
/// not carry over to the other, so results.json records which kind a run had.
///
/// ```
/// // Whatever this machine is, the answer names an instruction set or is None.
/// if let Some(name) = qdq_runtime::int8_dot_product() {
///     assert!(!name.is_empty());
/// }
/// ```
pub fn int8_dot_product() -> Option<&'static str> {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        if std::arch::is_x86_feature_detected!("avx512vnni") {
            return Some("AVX-512 VNNI");
        }
        if std::arch::is_x86_feature_detected!("avxvnni") {
            return Some("AVX-VNNI");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            return Some("Arm dot product");
        }
    }
    None
}
