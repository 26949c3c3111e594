//! A minimal `.npy` (NumPy format version 1.0) writer for little-endian `f32` / `i64` arrays in C order: enough to
//! hand byte-identical inputs to Python (`numpy.load`) and to our own benchmark binaries.
//!
//! Layout: the magic `\x93NUMPY`, version `1 0`, a little-endian `u16` header length, an ASCII Python dict
//! (`descr`, `fortran_order`, `shape`) padded with spaces and a final `\n` so that the data starts on a multiple of
//! 64 bytes, then the raw data. The padding follows NumPy's own writer (room for the first axis to grow to 21
//! digits), so files are byte-identical to `numpy.save` of the same array.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// An element type with a fixed little-endian `.npy` dtype.
pub trait Element: Copy {
    /// The dtype string, e.g. `<f4`.
    const DESCR: &'static str;
    fn put(self, out: &mut Vec<u8>);
}

impl Element for f32 {
    const DESCR: &'static str = "<f4";
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Element for i64 {
    const DESCR: &'static str = "<i8";
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";
/// Data starts on a multiple of this (NumPy's `ARRAY_ALIGN`).
const ALIGN: usize = 64;
/// NumPy leaves room in the header for the first axis to grow to this many digits.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// The shape as a Python tuple: `()`, `(5,)`, `(2, 3)`.
fn shape_tuple(shape: &[usize]) -> String {
    match shape {
        [] => "()".to_owned(),
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// The whole file for `data` viewed as `shape` (C order).
pub fn encode<T: Element>(shape: &[usize], data: &[T]) -> Result<Vec<u8>> {
    let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).context("shape overflows usize")?;
    if elements != data.len() {
        bail!("shape {shape:?} holds {elements} elements but {} were given", data.len());
    }
    let mut header = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", T::DESCR, shape_tuple(shape));
    if let Some(first) = shape.first() {
        header.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(first.to_string().len())));
    }
    let unpadded = MAGIC.len() + 2 + header.len() + 1;
    header.push_str(&" ".repeat((ALIGN - unpadded % ALIGN) % ALIGN));
    header.push('\n');
    let header_len = u16::try_from(header.len()).context("npy header longer than 65535 bytes")?;
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + header.len() + data.len() * 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for &x in data {
        x.put(&mut out);
    }
    Ok(out)
}

/// Writes `data` as `shape` to `path` (through a temporary sibling renamed into place).
pub fn write<T: Element>(path: &Path, shape: &[usize], data: &[T]) -> Result<()> {
    let bytes = encode(shape, data).with_context(|| format!("cannot encode {}", path.display()))?;
    crate::workspace::write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Splits a file into (header dict text, data) after checking the magic, the length field and the alignment.
    fn split(file: &[u8]) -> (String, &[u8]) {
        assert_eq!(&file[..8], MAGIC);
        let len = usize::from(u16::from_le_bytes([file[8], file[9]]));
        assert_eq!((10 + len) % ALIGN, 0, "data must start on a 64-byte boundary");
        let header = std::str::from_utf8(&file[10..10 + len]).unwrap();
        assert!(header.ends_with('\n'));
        (header.trim_end().to_owned(), &file[10 + len..])
    }

    // The expected files below were written by numpy 2.4 `np.save` (header length 118, total 128 + data).
    #[test]
    fn i64_matrix_is_byte_identical_to_numpy() {
        let file = encode(&[2, 3], &[1i64, -2, 3, 4, 5, -6]).unwrap();
        assert_eq!(file.len(), 176);
        assert_eq!(&file[8..10], &[0x76, 0x00]);
        let (header, data) = split(&file);
        assert_eq!(header, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }");
        assert_eq!(
            hex(data),
            "0100000000000000feffffffffffffff030000000000000004000000000000000500000000000000faffffffffffffff"
        );
    }

    #[test]
    fn f32_vector_and_empty_array_match_numpy() {
        let file = encode(&[2], &[1.5f32, -0.25]).unwrap();
        assert_eq!(file.len(), 136);
        let (header, data) = split(&file);
        assert_eq!(header, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
        assert_eq!(hex(data), "0000c03f000080be");

        let empty = encode::<f32>(&[0], &[]).unwrap();
        assert_eq!(empty.len(), 128);
        assert_eq!(split(&empty).0, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }");
    }

    #[test]
    fn round_trip_through_a_file() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let path = dir.join("a.npy");
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
        write(&path, &[10, 100], &values).unwrap();
        let file = std::fs::read(&path).unwrap();
        let (header, data) = split(&file);
        assert!(header.contains("'shape': (10, 100)"));
        let back: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(back, values);
        assert!(!dir.join("a.npy.tmp").exists());
    }

    #[test]
    fn shape_mismatch_and_scalars() {
        let err = encode(&[2, 2], &[1i64, 2, 3]).unwrap_err().to_string();
        assert!(err.contains("holds 4 elements but 3"), "{err}");
        let (header, data) = {
            let f = encode(&[], &[7i64]).unwrap();
            let (h, d) = split(&f);
            (h, d.to_vec())
        };
        assert!(header.contains("'shape': ()"));
        assert_eq!(data, 7i64.to_le_bytes());
    }
}
