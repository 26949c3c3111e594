//! Calibration: expose the tensors to calibrate as extra graph outputs of a temporary augmented model, stream
//! feature batches through it and fold every batch into calib's collectors.

use std::path::Path;
use std::time::Instant;

use calib::{CalibState, CollectOptions, Method, RangeTable};
use onnx_ir::{DataType, GraphExt as _, Model};
use runtime::{Session, SessionConfig};

use crate::data::Corpus;
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
}

/// The result of a calibration pass.
#[derive(Debug)]
pub struct Calibration {
    /// Mergeable statistics (calib_state.json).
    pub state: CalibState,
    /// Ranges per method, in the order of [`CalibrateOptions::methods`].
    pub tables: Vec<RangeTable>,
    pub tensors: Vec<String>,
    pub questions: usize,
    pub features: usize,
    pub seconds: f64,
}

/// Runs `data` through `model` with `tensors` exposed, and computes the ranges of every requested method.
pub fn calibrate(
    model: &Model,
    tensors: &[String],
    data: &Corpus,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<Calibration> {
    if opts.methods.is_empty() {
        return Err(Error::Config("calibration needs at least one range method".into()));
    }
    let started = Instant::now();
    let mut augmented = model.clone();
    let graph_outputs: Vec<String> = augmented.graph().output.iter().map(|o| o.name().to_owned()).collect();
    for t in tensors {
        if !graph_outputs.contains(t) {
            augmented.graph_mut().add_output(t, DataType::Float);
        }
    }
    let bytes = augmented.to_bytes()?;
    drop(augmented);
    let mut session = Session::from_bytes(&bytes, "augmented calibration model", &opts.session)?;
    drop(bytes);
    if let Some(why) = session.fallback() {
        progress.note(why);
    }

    let mut state = CalibState::new(CollectOptions::for_methods(&opts.methods, opts.num_bins));
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let io = data.io();
    progress.start("calibrating", Some(data.questions() as u64));
    let mut features = 0usize;
    for batch in data.batches(opts.batch)? {
        let batch = batch?;
        let inputs = batch.inputs(io);
        session.run_with(&inputs, &names, |outs| {
            let views: Vec<(&str, &[f32], &[usize])> = outs.iter().map(|o| (o.name, o.data, o.shape.as_slice())).collect();
            state.observe_batch(&views).map_err(|e| runtime::Error::Run {
                model: "augmented calibration model".into(),
                reason: e.to_string(),
            })
        })?;
        features += batch.len();
        progress.advance(questions_done(&batch));
    }
    progress.finish();
    if features == 0 {
        return Err(Error::Config("calibration data produced no features".into()));
    }
    let tables = calib::compute_all(&state, &opts.methods)?;
    Ok(Calibration {
        state,
        tables,
        tensors: tensors.to_vec(),
        questions: data.questions(),
        features,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Questions whose last window is in `batch`.
pub(crate) fn questions_done(batch: &squad::Batch) -> u64 {
    batch.features.iter().filter(|f| f.window_index + 1 == f.num_windows).count() as u64
}

/// Writes calibration.json (first method), calibration_<method>.json for the others, the ORT flatbuffers table,
/// the TensorRT cache and the mergeable statistics into `dir`.
pub fn write_tables(cal: &Calibration, dir: &Path) -> Result<()> {
    let Some(main) = cal.tables.first() else {
        return Err(Error::Config("no range table to write".into()));
    };
    std::fs::create_dir_all(dir).map_err(|e| Error::Output { path: dir.to_path_buf(), reason: e.to_string() })?;
    calib::tables::write_json(dir.join("calibration.json"), main)?;
    for t in &cal.tables[1..] {
        calib::tables::write_json(dir.join(format!("calibration_{}.json", t.method)), t)?;
    }
    calib::tables::write_ort_flatbuffers(dir.join("calibration.flatbuffers"), main)?;
    calib::tables::write_trt_cache(dir.join("calibration.cache"), main, calib::tables::DEFAULT_TRT_VERSION)?;
    cal.state.save_json(dir.join("calib_state.json"))?;
    Ok(())
}
