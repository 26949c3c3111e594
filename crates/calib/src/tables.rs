//! Calibration table files: `calibration.json` ([`RangeTable`]), ONNX Runtime's flatbuffers table read by its
//! TensorRT and MIGraphX EPs, and TensorRT's native calibration cache. Every writer writes a temporary sibling
//! and renames it; every reader reports the file and the line or key at fault.
//!
//! ORT flatbuffers schema (namespace `CalTableFlatBuffers`, no file identifier):
//! `table KeyValue { key: string (required, key); value: string; }`, `table TrtTable { dict: [KeyValue]; }`,
//! `root_type TrtTable`. `value` is `max(|min|, |max|)` as a decimal string; entries are sorted by key.
//!
//! TensorRT cache: first line `TRT-<version>-EntropyCalibration2`, then `<tensor>: <hex>` per tensor where
//! `<hex>` is the 8 hex digits of the IEEE-754 bits of the scale `amax / 127`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flatbuffers::{FlatBufferBuilder, Follow, ForwardsUOffset, Table, Vector, Verifiable, Verifier, WIPOffset};

use crate::{Error, RangeTable, Result};

/// Default TensorRT version number written in the cache header.
pub const DEFAULT_TRT_VERSION: u32 = 8601;

/// Writes `bytes` to `path` atomically ([`files::write_atomic`]): readers see the old file or the whole new one, and
/// a killed process leaves nothing.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    files::write_atomic(path, bytes).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// Largest range table read (`calibration.json` with histograms included): 1 GiB.
const MAX_TABLE_BYTES: u64 = 1 << 30;

/// The bytes of `path` if it is a regular file of at most [`MAX_TABLE_BYTES`] (a FIFO would block, `/dev/zero` would be
/// read until memory runs out), without a leading UTF-8 byte-order mark (a JSON or text table saved by an editor
/// that writes one; no flatbuffer starts with it: its first four bytes are an offset within the file).
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    let mut bytes =
        files::read_regular(path, MAX_TABLE_BYTES).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.drain(..3);
    }
    Ok(bytes)
}

fn table_err(path: &Path, location: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Table { path: path.to_path_buf(), location: location.into(), message: message.into() }
}

/// At most `max` characters of `s`, with `...` and the full length when cut: a file that is not a range table
/// (a SQuAD dataset given to `--ranges`) must not put megabytes of itself into one error line.
fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((cut, _)) => format!("{}... ({} characters)", &s[..cut], s.chars().count()),
    }
}

/// Characters of a file's content quoted in a message.
const QUOTE: usize = 80;

/// Write `calibration.json`.
pub fn write_json(path: impl AsRef<Path>, table: &RangeTable) -> Result<()> {
    let path = path.as_ref();
    let bytes = serde_json::to_vec_pretty(table).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
    write_atomic(path, &bytes)
}

/// Read `calibration.json`; every range must be finite with `min <= max`.
pub fn read_json(path: impl AsRef<Path>) -> Result<RangeTable> {
    let path = path.as_ref();
    let table: RangeTable =
        serde_json::from_slice(&read(path)?).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
    checked(table, path)
}

/// `table` if every range (per tensor and per channel) is finite with `min <= max`; `path` names it in errors.
fn checked(table: RangeTable, path: &Path) -> Result<RangeTable> {
    let all = table.ranges.iter().chain(table.channels.iter().flat_map(|(k, v)| v.iter().map(move |r| (k, r))));
    for (name, r) in all {
        if !(r.min.is_finite() && r.max.is_finite() && r.min <= r.max) {
            return Err(table_err(path, format!("ranges.{name}"), format!("expected finite min <= max, got {r:?}")));
        }
    }
    Ok(table)
}

/// Entries of a table left out, with why.
type Rejected = Vec<(String, String)>;

/// Which table format a file held (see [`read_ranges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    /// qdq's calibration.json ([`RangeTable`]).
    Qdq,
    /// ONNX Runtime's calibration.json (`write_calibration_table`, `save_tensors_data`): `lowest` / `highest` per
    /// tensor.
    OrtJson,
    /// ONNX Runtime's calibration.flatbuffers (the table its TensorRT and MIGraphX EPs read).
    OrtFlatbuffers,
    /// ONNX Runtime's calibration.cache: one `name value` line per tensor.
    OrtText,
    /// TensorRT's native calibration cache (`TRT-<version>-<calibrator>`, hex scales).
    TrtCache,
}

