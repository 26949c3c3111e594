//! `cargo xtask fuzz --cases N`: a seeded mutation harness over the library entry points that read user files
//! (issue 18). Seeds are the repository's own fixtures and a tiny BERT: ONNX models through `onnx_ir::Model`
//! (decoded, checked, re-encoded and decoded again, then through qdq's planning, smoothing and dynamic mode for every
//! preset), range tables of every format through `calib::tables::read_ranges`, SQuAD files through
//! `squad::load_squad`, tokenization and windowing, `squad_metrics` scoring, tokenizer files through both loaders, a
//! classifier's data files (TSV, JSONL, text lines: with byte-order marks, CRLF ends and changed labels too) through
//! `InputSet::load` and its label check, and a sentence-transformers folder's config files through the data
//! configuration every command reads a folder with (running ONNX Runtime on mutants is
//! left out: a crash there is not ours to fix). Each case applies one to four mutations (bit flips, random bytes,
//! truncation, inserted or repeated chunks) chosen by a xorshift generator seeded with the case number, so a failure
//! is reproduced by `--cases` and `--first`.
//!
//! The oracle: no panic, no case over [`CASE_LIMIT`], every error has a message, and a model that loads re-encodes to
//! itself. A seeded mutator in xtask rather than cargo-fuzz: cargo-fuzz needs the nightly toolchain and its own
//! install in CI, while this runs on stable as a unit test (so `cargo xtask test` runs it briefly) and reproduces any
//! case from its number. Coverage-guided fuzzing can be added later with the same targets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::workspace::root;

/// A case that takes longer than this is a failure (a hang or a runaway loop).
pub const CASE_LIMIT: Duration = Duration::from_secs(5);

/// xorshift64*: deterministic.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four mutations of `bytes`.
fn mutate(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(b.len());
        match rng.below(5) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.next() as u8,
            2 => b.truncate(at),
            3 => {
                let chunk: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
                b.splice(at..at, chunk);
            }
            _ => {
                let end = (at + 1 + rng.below(64)).min(b.len());
                let chunk = b[at..end].to_vec();
                let to = rng.below(b.len());
                b.splice(to..to, chunk);
            }
        }
    }
    b
}

/// [`mutate`], then, for the files users write by hand, what editors and spreadsheets do to them: a UTF-8
/// byte-order mark put first, CRLF line ends, a label or number changed (to another digit, a sign, a letter).
fn mutate_text(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = if rng.below(3) == 0 { bytes.to_vec() } else { mutate(bytes, rng) };
    if rng.below(3) == 0 {
        b.splice(0..0, *b"\xEF\xBB\xBF");
    }
    if rng.below(3) == 0 {
        b = b.iter().flat_map(|&c| if c == b'\n' { vec![b'\r', b'\n'] } else { vec![c] }).collect();
    }
    let digits: Vec<usize> = b.iter().enumerate().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
    if !digits.is_empty() && rng.below(2) == 0 {
        let at = digits[rng.below(digits.len())];
        b[at] = *b"0123456789-x".get(rng.below(12)).unwrap_or(&b'9');
    }
    b
}

/// What one target does with a mutant file: `Ok(true)` accepted, `Ok(false)` refused with a message.
type Check = fn(&Path) -> Result<bool>;

fn onnx(path: &Path) -> Result<bool> {
    match onnx_ir::Model::load(path) {
        Ok(m) => {
            let again = onnx_ir::Model::from_bytes(&m.to_bytes()?, "re-encoded")?;
            // A NaN attribute or tensor value never equals itself as a float: two protos that differ only there print
            // alike.
            if again.proto != m.proto && format!("{:?}", again.proto) != format!("{:?}", m.proto) {
                bail!("a loaded model does not re-encode to itself");
            }
            through_qdq(&m)?;
            // As qdq's jobs load a model to quantize: its constants folded, then through qdq again.
            let mut folded = m.clone();
            match onnx_ir::fold_constants(folded.graph_mut()) {
                Ok(f) if f.nodes() > 0 => through_qdq(&folded)?,
                Ok(_) => {}
                Err(e) if e.to_string().is_empty() => bail!("a fold error without a message"),
                Err(_) => {}
            }
            Ok(true)
        }
        Err(e) if e.to_string().is_empty() => bail!("an error without a message"),
        Err(_) => Ok(false),
    }
}

