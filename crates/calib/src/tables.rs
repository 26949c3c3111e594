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

/// Writes `bytes` to `path` atomically (an unnamed temporary file in the same directory, synced, then linked into
/// place; mode from the umask): readers see the old file or the whole new one, and a killed process leaves nothing.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut file = atomic_write_file::AtomicWriteFile::options().open(path).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.commit().map_err(io)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

fn table_err(path: &Path, location: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Table { path: path.to_path_buf(), location: location.into(), message: message.into() }
}

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
    let all = table.ranges.iter().chain(table.channels.iter().flat_map(|(k, v)| v.iter().map(move |r| (k, r))));
    for (name, r) in all {
        if !(r.min.is_finite() && r.max.is_finite() && r.min <= r.max) {
            return Err(table_err(path, format!("ranges.{name}"), format!("expected finite min <= max, got {r:?}")));
        }
    }
    Ok(table)
}

/// Ranges `tensor -> (min, max)` from any table file qdq reads, told apart by content: `calibration.json` (qdq's own,
/// the ranges as written), ONNX Runtime's flatbuffers table or a TensorRT calibration cache (these two hold one
/// `amax` per tensor, read as the symmetric range `(-amax, amax)`).
pub fn read_ranges(path: impl AsRef<Path>) -> Result<BTreeMap<String, (f32, f32)>> {
    let path = path.as_ref();
    let bytes = read(path)?;
    let symmetric = |m: BTreeMap<String, f32>| m.into_iter().map(|(k, a)| (k, (-a, a))).collect();
    if bytes.first() == Some(&b'{') {
        Ok(read_json(path)?.min_max())
    } else if bytes.starts_with(b"TRT-") {
        let text =
            String::from_utf8(bytes).map_err(|_| table_err(path, "file", "a TensorRT cache is text; not UTF-8"))?;
        Ok(symmetric(decode_trt_cache(&text, path)?.amax()))
    } else {
        Ok(symmetric(decode_ort_flatbuffers(&bytes, path)?))
    }
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

/// Decode ORT's flatbuffers calibration table (verified); `path` is only used in errors.
pub fn decode_ort_flatbuffers(bytes: &[u8], path: &Path) -> Result<BTreeMap<String, f32>> {
    let root = flatbuffers::root::<TrtTable>(bytes)
        .map_err(|e| table_err(path, "root", format!("not a TrtTable flatbuffer: {e}")))?;
    let mut out = BTreeMap::new();
    let Some(dict) = root.dict() else {
        return Ok(out);
    };
    for (i, kv) in dict.iter().enumerate() {
        let key = kv.key();
        let value = kv.value().ok_or_else(|| table_err(path, format!("dict[{i}] `{key}`"), "missing value"))?;
        let amax: f32 = value.trim().parse().map_err(|_| {
            table_err(path, format!("dict[{i}] `{key}`"), format!("value `{value}` is not a decimal number"))
        })?;
        if !amax.is_finite() || amax < 0.0 {
            return Err(table_err(
                path,
                format!("dict[{i}] `{key}`"),
                format!("expected a finite amax >= 0, got {value}"),
            ));
        }
        out.insert(key.to_string(), amax);
    }
    Ok(out)
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
    let text = String::from_utf8(bytes).map_err(|_| table_err(path, "file", "not UTF-8 text"))?;
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