/// What [`read_ranges`] found in a table file.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRanges {
    pub format: TableFormat,
    /// `tensor -> (min, max)`.
    pub ranges: BTreeMap<String, (f32, f32)>,
    /// Entries left out, with why (non-finite, min > max, not a number): whether one matters depends on whether the
    /// caller needs that tensor, so it is the caller's to report as an error or a warning.
    pub rejected: Rejected,
    /// qdq's own table: the identity of the model it was measured on ([`crate::RangeTable::model`]).
    pub model: Option<String>,
}

/// Ranges `tensor -> (min, max)` from any table file qdq or ONNX Runtime / TensorRT write, told apart by content:
///
/// - qdq's calibration.json: the ranges as written (every one must be valid, as qdq wrote them);
/// - ONNX Runtime's calibration.json (`{"CLS": "TensorsData", "data": {...}}`, a plain `{tensor: {...}}` map, or
///   `{tensor: [lowest, highest]}`; numbers or numpy-array wrappers): `(lowest, highest)` as written;
/// - the amax-only formats, read as the symmetric range `(-|v|, |v|)`: ONNX Runtime's calibration.flatbuffers and
///   calibration.cache text (ONNX Runtime writes `max(highest, lowest)` there, which is negative for an all-negative
///   tensor and is the larger end, not the larger magnitude, of an asymmetric range: prefer its JSON when you have
///   it) and TensorRT's calibration cache.
///
/// A bad entry of ONNX Runtime's files is left out and listed in [`TableRanges::rejected`] instead of failing the file.
pub fn read_ranges(path: impl AsRef<Path>) -> Result<TableRanges> {
    let path = path.as_ref();
    let table = read_any_table(path)?;
    if table.ranges.is_empty() {
        let why = table
            .rejected
            .first()
            .map(|(k, w)| format!(" (first entry `{}`: {w})", excerpt(k, QUOTE)))
            .unwrap_or_default();
        return Err(table_err(path, "file", format!("holds no usable tensor ranges{why}")));
    }
    Ok(table)
}

fn read_any_table(path: &Path) -> Result<TableRanges> {
    let bytes = read(path)?;
    let symmetric = |m: BTreeMap<String, f32>| m.into_iter().map(|(k, a)| (k, (-a, a))).collect();
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first == Some(b'{') {
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
        if v.get("ranges").is_some() && v.get("method").is_some() {
            let table = serde_json::from_value(v).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
            let table = checked(table, path)?;
            let model = table.model.clone();
            return Ok(TableRanges { format: TableFormat::Qdq, ranges: table.min_max(), rejected: vec![], model });
        }
        return ort_json(&v, path);
    }
    if bytes.starts_with(b"TRT-") {
        let text = files::text(bytes).map_err(|e| table_err(path, "file", format!("a TensorRT cache is text; {e}")))?;
        let ranges = symmetric(decode_trt_cache(&text, path)?.amax());
        return Ok(TableRanges { format: TableFormat::TrtCache, ranges, rejected: vec![], model: None });
    }
    if let Some(t) = ort_text(&bytes) {
        return Ok(t);
    }
    let (raw, mut rejected) = decode_ort_flatbuffers_lenient(&bytes, path)?;
    let mut ranges = BTreeMap::new();
    for (k, v) in raw {
        match amax_of(v) {
            Ok(a) => {
                ranges.insert(k, (-a, a));
            }
            Err(why) => rejected.push((k, why)),
        }
    }
    Ok(TableRanges { format: TableFormat::OrtFlatbuffers, ranges, rejected, model: None })
}

/// `|v|` of an amax-style value, which must be finite.
fn amax_of(v: f32) -> std::result::Result<f32, String> {
    if v.is_finite() { Ok(v.abs()) } else { Err(format!("value {v} is not finite")) }
}

