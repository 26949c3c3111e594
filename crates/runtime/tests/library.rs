//! Tests against the ONNX Runtime library `cargo xtask setup` provisions (found via ORT_DYLIB_PATH or .ort/).

use qdq_runtime::{Ep, Error, Session, SessionConfig, TensorRtOptions, init};

#[test]
fn loads_the_pinned_onnxruntime_with_its_cpu_provider() {
    let info = init(None).expect("ONNX Runtime must be provisioned: run `cargo xtask setup`");
    assert_eq!(info.version, "1.31.1", "loaded {}", info.path.display());
    assert!(info.providers.iter().any(|p| p == "CPUExecutionProvider"), "{:?}", info.providers);
}

#[test]
fn an_ep_the_library_lacks_is_a_clear_error_not_a_fallback() {
    let info = init(None).unwrap();
    if info.providers.iter().any(|p| p == "TensorrtExecutionProvider") {
        eprintln!("skipped: this library has TensorRT");
        return;
    }
    let cfg =
        SessionConfig { ep: Ep::TensorRt(TensorRtOptions { int8: true, ..Default::default() }), ..Default::default() };
    let err = Session::from_bytes(b"not even a model", "model.onnx", &cfg).unwrap_err();
    assert!(matches!(err, Error::EpUnavailable { .. }), "{err:?}");
    let msg = err.to_string();
    for needle in ["TensorrtExecutionProvider", "CPUExecutionProvider", "cargo xtask setup --gpu"] {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
}

#[test]
fn garbage_model_bytes_name_the_model() {
    let err = Session::from_bytes(b"\x08\x07garbage", "broken.onnx", &SessionConfig::default()).unwrap_err();
    assert!(matches!(err, Error::Session { .. }), "{err:?}");
    assert!(err.to_string().contains("broken.onnx"), "{err}");
}
