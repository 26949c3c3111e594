//! Value parsers of the settings' flags (feature `cli`), for the binary's own flags too.

use clap::builder::{PossibleValuesParser, TypedValueParser};

/// One of `names` (listed in --help, and in the error for any other value), parsed into `T`.
pub fn choice<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    PossibleValuesParser::new(names).try_map(|s| s.parse::<T>())
}

/// A count of at least 1.
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{s}` must be a whole number of at least 1")),
    }
}

/// `KEY=VALUE`, both non-empty.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(format!("`{s}` must be KEY=VALUE")),
    }
}
