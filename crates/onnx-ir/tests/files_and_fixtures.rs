//! External data, byte-exact round trips of onnx-written fixtures, tiny BERT, bad input.

use std::path::{Path, PathBuf};

use qdq_onnx_ir::proto::tensor_proto::DataLocation;
use qdq_onnx_ir::proto::{StringStringEntryProto, TensorProto};
use qdq_onnx_ir::tiny_bert::{LayerNormKind, TinyBertConfig, build};
use qdq_onnx_ir::{
    DataType, Error, ExternalDataOptions, GraphExt, Model, SaveOptions, array_to_tensor, tensor_to_array,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/onnx-ir")
}

#[test]
fn onnx_written_fixture_reencodes_byte_identically() {
    let path = fixtures().join("attrs.onnx");
    let bytes = std::fs::read(&path).unwrap();
    let m = Model::load(&path).unwrap();
    assert_eq!(m.to_bytes().unwrap(), bytes);
    // spot-check decoded content written by the reference package
    assert_eq!(m.proto.functions.len(), 1);
    assert_eq!(m.proto.training_info.len(), 1);
    assert_eq!(m.graph().sparse_initializer.len(), 1);
    let i8s = tensor_to_array::<i8>(m.graph().initializer("i8_typed").unwrap()).unwrap();
    assert_eq!(i8s.as_slice().unwrap(), &[-128, 0, 127]);
    let f16s = tensor_to_array::<half::f16>(m.graph().initializer("f16_raw").unwrap()).unwrap();
    assert_eq!(f16s.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), vec![1.0, -2.5, 65504.0]);
    let f16t = tensor_to_array::<half::f16>(m.graph().initializer("f16_typed").unwrap()).unwrap();
    assert_eq!(f16t.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), vec![0.5, -1.0]);
    m.graph().validate().unwrap();
    // names inside If/Loop bodies count as taken
    assert_eq!(m.graph().fresh_name("then_out"), "then_out_1");
    assert_eq!(m.graph().fresh_name("body_add"), "body_add_1");
}

#[test]
fn onnx_written_external_data_is_loaded() {
    let m = Model::load(fixtures().join("external/model.onnx")).unwrap();
    let w = m.graph().initializer("W").unwrap();
    assert_eq!(w.data_location(), DataLocation::Default);
    let a = tensor_to_array::<f32>(w).unwrap();
    assert_eq!(a.shape(), &[20, 30]);
    // generator wrote arange(600) / 7
    for (i, v) in a.iter().enumerate() {
        assert_eq!(*v, i as f32 / 7.0);
    }
    // the small tensor stayed inline
    assert_eq!(tensor_to_array::<f32>(m.graph().initializer("B").unwrap()).unwrap().as_slice().unwrap(), &[1.0, 2.0]);
}

fn big_model() -> Model {
    let mut m = crate::common::small_model();
    let big = ndarray::Array::from_shape_fn(ndarray::IxDyn(&[3, 300]), |i| (i[0] * 300 + i[1]) as f32);
    m.graph_mut().add_initializer(array_to_tensor("big", &big));
    m.graph_mut().add_initializer(array_to_tensor("big2", &big.mapv(|v| -v)));
    m.graph_mut().push_node(qdq_onnx_ir::node("Identity", "keep", &["big"], &["big_copy"]));
    m.graph_mut().push_node(qdq_onnx_ir::node("Identity", "keep2", &["big2"], &["big2_copy"]));
    m
}

#[test]
fn save_with_external_data_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let m = big_model();
    let p = dir.path().join("m.onnx");
    m.save_with(&p, &SaveOptions { external_data: Some(ExternalDataOptions::new("m.onnx.data")) }).unwrap();
    // the on-disk model references the side file for the two 3600-byte tensors only
    let raw = Model::from_bytes(&std::fs::read(&p).unwrap(), "m.onnx");
    assert!(matches!(raw, Err(Error::ExternalData { .. })));
    let side = std::fs::metadata(dir.path().join("m.onnx.data")).unwrap().len();
    assert_eq!(side, 4096 + 3600, "second tensor starts at the next 4096-byte boundary");
    let back = Model::load(&p).unwrap();
    assert_eq!(back.proto, m.proto);
    let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, vec!["m.onnx", "m.onnx.data"]);
}

#[test]
fn external_file_name_must_be_plain() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["../x.data", "sub/x.data", "", "m.onnx"] {
        let opts = SaveOptions { external_data: Some(ExternalDataOptions::new(bad)) };
        let e = big_model().save_with(dir.path().join("m.onnx"), &opts).unwrap_err();
        assert!(matches!(e, Error::Options { .. }), "{bad}: {e}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn over_the_limit_needs_external_data() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.onnx");
    let e = big_model().save_limited_for_test(&p, &SaveOptions::default(), 5000).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }));
    assert!(e.to_string().contains("external_data"), "{e}");
    assert!(!p.exists());
    let opts = SaveOptions { external_data: Some(ExternalDataOptions::new("d")) };
    big_model().save_limited_for_test(&p, &opts, 5000).unwrap();
    assert_eq!(Model::load(&p).unwrap().proto, big_model().proto);
}