/// ONNX Runtime's calibration.json, any of the shapes its versions have written.
fn ort_json(v: &serde_json::Value, path: &Path) -> Result<TableRanges> {
    let entries = match v.get("CLS").and_then(|c| c.as_str()) {
        Some("TensorsData") => v.get("data"),
        _ => Some(v),
    };
    let Some(entries) = entries.and_then(|e| e.as_object()) else {
        return Err(table_err(path, "data", "expected qdq's calibration.json or ONNX Runtime's {tensor: range} map"));
    };
    let mut out = TableRanges { format: TableFormat::OrtJson, ranges: BTreeMap::new(), rejected: vec![], model: None };
    for (k, e) in entries.iter().filter(|(k, _)| *k != "CLS" && *k != "calibration_method") {
        match ort_json_range(e) {
            Ok(r) => {
                out.ranges.insert(k.clone(), r);
            }
            Err(why) => out.rejected.push((k.clone(), why)),
        }
    }
    Ok(out)
}

/// `(lowest, highest)` of one entry: `[lo, hi]`, or `{"lowest": x, "highest": y}` with numbers or numpy-array
/// wrappers (`{"data": x | [x], "dtype": ..., "CLS": "numpy.array"}`).
fn ort_json_range(e: &serde_json::Value) -> std::result::Result<(f32, f32), String> {
    fn number(v: Option<&serde_json::Value>) -> Option<f64> {
        let v = v?;
        let v = v.get("data").unwrap_or(v);
        v.as_f64().or_else(|| v.as_array().filter(|a| a.len() == 1)?.first()?.as_f64())
    }
    let (lo, hi) = match e {
        serde_json::Value::Array(a) if a.len() == 2 => (number(a.first()), number(a.get(1))),
        _ => (number(e.get("lowest")), number(e.get("highest"))),
    };
    let (Some(lo), Some(hi)) = (lo, hi) else {
        let got = excerpt(&e.to_string(), QUOTE);
        return Err(format!("expected [lowest, highest] or {{\"lowest\", \"highest\"}} numbers, got {got}"));
    };
    let (lo, hi) = (lo as f32, hi as f32);
    if lo.is_finite() && hi.is_finite() && lo <= hi {
        Ok((lo, hi))
    } else {
        Err(format!("range [{lo}, {hi}] is not a finite interval with lowest <= highest"))
    }
}

/// ONNX Runtime's calibration.cache text (`name value` per line, the name may hold spaces), if `bytes` is text: no
/// control bytes but tab, CR and LF (a flatbuffers table always has some). A line that is not `name number` is
/// listed as rejected.
fn ort_text(bytes: &[u8]) -> Option<TableRanges> {
    if bytes.iter().any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\r' | b'\n')) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let mut out = TableRanges { format: TableFormat::OrtText, ranges: BTreeMap::new(), rejected: vec![], model: None };
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line = line.trim_end();
        match line.rsplit_once(' ').map(|(name, v)| (name, v.parse::<f32>())) {
            Some((name, Ok(v))) => match amax_of(v) {
                Ok(a) => {
                    out.ranges.insert(name.to_string(), (-a, a));
                }
                Err(why) => out.rejected.push((name.to_string(), why)),
            },
            Some((name, Err(_))) => out.rejected.push((name.to_string(), format!("line {}: not a number", i + 1))),
            None => out
                .rejected
                .push((format!("line {}", i + 1), format!("expected `name value`, got `{}`", excerpt(line, QUOTE)))),
        }
    }
    Some(out)
}

/// `tensor -> max(|min|, |max|)` of a table (what the flatbuffers table and the TensorRT cache carry).
pub fn amax_map(table: &RangeTable) -> BTreeMap<String, f32> {
    table.ranges.iter().map(|(k, r)| (k.clone(), r.amax())).collect()
}

/// Encode ORT's flatbuffers calibration table.
pub fn encode_ort_flatbuffers(amax: &BTreeMap<String, f32>) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let mut entries: Vec<WIPOffset<KeyValue>> = Vec::with_capacity(amax.len());
    // BTreeMap iterates in byte order, which is flatbuffers' key order.
    for (k, v) in amax {
        let key = fbb.create_string(k);
        let value = fbb.create_string(&v.to_string());
        let start = fbb.start_table();
        fbb.push_slot_always(KeyValue::VT_KEY, key);
        fbb.push_slot_always(KeyValue::VT_VALUE, value);
        let end = fbb.end_table(start);
        entries.push(WIPOffset::new(end.value()));
    }
    let dict = fbb.create_vector(&entries);
    let start = fbb.start_table();
    fbb.push_slot_always(TrtTable::VT_DICT, dict);
    let root = fbb.end_table(start);
    fbb.finish(root, None);
    fbb.finished_data().to_vec()
}

