//! Speed against FP32, measured in alternation: warm sessions of FP32 and of the other model run the same batches in
//! turn, round after round (A B, B A, A B, ...), so the machine's drift over minutes (other load, clocks) falls on
//! both; each round gives one ratio, and the median and range of the rounds are reported. Two models timed in
//! separate evaluations minutes apart differ by up to 40 % on a shared machine for no reason of their own.

use std::cell::RefCell;
use std::path::Path;
use std::time::Instant;

use ndarray::{Array2, ArrayView2};
use runtime::{ModelSource, Session, SessionConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::progress::Progress;

/// How much faster a model ran than FP32 on the same batches: FP32's time over the model's, per round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Speedup {
    /// Median over the rounds (above 1: faster than FP32).
    pub median: f64,
    /// The slowest and fastest round.
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
    /// Features each model ran per round.
    pub features: usize,
    /// Median over the rounds of each model's time per feature, in ms: the reference (FP32) and the model timed.
    #[serde(default)]
    pub reference_ms_per_feature: f64,
    #[serde(default)]
    pub ms_per_feature: f64,
}

impl Speedup {
    /// `1.52x (1.41-1.60)`: median (slowest-fastest round).
    pub fn describe(&self) -> String {
        format!("{:.2}x ({:.2}-{:.2})", self.median, self.min, self.max)
    }

    /// The summary of timed rounds (the reference's time over the model's in each); `None` without any finite
    /// ratio.
    fn from_rounds(rounds: &[Round], features: usize) -> Option<Speedup> {
        let mut ratios: Vec<f64> = rounds.iter().map(|r| r.reference / r.other).filter(|r| r.is_finite()).collect();
        let mid = median(&mut ratios)?;
        let ms = |t: Vec<f64>| median(&mut t.into_iter().map(|s| s * 1e3 / features.max(1) as f64).collect::<Vec<_>>());
        Some(Speedup {
            median: mid,
            min: ratios[0],
            max: ratios[ratios.len() - 1],
            rounds: ratios.len(),
            features,
            reference_ms_per_feature: ms(rounds.iter().map(|r| r.reference).collect()).unwrap_or(0.0),
            ms_per_feature: ms(rounds.iter().map(|r| r.other).collect()).unwrap_or(0.0),
        })
    }
}

/// The median of `v` (sorted in place); `None` for none.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A speed-up with both models at their EP's own default float precision ([`runtime::Ep::default_float`]): the FP32
/// its users run (OpenVINO's bf16 on a CPU with bf16 matrix instructions, FP16 engines on TensorRT / MIGraphX), beside
/// the one against FP32 in f32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AtDefaultPrecision<T = Speedup> {
    /// The precision's name as the EP takes it (`bf16`, `f16`, `fp16`).
    pub precision: String,
    /// What gives the CPU that precision, where it is the CPU's (`AMX`, `AVX512-BF16`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The speed-up (an embedding model's: one per shape), when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<T>,
    /// Why it was not measured (the EP refused the precision), when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<T> AtDefaultPrecision<T> {
    /// `At openvino's own default float precision here, bf16 (AMX), the FP32 its users run: INT8 runs at ...`, the
    /// measurement said by `said`.
    pub fn describe_with(&self, ep: &str, said: impl FnOnce(&T) -> String) -> String {
        let by = self.instructions.as_ref().map_or(String::new(), |i| format!(" ({i})"));
        let head =
            format!("At {ep}'s own default float precision here, {}{by}, the FP32 its users run", self.precision);
        match (&self.speedup, &self.error) {
            (Some(s), _) => format!("{head}: {}.", said(s)),
            (None, Some(e)) => format!("{head}: not measured ({e})."),
            (None, None) => format!("{head}: not measured."),
        }
    }
}

impl AtDefaultPrecision {
    /// [`Self::describe_with`] of a speed-up against FP32: `... : INT8 runs at 1.05x (0.98-1.10) FP32's speed.`
    pub fn describe(&self, ep: &str, model: &str) -> String {
        self.describe_with(ep, |s| format!("{model} runs at {} FP32's speed", s.describe()))
    }
}

