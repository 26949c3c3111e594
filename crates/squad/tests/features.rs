use crate::common::*;
use qdq_squad::*;

#[test]
fn window_arithmetic_matches_bert() {
    assert_eq!(windows(10, 4, 3), [(0, 4), (3, 4), (6, 4)]);
    assert_eq!(windows(10, 4, 2), [(0, 4), (2, 4), (4, 4), (6, 4)]);
    // Stride larger than the window: the step is the window length.
    assert_eq!(windows(10, 4, 6), [(0, 4), (4, 4), (8, 2)]);
    assert_eq!(windows(5, 8, 2), [(0, 5)]);
    assert_eq!(windows(0, 8, 2), [(0, 0)]);
}

#[test]
fn config_validation() {
    assert!(FeatureConfig::default().validate().is_ok());
    let e = FeatureConfig { max_seq_len: 67, doc_stride: 128, max_query_len: 64 }.validate().unwrap_err();
    assert!(e.to_string().contains("max_seq_len 67"), "{e}");
    assert!(FeatureConfig { max_seq_len: 68, doc_stride: 128, max_query_len: 64 }.validate().is_ok());
    assert!(FeatureConfig { doc_stride: 0, ..Default::default() }.validate().is_err());
}

#[test]
fn feature_layout_and_max_context() {
    // 10 context tokens, query of 2: max_seq_len 9 leaves 4 doc tokens per window; stride 3 -> windows 0..4, 3..7, 6..10.
    let cfg = FeatureConfig { max_seq_len: 9, doc_stride: 3, max_query_len: 64 };
    let ctx = word_tokens("a b c d e f g h i j");
    let f = build_features(&cfg, 1, 2, &[10, 11], &ctx, 7, 40);
    assert_eq!(f.len(), 3);
    assert_eq!(f[0].input_ids, [1, 10, 11, 2, 100, 101, 102, 103, 2]);
    assert_eq!(f[0].token_type_ids, [0, 0, 0, 0, 1, 1, 1, 1, 1]);
    assert_eq!(f[1].input_ids[4..8], [103, 104, 105, 106]);
    assert_eq!(f[0].token_offsets[..4], [None; 4]);
    assert_eq!(f[0].token_offsets[4], Some((0, 1)));
    assert_eq!(f[2].token_offsets[7], Some((18, 19)));
    assert_eq!(f[0].token_offsets[8], None);
    assert_eq!((f[2].id, f[2].example_index, f[2].window_index, f[2].num_windows), (42, 7, 2, 3));
    // Hand-computed scores min(left, right) + 0.01 * 4: token 3 ties (0.04 in windows 0 and 1) -> first window;
    // token 6 ties between windows 1 and 2 -> window 1; every other token has a single best window.
    let flags = |i: usize| f[i].token_is_max_context[4..8].to_vec();
    assert_eq!(flags(0), [true, true, true, true]);
    assert_eq!(flags(1), [false, true, true, true]);
    assert_eq!(flags(2), [false, true, true, true]);
    assert!(!f[0].token_is_max_context[0] && !f[0].token_is_max_context[8]);
    // Each context token is max-context in exactly one window.
    let total: usize = f.iter().map(|x| x.token_is_max_context.iter().filter(|&&b| b).count()).sum();
    assert_eq!(total, 10);
}

#[test]
fn query_is_truncated() {
    let cfg = FeatureConfig { max_seq_len: 9, doc_stride: 3, max_query_len: 1 };
    let f = build_features(&cfg, 1, 2, &[10, 11, 12], &word_tokens("a b"), 0, 0);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].input_ids, [1, 10, 2, 100, 101, 2]);
    assert_eq!(f[0].token_type_ids, [0, 0, 0, 1, 1, 1]);
}

#[test]
fn model_io_presets() {
    assert_eq!(ModelIo::default().attention_mask, "attention_mask");
    let tf = ModelIo::bert_tf();
    assert_eq!((tf.attention_mask.as_str(), tf.token_type_ids.as_deref()), ("input_mask", Some("segment_ids")));
    assert_eq!(tf.start_logits, "output_start_logits");
}
