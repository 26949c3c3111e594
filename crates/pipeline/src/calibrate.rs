//! Calibration: expose the tensors to calibrate as extra graph outputs of a temporary augmented model, stream
//! feature batches through it and fold every batch into calib's collectors.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use calib::{CalibState, CollectOptions, Method, RangeTable};
use ndarray::{Array2, ArrayView2};
use onnx_ir::{DataType, GraphExt as _, Model};
use runtime::{Session, SessionConfig};

use crate::inputs::Feeds;
use crate::{Error, Progress, Result};

/// How to calibrate.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// Features per batch.
    pub batch: usize,
    /// Every method whose ranges are wanted; statistics for all of them are collected in one pass. The first one is
    /// the one used for quantization.
    pub methods: Vec<Method>,
    /// Histogram bins per tensor.
    pub num_bins: usize,
    /// The EP calibration runs on (the FP32 model with extra outputs).
    pub session: SessionConfig,
    /// Sessions run side by side ([`pass_workers`]); `None` chooses.
    pub workers: Option<usize>,
    /// How the pass reads its tensors; `None` chooses ([`Reading::for_ep`]).
    pub reading: Option<Reading>,
}

/// How a statistics pass reads the tensors it calibrates. They can differ in the last bit where ONNX Runtime fuses
/// a pattern ending in the tensor when a node reads it but not when it is a graph output: PyTorch's ALBERT exports in
/// testdata/forms get `FastGelu` for their tanh GELU (as the plain model does at inference), and a few values move by
/// one to three float32 ulps (one range end of the legacy export by 3e-7). On MiniLM, PyTorch's BERT exports and the
/// tiny BERT the statistics are the same bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// An `Observe` node on each tensor ([`runtime::observe`]) hands it over during the run, right after it is
    /// computed and while it is still in the caches; ONNX Runtime reuses its buffer as it would without it.
    Observe,
    /// Each tensor a graph output: ONNX Runtime keeps it to the end of the run and hands it back (MiniLM at 384
    /// tokens: about 84 MB per feature, written once more and read back from memory).
    Outputs,
}

impl Reading {
    /// [`Reading::Observe`] on the CPU EP, where the node's kernel runs; [`Reading::Outputs`] on the others (a GPU
    /// EP would copy every observed tensor to the host mid-run).
    pub fn for_ep(ep: &runtime::Ep) -> Reading {
        if matches!(ep, runtime::Ep::Cpu) { Reading::Observe } else { Reading::Outputs }
    }
}

impl CalibrateOptions {
    /// `methods` with `num_bins` bins, `batch` features per batch on `session`, the number of sessions chosen.
    pub fn new(batch: usize, methods: Vec<Method>, num_bins: usize, session: SessionConfig) -> Self {
        CalibrateOptions { batch, methods, num_bins, session, workers: None, reading: None }
    }
}

/// Largest model (serialized, weights inline) that gets [`DEFAULT_SESSIONS`] calibration sessions by default: each
/// session holds its own copy of the weights (MiniLM, 90 MB: peak RSS 350 -> 565 MB with two).
pub const SIDE_BY_SIDE_MAX_BYTES: u64 = 512 << 20;
/// Sessions of a calibration pass by default (fewer with fewer cores): two are enough for one to fold its outputs
/// while the other runs; more would multiply the memory for little (each gets its share of the cores anyway).
pub const DEFAULT_SESSIONS: usize = 2;

/// How many augmented-model sessions a statistics pass of `model` runs side by side: `opts.workers`, else
/// [`DEFAULT_SESSIONS`] (at most one per intra-op thread or core) when the model is at most
/// [`SIDE_BY_SIDE_MAX_BYTES`], else one; always one on an EP other than the CPU (a GPU runs one session at a time)
/// and when the statistics depend on batch order (a moving average).
pub fn pass_workers(model: &Model, opts: &CalibrateOptions, collect: &CollectOptions) -> usize {
    if !matches!(opts.session.ep, runtime::Ep::Cpu) || collect.moving_average.is_some() {
        return 1;
    }
    opts.workers.unwrap_or_else(|| {
        if model.encoded_len() <= SIDE_BY_SIDE_MAX_BYTES {
            runtime::threads_or_cores(opts.session.intra_threads).min(DEFAULT_SESSIONS)
        } else {
            1
        }
    })
}

/// The result of a calibration pass.
#[derive(Debug)]
pub struct Calibration {
    /// Mergeable statistics (calib_state.json).
    pub state: CalibState,
    /// Ranges per method, in the order of [`CalibrateOptions::methods`].
    pub tables: Vec<RangeTable>,
    pub tensors: Vec<String>,
    /// Units of data seen (SQuAD questions, or inputs of another task), and what they are.
    pub questions: usize,
    pub unit: &'static str,
    pub features: usize,
    /// Wall time of the whole calibration (session creation, the pass, the ranges).
    pub seconds: f64,
    /// Where the pass itself went, and on how many sessions.
    pub times: PassTimes,
}

