//! One statistics pass: the calibration data streamed through the model, each tensor to calibrate read as it is
//! computed (an `Observe` node on the CPU EP, or an extra graph output), folded into calib's statistics on one or
//! more sessions side by side, merged exactly at the end.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use calib::{CalibState, CollectOptions, Method};
use ndarray::{Array2, ArrayView2};
use onnx_ir::Model;
use runtime::{Session, SessionConfig};

use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::progress::Progress;
use crate::steps::augment::{augmented_sessions, used_rows};
use crate::steps::spread::{Order, spread};

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
    /// The same statistics in two halves, batches dealt to them in turn (`state` is the two merged): how much the
    /// ranges depend on which data calibrated ([`calib::range_spread`]).
    pub halves: [CalibState; 2],
    /// Features seen.
    pub features: usize,
    pub times: PassTimes,
}

/// Streams `data` through `model` with `tensors` exposed as extra outputs and folds every batch into a
/// [`CalibState`] collecting what `collect` asks for: `opts.batch` features per batch, on [`pass_workers`] sessions
/// side by side, each folding what it ran into a state of its own (two: its batches in turn into each half); the
/// states are merged at the end, which is exact ([`CalibState::merge`]), so the statistics do not depend on the
/// number of sessions. `opts.methods` is not read.
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
        .map(|_| {
            let state = || CalibState::try_new(collect.clone());
            Ok::<_, calib::Error>(Fold::new([state()?, state()?], observed))
        })
        .collect::<calib::Result<_>>()?;
    let observers: Option<Vec<_>> = folds.iter().map(Fold::observer).collect();
    let mut sessions =
        augmented_sessions(model, &names, "augmented calibration model", &configs, observers.as_deref())?;
    for s in &mut sessions {
        s.feed_zeros(data.zero_inputs())?;
    }
    if let Some(why) = sessions.first().and_then(Session::fallback) {
        progress.warn(why);
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
    let (state, halves, mut times) = merged(folds)?;
    times.pass_s = started.elapsed().as_secs_f64();
    progress.finish();
    if features == 0 {
        let reason = "the calibration data produced no features".into();
        return Err(Error::Input { path: data.source().to_path_buf(), reason });
    }
    Ok(Pass { state, halves, features, times })
}

/// The sessions' statistics merged (exactly): all of them, and each half; and the mean of their times.
fn merged(folds: Vec<Fold>) -> Result<(CalibState, [CalibState; 2], PassTimes)> {
    let workers = folds.len();
    let mut times = PassTimes { sessions: workers, ..PassTimes::default() };
    let add = |t: &mut PassTimes, f: &PassTimes| {
        t.inference_s += f.inference_s / workers as f64;
        t.statistics_s += f.statistics_s / workers as f64;
    };
    let mut folds = folds.into_iter().map(Fold::finish);
    let Some(first) = folds.next() else { return Err(Error::Internal("calibration ran no session".into())) };
    let (mut halves, first_times) = first?;
    add(&mut times, &first_times);
    for f in folds {
        let ([a, b], t) = f?;
        halves[0].merge(&a)?;
        halves[1].merge(&b)?;
        add(&mut times, &t);
    }
    let mut state = halves[0].clone();
    state.merge(&halves[1])?;
    Ok((state, halves, times))
}

/// Where an observing session's `Observe` nodes fold the tensors of the batch under way: the state, the rows of the
/// batch that hold data, the time spent, and the first error (ONNX Runtime carries only its message).
struct Sink {
    tensors: Vec<String>,
    inner: Mutex<SinkState>,
}

struct SinkState {
    /// The two halves, taken out when the pass ends (ONNX Runtime may hold the observer a while after its session is
    /// gone).
    states: Option<[CalibState; 2]>,
    /// The half the batch under way goes to.
    half: usize,
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
        let half = g.half;
        let Some(states) = g.states.as_mut() else { return Err("the calibration pass has ended".into()) };
        // On this thread alone: the other sessions run on the other cores.
        if let Err(e) = states[half].observe_here(name, &data[..n], &shape) {
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
    Outputs([CalibState; 2]),
    Observers(Arc<Sink>),
}

/// One session's share of a statistics pass: where its statistics go (its batches into the two halves in turn) and
/// its own times.
struct Fold {
    target: Target,
    times: PassTimes,
    runs: usize,
}

impl Fold {
    /// A fold of exposed outputs, or with `observed` (the tensors in slot order) one of `Observe` nodes.
    fn new(states: [CalibState; 2], observed: Option<&[String]>) -> Self {
        let target = match observed {
            None => Target::Outputs(states),
            Some(tensors) => {
                let (used, fed, statistics_s, error) = (0, 0, 0.0, None);
                let inner = Mutex::new(SinkState { states: Some(states), half: 0, used, fed, statistics_s, error });
                Target::Observers(Arc::new(Sink { tensors: tensors.to_vec(), inner }))
            }
        };
        Fold { target, times: PassTimes::default(), runs: 0 }
    }

    /// The observer its session hands tensors to, if it observes.
    fn observer(&self) -> Option<Arc<dyn runtime::Observer>> {
        match &self.target {
            Target::Observers(sink) => Some(Arc::clone(sink) as Arc<dyn runtime::Observer>),
            Target::Outputs(_) => None,
        }
    }

    /// The halves and times, once its session's runs are over.
    fn finish(self) -> Result<([CalibState; 2], PassTimes)> {
        let mut times = self.times;
        let state = match self.target {
            Target::Outputs(states) => Some(states),
            Target::Observers(sink) => {
                let mut g = sink.lock();
                // The statistics ran inside the runs.
                times.statistics_s = g.statistics_s;
                times.inference_s -= g.statistics_s;
                g.states.take()
            }
        };
        let state =
            state.ok_or_else(|| Error::Internal("calibration: a session's statistics were taken twice".into()))?;
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
        let half = self.runs % 2;
        self.runs += 1;
        let state = match &mut self.target {
            Target::Outputs(states) => &mut states[half],
            Target::Observers(sink) => {
                {
                    let mut g = sink.lock();
                    (g.used, g.fed, g.half) = (used, fed, half);
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

/// The pass over several sessions ([`spread`]): each takes its turn's batch and folds it into its own
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
    spread(
        &mut pairs,
        "calibration",
        // What each session folds its histograms on is the same each run (the same calib_state.json).
        Order::InTurn,
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