/// A model that loads goes on through what qdq does with it, for every preset with and without smoothing: the
/// tensors to calibrate, a plan with a range for each, applied to a copy, the coverage of the result; the smoothing
/// sites smoothed with unit statistics; the dynamic mode. Refusals are fine if they say why; panics are not.
fn through_qdq(m: &onnx_ir::Model) -> Result<()> {
    let said = |e: qdq::Error| if e.to_string().is_empty() { bail!("a qdq error without a message") } else { Ok(()) };
    for preset in qdq::PRESETS {
        let preset_policy = qdq::Policy::preset(preset)?;
        for smooth in [preset_policy.smooth, None] {
            let policy = qdq::Policy { smooth, ..preset_policy.clone() };
            let placed = || -> qdq::Result<()> {
                let tensors = qdq::tensors_to_calibrate(m, &policy)?;
                let ranges: qdq::Ranges = tensors.into_iter().map(|t| (t, (-1.0, 1.0))).collect();
                let plan = qdq::plan(m, &ranges, &policy)?;
                let mut q = m.clone();
                plan.apply(&mut q)?;
                qdq::coverage(&q);
                Ok(())
            };
            for outcome in [placed(), qdq::quantize_dynamic(m, &policy).map(|_| ())] {
                if let Err(e) = outcome {
                    said(e)?;
                }
            }
        }
        let policy = &preset_policy;
        if let (Some(alpha), Ok(sites)) = (policy.smooth, qdq::smoothing_sites(m, policy)) {
            let absmax = sites.iter().map(|s| (s.tensor.clone(), vec![1.0; s.channels])).collect();
            if let Err(e) = qdq::smooth(m, policy, &absmax, alpha) {
                said(e)?;
            }
        }
    }
    Ok(())
}

fn table(path: &Path) -> Result<bool> {
    match calib::tables::read_ranges(path) {
        Ok(t) if t.ranges.values().any(|(lo, hi)| !(lo.is_finite() && hi.is_finite() && lo <= hi)) => {
            bail!("an accepted table holds an invalid range")
        }
        Ok(_) => Ok(true),
        Err(e) if e.to_string().is_empty() => bail!("an error without a message"),
        Err(_) => Ok(false),
    }
}

/// An accepted calibration state (calib_state.json) gives each method's ranges (finite, ordered) or an error, and
/// merges with itself.
fn state(path: &Path) -> Result<bool> {
    let Ok(s) = calib::CalibState::load_json(path) else { return Ok(false) };
    let methods = [
        calib::Method::MinMax { symmetric: false },
        calib::Method::Percentile { percentile: 99.99, symmetric: true },
        calib::Method::Percentile { percentile: 99.9, symmetric: false },
        calib::Method::Mse,
        calib::Method::Entropy { num_quantized_bins: 16 },
        calib::Method::Distribution,
    ];
    for m in &methods {
        match calib::compute_ranges(&s, m) {
            Ok(t) if t.ranges.values().any(|r| !(r.min.is_finite() && r.max.is_finite() && r.min <= r.max)) => {
                bail!("{m:?}: an accepted state gives an invalid range")
            }
            Err(e) if e.to_string().is_empty() => bail!("{m:?}: an error without a message"),
            _ => {}
        }
    }
    let mut twice = s.clone();
    if let Err(e) = twice.merge(&s)
        && e.to_string().is_empty()
    {
        bail!("a merge error without a message");
    }
    Ok(true)
}