/// The FP32 and quantized models' sessions at their EP's default float precision, and its name, when that differs from
/// theirs ([`runtime::Ep::default_float`]).
pub(crate) fn default_precision_sessions(
    fp32: &SessionConfig,
    int8: &SessionConfig,
) -> Option<(SessionConfig, SessionConfig, &'static str)> {
    let (int8_ep, name) = int8.ep.default_float()?;
    let (fp32_ep, _) = fp32.ep.default_float()?;
    Some((SessionConfig { ep: fp32_ep, ..fp32.clone() }, SessionConfig { ep: int8_ep, ..int8.clone() }, name))
}

/// [`default_precision_sessions`] with the CPU instructions behind that precision, where the EP is timed (not an
/// emulated NPU, whose float precision is the device's, not a choice).
pub(crate) fn timed_default_sessions(
    fp32: &SessionConfig,
    int8: &SessionConfig,
) -> Option<(SessionConfig, SessionConfig, &'static str, Option<String>)> {
    let (f, q, name) = default_precision_sessions(fp32, int8)?;
    if !q.ep.is_timed() {
        return None;
    }
    let instructions = q.ep.default_float_instructions().map(str::to_owned);
    Some((f, q, name, instructions))
}

/// The quantized model against FP32 with both at their EP's default float precision, when that is not the sessions'
/// own: `time(fp32, int8)` times them; a failure (the EP refusing the precision) is recorded, not raised.
pub(crate) fn at_default_precision<T>(
    fp32: &SessionConfig,
    int8: &SessionConfig,
    time: impl FnOnce(&SessionConfig, &SessionConfig) -> Result<T>,
) -> Option<AtDefaultPrecision<T>> {
    let (f, q, name, instructions) = timed_default_sessions(fp32, int8)?;
    let (speedup, error) = match time(&f, &q) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Some(AtDefaultPrecision { precision: name.to_owned(), instructions, speedup, error })
}

/// How closely two sessions (one model on two EPs) compute the same logits on the same features.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogitsAgreement {
    /// Largest absolute difference of any logit.
    pub max_abs: f32,
    /// Mean absolute difference over every logit.
    pub mean_abs: f32,
    /// Features compared.
    pub features: usize,
}

impl LogitsAgreement {
    /// `max 1.23e-2, mean 1.10e-3 over 16 features`.
    pub fn describe(&self) -> String {
        format!("max {:.2e}, mean {:.2e} over {} features", self.max_abs, self.mean_abs, self.features)
    }
}

/// `model`'s logits on `a` against those on `b`, on the first batches of `batches` holding at most [`FEATURES`]
/// features (at least one batch); progress as `stage` (an emulated EP takes seconds per feature).
pub(crate) fn logits_agreement(
    model: &Path,
    (a, b): (&SessionConfig, &SessionConfig),
    batches: &[squad::Batch],
    io: &squad::ModelIo,
    (stage, progress): (&str, &dyn Progress),
) -> Result<LogitsAgreement> {
    let batches = leading(batches, FEATURES);
    progress.start(stage, Some(batches.iter().map(|b| b.len() as u64).sum()), "features");
    let name = model.display().to_string();
    let mut sessions = Vec::with_capacity(2);
    for cfg in [a, b] {
        let mut s = crate::model::open_session(ModelSource::File(model), &name, cfg)?;
        s.feed_zeros(&io.zero_inputs)?;
        sessions.push(s);
    }
    let outputs = io.logit_outputs();
    let (mut max_abs, mut sum, mut count, mut features) = (0f32, 0f64, 0usize, 0usize);
    for batch in batches {
        let inputs = batch.inputs(io);
        let first = sessions[0].run(&inputs, &outputs)?;
        let second = sessions[1].run(&inputs, &outputs)?;
        for (x, y) in first.iter().zip(&second) {
            for (p, q) in x.iter().zip(y) {
                let d = (p - q).abs();
                max_abs = max_abs.max(d);
                sum += f64::from(d);
                count += 1;
            }
        }
        features += first.first().map_or(0, |l| l.shape().first().copied().unwrap_or(0));
        progress.advance(batch.len() as u64);
    }
    progress.finish();
    Ok(LogitsAgreement { max_abs, mean_abs: if count == 0 { 0.0 } else { (sum / count as f64) as f32 }, features })
}

