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

/// The kind of x86 CPU a model is laid out for, by what decides its INT8 and bf16 speed: the instructions OpenVINO's
/// and ONNX Runtime's kernels choose between. A model is often quantized on one machine and served on another, so the
/// kind is a setting ([`CpuKind::host`] when none is named) and recorded with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuKind {
    /// AMX tiles (Xeons since Sapphire Rapids): bf16 and int8 matrix multiplies, int8 tiles contracting 64 bytes.
    Amx,
    /// AVX512-BF16 without AMX (Zen 4 / 5, Cooper Lake): bf16 dot products and AVX-512 VNNI.
    Avx512Bf16,
    /// 8-bit dot products (AVX-512 VNNI, AVX-VNNI), no bf16 instructions.
    Vnni,
    /// None of those (AVX2): 8-bit products in widening multiply-adds, bf16 emulated.
    Avx2,
}

impl CpuKind {
    /// Every kind's name, as [`CpuKind::from_str`](std::str::FromStr) takes it.
    pub const NAMES: &'static [&'static str] = &["amx", "avx512-bf16", "vnni", "avx2"];

    /// The kind of the CPU running this process.
    pub fn host() -> CpuKind {
        match bf16_matmul() {
            Some("AMX") => CpuKind::Amx,
            Some(_) => CpuKind::Avx512Bf16,
            None if int8_dot_product().is_some() => CpuKind::Vnni,
            None => CpuKind::Avx2,
        }
    }

    /// Its name ([`CpuKind::NAMES`]).
    pub fn name(self) -> &'static str {
        match self {
            CpuKind::Amx => "amx",
            CpuKind::Avx512Bf16 => "avx512-bf16",
            CpuKind::Vnni => "vnni",
            CpuKind::Avx2 => "avx2",
        }
    }

    /// Its bf16 matrix instructions, as [`bf16_matmul`] names the host's: where there are some, OpenVINO's CPU device
    /// runs a float model in bf16 unless told otherwise.
    pub fn bf16_matmul(self) -> Option<&'static str> {
        match self {
            CpuKind::Amx => Some("AMX"),
            CpuKind::Avx512Bf16 => Some("AVX512-BF16"),
            CpuKind::Vnni | CpuKind::Avx2 => None,
        }
    }
}

impl std::fmt::Display for CpuKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CpuKind {
    /// What is accepted.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase().replace('_', "-");
        match lower.as_str() {
            "amx" => Ok(CpuKind::Amx),
            "avx512-bf16" | "avx512bf16" => Ok(CpuKind::Avx512Bf16),
            "vnni" | "avx512-vnni" | "avx-vnni" => Ok(CpuKind::Vnni),
            "avx2" => Ok(CpuKind::Avx2),
            _ => Err(format!("`{s}`: expected {}", CpuKind::NAMES.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name parses back to its kind; the host is one of them; only the bf16 kinds name bf16 instructions, as
    /// the host's own answer does.
    #[test]
    fn kinds_round_trip_and_agree_with_the_host() {
        for name in CpuKind::NAMES {
            let kind: CpuKind = name.parse().unwrap();
            assert_eq!(kind.name(), *name);
            assert_eq!(kind.to_string(), *name);
        }
        assert_eq!("AVX512_VNNI".parse::<CpuKind>(), Ok(CpuKind::Vnni));
        assert!("sse4".parse::<CpuKind>().unwrap_err().contains("amx, avx512-bf16, vnni, avx2"));
        let host = CpuKind::host();
        assert_eq!(host.bf16_matmul(), bf16_matmul());
        assert_eq!(matches!(host, CpuKind::Amx | CpuKind::Avx512Bf16), host.bf16_matmul().is_some());
    }
}