/// Calibration states to mutate, written into `work`: whole histograms of every kind, and a percentile's and mse's
/// tails alone with their middle bins folded.
fn state_seeds(work: &Path) -> Result<Vec<PathBuf>> {
    let mut rng = Rng::new(7);
    let data: Vec<f32> = (0..40_000).map(|_| (rng.below(2001) as f32 - 1000.0) / 250.0).collect();
    let all = [calib::Method::Mse, calib::Method::Entropy { num_quantized_bins: 16 }];
    let tails = [calib::Method::Percentile { percentile: 99.99, symmetric: true }];
    let mse_tails = [calib::Method::Mse];
    let mut seeds = vec![];
    for (name, methods) in
        [("state_whole.json", &all[..]), ("state_tails.json", &tails[..]), ("state_mse_tails.json", &mse_tails[..])]
    {
        let mut s = calib::CalibState::new(calib::CollectOptions::for_methods(methods, 64));
        // mse's: five times the values, most near zero, a few out to 4 (its threshold is proven from the top alone).
        let mse = methods == mse_tails;
        for chunk in data.chunks(5_000).cycle().take(if mse { 40 } else { 8 }) {
            let chunk: Vec<f32> = if mse { chunk.iter().map(|x| x.powi(3) / 16.0).collect() } else { chunk.to_vec() };
            s.observe("t", &chunk, &[chunk.len()])?;
        }
        let folded = s.tensor("t").and_then(|t| t.abs.as_ref()).and_then(|h| h.folded());
        if name != "state_whole.json" && folded.is_none() {
            bail!("fuzz seed {name}: nothing folded");
        }
        let path = work.join(name);
        s.save_json(&path)?;
        seeds.push(path);
    }
    Ok(seeds)
}

/// The fixtures' vocabulary, loaded once.
static VOCAB: std::sync::OnceLock<Option<tokenizer::Tokenizer>> = std::sync::OnceLock::new();

/// An accepted SQuAD file goes on through tokenization and windowing, as evaluation and calibration feed it.
fn featurize(path: &Path) -> Result<bool> {
    let Ok(data) = squad::load_squad(path) else { return Ok(false) };
    let tok =
        VOCAB.get_or_init(|| tokenizer::Tokenizer::from_vocab(root().join("testdata/squad/vocab.txt"), true).ok());
    let Some(tok) = tok else { bail!("the fixtures' vocab.txt does not load") };
    let cfg = squad::FeatureConfig { max_seq_len: 64, doc_stride: 24, max_query_len: 16 };
    for batch in squad::FeatureStream::new(&data.examples, tok, cfg, 4, squad::Padding::Longest)? {
        if let Err(e) = batch
            && e.to_string().is_empty()
        {
            bail!("a featurization error without a message");
        }
    }
    Ok(true)
}

fn squad_file(path: &Path) -> Result<bool> {
    let ours = featurize(path)?;
    match squad_metrics::load_dataset(path) {
        Ok(d) => {
            let m = squad_metrics::evaluate_v1(&d, &Default::default());
            if !(m.f1.is_finite() || d.num_questions() == 0) {
                bail!("scoring an accepted file gave F1 {}", m.f1);
            }
            Ok(ours)
        }
        Err(e) if e.to_string().is_empty() => bail!("an error without a message"),
        Err(_) => Ok(false),
    }
}

/// A pipeline error, or a message-less one as the failure it is.
fn refused(e: &pipeline::Error) -> Result<bool> {
    if e.to_string().trim().is_empty() {
        bail!("an error without a message");
    }
    Ok(false)
}

/// The model, tokenizer and roles text data is read for: a 3-class tiny BERT classifier and the fixtures' vocabulary.
static CLASSIFIER: std::sync::OnceLock<Option<(onnx_ir::Model, pipeline::TextInputs)>> = std::sync::OnceLock::new();