/// Where a statistics pass spends its time: ONNX Runtime's runs of the augmented model, and folding their outputs
/// into the statistics (on the same cores: ONNX Runtime's threads are busy while it runs). `pass_s` is the whole
/// pass from the first batch to the last (also reading and tokenizing the data), without building the sessions.
/// With sessions side by side, `inference_s` and `statistics_s` are the mean over the sessions of each one's own
/// time (one session folds while another runs, so the two can add up to more than the pass).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PassTimes {
    #[serde(rename = "pass_seconds")]
    pub pass_s: f64,
    #[serde(rename = "inference_seconds")]
    pub inference_s: f64,
    #[serde(rename = "statistics_seconds")]
    pub statistics_s: f64,
    /// Augmented-model sessions run side by side ([`pass_workers`]).
    #[serde(default)]
    pub sessions: usize,
}

impl PassTimes {
    /// `pass 7.1 s: 6.4 s in ONNX Runtime, 0.6 s statistics` (with `, each of 2 sessions side by side` when there
    /// were several), for summaries.
    pub fn describe(&self) -> String {
        let each = if self.sessions > 1 {
            format!(", each of {} sessions side by side", self.sessions)
        } else {
            String::new()
        };
        format!(
            "pass {:.1} s: {:.1} s in ONNX Runtime, {:.1} s statistics{each}",
            self.pass_s, self.inference_s, self.statistics_s
        )
    }
}

/// What [`collect_stats`] gathered.
#[derive(Debug)]
pub struct Pass {
    pub state: CalibState,
    /// Features seen.
    pub features: usize,
    pub times: PassTimes,
}

