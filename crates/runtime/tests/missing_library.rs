//! A process whose ONNX Runtime library is missing or not a library gets one clear error, never a panic.
//! (Its own test binary: the library is loaded once per process.)

use qdq_runtime::{Error, Session, SessionConfig, init};

#[test]
fn a_file_that_is_not_onnxruntime_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libonnxruntime.so.1.31.1");
    std::fs::write(&fake, b"this is not a shared library").unwrap();
    let err = init(Some(&fake)).unwrap_err();
    assert!(matches!(err, Error::LibraryLoad { .. }), "{err:?}");
    assert!(err.to_string().contains("libonnxruntime.so.1.31.1"), "{err}");
    // The loader's own words, not only that loading failed.
    assert!(err.to_string().contains("invalid ELF header") || err.to_string().contains("too short"), "{err}");
    // Sessions created afterwards report the same failure instead of panicking.
    let cfg = SessionConfig { library: Some(fake), ..Default::default() };
    let err = Session::from_bytes(b"", "m.onnx", &cfg).unwrap_err();
    assert!(err.to_string().contains("libonnxruntime.so.1.31.1"), "{err}");
    // Said once, as it was said the first time: not "cannot load ONNX Runtime from ONNX Runtime: cannot load ...".
    assert_eq!(err.to_string().matches("cannot load ONNX Runtime").count(), 1, "{err}");
}
