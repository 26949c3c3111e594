//! What the tests share: the fixtures (the tiny BERT, the SQuAD files) and how `qdq` is run and its error read.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use onnx_ir::tiny_bert::{TinyBertConfig, build};

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

pub fn qdq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qdq")).args(args).output().expect("qdq runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The error lines (`qdq: error: ...`) of a failed run; asserts there is exactly one and returns it.
pub fn one_error(o: &Output) -> String {
    assert!(!o.status.success(), "expected failure; stdout: {}", String::from_utf8_lossy(&o.stdout));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("qdq: error:")).collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    lines[0].to_owned()
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub model: PathBuf,
}

pub fn fixture(cfg: TinyBertConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.onnx");
    build(&cfg).save(&model).unwrap();
    Fixture { dir, model }
}

pub fn tiny() -> Fixture {
    fixture(TinyBertConfig { max_positions: 64, ..Default::default() })
}

/// The feature shape every run on the tiny model uses (its positions end at 64).
pub const TINY_SHAPE: [&str; 6] = ["--seq_len", "64", "--query_len", "16", "--doc_stride", "24"];

pub fn e2e_args<'a>(f: &'a Fixture, out: &'a str, vocab: &'a str, dataset: &'a str) -> Vec<String> {
    let model = f.model.to_str().unwrap();
    let out = f.dir.path().join(out);
    let args = ["e2e", "--model", model, "--vocab", vocab, "--dataset", dataset, "--out", out.to_str().unwrap()];
    args.iter().chain(&TINY_SHAPE).chain(&["--cal_num", "4", "--batch", "2"]).map(|s| s.to_string()).collect()
}

pub fn run(args: &[String]) -> Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    qdq(&refs)
}

/// Asserts that a Markdown reader (GitHub's tables) sees in `text` exactly the table rows written as `|` lines: no
/// sentence after a table read as one more row, no table broken apart.
pub fn assert_markdown_tables(text: &str) {
    use pulldown_cmark::{Event, Options, Parser, Tag};
    let read = Parser::new_ext(text, Options::ENABLE_TABLES)
        .filter(|e| matches!(e, Event::Start(Tag::TableHead | Tag::TableRow)))
        .count();
    let delimiter = |l: &str| l.starts_with("|-") || l.starts_with("|:") || l.starts_with("| -");
    let written = text.lines().filter(|l| l.starts_with('|') && !delimiter(l)).count();
    assert!(written > 0, "no table in:\n{text}");
    assert_eq!(read, written, "a Markdown reader sees {read} table rows where {written} were written:\n{text}");
}