fn external_tensor(location: &str) -> TensorProto {
    let kv = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
    TensorProto {
        name: Some("ext_w".into()),
        dims: vec![2],
        data_type: Some(DataType::Float as i32),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![kv("location", location), kv("offset", "0"), kv("length", "8")],
        ..Default::default()
    }
}

fn write_with_tensor(dir: &Path, t: TensorProto) -> PathBuf {
    let mut m = crate::common::small_model();
    m.graph_mut().add_initializer(t);
    let p = dir.join("m.onnx");
    std::fs::write(&p, m.to_bytes().unwrap()).unwrap();
    p
}

fn assert_external_err(p: &Path, location: &str, needle: &str) {
    let e = Model::load(p).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::ExternalData { .. }), "{msg}");
    assert!(msg.contains("ext_w") && msg.contains(location) && msg.contains(needle), "{msg}");
}

#[test]
fn bad_external_locations_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("model");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(dir.path().join("outside.bin"), [0u8; 8]).unwrap();
    let p = write_with_tensor(&sub, external_tensor("../outside.bin"));
    assert_external_err(&p, "../outside.bin", "..");
    let abs = dir.path().join("outside.bin").display().to_string();
    let p = write_with_tensor(&sub, external_tensor(&abs));
    assert_external_err(&p, &abs, "absolute");
    let p = write_with_tensor(&sub, external_tensor("missing.bin"));
    assert_external_err(&p, "missing.bin", "missing.bin");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("outside.bin"), sub.join("link.bin")).unwrap();
        let p = write_with_tensor(&sub, external_tensor("link.bin"));
        assert_external_err(&p, "link.bin", "outside");
    }
    std::fs::write(sub.join("short.bin"), [0u8; 4]).unwrap();
    let p = write_with_tensor(&sub, external_tensor("short.bin"));
    assert_external_err(&p, "short.bin", "past the end");
}

#[test]
fn corrupt_files_give_decode_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = crate::common::small_model().to_bytes().unwrap();
    let p = dir.path().join("trunc.onnx");
    std::fs::write(&p, &good[..good.len() - 7]).unwrap();
    let e = Model::load(&p).unwrap_err();
    assert!(matches!(e, Error::Decode { .. } | Error::Graph { .. }), "{e}");
    assert!(e.to_string().contains("trunc.onnx"), "{e}");
    // deterministic pseudo-random garbage
    let mut x: u32 = 12345;
    let junk: Vec<u8> = (0..4000)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    let p = dir.path().join("junk.onnx");
    std::fs::write(&p, &junk).unwrap();
    let e = Model::load(&p).unwrap_err();
    assert!(e.to_string().contains("junk.onnx"), "{e}");
    let e = Model::load(dir.path().join("nope.onnx")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("nope.onnx"));
}

#[test]
fn bad_tensor_dims_and_lengths_are_caught_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = array_to_tensor("huge", &ndarray::arr1(&[1.0f32]).into_dyn());
    t.dims = vec![1 << 40, 1 << 40];
    let p = write_with_tensor(dir.path(), t);
    let e = Model::load(&p).unwrap_err();
    assert!(matches!(e, Error::BadTensor { .. }));
    assert!(e.to_string().contains("huge") && e.to_string().contains("overflow") && e.to_string().contains("m.onnx"));

    let mut t = array_to_tensor("short", &ndarray::arr1(&[1.0f32, 2.0]).into_dyn());
    t.dims = vec![3];
    let p = write_with_tensor(dir.path(), t);
    let e = Model::load(&p).unwrap_err().to_string();
    assert!(e.contains("short") && e.contains("8 bytes") && e.contains("12"), "{e}");

    let mut t = array_to_tensor("neg", &ndarray::arr1(&[1.0f32]).into_dyn());
    t.dims = vec![-1];
    let p = write_with_tensor(dir.path(), t);
    assert!(Model::load(&p).unwrap_err().to_string().contains("negative"));
}

fn op_count(m: &Model, op: &str) -> usize {
    m.graph().node.iter().filter(|n| n.op_type() == op).count()
}

