use crate::common::*;
use qdq_squad::*;
use std::path::PathBuf;
use std::sync::Arc;

#[test]
fn loads_fixture_in_file_order() {
    let d = load_squad(fixture("tiny-v1.1.json")).unwrap();
    let ids: Vec<&str> = d.examples.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["cafe-1", "cafe-2", "cafe-3", "cafe-4", "paris-1", "whale-1", "whale-2", "whale-3", "note-1"]);
    assert!(Arc::ptr_eq(&d.examples[0].context, &d.examples[3].context));
    assert_eq!(d.examples[3].context_index, 0);
    assert_eq!(d.examples[8].context_index, 3);
    assert!(!d.is_v2());
    let v2 = load_squad(fixture("tiny-v2.0.json")).unwrap();
    assert!(v2.is_v2());
    assert_eq!(v2.examples.iter().filter(|e| e.is_impossible).count(), 2);
    let mut d2 = d.clone();
    d2.limit(5);
    assert_eq!(d2.examples.last().unwrap().id, "paris-1");
}

fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let p = dir.path().join("bad.json");
    std::fs::write(&p, text).unwrap();
    p
}

fn squad_with_answer(answer: &str) -> String {
    let qa = r#"{"id": "x", "question": "q", "answers": []}"#;
    let qa_bad = format!(r#"{{"id": "z", "question": "q", "answers": [{answer}]}}"#);
    format!(
        r#"{{"version": "1.1", "data": [{{"title": "t", "paragraphs": [
            {{"context": "c", "qas": []}},
            {{"context": "hello world", "qas": [{qa}, {qa}, {qa_bad}]}}]}}]}}"#
    )
}