/// What models are timed on: batches of named inputs, the outputs read and the inputs fed zeros.
pub(crate) struct Workload {
    batches: Vec<Vec<(String, Array2<i64>)>>,
    outputs: Vec<String>,
    zero_inputs: Vec<String>,
}

impl Workload {
    /// `batches` read as SQuAD evaluation reads them.
    pub(crate) fn squad(batches: &[squad::Batch], io: &squad::ModelIo) -> Workload {
        let batches = batches
            .iter()
            .map(|b| b.inputs(io).into_iter().map(|(n, a)| (n.to_owned(), a.to_owned())).collect())
            .collect();
        let outputs = io.logit_outputs().into_iter().map(str::to_owned).collect();
        Workload { batches, outputs, zero_inputs: io.zero_inputs.clone() }
    }

    /// Batches of named inputs, reading `outputs`.
    pub(crate) fn new(batches: Vec<Vec<(String, Array2<i64>)>>, outputs: Vec<String>) -> Workload {
        Workload { batches, outputs, zero_inputs: vec![] }
    }

    /// The same work with `names` fed zeros in every run (inputs the outputs do not depend on).
    pub(crate) fn with_zero_inputs(self, names: Vec<String>) -> Workload {
        Workload { zero_inputs: names, ..self }
    }

    /// Rows of every batch together.
    fn features(&self) -> usize {
        self.batches.iter().map(|b| b.first().map_or(0, |(_, a)| a.nrows())).sum()
    }
}

/// FP32's warm session and the work it is timed on, to time other models against.
pub(crate) struct PairedTiming {
    fp32: RefCell<Session>,
    work: Workload,
    rounds: usize,
}

/// Features (at most; at least one batch) each model runs per round, and the rounds: about 5 s on MiniLM.
pub(crate) const FEATURES: usize = 16;
pub(crate) const ROUNDS: usize = 5;
/// Rounds of [`PairedTiming::head_to_head`]: two INT8 models a few per cent apart need more than a model against FP32
/// (MiniLM, 16 features: 5 rounds ranged 0.92-1.07 around a median of 0.95; about 0.3 s a round).
pub(crate) const HEAD_TO_HEAD_ROUNDS: usize = 21;

impl PairedTiming {
    /// FP32 (`fp32`, on `cfg`) timed on the first SQuAD batches of `batches` holding at most `max_features` features
    /// (at least one batch), `rounds` rounds per model.
    pub(crate) fn new(
        fp32: &Path,
        cfg: &SessionConfig,
        batches: &[squad::Batch],
        io: &squad::ModelIo,
        max_features: usize,
        rounds: usize,
    ) -> Result<Self> {
        PairedTiming::on(fp32, cfg, Workload::squad(leading(batches, max_features), io), rounds)
    }

    /// FP32 (`fp32`, on `cfg`) timed on `work`, `rounds` rounds per model.
    pub(crate) fn on(fp32: &Path, cfg: &SessionConfig, work: Workload, rounds: usize) -> Result<Self> {
        if work.batches.is_empty() || rounds == 0 {
            return Err(Error::Internal("timing against FP32 needs at least one batch and one round".into()));
        }
        let mut session = crate::model::open_session(ModelSource::File(fp32), "FP32 model", cfg)?;
        session.feed_zeros(&work.zero_inputs)?;
        warm_up(&mut session, &work)?;
        Ok(PairedTiming { fp32: RefCell::new(session), work, rounds })
    }

    /// `model` (on `cfg`) against FP32, in alternating rounds.
    pub(crate) fn against(&self, model: &Path, cfg: &SessionConfig) -> Result<Speedup> {
        let mut other = self.open(model, cfg)?;
        let ratios = self.alternate(self.rounds, &mut self.fp32.borrow_mut(), &mut other)?;
        self.summary(ratios, model, "FP32")
    }