/// Runs `data` through `model` with `tensors` exposed, and computes the ranges of every requested method.
pub fn calibrate(
    model: &Model,
    tensors: &[String],
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<Calibration> {
    if opts.methods.is_empty() {
        return Err(Error::Config("calibration needs at least one range method".into()));
    }
    let started = Instant::now();
    let collect = CollectOptions::for_methods(&opts.methods, opts.num_bins);
    let pass = collect_stats(model, tensors, data, opts, collect, "calibrating", progress)?;
    let (units, unit) = data.units();
    let again = |whole| collect_stats(model, tensors, data, opts, whole, "calibrating again", progress);
    let (Pass { state, features, mut times }, mut tables, ranges_s) = ranges_of(pass, &opts.methods, again)?;
    // Computing the ranges belongs to the pass: it is work inference alone does not do.
    times.pass_s += ranges_s;
    report_non_finite(&state, &tables[0], tensors);
    // Tables of a smoothed model carry its smoothing's fingerprint: `quantize` refuses them with another model.
    for t in &mut tables {
        t.model = qdq::smoothing_fingerprint(model).map(str::to_owned);
    }
    Ok(Calibration {
        state,
        tables,
        tensors: tensors.to_vec(),
        questions: units as usize,
        unit,
        features,
        seconds: started.elapsed().as_secs_f64(),
        times,
    })
}

/// The range tables of `methods` from `pass`, and the seconds computing them took. Where the pass kept only the
/// histograms' tails (a percentile's or mse's, [`calib::CollectOptions::tails`]) and a range needs the folded middle
/// (the tails the first batches showed were thinner than the rest), the statistics are collected `again` with whole
/// histograms, and that pass (its time including the first one's) is returned.
fn ranges_of(
    pass: Pass,
    methods: &[calib::Method],
    again: impl FnOnce(CollectOptions) -> Result<Pass>,
) -> Result<(Pass, Vec<calib::RangeTable>, f64)> {
    let started = Instant::now();
    match calib::compute_all(&pass.state, methods) {
        Err(calib::Error::TailTooThin { tensor, method }) if pass.state.options().tails.is_some() => {
            tracing::warn!(
                "{tensor}: its {method} range needs more of the histogram than the tails kept from the first batches; \
                 counting every tensor's histogram again in full"
            );
            let whole = CollectOptions { tails: None, ..pass.state.options().clone() };
            let mut second = again(whole)?;
            second.times.pass_s += pass.times.pass_s;
            let started = Instant::now();
            let tables = calib::compute_all(&second.state, methods)?;
            Ok((second, tables, started.elapsed().as_secs_f64()))
        }
        r => Ok((pass, r?, started.elapsed().as_secs_f64())),
    }
}

/// Says which tensors held NaN or ±Inf (left out of their statistics), and which got no range at all (no finite
/// value: they stay in float, and would otherwise vanish from calibration.json without a word).
fn report_non_finite(state: &CalibState, main: &RangeTable, tensors: &[String]) {
    for (t, c) in state.non_finite() {
        tracing::warn!("{t}: {} NaN, {} +Inf, {} -Inf values left out of its calibration", c.nan, c.pos_inf, c.neg_inf);
    }
    for t in tensors.iter().filter(|t| !main.ranges.contains_key(*t)) {
        tracing::warn!("{t}: no finite value seen in calibration, so no range: it stays in float");
    }
}

/// What the smoothing step did (see [`smooth_model`]).
#[derive(Debug, Clone)]
pub struct Smoothing {
    /// Migration strength α.
    pub alpha: f32,
    /// One entry per smoothed LayerNorm output.
    pub sites: Vec<qdq::SmoothedSite>,
    /// Wall time of the per-channel pass and the rewrite.
    pub seconds: f64,
}

impl Smoothing {
    /// One line for logs and reports: sites, α and how much the channel spread shrank.
    pub fn describe(&self) -> String {
        let ln = self.sites.iter().filter(|s| s.site.gamma.is_some()).count();
        let other = self.sites.len() - ln;
        let matmuls: usize = self.sites.iter().map(|s| s.site.matmuls.len()).sum();
        let worst = |f: fn(&qdq::SmoothedSite) -> f32| self.sites.iter().map(f).fold(0.0f32, f32::max);
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let what = if other == 0 {
            format!("{ln} LayerNorm output{}", plural(ln))
        } else {
            format!("{ln} LayerNorm output{} and {other} other MatMul input{}", plural(ln), plural(other))
        };
        format!(
            "{what} smoothed into {matmuls} MatMul{} (alpha {}): largest channel max / median {:.1}x -> {:.1}x",
            plural(matmuls),
            self.alpha,
            worst(|s| s.spread_before),
            worst(|s| s.spread_after),
        )
    }
}

/// Applies the policy's SmoothQuant-style migration ([`qdq::smooth`]): one pass over `data` collects the
/// per-channel min/max (last axis) of every [`qdq::smoothing_sites`] tensor, then the LayerNorm parameters and the
/// MatMul weights are rescaled, in the model itself (a model of gigabytes is not held twice). Returns the model,
/// smoothed or as it was, and what smoothing did (`None` when the policy does not smooth or the model has no site).
/// The main calibration must then run on the returned model.
pub fn smooth_model(
    model: Model,
    policy: &qdq::Policy,
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<(Model, Option<Smoothing>)> {
    let Some(alpha) = policy.smooth else { return Ok((model, None)) };
    if let Some(record) = qdq::smoothing_record(&model) {
        return Err(Error::Config(format!(
            "the model is already smoothed ({record}); quantize it with policy option smooth=off, or start from the \
             original model"
        )));
    }
    let started = Instant::now();
    let sites = qdq::smoothing_sites(&model, policy)?;
    if sites.is_empty() {
        return Ok((model, None));
    }
    let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
    let collect = CollectOptions { per_channel_axis: Some(-1), ..Default::default() };
    let state = collect_stats(&model, &tensors, data, opts, collect, "smoothing", progress)?.state;
    let mut absmax = std::collections::BTreeMap::new();
    for t in &tensors {
        let channels = state.tensor(t).and_then(|s| s.channels.as_ref()).ok_or_else(|| {
            Error::Config(format!("smoothing: no per-channel statistics were collected for tensor '{t}'"))
        })?;
        let m: Vec<f32> = channels.iter().map(|r| r.map_or(0.0, |r| r.min.abs().max(r.max.abs()))).collect();
        absmax.insert(t.clone(), m);
    }
    let mut model = model;
    let sites = qdq::smooth_in_place(&mut model, policy, &absmax, alpha)?;
    Ok((model, Some(Smoothing { alpha, sites, seconds: started.elapsed().as_secs_f64() })))
}

/// Streams `data` through `model` with `tensors` exposed as extra outputs and folds every batch into a
/// [`CalibState`] collecting what `collect` asks for: `opts.batch` features per batch, on [`pass_workers`] sessions
/// side by side, each folding what it ran into a state of its own; the states are merged at the end, which is exact
/// ([`CalibState::merge`]), so the statistics do not depend on the number of sessions. `opts.methods` is not read.
pub fn collect_stats(
    model: &Model,
    tensors: &[String],
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    collect: CollectOptions,
    label: &str,
    progress: &dyn Progress,
) -> Result<Pass> {
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let configs = opts.session.side_by_side(pass_workers(model, opts, &collect));
    let reading = opts.reading.unwrap_or_else(|| Reading::for_ep(&opts.session.ep));
    let observed = (reading == Reading::Observe).then_some(tensors);
    let mut folds: Vec<Fold> = configs
        .iter()
        .map(|_| CalibState::try_new(collect.clone()).map(|s| Fold::new(s, observed)))
        .collect::<calib::Result<_>>()?;
    let observers: Option<Vec<_>> = folds.iter().map(Fold::observer).collect();
    let mut sessions =
        augmented_sessions(model, &names, "augmented calibration model", &configs, observers.as_deref())?;
    for s in &mut sessions {
        s.feed_zeros(data.zero_inputs())?;
    }
    if let Some(why) = sessions.first().and_then(Session::fallback) {
        progress.note(why);
    }
    let (units, unit) = data.units();
    progress.start(label, Some(units), unit);
    let started = Instant::now();
    let features = if let ([session], [fold]) = (sessions.as_mut_slice(), folds.as_mut_slice()) {
        data.each_batch(opts.batch, &mut |inputs, used, done| {
            fold.run(session, inputs, &names, used)?;
            progress.advance(done);
            Ok(())
        })?
    } else {
        side_by_side(&mut sessions, &mut folds, data, opts.batch, &names, progress)?
    };
    drop(sessions);
    let workers = folds.len();
    let mut times = PassTimes { sessions: workers, ..PassTimes::default() };
    let mut folds = folds.into_iter().map(Fold::finish);
    let Some(first) = folds.next() else { return Err(Error::Config("calibration ran no session".into())) };
    let (mut state, first_times) = first?;
    let add = |t: &mut PassTimes, f: &PassTimes| {
        t.inference_s += f.inference_s / workers as f64;
        t.statistics_s += f.statistics_s / workers as f64;
    };
    add(&mut times, &first_times);
    for f in folds {
        let (s, t) = f?;
        state.merge(&s)?;
        add(&mut times, &t);
    }
    times.pass_s = started.elapsed().as_secs_f64();
    progress.finish();
    if features == 0 {
        return Err(Error::Config("calibration data produced no features".into()));
    }
    Ok(Pass { state, features, times })
}

/// Where an observing session's `Observe` nodes fold the tensors of the batch under way: the state, the rows of the
/// batch that hold data, the time spent, and the first error (ONNX Runtime carries only its message).
struct Sink {
    tensors: Vec<String>,
    inner: Mutex<SinkState>,
}

struct SinkState {
    /// Taken out when the pass ends (ONNX Runtime may hold the observer a while after its session is gone).
    state: Option<CalibState>,
    used: usize,
    fed: usize,
    statistics_s: f64,
    error: Option<calib::Error>,
}

impl Sink {
    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl runtime::Observer for Sink {
    fn observe(&self, slot: usize, shape: &[usize], data: &[f32]) -> std::result::Result<(), String> {
        let started = Instant::now();
        let mut g = self.lock();
        let name = self.tensors.get(slot).ok_or_else(|| format!("no tensor in observer slot {slot}"))?;
        // A fixed-batch model's filler rows are left out wherever the batch leads the tensor's first axis.
        let shape = used_rows(shape, g.used, g.fed);
        let n = shape.iter().product::<usize>().min(data.len());
        let Some(state) = g.state.as_mut() else { return Err("the calibration pass has ended".into()) };
        // On this thread alone: the other sessions run on the other cores.
        if let Err(e) = state.observe_here(name, &data[..n], &shape) {
            let message = e.to_string();
            g.error.get_or_insert(e);
            return Err(message);
        }
        g.statistics_s += started.elapsed().as_secs_f64();
        Ok(())
    }
}

/// What one session of a pass folds into: a state it fills from exposed outputs after each run, or the sink its
/// `Observe` nodes fill during the run.
enum Target {
    Outputs(CalibState),
    Observers(Arc<Sink>),
}

/// One session's share of a statistics pass: where its statistics go and its own times.
struct Fold {
    target: Target,
    times: PassTimes,
}

impl Fold {
    /// A fold of exposed outputs, or with `observed` (the tensors in slot order) one of `Observe` nodes.
    fn new(state: CalibState, observed: Option<&[String]>) -> Self {
        let target = match observed {
            None => Target::Outputs(state),
            Some(tensors) => {
                let inner =
                    Mutex::new(SinkState { state: Some(state), used: 0, fed: 0, statistics_s: 0.0, error: None });
                Target::Observers(Arc::new(Sink { tensors: tensors.to_vec(), inner }))
            }
        };
        Fold { target, times: PassTimes::default() }
    }

    /// The observer its session hands tensors to, if it observes.
    fn observer(&self) -> Option<Arc<dyn runtime::Observer>> {
        match &self.target {
            Target::Observers(sink) => Some(Arc::clone(sink) as Arc<dyn runtime::Observer>),
            Target::Outputs(_) => None,
        }
    }

    /// The state and times, once its session's runs are over.
    fn finish(self) -> Result<(CalibState, PassTimes)> {
        let mut times = self.times;
        let state = match self.target {
            Target::Outputs(state) => Some(state),
            Target::Observers(sink) => {
                let mut g = sink.lock();
                // The statistics ran inside the runs.
                times.statistics_s = g.statistics_s;
                times.inference_s -= g.statistics_s;
                g.state.take()
            }
        };
        let state =
            state.ok_or_else(|| Error::Config("calibration: a session's statistics were taken twice".into()))?;
        Ok((state, times))
    }

    /// Runs one batch (`used` of its rows hold data) and folds the tensors `names` into the statistics.
    fn run(
        &mut self,
        session: &mut Session,
        inputs: &[(&str, ArrayView2<'_, i64>)],
        names: &[&str],
        used: usize,
    ) -> Result<()> {
        let run = Instant::now();
        let fed = inputs.first().map_or(used, |(_, a)| a.nrows());
        let state = match &mut self.target {
            Target::Outputs(state) => state,
            Target::Observers(sink) => {
                {
                    let mut g = sink.lock();
                    (g.used, g.fed) = (used, fed);
                }
                let result = session.run_with(inputs, &[], |_| Ok::<_, Error>(()));
                self.times.inference_s += run.elapsed().as_secs_f64();
                // The observer's own error, when it failed the run.
                return match sink.lock().error.take() {
                    Some(e) => Err(e.into()),
                    None => result,
                };
            }
        };
        let times = &mut self.times;
        session.run_with(inputs, names, |outs| -> Result<()> {
            let stats = Instant::now();
            times.inference_s += (stats - run).as_secs_f64();
            // A fixed-batch model's filler rows are left out wherever the batch leads the tensor's first axis.
            let shapes: Vec<Vec<usize>> = outs.iter().map(|o| used_rows(&o.shape, used, fed)).collect();
            let views: Vec<(&str, &[f32], &[usize])> = outs
                .iter()
                .zip(&shapes)
                .map(|(o, shape)| (o.name, &o.data[..shape.iter().product::<usize>()], shape.as_slice()))
                .collect();
            state.observe_batch(&views)?;
            times.statistics_s += stats.elapsed().as_secs_f64();
            Ok(())
        })
    }
}

/// A batch of owned input arrays, the rows of it that hold data, and the units it completes.
type OwnedBatch = (Vec<(String, Array2<i64>)>, usize, u64);

/// The pass over several sessions ([`crate::spread::spread`]): each takes its turn's batch and folds it into its own
/// [`Fold`]. Returns the features fed.
fn side_by_side(
    sessions: &mut [Session],
    folds: &mut [Fold],
    data: &dyn Feeds,
    batch: usize,
    names: &[&str],
    progress: &dyn Progress,
) -> Result<usize> {
    let mut pairs: Vec<(&mut Session, &mut Fold)> = sessions.iter_mut().zip(folds.iter_mut()).collect();
    crate::spread::spread(
        &mut pairs,
        "calibration",
        // What each session folds its histograms on is the same each run (the same calib_state.json).
        crate::spread::Order::InTurn,
        |send| {
            data.each_batch(batch, &mut |inputs, used, done| {
                send((inputs.iter().map(|(n, a)| ((*n).to_owned(), a.to_owned())).collect(), used, done))
            })
        },
        |(session, fold), (arrays, used, done): OwnedBatch| {
            let inputs: Vec<(&str, ArrayView2<'_, i64>)> = arrays.iter().map(|(n, a)| (n.as_str(), a.view())).collect();
            fold.run(session, &inputs, names, used)?;
            progress.advance(done);
            Ok(())
        },
    )
}

/// The shape of the part of an output that `used` of `fed` batch rows produced: the first axis scaled down when it
/// is a multiple of `fed` (`[batch, ..]`, and `[batch * seq, ..]` of a model that flattens), else the whole output.
pub(crate) fn used_rows(shape: &[usize], used: usize, fed: usize) -> Vec<usize> {
    let mut shape = shape.to_vec();
    if used < fed
        && let Some(d0) = shape.first_mut()
        && *d0 % fed == 0
    {
        *d0 = *d0 / fed * used;
    }
    shape
}

/// The values of `o` that `used` of `fed` batch rows produced ([`used_rows`]).
pub(crate) fn used_data<'a>(o: &'a runtime::OutputRef<'_>, used: usize, fed: usize) -> &'a [f32] {
    &o.data[..used_rows(&o.shape, used, fed).iter().product::<usize>()]
}

/// A session on `model` with `tensors` exposed as float outputs (those already graph outputs stay as they are). The
/// edited copy is dropped before the session is built, so the model is not held twice beside ONNX Runtime's; a model
/// over 2 GiB goes through a temporary file instead, and is not copied in memory at all.
pub(crate) fn session_with_outputs(
    model: &Model,
    tensors: &[&str],
    label: &str,
    cfg: &SessionConfig,
) -> Result<Session> {
    let mut sessions = sessions_with_outputs(model, tensors, label, std::slice::from_ref(cfg))?;
    sessions.pop().ok_or_else(|| Error::Config(format!("{label}: no session was made")))
}

/// [`session_with_outputs`] once per config in `cfgs`, from one augmented model, the sessions built side by side.
pub(crate) fn sessions_with_outputs(
    model: &Model,
    tensors: &[&str],
    label: &str,
    cfgs: &[SessionConfig],
) -> Result<Vec<Session>> {
    augmented_sessions(model, tensors, label, cfgs, None)
}

/// One session per config on `model` augmented to read `tensors`: each exposed as a float output (those already
/// graph outputs stay as they are), or with `observers` (one per config) an `Observe` node on each, its slot the
/// tensor's index, handing it to that session's observer during the run. The edited copy is dropped before the
/// sessions are built, so the model is not held twice beside ONNX Runtime's; a model over 2 GiB goes through a
/// temporary file instead, and is not copied in memory at all.
fn augmented_sessions(
    model: &Model,
    tensors: &[&str],
    label: &str,
    cfgs: &[SessionConfig],
    observers: Option<&[Arc<dyn runtime::Observer>]>,
) -> Result<Vec<Session>> {
    let graph_outputs: Vec<String> = model.graph().output.iter().map(|o| o.name().to_owned()).collect();
    let mut augment = |p: &mut onnx_ir::proto::ModelProto| match observers {
        Some(_) => add_observers(p, tensors),
        None => {
            let g = p.graph.get_or_insert_with(Default::default);
            for t in tensors.iter().filter(|t| !graph_outputs.iter().any(|o| o == *t)) {
                g.add_output(t, DataType::Float);
            }
        }
    };
    let open = |i: usize, source: runtime::ModelSource<'_>| -> Result<Session> {
        Ok(match observers.and_then(|o| o.get(i)) {
            Some(o) => Session::open_observed(source, label, &cfgs[i], Arc::clone(o))?,
            None => Session::open(source, label, &cfgs[i])?,
        })
    };
    if model.encoded_len() > onnx_ir::PROTOBUF_LIMIT {
        // Over 2 GiB inline: ONNX Runtime reads the augmented model from a temporary file with the large tensors
        // beside it, written without copying the weights in memory.
        let dir = tempfile::tempdir().map_err(|e| Error::Config(format!("{label}: a temporary directory: {e}")))?;
        let path = dir.path().join("augmented.onnx");
        // Gone when the sessions are made (they hold what they need), and on Ctrl-C / SIGTERM before that.
        let _scratch = [dir.path().to_path_buf(), path.clone(), dir.path().join("augmented.onnx.data")]
            .map(|p| files::signals::remove_on_signal(&p));
        let ext = onnx_ir::ExternalDataOptions::new("augmented.onnx.data");
        model.save_edited_with_external_data(&path, &ext, &mut augment)?;
        tracing::debug!("{label}: written to {} with its large tensors beside it", path.display());
        return build_each(cfgs.len(), |i| open(i, runtime::ModelSource::File(&path)));
    }
    let mut augmented = model.clone();
    augment(&mut augmented.proto);
    let bytes = augmented.to_bytes()?;
    drop(augmented);
    build_each(cfgs.len(), |i| open(i, runtime::ModelSource::Bytes(&bytes)))
}

/// An `Observe` node ([`runtime::observe`]) on each of `tensors`, its slot the tensor's index, its one-value output
/// a graph output (so no optimisation drops it); and the import of the operator's domain. The nodes are listed so that
/// ONNX Runtime runs each right behind its tensor's producer (see the comment inside).
fn add_observers(p: &mut onnx_ir::proto::ModelProto, tensors: &[&str]) {
    use runtime::observe::{OBSERVE_DOMAIN, OBSERVE_OP, OBSERVE_SLOT};
    if !p.opset_import.iter().any(|o| o.domain() == OBSERVE_DOMAIN) {
        p.opset_import
            .push(onnx_ir::proto::OperatorSetIdProto { domain: Some(OBSERVE_DOMAIN.into()), version: Some(1) });
    }
    let g = p.graph.get_or_insert_with(Default::default);
    let mut names = onnx_ir::NameSet::from_graph(g);
    // ONNX Runtime's default execution order is a depth-first walk back from the graph's leaves (nodes whose outputs
    // no node reads), the last-listed leaf first, each node placed once the walk has placed all its inputs. Every
    // Observe is such a leaf: listed in slot order, the first walked observed a late tensor, so the whole model was
    // placed before it and every Observe ran after the model, reading tensors held to the end of the run (seen in ONNX
    // Runtime's profile). Listed latest-produced tensor first, the last-listed Observe is walked first and lands right
    // behind its tensor's producer, the next right behind its own, and so on. (Nodes are in topological order in an
    // ONNX graph; a tensor nothing produces, an input or initializer, counts as produced first.)
    let produced_at: std::collections::HashMap<&str, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i + 1))).collect();
    let mut order: Vec<(usize, &str)> = tensors.iter().copied().enumerate().collect();
    order.sort_by_key(|&(_, t)| std::cmp::Reverse(produced_at.get(t).copied().unwrap_or(0)));
    let mut observes = Vec::with_capacity(order.len());
    for (slot, t) in order {
        let out = names.fresh(&format!("{t}_observed"));
        let mut node = onnx_ir::node(OBSERVE_OP, &names.fresh(&format!("{t}_observe")), &[t], &[&out]);
        node.domain = Some(OBSERVE_DOMAIN.into());
        node.attribute.push(onnx_ir::attr_int(OBSERVE_SLOT, slot as i64));
        observes.push(node);
        g.add_output(&out, DataType::Float);
    }
    g.node.extend(observes);
}

/// `n` sessions, built in threads of their own when there are several (ONNX Runtime builds a session on one core),
/// in order.
fn build_each(n: usize, build: impl Fn(usize) -> Result<Session> + Sync) -> Result<Vec<Session>> {
    if n == 1 {
        return Ok(vec![build(0)?]);
    }
    let build = &build;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n).map(|i| scope.spawn(move || build(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Config("building a session panicked".into()))))
            .collect()
    })
}