#[test]
fn tiny_bert_is_valid_deterministic_and_shaped_like_hf() {
    for ln in [LayerNormKind::Decomposed, LayerNormKind::Fused] {
        let cfg = TinyBertConfig { layer_norm: ln, vocab_size: 50, ..Default::default() };
        let m = build(&cfg);
        m.validate().unwrap();
        assert_eq!(m.opset(""), Some(if ln == LayerNormKind::Fused { 17 } else { 14 }));
        assert_eq!(build(&cfg).proto, m.proto, "same seed, same model");
        let other = build(&TinyBertConfig { seed: 1, ..cfg.clone() });
        assert_ne!(other.proto, m.proto);
        let g = m.graph();
        let ins: Vec<_> = g.input.iter().map(|v| v.name()).collect();
        assert_eq!(ins, ["input_ids", "attention_mask", "token_type_ids"]);
        let outs: Vec<_> = g.output.iter().map(|v| v.name()).collect();
        assert_eq!(outs, ["start_logits", "end_logits"]);
        // 2 layers x (Q, K, V, attn out, FFN in, FFN out) + QA head, plus 2 attention MatMuls per layer
        assert_eq!(op_count(&m, "MatMul"), 2 * 6 + 1 + 2 * 2);
        assert_eq!(op_count(&m, "Softmax"), 2);
        assert_eq!(op_count(&m, "Erf"), 2);
        let lns = 1 + 2 * 2;
        match ln {
            LayerNormKind::Fused => assert_eq!(op_count(&m, "LayerNormalization"), lns),
            LayerNormKind::Decomposed => assert_eq!(op_count(&m, "ReduceMean"), 2 * lns),
        }
        let q = g.producer_of("/bert/encoder/layer.0/attention/self/query/MatMul_output_0").unwrap();
        assert_eq!(g.node[q].name(), "/bert/encoder/layer.0/attention/self/query/MatMul");
        let (add, slot) = g.consumers_of(g.node[q].output[0].as_str())[0];
        assert_eq!((g.node[add].op_type(), slot), ("Add", 1), "bias is the first Add input");
        let w =
            tensor_to_array::<f32>(g.initializer("bert.encoder.layer.0.attention.self.query.weight").unwrap()).unwrap();
        assert_eq!(w.shape(), &[32, 32]);
        let mean = w.mean().unwrap();
        let std = (w.mapv(|v| (v - mean) * (v - mean)).mean().unwrap()).sqrt();
        assert!(mean.abs() < 0.005 && (0.015..0.025).contains(&std), "mean {mean} std {std}");
        assert_eq!(g.initializer("bert.embeddings.word_embeddings.weight").unwrap().dims, vec![50, 32]);
        // round trip through bytes is exact
        let bytes = m.to_bytes().unwrap();
        let back = Model::from_bytes(&bytes, "tiny").unwrap();
        assert_eq!(back.to_bytes().unwrap(), bytes);
    }
}

#[test]
fn tiny_bert_odd_config_still_valid() {
    let m = build(&TinyBertConfig { layers: 1, hidden: 12, heads: 5, intermediate: 0, ..Default::default() });
    m.validate().unwrap();
    let shape = tensor_to_array::<i64>(m.graph().initializer("/bert/Constant_heads_shape").unwrap()).unwrap();
    assert_eq!(shape.as_slice().unwrap(), &[0, 0, 4, 3], "heads lowered to a divisor of 12");
}

/// Issue 18, items 1-3: a FIFO as external data (or as the model) is refused instead of blocking; a small tensor
/// pointing at a large file is refused before its bytes are allocated; dims whose byte count overflows u64 are an
/// error instead of skipping the length check.
#[test]
fn bounded_reading_of_models_and_external_data() {
    let dir = tempfile::tempdir().unwrap();
    #[cfg(unix)]
    {
        let fifo = dir.path().join("pipe.bin");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
        if made {
            let p = write_with_tensor(dir.path(), external_tensor("pipe.bin"));
            assert_external_err(&p, "pipe.bin", "not a regular file");
            let e = Model::load(&fifo).unwrap_err().to_string();
            assert!(e.contains("pipe.bin") && e.contains("not a regular file"), "{e}");
        }
        let e = Model::load("/dev/zero").unwrap_err().to_string();
        assert!(e.contains("/dev/zero") && e.contains("not a regular file"), "{e}");
    }
    assert!(Model::load(dir.path()).is_err(), "a directory is not a model");
    // 2 floats (8 bytes) pointing at a 64 MiB sparse file without a length: refused from the sizes alone.
    let big = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    big.set_len(64 << 20).unwrap();
    let mut t = external_tensor("big.bin");
    t.external_data.retain(|e| e.key() != "length");
    let p = write_with_tensor(dir.path(), t);
    assert_external_err(&p, "big.bin", "need 8");
    // Dims [2^31, 2^31] of FLOAT: 2^64 bytes, which no u64 holds.
    let mut m = crate::common::small_model();
    m.graph_mut().add_initializer(TensorProto {
        name: Some("huge".into()),
        dims: vec![1 << 31, 1 << 31],
        data_type: Some(DataType::Float as i32),
        raw_data: Some(vec![0; 4]),
        ..Default::default()
    });
    let p = dir.path().join("huge.onnx");
    std::fs::write(&p, m.to_bytes().unwrap()).unwrap();
    let e = Model::load(&p).unwrap_err().to_string();
    assert!(e.contains("huge") && e.contains("64 bits"), "{e}");
}