/// Decode ORT's flatbuffers calibration table (verified); `path` is only used in errors. Every value must be a finite
/// amax >= 0 (as qdq writes them; [`read_ranges`] also reads ONNX Runtime's own, signed values).
pub fn decode_ort_flatbuffers(bytes: &[u8], path: &Path) -> Result<BTreeMap<String, f32>> {
    let (raw, rejected) = decode_ort_flatbuffers_lenient(bytes, path)?;
    if let Some((key, why)) = rejected.into_iter().next() {
        return Err(table_err(path, format!("`{key}`"), why));
    }
    for (key, &amax) in &raw {
        if !amax.is_finite() || amax < 0.0 {
            return Err(table_err(path, format!("`{key}`"), format!("expected a finite amax >= 0, got {amax}")));
        }
    }
    Ok(raw)
}

/// Every entry of a flatbuffers table as a number; entries whose value is missing or not a number are returned
/// apart, with why.
fn decode_ort_flatbuffers_lenient(bytes: &[u8], path: &Path) -> Result<(BTreeMap<String, f32>, Rejected)> {
    let root = flatbuffers::root::<TrtTable>(bytes)
        .map_err(|e| table_err(path, "root", format!("not a TrtTable flatbuffer: {e}")))?;
    let (mut out, mut rejected) = (BTreeMap::new(), Vec::new());
    for kv in root.dict().iter().flatten() {
        let key = kv.key().to_string();
        match kv.value().map(|v| (v, v.trim().parse::<f32>())) {
            Some((_, Ok(v))) => {
                out.insert(key, v);
            }
            Some((v, Err(_))) => rejected.push((key, format!("value `{v}` is not a decimal number"))),
            None => rejected.push((key, "missing value".to_string())),
        }
    }
    Ok((out, rejected))
}

/// Write ORT's flatbuffers calibration table for `table` (value = amax).
pub fn write_ort_flatbuffers(path: impl AsRef<Path>, table: &RangeTable) -> Result<()> {
    write_atomic(path.as_ref(), &encode_ort_flatbuffers(&amax_map(table)))
}

/// Read ORT's flatbuffers calibration table: `tensor -> amax`.
pub fn read_ort_flatbuffers(path: impl AsRef<Path>) -> Result<BTreeMap<String, f32>> {
    let path = path.as_ref();
    decode_ort_flatbuffers(&read(path)?, path)
}

/// A TensorRT calibration cache: header fields and per-tensor scales (`amax / 127`).
#[derive(Clone, Debug, PartialEq)]
pub struct TrtCache {
    /// Version field of the header (e.g. `8601`).
    pub version: String,
    /// Calibrator name of the header (e.g. `EntropyCalibration2`).
    pub calibrator: String,
    /// Per-tensor scale.
    pub scales: BTreeMap<String, f32>,
}

impl TrtCache {
    /// Per-tensor amax (`scale * 127`).
    pub fn amax(&self) -> BTreeMap<String, f32> {
        self.scales.iter().map(|(k, s)| (k.clone(), s * 127.0)).collect()
    }
}

/// Encode a TensorRT calibration cache from per-tensor amax values.
pub fn encode_trt_cache(amax: &BTreeMap<String, f32>, version: u32) -> String {
    let mut s = format!("TRT-{version}-EntropyCalibration2\n");
    for (k, a) in amax {
        s.push_str(&format!("{k}: {:08x}\n", (a / 127.0).to_bits()));
    }
    s
}

/// Write a TensorRT calibration cache for `table`.
pub fn write_trt_cache(path: impl AsRef<Path>, table: &RangeTable, version: u32) -> Result<()> {
    write_atomic(path.as_ref(), encode_trt_cache(&amax_map(table), version).as_bytes())
}