/// Writes calibration.json (first method), calibration_<method>.json for the others, the ORT flatbuffers table,
/// the TensorRT cache and the mergeable statistics into `dir`.
pub fn write_tables(cal: &Calibration, dir: &Path) -> Result<()> {
    let Some(main) = cal.tables.first() else {
        return Err(Error::Config("no range table to write".into()));
    };
    crate::create_out_dir(dir, "--out")?;
    // The set lands together as far as SIGINT / SIGTERM go: they wait for the last table.
    let _held = files::signals::hold();
    calib::tables::write_json(dir.join("calibration.json"), main)?;
    for t in &cal.tables[1..] {
        calib::tables::write_json(dir.join(format!("calibration_{}.json", t.method)), t)?;
    }
    calib::tables::write_ort_flatbuffers(dir.join("calibration.flatbuffers"), main)?;
    calib::tables::write_trt_cache(dir.join("calibration.cache"), main, calib::tables::DEFAULT_TRT_VERSION)?;
    cal.state.save_json(dir.join("calib_state.json"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::{Pass, PassTimes, add_observers, ranges_of, used_rows};
    use calib::{CalibState, CollectOptions, Method};

    /// A pass over `batches` (values of one tensor `t`) collected with `opts`, as if it took `seconds`.
    fn pass(opts: CollectOptions, batches: &[Vec<f32>], seconds: f64) -> Pass {
        let mut state = CalibState::new(opts);
        for b in batches {
            state.observe_here("t", b, &[b.len()]).unwrap();
        }
        Pass { state, features: batches.len(), times: PassTimes { pass_s: seconds, ..PassTimes::default() } }
    }

    /// A percentile whose tails, chosen on the first batch, the later batches leave behind: the statistics are
    /// collected again with whole histograms, that pass's ranges are returned and its time includes the first one's;
    /// where the tails hold the percentile, no second pass runs.
    #[test]
    fn a_percentile_past_its_kept_tails_is_collected_again_in_full() {
        let m = Method::Percentile { percentile: 99.0, symmetric: true };
        // The first batch (values 1..2) decides the folding for a tail of one in a million: every bin below 1 is
        // folded, and the 99th percentile of the whole lies in 0..0.5, where the 40 later batches are.
        let mut batches =
            vec![(0..calib::TAIL_MIN).map(|i| 1.0 + i as f32 / calib::TAIL_MIN as f32).collect::<Vec<_>>()];
        batches.extend((0..40).map(|k| (0..100_000).map(|i| ((i * 7 + k) % 1000) as f32 / 2000.0).collect()));
        let thin = CollectOptions { tails: Some(1e-6), ..CollectOptions::for_methods(std::slice::from_ref(&m), 256) };
        let whole = CollectOptions { tails: None, ..thin.clone() };
        let mut asked = None;
        let (second, tables, _) = ranges_of(pass(thin.clone(), &batches, 2.0), std::slice::from_ref(&m), |o| {
            asked = Some(o.clone());
            Ok(pass(o, &batches, 3.0))
        })
        .unwrap();
        assert_eq!(asked.as_ref(), Some(&whole), "collected again with whole histograms");
        assert!(second.state.tensor("t").unwrap().abs.as_ref().unwrap().folded().is_none());
        assert_eq!(second.times.pass_s, 5.0, "both passes' time");
        let want = calib::compute_ranges(&pass(whole, &batches, 0.0).state, &m).unwrap();
        assert_eq!(tables[0].ranges["t"], want.ranges["t"]);
        assert!(tables[0].ranges["t"].max < 0.5, "{:?}", tables[0].ranges["t"]);

        // Tails wide enough (the same later batches alone, the 99.99th percentile): folded, and one pass.
        let m = Method::Percentile { percentile: 99.99, symmetric: true };
        let ok = CollectOptions::for_methods(std::slice::from_ref(&m), 256);
        let (first, tables, _) =
            ranges_of(pass(ok, &batches[1..], 2.0), std::slice::from_ref(&m), |_| panic!("no second pass is needed"))
                .unwrap();
        assert!(first.state.tensor("t").unwrap().abs.as_ref().unwrap().folded().is_some());
        assert_eq!(first.times.pass_s, 2.0);
        let whole = CollectOptions { tails: None, ..first.state.options().clone() };
        let want = calib::compute_ranges(&pass(whole, &batches[1..], 0.0).state, &m).unwrap();
        assert_eq!(tables[0].ranges["t"], want.ranges["t"]);
    }

    /// The slots an observer was handed, in the order ONNX Runtime ran their `Observe` nodes.
    #[derive(Default)]
    struct Order(Mutex<Vec<usize>>);

    impl runtime::Observer for Order {
        fn observe(&self, slot: usize, _: &[usize], _: &[f32]) -> std::result::Result<(), String> {
            self.0.lock().map_err(|e| e.to_string())?.push(slot);
            Ok(())
        }
    }

    /// ONNX Runtime runs each `Observe` right behind its tensor's producer, so the nodes run in the order the tensors
    /// are computed, whatever order the slots are in (listed in slot order, they all ran after the model, the last
    /// slot first).
    #[test]
    fn observe_nodes_run_in_the_order_their_tensors_are_computed() {
        let model = onnx_ir::tiny_bert::build(&onnx_ir::tiny_bert::TinyBertConfig::default());
        let computed: Vec<String> = model
            .graph()
            .node
            .iter()
            .filter(|n| matches!(n.op_type(), "MatMul" | "Softmax"))
            .map(|n| n.output[0].clone())
            .collect();
        assert!(computed.len() >= 6, "{computed:?}");
        // Slots in an order unrelated to the graph's: reversed, then the two halves swapped.
        let mut slots: Vec<&str> = computed.iter().rev().map(String::as_str).collect();
        slots.rotate_left(computed.len() / 2);
        let mut proto = model.proto.clone();
        add_observers(&mut proto, &slots);
        let bytes = onnx_ir::Model::new(proto).to_bytes().unwrap();
        let order = Arc::new(Order::default());
        let observer: Arc<dyn runtime::Observer> = order.clone();
        let cfg = runtime::SessionConfig::default();
        let mut s =
            runtime::Session::open_observed(runtime::ModelSource::Bytes(&bytes), "tiny", &cfg, observer).unwrap();
        let ids = ndarray::Array2::from_shape_fn((1, 8), |(_, j)| 5 + j as i64);
        let (mask, segments) = (ndarray::Array2::ones((1, 8)), ndarray::Array2::zeros((1, 8)));
        let feeds = [("input_ids", ids.view()), ("attention_mask", mask.view()), ("token_type_ids", segments.view())];
        s.run_with(&feeds, &[], |_| Ok::<_, runtime::Error>(())).unwrap();
        let ran: Vec<&str> = order.0.lock().unwrap().iter().map(|&slot| slots[slot]).collect();
        assert_eq!(ran, computed, "Observe nodes ran out of the order their tensors are computed in");
    }

    #[test]
    fn filler_rows_are_cut_where_the_batch_leads_the_first_axis() {
        // 3 of 8 rows hold features: [batch, seq, hidden], [batch * seq, hidden] (a model that flattens), and a
        // tensor whose first axis is not the batch's.
        assert_eq!(used_rows(&[8, 5, 4], 3, 8), [3, 5, 4]);
        assert_eq!(used_rows(&[40, 4], 3, 8), [15, 4]);
        assert_eq!(used_rows(&[12, 4], 3, 8), [12, 4]);
        assert_eq!(used_rows(&[], 3, 8), Vec::<usize>::new());
        assert_eq!(used_rows(&[8, 5], 8, 8), [8, 5], "a full batch is whole");
    }
}