#[test]
fn over_the_limit_save_moves_large_tensors_to_a_side_file_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.onnx");
    // Under the limit: inline, no side file.
    let saved = big_model().save_auto_for_test(&p, 1 << 20).unwrap();
    assert_eq!(saved.external_data, None);
    assert!(Model::from_bytes(&std::fs::read(&p).unwrap(), "m.onnx").is_ok());
    // Over it: the 3600-byte tensors go to m.onnx.data, and the model reads back the same.
    let saved = big_model().save_auto_for_test(&p, 5000).unwrap();
    assert_eq!(saved.external_data, Some(dir.path().join("m.onnx.data")));
    assert!(std::fs::metadata(&p).unwrap().len() < 5000);
    assert_eq!(Model::load(&p).unwrap().proto, big_model().proto);
}

#[test]
fn attribute_tensors_move_to_the_side_file_too() {
    // The main graph's initializers take the copy-free path; a large tensor in a node attribute (a Constant) is moved
    // by the general walk. Both must land in the side file and read back.
    let dir = tempfile::tempdir().unwrap();
    let mut m = big_model();
    let c = ndarray::Array::from_shape_fn(ndarray::IxDyn(&[2, 300]), |i| (i[0] + 2 * i[1]) as f32);
    let mut constant = qdq_onnx_ir::node("Constant", "c", &[], &["c_out"]);
    constant.attribute.push(qdq_onnx_ir::attr_tensor("value", array_to_tensor("c", &c)));
    m.graph_mut().push_node(constant);
    let p = dir.path().join("a.onnx");
    m.save_with(&p, &SaveOptions { external_data: Some(ExternalDataOptions::new("a.bin")) }).unwrap();
    // big (3600 B) at 0, big2 at 4096, the constant (2400 B) at 8192.
    assert_eq!(std::fs::metadata(dir.path().join("a.bin")).unwrap().len(), 8192 + 2400);
    assert_eq!(Model::load(&p).unwrap().proto, m.proto);
}

#[test]
fn graph_only_loading_checks_external_data_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.onnx");
    let opts = SaveOptions { external_data: Some(ExternalDataOptions::new("m.onnx.data")) };
    // Two tensors over 1 MiB stay on disk; the 3600-byte ones are read (small tensors such as scales are data the
    // graph's readers use).
    let mut model = big_model();
    let huge = ndarray::Array::from_shape_fn(ndarray::IxDyn(&[300, 1000]), |i| (i[0] + i[1]) as f32);
    model.graph_mut().add_initializer(array_to_tensor("huge", &huge));
    model.graph_mut().add_initializer(array_to_tensor("huge2", &huge.mapv(|v| -v)));
    model.save_with(&p, &opts).unwrap();
    let m = Model::load_graph_only(&p).unwrap();
    assert_eq!(m.unread_external_data(), 2);
    let side = dir.path().join("m.onnx.data").canonicalize().unwrap();
    assert_eq!(m.external_files().collect::<Vec<_>>(), vec![side.as_path()]);
    assert_eq!(Model::load(&p).unwrap().external_files().count(), 1);
    let huge = m.graph().initializer("huge").unwrap();
    assert_eq!((huge.dims.as_slice(), huge.raw_data.is_none()), (&[300i64, 1000][..], true));
    assert_eq!(huge.data_location(), DataLocation::External);
    assert_eq!(m.graph().initializer("big"), model.graph().initializer("big"));
    // The graph is all there; writing it is refused rather than writing a model that lost its weights.
    assert_eq!(m.graph().node.len(), model.graph().node.len());
    for e in [m.to_bytes().unwrap_err(), m.save(dir.path().join("copy.onnx")).unwrap_err()] {
        assert!(e.to_string().contains("without its external data (2 tensors)"), "{e}");
    }
    assert!(!dir.path().join("copy.onnx").exists());
    // A reference that does not hold what the dims need is still an error naming the tensor.
    let side = dir.path().join("m.onnx.data");
    let len = std::fs::metadata(&side).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&side).unwrap().set_len(len - 4).unwrap();
    let e = Model::load_graph_only(&p).unwrap_err().to_string();
    assert!(e.contains("huge2") && e.contains("past the end"), "{e}");
}