/// A classifier's data file (TSV, JSONL, text lines) through `InputSet::load`, its labels checked against the 3
/// classes: an accepted file has a label for every row or none, each a class.
fn text_data(path: &Path) -> Result<bool> {
    let inputs = CLASSIFIER.get_or_init(|| {
        use onnx_ir::tiny_bert::{Head, TinyBertConfig, build};
        let cfg = TinyBertConfig {
            layers: 1,
            hidden: 8,
            intermediate: 16,
            head: Head::Classifier { labels: 3 },
            ..Default::default()
        };
        let model = build(&cfg);
        let roles = pipeline::detect_inputs(&model, path, &pipeline::IoNames::Auto).ok()?;
        let vocab = root().join("testdata/squad/vocab.txt");
        let tok = tokenizer::Tokenizer::from_vocab(&vocab, true).ok()?;
        let text = pipeline::TextInputs {
            roles: Ok(roles),
            tokenizer: Ok(std::sync::Arc::new(tok)),
            tokenizer_file: vocab,
            max_len: 64,
            label_ids: None,
        };
        Some((model, text))
    });
    let Some((model, text)) = inputs else { bail!("the tiny classifier's inputs do not load") };
    let set = match pipeline::InputSet::load(path, model, text, 0) {
        Ok(set) => set,
        Err(e) => return refused(&e),
    };
    if set.labels.as_ref().is_some_and(|l| l.len() != set.len()) {
        bail!("{} labels for {} rows", set.labels.as_ref().map_or(0, Vec::len), set.len());
    }
    match set.check_labels(3, "logits") {
        Ok(()) if set.labels.as_ref().is_some_and(|l| l.iter().any(|c| !(0..3).contains(c))) => {
            bail!("a label outside the 3 classes passed the check")
        }
        Ok(()) => Ok(true),
        Err(e) => refused(&e),
    }
}

/// A tokenizer file (vocab.txt or tokenizer.json) through the loaders, then a text through it.
fn tokenizer(path: &Path) -> Result<bool> {
    let loaded = if path.extension().is_some_and(|e| e == "json") {
        tokenizer::Tokenizer::from_tokenizer_json(path)
    } else {
        tokenizer::Tokenizer::from_vocab(path, true)
    };
    match loaded {
        Ok(t) => {
            if let Err(e) = t.tokenize("Which NFL team won Super Bowl 50?", "text")
                && e.to_string().is_empty()
            {
                bail!("a tokenization error without a message");
            }
            Ok(true)
        }
        Err(e) if e.to_string().is_empty() => bail!("an error without a message"),
        Err(_) => Ok(false),
    }
}

/// A sentence-transformers folder's config files, each mutant in place of one of them beside a tiny BERT, through
/// the data configuration every command reads a folder with.
fn folder_file(path: &Path) -> Result<bool> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let Some(original) = name.strip_prefix("mutant-") else {
        bail!("{} is not a folder file's mutant", path.display())
    };
    let folder = path.parent().unwrap_or(Path::new(".")).join("folder");
    if !folder.join("model.onnx").is_file() {
        use onnx_ir::tiny_bert::{Head, TinyBertConfig, build};
        let cfg = TinyBertConfig {
            layers: 1,
            hidden: 8,
            intermediate: 16,
            max_positions: 64,
            head: Head::Hidden { pooler: false },
            ..Default::default()
        };
        std::fs::create_dir_all(folder.join("1_Pooling"))?;
        build(&cfg).save(folder.join("model.onnx"))?;
        std::fs::copy(root().join("testdata/squad/vocab.txt"), folder.join("vocab.txt"))?;
    }
    for (file, text) in FOLDER_FILES {
        std::fs::write(folder.join(file), text)?;
    }
    std::fs::copy(path, folder.join(original.replace('~', "/")))?;
    let settings = pipeline::DataSettings {
        vocab: None,
        tokenizer_json: None,
        lowercase: true,
        version: pipeline::SquadVersion::V1_1,
        seq_len: None,
        query_len: None,
        doc_stride: None,
        io_names: pipeline::IoNames::Auto,
        force: false,
        pad_to_max: false,
        pooling: None,
        corpus: None,
    };
    match settings.config(&folder.join("model.onnx")) {
        Ok(cfg) if cfg.features.max_seq_len == 0 || cfg.features.max_seq_len > 64 => {
            bail!("a length of {} accepted for 64 positions", cfg.features.max_seq_len)
        }
        Ok(_) => Ok(true),
        Err(e) => refused(&e),
    }
}

