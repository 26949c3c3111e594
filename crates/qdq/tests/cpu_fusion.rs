//! Which integer kernels ORT's CPU EP turns the `cpu` preset's MatMuls into (optimized model
//! saved through `SessionConfig::optimized_model_path`, opt level All).
use std::collections::BTreeMap;

use crate::common::*;

fn optimized_op_counts(preset: &str, ln: Ln, set: &[(&str, &str)]) -> BTreeMap<String, usize> {
    let fp32 = tiny_bert(ln);
    let mut policy = unsmoothed(preset);
    for (k, v) in set {
        policy.set(k, v).unwrap();
    }
    let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
    let ranges = observed_ranges(&fp32, &tensors);
    let (q, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("optimized.onnx");
    let cfg = runtime::SessionConfig { optimized_model_path: Some(path.clone()), ..Default::default() };
    drop(session(&q, &cfg));
    let opt = onnx_ir::Model::load(&path).unwrap();
    let mut counts = BTreeMap::new();
    for n in &opt.graph().node {
        if std::env::var_os("QDQ_SHOW").is_some() {
            eprintln!("  {} {} {:?}", n.op_type(), n.name(), n.input);
        }
        *counts.entry(n.op_type().to_string()).or_insert(0) += 1;
    }
    eprintln!("{preset} {ln:?} {set:?}: {counts:?}");
    counts
}

#[test]
fn cpu_preset_matmuls_become_integer_kernels() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let counts = optimized_op_counts("cpu", ln, &[]);
        // 9 MatMuls: 7 weighted + 2 attention, all integer kernels, every weighted one with a float output. (ORT
        // moves the Q/DQ pair on P*V's Transpose/Reshape up to its output, so P*V may become QLinearMatMul.)
        let to_float = counts.get("MatMulIntegerToFloat").copied().unwrap_or(0);
        let qlinear = counts.get("QLinearMatMul").copied().unwrap_or(0);
        assert!(to_float >= 7 && to_float + qlinear == 9, "{counts:?}");
        for float in ["MatMul", "Gemm", "FusedMatMul"] {
            assert!(!counts.contains_key(float), "{float} left: {counts:?}");
        }
    }
}

#[test]
fn cpu_preset_with_quantized_outputs_fuses_qlinear_matmul() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let counts = optimized_op_counts("cpu", ln, &[("quantize_outputs", "true")]);
        let qlinear = counts.get("QLinearMatMul").copied().unwrap_or(0);
        let float = counts.get("MatMul").copied().unwrap_or(0);
        assert!(qlinear >= 7 && qlinear + float == 9, "{counts:?}");
    }
}

#[test]
#[ignore = "exploration: prints layouts"]
fn explore_cpu_layouts() {
    for set in [
        &[("quantize_outputs", "false")][..],
        &[("dedicated_pairs", "true")][..],
        &[("op_types", "MatMul,Add"), ("residual_add", "quantize"), ("quantize_outputs", "true")][..],
    ] {
        optimized_op_counts("cpu", Ln::Fused, set);
    }
}
