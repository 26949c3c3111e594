//! Micro-benchmarks of calib on files another tool reads too (`cargo xtask bench vs-python` compares them with
//! numpy and ONNX Runtime's Python calibrators):
//!
//! ```text
//! cargo run --release -p qdq-calib --example microbench -- --arrays A.npy[,B.npy...] --num-bins N[,M...] --repeat R
//!     [--state calib_state.json --tensors K] [--num-quantized-bins Q] --histograms-out H.json
//! ```
//!
//! For every `.npy` array (little-endian float32, C order): the median time of the min/max scan alone
//! (`CalibState::observe` collecting min/max only) and, for each `N` bins per side, of a whole collection step
//! (`CalibState::observe` with a signed histogram: scan plus binning) and of the binning alone (`Histogram::observe`).
//! For the signed histogram (first `N`) of the last array, and for the `K` tensors of
//! `calib_state.json` whose signed histograms reach furthest (the longest searches): the median time of
//! `entropy_threshold` with `Q` quantized bins. The histograms are written to `H.json` (counts, bins per side, bin
//! width, observed min/max, our threshold) so the other tool searches exactly the same ones. Prints JSON.

use std::path::Path;
use std::time::Instant;

use qdq_calib::hist::Histogram;
use qdq_calib::{CalibState, CollectOptions, entropy_threshold};
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error>;