/// Parse a TensorRT calibration cache; `path` is only used in errors.
pub fn decode_trt_cache(text: &str, path: &Path) -> Result<TrtCache> {
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or_default();
    let mut parts = header.splitn(3, '-');
    let (Some("TRT"), Some(version), Some(calibrator)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(table_err(path, "line 1", format!("expected `TRT-<version>-<calibrator>`, got `{header}`")));
    };
    let mut scales = BTreeMap::new();
    for (i, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let at = format!("line {}", i + 1);
        let Some((name, hex)) = line.rsplit_once(':') else {
            return Err(table_err(path, at, format!("expected `<tensor>: <8 hex digits>`, got `{line}`")));
        };
        let hex = hex.trim();
        let bits = (hex.len() == 8).then(|| u32::from_str_radix(hex, 16).ok()).flatten().ok_or_else(|| {
            table_err(path, at.clone(), format!("tensor `{name}`: expected 8 hex digits, got `{hex}`"))
        })?;
        let scale = f32::from_bits(bits);
        if !scale.is_finite() || scale < 0.0 {
            return Err(table_err(path, at, format!("tensor `{name}`: scale {scale} is not finite and >= 0")));
        }
        scales.insert(name.trim().to_string(), scale);
    }
    Ok(TrtCache { version: version.to_string(), calibrator: calibrator.to_string(), scales })
}

/// Read a TensorRT calibration cache.
pub fn read_trt_cache(path: impl AsRef<Path>) -> Result<TrtCache> {
    let path = path.as_ref();
    let bytes = read(path)?;
    let text = files::text(bytes).map_err(|e| table_err(path, "file", format!("a TensorRT cache is text; {e}")))?;
    decode_trt_cache(&text, path)
}

/// Hand-written accessor of the `KeyValue` table (field `key` at vtable slot 4, `value` at 6).
pub struct KeyValue<'a> {
    tab: Table<'a>,
}

impl KeyValue<'_> {
    /// vtable offset of `key`.
    pub const VT_KEY: u16 = 4;
    /// vtable offset of `value`.
    pub const VT_VALUE: u16 = 6;
}

impl<'a> KeyValue<'a> {
    /// The key (required; present in any verified buffer).
    pub fn key(&self) -> &'a str {
        // SAFETY: the buffer was verified by `flatbuffers::root`, which checked this slot is a string.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::VT_KEY, Some("")) }.unwrap_or("")
    }
    /// The value.
    pub fn value(&self) -> Option<&'a str> {
        // SAFETY: as above.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::VT_VALUE, None) }
    }
}

impl<'a> Follow<'a> for KeyValue<'a> {
    type Inner = KeyValue<'a>;
    unsafe fn follow(buf: &'a [u8], loc: usize) -> Self::Inner {
        // SAFETY: the caller guarantees `loc` is a table in `buf` (flatbuffers' contract).
        KeyValue { tab: unsafe { Table::new(buf, loc) } }
    }
}

impl Verifiable for KeyValue<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> std::result::Result<(), flatbuffers::InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<&str>>("key", Self::VT_KEY, true)?
            .visit_field::<ForwardsUOffset<&str>>("value", Self::VT_VALUE, false)?
            .finish();
        Ok(())
    }
}

/// Hand-written accessor of the root `TrtTable` (field `dict` at vtable slot 4).
pub struct TrtTable<'a> {
    tab: Table<'a>,
}

impl<'a> TrtTable<'a> {
    /// vtable offset of `dict`.
    pub const VT_DICT: u16 = 4;
    /// The entries.
    pub fn dict(&self) -> Option<Vector<'a, ForwardsUOffset<KeyValue<'a>>>> {
        // SAFETY: verified by `flatbuffers::root`.
        unsafe { self.tab.get::<ForwardsUOffset<Vector<'a, ForwardsUOffset<KeyValue<'a>>>>>(Self::VT_DICT, None) }
    }
}

impl<'a> Follow<'a> for TrtTable<'a> {
    type Inner = TrtTable<'a>;
    unsafe fn follow(buf: &'a [u8], loc: usize) -> Self::Inner {
        // SAFETY: the caller guarantees `loc` is a table in `buf`.
        TrtTable { tab: unsafe { Table::new(buf, loc) } }
    }
}

impl Verifiable for TrtTable<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> std::result::Result<(), flatbuffers::InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<Vector<'_, ForwardsUOffset<KeyValue>>>>("dict", Self::VT_DICT, false)?
            .finish();
        Ok(())
    }
}

/// Path helper used in errors of in-memory decoding.
pub fn memory_path() -> PathBuf {
    PathBuf::from("<memory>")
}
