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

/// The bf16 matrix instructions of this CPU, by name: `AMX` (tile multiplies, Xeons since Sapphire Rapids), then
/// `AVX512-BF16` (dot products of bf16 pairs), or `None`. Where a CPU has one, OpenVINO's CPU device runs a float
/// model in bf16 unless told otherwise, and that is the FP32 its users compare INT8 with; without one, bf16 is
/// emulated and slower than f32.
///
/// ```
/// if let Some(name) = qdq_runtime::bf16_matmul() {
///     assert!(name == "AMX" || name == "AVX512-BF16");
/// }
/// ```
pub fn bf16_matmul() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        // AMX has no stable feature test in std; Linux lists it among the CPU's flags.
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags = flags.lines().find(|l| l.starts_with("flags")).unwrap_or_default();
        if flags.split_whitespace().any(|f| f == "amx_bf16") {
            return Some("AMX");
        }
        if std::arch::is_x86_feature_detected!("avx512bf16") {
            return Some("AVX512-BF16");
        }
    }
    None
}