/// The data of a version 1.x `.npy` file of little-endian float32 values.
fn read_f32_npy(path: &Path) -> Result<Vec<f32>, Error> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: {why}", path.display());
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" || bytes[6] != 1 {
        return Err(bad("not a version 1 .npy file").into());
    }
    let header_end = 10 + usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
    let header =
        bytes.get(10..header_end).and_then(|h| std::str::from_utf8(h).ok()).ok_or_else(|| bad("bad header"))?;
    if !header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False") {
        return Err(bad("expected little-endian float32 in C order").into());
    }
    let data = &bytes[header_end..];
    if data.len() % 4 != 0 {
        return Err(bad("data is not a whole number of float32 values").into());
    }
    Ok(data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Median wall time of `f` over `repeat` runs, in seconds.
fn median_seconds<T>(repeat: usize, mut f: impl FnMut() -> T) -> f64 {
    let mut times: Vec<f64> = (0..repeat.max(1))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Non-empty bins furthest from zero, in bins (how far the entropy search runs).
fn extent(h: &Histogram) -> i64 {
    let counts = h.counts();
    (0..counts.len())
        .filter(|&i| counts[i] > 0)
        .map(|i| h.bin_of_index(i))
        .map(|k| if k >= 0 { k + 1 } else { -k })
        .max()
        .unwrap_or(0)
}

struct Searched<'a> {
    name: String,
    hist: &'a Histogram,
    min: f32,
    max: f32,
}

/// A state and its name.
type Named = (String, CalibState);

/// Each array of `arrays` (comma-separated .npy files) observed with each per-side bin count of `num_bins`
/// (median of `repeat` runs), as JSON rows; and the last array's state (with the first bin count), named.
fn collect_arrays(arrays: &str, num_bins: &[usize], repeat: usize) -> Result<(Vec<Value>, Option<Named>), Error> {
    let mut collection = Vec::new();
    let mut last: Option<(String, CalibState)> = None;
    for path in arrays.split(',') {
        let data = read_f32_npy(Path::new(path))?;
        let n = data.len();
        let array = Path::new(path).file_name().map(|f| f.to_string_lossy().into_owned());
        // the min/max scan alone: what a collection step costs before any binning
        let minmax_only = median_seconds(repeat, || {
            let mut s = CalibState::new(CollectOptions::default());
            s.observe("t", &data, &[n]).map(|()| s)
        });
        let max_abs = data.iter().fold(0f32, |a, x| if x.is_finite() { a.max(x.abs()) } else { a });
        for &per_side in num_bins {
            let opts = CollectOptions { num_bins: per_side, signed_histogram: true, ..Default::default() };
            let observe = median_seconds(repeat, || {
                let mut s = CalibState::new(opts.clone());
                s.observe("t", &data, &[n]).map(|()| s)
            });
            let bin_only = median_seconds(repeat, || {
                let mut h = Histogram::new(true, per_side);
                h.observe(&data, max_abs, n as u64);
                h
            });
            collection.push(json!({
                "array": array,
                "values": n,
                "bins": 2 * per_side,
                "observe_s": observe,
                "histogram_only_s": bin_only,
                "minmax_only_s": minmax_only,
            }));
        }
        let mut s =
            CalibState::new(CollectOptions { num_bins: num_bins[0], signed_histogram: true, ..Default::default() });
        s.observe("t", &data, &[n])?;
        let name = format!("normal {}", Path::new(path).file_stem().map(|f| f.to_string_lossy()).unwrap_or_default());
        last = Some((name, s));
    }
    Ok((collection, last))
}

/// The entropy threshold search on each of `searched` (median of `repeat` runs, at least 20) as JSON rows, and each
/// histogram exported with the threshold found.
fn entropy_rows(searched: &[Searched], repeat: usize, nq: usize) -> (Vec<Value>, Vec<Value>) {
    let mut entropy = Vec::new();
    let mut exported = Vec::new();
    for s in searched {
        let seconds = median_seconds(repeat.max(20), || entropy_threshold(s.hist, nq));
        let threshold = entropy_threshold(s.hist, nq);
        let candidates = (extent(s.hist).min(s.hist.per_side() as i64) - nq.div_ceil(2) as i64 + 1).max(0);
        entropy.push(json!({
            "name": s.name,
            "bins": s.hist.counts().len(),
            "candidates": candidates,
            "seconds": seconds,
            "threshold": threshold,
        }));
        exported.push(json!({
            "name": s.name,
            "per_side": s.hist.per_side(),
            "width": s.hist.width(),
            "counts": s.hist.counts(),
            "min": s.min,
            "max": s.max,
            "ours": threshold,
        }));
    }
    (entropy, exported)
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let arrays = get("--arrays").ok_or("--arrays A.npy[,B.npy...] is required")?;
    let num_bins: Vec<usize> = get("--num-bins")
        .ok_or("--num-bins N[,M...] is required")?
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    if num_bins.is_empty() {
        return Err("--num-bins needs at least one value".into());
    }
    let repeat: usize = get("--repeat").map_or(Ok(5), |r| r.parse())?;
    let nq: usize = get("--num-quantized-bins").map_or(Ok(255), |r| r.parse())?;
    let top: usize = get("--tensors").map_or(Ok(1), |r| r.parse())?;
    let out = get("--histograms-out").ok_or("--histograms-out H.json is required")?;

    let (collection, last) = collect_arrays(&arrays, &num_bins, repeat)?;

    let mut searched: Vec<Searched> = Vec::new();
    if let Some((name, s)) = &last
        && let Some(t) = s.tensor("t")
        && let (Some(h), Some(r)) = (&t.signed, t.minmax)
    {
        searched.push(Searched { name: name.clone(), hist: h, min: r.min, max: r.max });
    }
    let state = get("--state").map(CalibState::load_json).transpose()?;
    if let Some(state) = &state {
        let mut real: Vec<Searched> = state
            .tensors()
            .filter_map(|name| {
                let t = state.tensor(name)?;
                let r = t.minmax?;
                Some(Searched { name: name.to_owned(), hist: t.signed.as_ref()?, min: r.min, max: r.max })
            })
            .collect();
        real.sort_by_key(|s| std::cmp::Reverse(extent(s.hist)));
        searched.extend(real.into_iter().take(top));
    }

    let (entropy, exported) = entropy_rows(&searched, repeat, nq);
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&Value::Array(exported))?)?;
    std::fs::rename(&tmp, &out)?;
    let report = json!({
        "threads": rayon::current_num_threads(),
        "collection": collection,
        "entropy": entropy,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
