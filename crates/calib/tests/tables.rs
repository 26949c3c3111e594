//! Table formats: round trips, an independent flatbuffers decoder, TensorRT cache bits, reader errors.
use std::collections::BTreeMap;
use std::path::PathBuf;

use qdq_calib::tables::*;
use qdq_calib::*;

/// A scratch directory removed when dropped (also when the test fails).
fn dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("calib-tables-{name}-")).tempdir().unwrap()
}

fn sample() -> RangeTable {
    let mut ranges = BTreeMap::new();
    ranges.insert("b/out".to_string(), Range { min: -0.5, max: 2.0 });
    ranges.insert("a:0".to_string(), Range { min: -3.25, max: 1.0 });
    ranges.insert("zero".to_string(), Range { min: 0.0, max: 0.0 });
    RangeTable {
        method: "minmax".into(),
        options: Method::MinMax { symmetric: false }.options_json(),
        ranges,
        channels: BTreeMap::new(),
        distribution: BTreeMap::new(),
        model: Some("fingerprint".into()),
        chosen: BTreeMap::from([("a:0".to_string(), "percentile".to_string())]),
    }
}

#[test]
fn json_round_trip_and_validation() {
    let d = dir("json");
    let p = d.path().join("calibration.json");
    write_json(&p, &sample()).unwrap();
    assert_eq!(read_json(&p).unwrap(), sample());
    std::fs::write(&p, r#"{"method":"minmax","options":{},"ranges":{"t":{"min":2.0,"max":1.0}}}"#).unwrap();
    let e = read_json(&p).unwrap_err().to_string();
    assert!(e.contains("calibration.json") && e.contains("ranges.t"), "{e}");
}

/// Independent little-endian flatbuffers walk: root -> table -> vtable -> fields.
fn table_field(buf: &[u8], table: usize, slot: usize) -> Option<usize> {
    let u32_at = |p: usize| u32::from_le_bytes(buf[p..p + 4].try_into().unwrap()) as usize;
    let i32_at = |p: usize| i32::from_le_bytes(buf[p..p + 4].try_into().unwrap()) as i64;
    let u16_at = |p: usize| u16::from_le_bytes(buf[p..p + 2].try_into().unwrap()) as usize;
    let vtable = (table as i64 - i32_at(table)) as usize;
    let vt_len = u16_at(vtable);
    if slot >= vt_len {
        return None;
    }
    let off = u16_at(vtable + slot);
    (off != 0).then(|| {
        let field = table + off;
        field + u32_at(field) // all our fields are offsets (string / vector / table)
    })
}

fn string_at(buf: &[u8], p: usize) -> String {
    let len = u32::from_le_bytes(buf[p..p + 4].try_into().unwrap()) as usize;
    assert_eq!(buf[p + 4 + len], 0, "strings are NUL-terminated");
    String::from_utf8(buf[p + 4..p + 4 + len].to_vec()).unwrap()
}

#[test]
fn ort_flatbuffers_layout_decoded_by_hand() {
    let amax = amax_map(&sample());
    let buf = encode_ort_flatbuffers(&amax);
    let root = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    let dict = table_field(&buf, root, 4).expect("TrtTable.dict at slot 4");
    let n = u32::from_le_bytes(buf[dict..dict + 4].try_into().unwrap()) as usize;
    let mut got = Vec::new();
    for i in 0..n {
        let p = dict + 4 + 4 * i;
        let kv = p + u32::from_le_bytes(buf[p..p + 4].try_into().unwrap()) as usize;
        let key = string_at(&buf, table_field(&buf, kv, 4).expect("key at slot 4"));
        let value = string_at(&buf, table_field(&buf, kv, 6).expect("value at slot 6"));
        got.push((key, value));
    }
    // sorted by key, value = max(|min|, |max|) in decimal
    let want = vec![
        ("a:0".to_string(), "3.25".to_string()),
        ("b/out".to_string(), "2".to_string()),
        ("zero".to_string(), "0".to_string()),
    ];
    assert_eq!(got, want);
}

#[test]
fn ort_flatbuffers_round_trip_and_errors() {
    let d = dir("fb");
    let p = d.path().join("calibration.flatbuffers");
    write_ort_flatbuffers(&p, &sample()).unwrap();
    let back = read_ort_flatbuffers(&p).unwrap();
    assert_eq!(back, amax_map(&sample()));
    assert_eq!(back["a:0"], 3.25);
    std::fs::write(&p, b"\x01\x02\x03").unwrap();
    let e = read_ort_flatbuffers(&p).unwrap_err().to_string();
    assert!(e.contains("calibration.flatbuffers") && e.contains("TrtTable"), "{e}");
    let mut bad = BTreeMap::new();
    bad.insert("t".to_string(), f32::NAN);
    let e = decode_ort_flatbuffers(&encode_ort_flatbuffers(&bad), &memory_path()).unwrap_err().to_string();
    assert!(e.contains("`t`"), "{e}");
}

#[test]
fn trt_cache_bits_and_round_trip() {
    let mut amax = BTreeMap::new();
    amax.insert("in".to_string(), 127.0f32); // scale 1.0 = 0x3f800000
    amax.insert("out".to_string(), 63.5f32); // scale 0.5 = 0x3f000000
    let text = encode_trt_cache(&amax, 8601);
    assert_eq!(text, "TRT-8601-EntropyCalibration2\nin: 3f800000\nout: 3f000000\n");
    let cache = decode_trt_cache(&text, &memory_path()).unwrap();
    assert_eq!(cache.version, "8601");
    assert_eq!(cache.calibrator, "EntropyCalibration2");
    assert_eq!(cache.amax(), amax);

    let d = dir("trt");
    let p = d.path().join("cache");
    write_trt_cache(&p, &sample(), DEFAULT_TRT_VERSION).unwrap();
    let back = read_trt_cache(&p).unwrap().amax();
    for (k, r) in &sample().ranges {
        assert!((back[k] - r.amax()).abs() <= r.amax() * 1e-6, "{k}");
    }
}

#[test]
fn trt_cache_errors_name_the_line() {
    let p = memory_path();
    let e = decode_trt_cache("hello\n", &p).unwrap_err().to_string();
    assert!(e.contains("line 1"), "{e}");
    let e = decode_trt_cache("TRT-8601-EntropyCalibration2\na: 3f800000\nb: xyz\n", &p).unwrap_err().to_string();
    assert!(e.contains("line 3") && e.contains("`b`"), "{e}");
    let e = decode_trt_cache("TRT-8601-EntropyCalibration2\nno colon here\n", &p).unwrap_err().to_string();
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn read_ranges_tells_qdqs_three_formats_apart() {
    let d = dir("any");
    let t = sample();
    write_json(d.path().join("c.json"), &t).unwrap();
    write_ort_flatbuffers(d.path().join("c.flatbuffers"), &t).unwrap();
    write_trt_cache(d.path().join("c.cache"), &t, DEFAULT_TRT_VERSION).unwrap();
    // qdq's own table keeps each range as written; the two amax-only formats read back symmetric.
    let json = read_ranges(d.path().join("c.json")).unwrap();
    assert_eq!((json.format, &json.ranges, json.rejected.len()), (TableFormat::Qdq, &t.min_max(), 0));
    assert_eq!(json.ranges["a:0"], (-3.25, 1.0));
    let fb = read_ranges(d.path().join("c.flatbuffers")).unwrap();
    assert_eq!((fb.format, fb.ranges["a:0"]), (TableFormat::OrtFlatbuffers, (-3.25, 3.25)));
    let trt = read_ranges(d.path().join("c.cache")).unwrap();
    assert_eq!(trt.format, TableFormat::TrtCache);
    let b = trt.ranges["b/out"];
    assert!((b.1 - 2.0).abs() < 1e-6 && b.0 == -b.1, "{trt:?}");
    assert_eq!(trt.ranges.keys().collect::<Vec<_>>(), t.ranges.keys().collect::<Vec<_>>());
    // qdq's own table is all-or-nothing: an inverted range fails it, naming the tensor.
    let mut bad = sample();
    bad.ranges.insert("inverted".into(), Range { min: 1.0, max: -1.0 });
    write_json(d.path().join("bad.json"), &bad).unwrap();
    let e = read_ranges(d.path().join("bad.json")).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("ranges.inverted"), "{e}");
    // Anything else is reported as the flatbuffers table it is taken for, naming the file.
    std::fs::write(d.path().join("junk"), b"\x01\x02").unwrap();
    let e = read_ranges(d.path().join("junk")).unwrap_err().to_string();
    assert!(e.contains("junk") && e.contains("TrtTable"), "{e}");
    let e = read_ranges(d.path().join("missing.json")).unwrap_err().to_string();
    assert!(e.contains("missing.json"), "{e}");
}

/// A file that is not a range table at all (a SQuAD dataset, a text file of long lines) gets one short error quoting a
/// bounded excerpt of what it found, not the file.
#[test]
fn a_file_that_is_no_table_gets_a_short_error() {
    let d = dir("not_a_table");
    let context = "Super Bowl 50 was an American football game. ".repeat(20_000);
    let squad = format!(
        r#"{{"version": "1.1", "data": [{{"title": "t", "paragraphs": [{{"context": "{context}", "qas": []}}]}}]}}"#
    );
    std::fs::write(d.path().join("dev.json"), &squad).unwrap();
    std::fs::write(d.path().join("notes.txt"), format!("{context}\n{context}\n")).unwrap();
    for (file, said) in
        [("dev.json", "first entry `data`: expected [lowest, highest]"), ("notes.txt", "line 1: not a number")]
    {
        let e = read_ranges(d.path().join(file)).unwrap_err().to_string();
        assert!(e.contains(file) && e.contains(said), "{file}: {}", &e[..e.len().min(400)]);
        assert!(e.len() < 400 && e.contains(" characters)"), "{file}: {} bytes: {}", e.len(), &e[..e.len().min(400)]);
    }
}

fn ort_fixture(file: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/calib/ort").join(file)
}

/// The three files ONNX Runtime 1.31.1's `write_calibration_table` wrote (testdata/calib/ort_tables.py): all read,
/// the JSON with each range as written, the two amax files as ONNX Runtime's `max(highest, lowest)` made symmetric,
/// the all-negative tensor included (its amax files hold a negative number).
#[test]
fn read_ranges_reads_the_files_onnx_runtime_writes() {
    let expected = [
        ("/bert/embeddings/LayerNorm/Add_1_output_0", (-4.25, 3.5), 3.5),
        ("/bert/encoder/layer.0/attention/self/Softmax_output_0", (0.0, 0.96875), 0.96875),
        ("all_negative", (-0.75, -0.0064), 0.0064),
        ("asymmetric:0", (-12.5, 2.0), 2.0),
    ];
    let json = read_ranges(ort_fixture("calibration.json")).unwrap();
    let fb = read_ranges(ort_fixture("calibration.flatbuffers")).unwrap();
    let text = read_ranges(ort_fixture("calibration.cache")).unwrap();
    assert_eq!(
        (json.format, fb.format, text.format),
        (TableFormat::OrtJson, TableFormat::OrtFlatbuffers, TableFormat::OrtText)
    );
    for t in [&json, &fb, &text] {
        assert!(t.rejected.is_empty(), "{t:?}");
        assert_eq!(t.ranges.len(), expected.len(), "{t:?}");
    }
    for (name, (lo, hi), amax) in expected {
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        let r = json.ranges[name];
        assert!(close(r.0, lo) && close(r.1, hi), "{name}: {r:?}");
        for t in [&fb, &text] {
            let r = t.ranges[name];
            assert!(close(r.1, amax) && r.0 == -r.1, "{:?} {name}: {r:?}", t.format);
        }
    }
}

/// A bad entry of ONNX Runtime's files (a NaN amax, an inverted range) is left out and listed, not a failure of the
/// whole file; older JSON shapes (a plain map, `[lo, hi]` pairs, numpy-array wrappers) are read too.
#[test]
fn read_ranges_lists_bad_entries_of_onnx_runtime_files() {
    let d = dir("ort-bad");
    std::fs::write(d.path().join("t.cache"), "good 1.5\nbad nan\nname with spaces -2\n").unwrap();
    let t = read_ranges(d.path().join("t.cache")).unwrap();
    assert_eq!(t.ranges.get("good"), Some(&(-1.5, 1.5)));
    assert_eq!(t.ranges.get("name with spaces"), Some(&(-2.0, 2.0)));
    assert_eq!(t.rejected.len(), 1);
    assert!(t.rejected[0].0 == "bad" && t.rejected[0].1.contains("not finite"), "{:?}", t.rejected);
    // A malformed line of a text cache is a rejected entry, not a misreading of the file as a flatbuffer; an empty
    // table is an error.
    std::fs::write(d.path().join("m.cache"), "good 1.5\nbroken\nx y\n").unwrap();
    let t = read_ranges(d.path().join("m.cache")).unwrap();
    assert_eq!((t.format, t.ranges.len()), (TableFormat::OrtText, 1));
    let why: Vec<String> = t.rejected.iter().map(|(k, w)| format!("{k}: {w}")).collect();
    assert_eq!(why, ["line 2: expected `name value`, got `broken`", "x: line 3: not a number"]);
    std::fs::write(d.path().join("empty.cache"), "\n").unwrap();
    let e = read_ranges(d.path().join("empty.cache")).unwrap_err().to_string();
    assert!(e.contains("empty.cache") && e.contains("no usable tensor ranges"), "{e}");
    std::fs::write(d.path().join("allbad.cache"), "a nan\n").unwrap();
    let e = read_ranges(d.path().join("allbad.cache")).unwrap_err().to_string();
    assert!(e.contains("allbad.cache") && e.contains("`a`") && e.contains("not finite"), "{e}");
    let json = r#"{"a": [-1.0, 2.0], "b": {"lowest": {"data": [-3.0], "dtype": "float32", "CLS": "numpy.array"},
        "highest": {"data": 0.5, "dtype": "float32", "CLS": "numpy.array"}}, "c": {"lowest": 2.0, "highest": 1.0},
        "d": {"avg": 1.0}}"#;
    std::fs::write(d.path().join("old.json"), json).unwrap();
    let t = read_ranges(d.path().join("old.json")).unwrap();
    assert_eq!(t.format, TableFormat::OrtJson);
    assert_eq!((t.ranges["a"], t.ranges["b"]), ((-1.0, 2.0), (-3.0, 0.5)));
    let bad: Vec<&str> = t.rejected.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(bad, ["c", "d"], "{:?}", t.rejected);
}