    /// `model` against `reference` (both on `cfg`), in [`HEAD_TO_HEAD_ROUNDS`] alternating rounds on the same
    /// batches: the reference's time over the model's, so a ratio above 1 says the model is faster. Two INT8 models a
    /// few per cent apart are told apart this way, not by their ratios to FP32 from separate rounds.
    pub(crate) fn head_to_head(&self, reference: &Path, model: &Path, cfg: &SessionConfig) -> Result<Speedup> {
        let (mut a, mut b) = (self.open(reference, cfg)?, self.open(model, cfg)?);
        let ratios = self.alternate(HEAD_TO_HEAD_ROUNDS, &mut a, &mut b)?;
        self.summary(ratios, model, &reference.display().to_string())
    }

    /// A warm session of `model` fed as FP32's.
    fn open(&self, model: &Path, cfg: &SessionConfig) -> Result<Session> {
        let mut s = crate::model::open_session(ModelSource::File(model), &model.display().to_string(), cfg)?;
        s.feed_zeros(&self.work.zero_inputs)?;
        warm_up(&mut s, &self.work)?;
        Ok(s)
    }

    /// Per round (`rounds` of them), `reference`'s time over `other`'s, the two run in turn (A B, B A, ...).
    fn alternate(&self, rounds: usize, reference: &mut Session, other: &mut Session) -> Result<Vec<Round>> {
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let (a, b) = if round % 2 == 0 {
                let a = time_all(reference, &self.work)?;
                (a, time_all(other, &self.work)?)
            } else {
                let b = time_all(other, &self.work)?;
                (time_all(reference, &self.work)?, b)
            };
            times.push(Round { reference: a, other: b });
        }
        Ok(times)
    }

    fn summary(&self, rounds: Vec<Round>, model: &Path, reference: &str) -> Result<Speedup> {
        let features = self.work.features();
        Speedup::from_rounds(&rounds, features)
            .ok_or_else(|| Error::Internal(format!("{}: no timed round to compare with {reference}", model.display())))
    }
}

/// One round's seconds: the reference's (FP32's) and the other model's, each over every batch.
#[derive(Debug, Clone, Copy)]
struct Round {
    reference: f64,
    other: f64,
}

/// Where a model's time goes: ONNX Runtime's kernel time per operator type (after its graph optimisations: the
/// kernels that really ran), per feature, over [`PROFILE_PASSES`] passes of the same features after an untimed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpProfile {
    /// Features per pass.
    pub features: usize,
    /// Passes counted.
    pub passes: usize,
    /// Wall time of the runs, ms per feature.
    pub run_ms_per_feature: f64,
    /// Kernel time of every operator together, ms per feature (the rest of the run is ONNX Runtime's own work).
    pub kernel_ms_per_feature: f64,
    /// Largest first.
    pub ops: Vec<OpShare>,
}

/// One operator type's kernel time in an [`OpProfile`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpShare {
    /// As ONNX Runtime ran it (`MatMulIntegerToFloat`, `FusedMatMul`, `QAttention`, ...).
    pub op: String,
    /// The execution provider its kernels ran on.
    pub provider: String,
    /// Nodes of this type.
    pub nodes: usize,
    pub ms_per_feature: f64,
}

/// Passes an [`OpProfile`] counts (about 1.5 s on MiniLM FP32 at 16 features).
pub(crate) const PROFILE_PASSES: usize = 3;

/// The [`OpProfile`] of `model` on `cfg`: a session recording ONNX Runtime's profile (into a temporary file, removed
/// after) runs `pass` (`runs` runs over `features` features) once untimed, then [`PROFILE_PASSES`] times counted.
pub(crate) fn profile_ops(
    model: &Path,
    cfg: &SessionConfig,
    zero_inputs: &[String],
    (runs, features): (usize, usize),
    mut pass: impl FnMut(&mut Session) -> Result<()>,
) -> Result<OpProfile> {
    let dir = tempfile::Builder::new().prefix("qdq-profile-").tempdir().map_err(|e| Error::Output {
        path: std::env::temp_dir(),
        reason: format!("cannot make a temporary directory for the profile: {e}"),
    })?;
    let cfg = SessionConfig { profile: Some(dir.path().join("profile")), optimized_model_path: None, ..cfg.clone() };
    let mut s = crate::model::open_session(ModelSource::File(model), &model.display().to_string(), &cfg)?;
    s.feed_zeros(zero_inputs)?;
    for _ in 0..=PROFILE_PASSES {
        pass(&mut s)?;
    }
    let t = runtime::OpTimes::read(&s.end_profiling()?, runs)?;
    let per_feature = |micros: f64| micros / 1e3 / (PROFILE_PASSES * features).max(1) as f64;
    Ok(OpProfile {
        features,
        passes: PROFILE_PASSES,
        run_ms_per_feature: per_feature(t.run_micros),
        kernel_ms_per_feature: per_feature(t.kernel_micros()),
        ops: t
            .ops
            .into_iter()
            .map(|o| OpShare { op: o.op, provider: o.provider, nodes: o.nodes, ms_per_feature: per_feature(o.micros) })
            .collect(),
    })
}