/// A sentence-transformers folder as the tiny BERT's (`~` for `/` in the seed's name).
const FOLDER_FILES: [(&str, &str); 4] = [
    (
        "modules.json",
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#,
    ),
    ("1_Pooling/config.json", r#"{"word_embedding_dimension": 8, "pooling_mode_mean_tokens": true}"#),
    ("sentence_bert_config.json", r#"{"max_seq_length": 48, "do_lower_case": true}"#),
    ("tokenizer_config.json", r#"{"tokenizer_class": "BertTokenizer", "do_lower_case": true}"#),
];

/// Seeds written to `work`: the folder files (named `mutant-` + their path, `~` for `/`, as [`folder_file`]
/// reads them back) and a classifier's data files.
fn text_seeds(work: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let dir = work.join("seeds");
    std::fs::create_dir_all(&dir)?;
    let mut folder = vec![];
    for (file, text) in FOLDER_FILES {
        let p = dir.join(file.replace('/', "~"));
        std::fs::write(&p, text)?;
        folder.push(p);
    }
    let data = [
        ("glue.tsv", "sentence1\tsentence2\tlabel\nthe cat sat\ton the mat\t1\na denver game\tit was long\t0\n"),
        (
            "rows.jsonl",
            "{\"text\": \"the cat sat\", \"text_pair\": \"a mat\", \"label\": 2}\n{\"text\": \"a game\", \"label\": 0}\n",
        ),
        ("lines.txt", "the cat sat on the mat\nwhich river\tthe river is long\n"),
    ];
    let mut texts = vec![];
    for (file, text) in data {
        std::fs::write(dir.join(file), text)?;
        texts.push(dir.join(file));
    }
    Ok((folder, texts))
}

/// The targets and their seed files.
fn targets(work: &Path) -> Result<Vec<(&'static str, Check, Vec<PathBuf>)>> {
    let data = root().join("testdata");
    let tiny = work.join("tiny_bert.onnx");
    let cfg = onnx_ir::tiny_bert::TinyBertConfig { layers: 1, hidden: 8, intermediate: 16, ..Default::default() };
    onnx_ir::tiny_bert::build(&cfg).save(&tiny)?;
    // ONNX Runtime's fused form too (packed-QKV `Attention`, `SkipLayerNormalization`, ...), which the `cpu` preset
    // matches by its own patterns.
    let fused = work.join("tiny_bert_fused.onnx");
    let form = onnx_ir::tiny_bert::GraphForm::OrtFused;
    onnx_ir::tiny_bert::build(&onnx_ir::tiny_bert::TinyBertConfig { form, ..cfg }).save(&fused)?;
    let (folder, texts) = text_seeds(work)?;
    Ok(vec![
        ("onnx model", onnx as Check, vec![tiny, fused, data.join("onnx-ir/attrs.onnx")]),
        (
            "range table",
            table as Check,
            vec![
                data.join("calib/ort/calibration.json"),
                data.join("calib/ort/calibration.flatbuffers"),
                data.join("calib/ort/calibration.cache"),
                data.join("qdq/ranges_tiny_bert_fused.json"),
            ],
        ),
        ("squad file", squad_file as Check, vec![data.join("squad/tiny-v1.1.json"), data.join("squad/tiny-v2.0.json")]),
        ("calibration state", state as Check, state_seeds(work)?),
        ("tokenizer", tokenizer as Check, vec![data.join("squad/vocab.txt"), tokenizer_json_seed(work)?]),
        ("text data", text_data as Check, texts),
        ("model folder file", folder_file as Check, folder),
    ])
}

/// The fixtures' vocabulary as a tokenizer.json (saved by the loader itself).
fn tokenizer_json_seed(work: &Path) -> Result<PathBuf> {
    let path = work.join("tokenizer.json");
    tokenizer::Tokenizer::from_vocab(root().join("testdata/squad/vocab.txt"), true)?.save_tokenizer_json(&path)?;
    Ok(path)
}

/// Runs `cases` mutants of every seed of every target, starting at case `first`; returns per target (accepted,
/// refused).
pub fn run(cases: u64, first: u64) -> Result<Vec<(&'static str, u64, u64)>> {
    let scratch = tempfile::Builder::new().prefix("qdq-fuzz-").tempdir()?;
    let dir = scratch.path();
    let mut out = vec![];
    for (name, check, seeds) in targets(dir)? {
        let (mut ok, mut refused) = (0, 0);
        for seed in &seeds {
            let bytes = std::fs::read(seed)?;
            let ext = seed.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
            // A folder file's mutant keeps the seed's name: the target puts it back where it belongs.
            let mutant = match name {
                "model folder file" => {
                    dir.join(format!("mutant-{}", seed.file_name().unwrap_or_default().to_string_lossy()))
                }
                _ => dir.join(format!("mutant{ext}")),
            };
            let text = matches!(name, "tokenizer" | "text data" | "model folder file");
            for case in first..first + cases {
                let mut rng = Rng::new(case);
                std::fs::write(&mutant, if text { mutate_text(&bytes, &mut rng) } else { mutate(&bytes, &mut rng) })?;
                let started = Instant::now();
                let outcome = std::panic::catch_unwind(|| check(&mutant));
                let took = started.elapsed();
                let what = format!("{name}, seed {}, case {case}", seed.display());
                match outcome {
                    Err(_) => bail!("{what}: panicked"),
                    Ok(Err(e)) => bail!("{what}: {e:#}"),
                    Ok(Ok(_)) if took > CASE_LIMIT => bail!("{what}: took {took:?}"),
                    Ok(Ok(true)) => ok += 1,
                    Ok(Ok(false)) => refused += 1,
                }
            }
        }
        out.push((name, ok, refused));
    }
    Ok(out)
}

/// `cargo xtask fuzz`.
pub fn fuzz(cases: u64, first: u64) -> Result<()> {
    // A panic is caught and reported as a failing case; its default message would only repeat it.
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let result = run(cases, first);
    let _ = std::panic::take_hook();
    for (name, ok, refused) in result? {
        eprintln!("xtask: fuzz {name}: {ok} mutants accepted, {refused} refused with an error, no panic");
    }
    eprintln!("xtask: fuzz: {cases} cases per seed from case {first} in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The harness in `cargo xtask test`: a few hundred cases per seed (about a second in debug).
    #[test]
    fn mutated_inputs_never_panic() {
        let counts = super::run(200, 0).unwrap();
        assert_eq!(counts.len(), 7);
        for (name, ok, refused) in counts {
            assert!(refused > 0, "{name}: no mutant refused, the mutator does nothing");
            assert!(ok + refused > 0, "{name}");
        }
    }

    /// Cases longer runs once failed on: a tiny BERT whose head-split Reshape asks for more than i64 holds (an
    /// overflow in the value-projection match), a model with a NaN attribute (which never equals itself, so the
    /// re-encoding check must not compare it as a float), the fused form with a MatMul left without an output (the
    /// dynamic mode indexed its first output), and tiny BERT with an embedding table's Gather left without one (the
    /// int8 embedding indexed it).
    #[test]
    fn cases_that_once_failed_pass() {
        for case in [11_625, 32_623, 8_804, 321_427] {
            super::run(1, case).unwrap_or_else(|e| panic!("case {case}: {e:#}"));
        }
    }
}