#[test]
fn malformed_json_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, &squad_with_answer(r#"{"text": "hello", "answer_start": "zero"}"#));
    let e = load_squad(&p).unwrap_err().to_string();
    assert!(e.contains("data[0].paragraphs[1].qas[2].answers[0].answer_start"), "{e}");
    assert!(e.contains("bad.json"), "{e}");
    // Well-formed, but the answer does not fit in the context.
    let p = write(&dir, &squad_with_answer(r#"{"text": "world!", "answer_start": 6}"#));
    let e = load_squad(&p).unwrap_err().to_string();
    assert!(e.contains("data[0].paragraphs[1].qas[2].answers[0].answer_start") && e.contains("11 characters"), "{e}");
    let p = write(&dir, r#"{"data": [{"paragraphs": [{"qas": []}]}]}"#);
    let e = load_squad(&p).unwrap_err().to_string();
    assert!(e.contains("data[0].paragraphs[0]") && e.contains("context"), "{e}");
    let e = load_squad(dir.path().join("missing.json")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("missing.json"));
    // Not SQuAD at all (text lines, another JSON document): the error says what the file should have been.
    for other in ["hello world\n", r#"{"version": "1.1"}"#] {
        let e = load_squad(write(&dir, other)).unwrap_err().to_string();
        assert!(e.contains("bad.json") && e.contains(r#"not a SQuAD dataset (a JSON object with "data""#), "{e}");
    }
}

#[test]
fn vocab_checks_and_sizes() {
    let t = tokenizer();
    assert_eq!(t.vocab_size(), 800);
    assert_eq!(t.max_token_id(), 799);
    assert_eq!((t.pad_id, t.unk_id, t.cls_id, t.sep_id), (0, 6, 7, 8));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.txt");
    std::fs::write(&p, "[PAD]\n[UNK]\n[CLS]\nhello\n").unwrap();
    let e = Tokenizer::from_vocab(&p, true).unwrap_err().to_string();
    assert!(e.contains("v.txt") && e.contains("[SEP]"), "{e}");
    assert!(Tokenizer::from_vocab(dir.path().join("none.txt"), true).is_err());
    // A binary file (a model given to --vocab) is named as no vocabulary, with where a tokenizer.json goes.
    std::fs::write(&p, b"\x08\x07\x12\x04\xff\xfe onnx").unwrap();
    let e = Tokenizer::from_vocab(&p, true).unwrap_err().to_string();
    assert!(e.contains("v.txt") && e.contains("not a WordPiece vocabulary") && e.contains("--token"), "{e}");
    // MPNet's and RoBERTa's names for the same tokens (sentence-transformers' mpnet models): framed as BERT's.
    std::fs::write(&p, "<s>\n<pad>\n</s>\n<unk>\nhello\nworld\n").unwrap();
    let m = Tokenizer::from_vocab(&p, true).unwrap();
    assert_eq!((m.cls_id, m.pad_id, m.sep_id, m.unk_id), (0, 1, 2, 3));
    assert_eq!(m.tokenize("Hello world", "text").unwrap().ids, [4, 5]);
}

#[test]
fn non_ascii_offsets_slice_the_original() {
    let t = tokenizer();
    let text = "A naïve Café, 1902!";
    let toks = t.tokenize(text, "test").unwrap();
    let pieces: Vec<&str> = toks.offsets.iter().map(|&(a, b)| &text[a..b]).collect();
    assert_eq!(pieces, ["A", "naïve", "Café", ",", "1902", "!"]);
    let names: Vec<String> = toks.ids.iter().map(|&i| t.id_to_token(i).unwrap()).collect();
    assert_eq!(names, ["a", "naive", "cafe", ",", "1902", "!"]);
    // A word made of known letters splits into ## pieces; an unknown symbol is [UNK].
    let toks = t.tokenize("qzx 中", "test").unwrap();
    let names: Vec<String> = toks.ids.iter().map(|&i| t.id_to_token(i).unwrap()).collect();
    assert_eq!(names, ["q", "##z", "##x", "[UNK]"]);
    assert_eq!(toks.offsets[3], (4, 7));
}

#[test]
fn doc_tokens_like_bert() {
    let d = DocTokens::new(" Naïve  café\tx");
    assert_eq!(d.tokens, ["Naïve", "café", "x"]);
    assert_eq!(d.spans[1], (9, 14));
    // chars: ' ' N a ï v e ' ' ' ' c a f é '\t' x
    assert_eq!(d.char_to_word, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2]);
    assert_eq!(d.word_at_byte(10), 1);
}

#[test]
fn a_saved_tokenizer_json_tokenizes_like_the_vocab_it_came_from() {
    let t = tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tokenizer.json");
    t.save_tokenizer_json(&p).unwrap();
    let j = Tokenizer::from_tokenizer_json(&p).unwrap();
    assert_eq!((j.vocab_size(), j.max_token_id()), (t.vocab_size(), t.max_token_id()));
    assert_eq!((j.pad_id, j.unk_id, j.cls_id, j.sep_id), (t.pad_id, t.unk_id, t.cls_id, t.sep_id));
    let data = load_squad(fixture("tiny-v1.1.json")).unwrap();
    for ex in &data.examples {
        for text in [ex.question.as_str(), &ex.context] {
            assert_eq!(j.tokenize(text, "q").unwrap(), t.tokenize(text, "q").unwrap(), "{text}");
        }
    }
    std::fs::write(&p, "{\"not\": \"a tokenizer\"}").unwrap();
    let e = Tokenizer::from_tokenizer_json(&p).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
}

/// A WordPiece tokenizer.json whose vocabulary holds both RoBERTa's and BERT's special names, as MPNet's does
/// (`<s>` 0 ... `[CLS]` 5), with `post_processor` and `added_tokens` as given.
fn mpnet_like_tokenizer(dir: &tempfile::TempDir, post_processor: &str, specials: &[&str], padding: &str) -> PathBuf {
    let names = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "hello", "world"];
    let vocab: Vec<String> = names.iter().enumerate().map(|(i, t)| format!("\"{t}\": {i}")).collect();
    let added: Vec<String> = specials
        .iter()
        .map(|t| {
            let id = names.iter().position(|n| n == t).unwrap();
            format!(r#"{{"id": {id}, "content": "{t}", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}"#)
        })
        .collect();
    let json = format!(
        r###"{{"version": "1.0", "truncation": null, "padding": {padding}, "added_tokens": [{}],
        "normalizer": {{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}},
        "pre_tokenizer": {{"type": "BertPreTokenizer"}}, "post_processor": {post_processor}, "decoder": null,
        "model": {{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {{{}}}}}}}"###,
        added.join(", "),
        vocab.join(", ")
    );
    let p = dir.path().join("tokenizer.json");
    std::fs::write(&p, json).unwrap();
    p
}

/// Issue 76: MPNet's tokenizer.json frames a text `<s> a </s>` (ids 0, 2) and pads with `<pad>` (1), though its
/// vocabulary also holds `[CLS]` (its 105th entry); qdq had framed it with `[CLS]` and `[SEP]`, so calibration,
/// FP32 and INT8 all read texts the model never saw. The post-processor and padding decide; a BERT template keeps
/// BERT's framing; without either, the special tokens the tokenizer marks special win over BERT's names.
#[test]
fn a_tokenizer_json_frames_texts_as_its_post_processor_says() {
    let dir = tempfile::tempdir().unwrap();
    let roberta = r#"{"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": true, "add_prefix_space": false}"#;
    let padding = r#"{"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 1, "pad_type_id": 0, "pad_token": "<pad>"}"#;
    let p = mpnet_like_tokenizer(&dir, roberta, &["<s>", "<pad>", "</s>", "<unk>", "[UNK]"], padding);
    let t = Tokenizer::from_tokenizer_json(&p).unwrap();
    assert_eq!(t.framing(), Framing { cls: 0, sep: 2, pair_seps: 2, pair_type: 0 });
    assert_eq!(t.pad_id, 1);
    assert_eq!(t.tokenize("Hello world", "t").unwrap().ids, [8, 9]);
    // A pair as RoBERTa frames it: <s> q </s></s> context </s>, one segment.
    let cfg = FeatureConfig { max_seq_len: 10, doc_stride: 2, max_query_len: 64 };
    let ctx = Arc::new(t.tokenize("world hello world", "c").unwrap());
    let f: Vec<Feature> = FeatureWindows::new(&cfg, (t.framing(), 0, 0), &[8], ctx).collect();
    assert_eq!(f[0].input_ids, [0, 8, 2, 2, 9, 8, 9, 2]);
    assert_eq!(f[0].token_type_ids, [0; 8]);
    assert_eq!(f[0].token_offsets[4], Some((0, 5)));

    // No padding block: the token marked special pads; no post-processor: the specials marked special frame.
    let p = mpnet_like_tokenizer(&dir, "null", &["<s>", "<pad>", "</s>", "[UNK]"], "null");
    let t = Tokenizer::from_tokenizer_json(&p).unwrap();
    assert_eq!((t.cls_id, t.sep_id, t.pad_id, t.unk_id), (0, 2, 1, 4));

    // BERT's template over the same vocabulary: [CLS] a [SEP] b [SEP], the second segment 1.
    let template = r#"{"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [5], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [6], "tokens": ["[SEP]"]}}}"#;
    let p = mpnet_like_tokenizer(&dir, template, &["[CLS]", "[SEP]", "[PAD]", "[UNK]"], "null");
    let t = Tokenizer::from_tokenizer_json(&p).unwrap();
    assert_eq!(t.framing(), Framing { cls: 5, sep: 6, pair_seps: 1, pair_type: 1 });
    assert_eq!(t.pad_id, 7);

    // A vocab.txt beside a tokenizer_config.json naming the specials: the declared ones, and RoBERTa's pairs.
    let v = dir.path().join("vocab.txt");
    std::fs::write(&v, "<s>\n<pad>\n</s>\n<unk>\n[UNK]\n[CLS]\n[SEP]\n[PAD]\nhello\nworld\n").unwrap();
    let bert = Tokenizer::from_vocab(&v, true).unwrap();
    assert_eq!((bert.cls_id, bert.sep_id, bert.pad_id), (5, 6, 7), "no declaration: BERT's names");
    let config = r#"{"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "[UNK]"}"#;
    std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
    let t = Tokenizer::from_vocab(&v, true).unwrap();
    assert_eq!(t.framing(), Framing { cls: 0, sep: 2, pair_seps: 2, pair_type: 0 });
    assert_eq!((t.pad_id, t.unk_id), (1, 4));
}
