//! Text files as users write them: UTF-8 with or without the byte-order mark editors on Windows put first, and the
//! first byte that is not UTF-8 named by its line and column (a whole file called "binary" does not say where).

use std::fmt;
use std::io;
use std::path::Path;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where a file stops being UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotText {
    /// 1-based line of the bad byte.
    pub line: usize,
    /// 1-based column, in characters, of the bad byte within its line.
    pub column: usize,
    /// The byte itself.
    pub byte: u8,
}

impl fmt::Display for NotText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: byte 0x{:02X} is not UTF-8 text", self.line, self.column, self.byte)
    }
}

impl std::error::Error for NotText {}

/// `bytes` as text: a leading UTF-8 byte-order mark dropped; the first byte that is not UTF-8 an error saying where.
///
/// ```
/// assert_eq!(qdq_files::text(b"\xEF\xBB\xBFsentence\tlabel\r\n".to_vec()).unwrap(), "sentence\tlabel\r\n");
/// let e = qdq_files::text(b"ok\nab\xFFc\n".to_vec()).unwrap_err();
/// assert_eq!((e.line, e.column, e.byte), (2, 3, 0xFF));
/// ```
pub fn text(mut bytes: Vec<u8>) -> Result<String, NotText> {
    if bytes.starts_with(BOM) {
        bytes.drain(..BOM.len());
    }
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        // Everything before `at` is valid UTF-8.
        let before = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        NotText {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            byte: bytes[at],
        }
    })
}

/// The text of `path`, a regular file of at most `limit` bytes ([`crate::read_regular`], [`text`]); bytes that are
/// not UTF-8 are an `InvalidData` error saying where.
pub fn read_text(path: &Path, limit: u64) -> io::Result<String> {
    text(crate::read_regular(path, limit)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_byte_is_placed_by_line_and_character() {
        // Column counts characters: `é` is one.
        let e = text("é\r\nxé".bytes().chain([0xC3, b'(']).collect()).unwrap_err();
        assert_eq!(e, NotText { line: 2, column: 3, byte: 0xC3 });
        assert_eq!(e.to_string(), "line 2, column 3: byte 0xC3 is not UTF-8 text");
        let e = text(vec![0xEF, 0xBB, 0xBF, 0x80]).unwrap_err();
        assert_eq!((e.line, e.column, e.byte), (1, 1, 0x80));
        // Only a leading mark goes; one inside is the text's own character.
        assert_eq!(text(b"a\xEF\xBB\xBF".to_vec()).unwrap(), "a\u{FEFF}");
        assert_eq!(text(vec![]).unwrap(), "");
    }
}