/// The first of `batches` holding at most `max_features` features, and at least one batch (none of none).
pub(crate) fn leading(batches: &[squad::Batch], max_features: usize) -> &[squad::Batch] {
    leading_by(batches, max_features, squad::Batch::len)
}

/// The first of `batches` holding at most `max_rows` rows as `rows` counts them (at least one batch).
pub(crate) fn leading_by<T>(batches: &[T], max_rows: usize, rows: impl Fn(&T) -> usize) -> &[T] {
    let mut total = 0;
    let used = batches
        .iter()
        .enumerate()
        .take_while(|(i, b)| {
            total += rows(b);
            *i == 0 || total <= max_rows
        })
        .count();
    &batches[..used]
}

/// The [`OpProfile`] of `model` (on `cfg`) on SQuAD `batches`, read as evaluation reads them.
pub(crate) fn profile_batches(
    model: &Path,
    cfg: &SessionConfig,
    batches: &[squad::Batch],
    io: &squad::ModelIo,
) -> Result<OpProfile> {
    let w = Workload::squad(batches, io);
    profile_ops(model, cfg, &w.zero_inputs, (w.batches.len(), w.features()), |s| time_all(s, &w).map(|_| ()))
}

/// One untimed run of every batch before a model's rounds: ONNX Runtime plans and allocates for each new input shape
/// on its first run (and TensorRT builds its engine), which would otherwise fall on the first round of the model
/// timed second (docs/BENCHMARKS.md measured it).
fn warm_up(session: &mut Session, work: &Workload) -> Result<()> {
    time_all(session, work).map(|_| ())
}

/// Seconds to run every batch once.
fn time_all(session: &mut Session, work: &Workload) -> Result<f64> {
    let outputs: Vec<&str> = work.outputs.iter().map(String::as_str).collect();
    let feeds: Vec<Vec<(&str, ArrayView2<i64>)>> =
        work.batches.iter().map(|b| b.iter().map(|(n, a)| (n.as_str(), a.view())).collect()).collect();
    let started = Instant::now();
    for f in &feeds {
        session.run_with(f, &outputs, |_| Ok::<_, Error>(()))?;
    }
    Ok(started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_summarise_as_median_and_range() {
        let rounds =
            |ratios: &[f64]| -> Vec<Round> { ratios.iter().map(|r| Round { reference: *r, other: 1.0 }).collect() };
        let s = Speedup::from_rounds(&rounds(&[1.4, 1.9, 1.5, f64::NAN, 1.6]), 16).unwrap();
        // NaN dropped; an even count takes the mean of the middle two.
        assert!((s.median - 1.55).abs() < 1e-12, "{s:?}");
        assert_eq!((s.min, s.max, s.rounds, s.features), (1.4, 1.9, 4, 16));
        let odd = Speedup::from_rounds(&rounds(&[2.0, 1.0, 3.0]), 8).unwrap();
        assert_eq!((odd.median, odd.min, odd.max, odd.rounds), (2.0, 1.0, 3.0, 3));
        assert_eq!(odd.describe(), "2.00x (1.00-3.00)");
        // Each model's median time per feature: the other model took 1 s per round over 8 features.
        assert_eq!((odd.reference_ms_per_feature, odd.ms_per_feature), (250.0, 125.0));
        assert!(Speedup::from_rounds(&rounds(&[f64::INFINITY]), 1).is_none());
        assert!(Speedup::from_rounds(&[], 1).is_none());
    }
}
