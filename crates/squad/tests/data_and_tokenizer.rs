use crate::common::*;
use qdq_squad::*;
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
    let e = SquadTokenizer::from_vocab(&p, true).unwrap_err().to_string();
    assert!(e.contains("v.txt") && e.contains("[SEP]"), "{e}");
    assert!(SquadTokenizer::from_vocab(dir.path().join("none.txt"), true).is_err());
    // A binary file (a model given to --vocab) is named as no vocabulary, with where a tokenizer.json goes.
    std::fs::write(&p, b"\x08\x07\x12\x04\xff\xfe onnx").unwrap();
    let e = SquadTokenizer::from_vocab(&p, true).unwrap_err().to_string();
    assert!(e.contains("v.txt") && e.contains("not a WordPiece vocabulary") && e.contains("--token"), "{e}");
    // MPNet's and RoBERTa's names for the same tokens (sentence-transformers' mpnet models): framed as BERT's.
    std::fs::write(&p, "<s>\n<pad>\n</s>\n<unk>\nhello\nworld\n").unwrap();
    let m = SquadTokenizer::from_vocab(&p, true).unwrap();
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
    let j = SquadTokenizer::from_tokenizer_json(&p).unwrap();
    assert_eq!((j.vocab_size(), j.max_token_id()), (t.vocab_size(), t.max_token_id()));
    assert_eq!((j.pad_id, j.unk_id, j.cls_id, j.sep_id), (t.pad_id, t.unk_id, t.cls_id, t.sep_id));
    let data = load_squad(fixture("tiny-v1.1.json")).unwrap();
    for ex in &data.examples {
        for text in [ex.question.as_str(), &ex.context] {
            assert_eq!(j.tokenize(text, "q").unwrap(), t.tokenize(text, "q").unwrap(), "{text}");
        }
    }
    std::fs::write(&p, "{\"not\": \"a tokenizer\"}").unwrap();
    let e = SquadTokenizer::from_tokenizer_json(&p).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
}
