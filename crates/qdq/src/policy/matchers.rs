//! A policy's glob lists, compiled.

use super::*;

/// Compiled glob lists of a policy.
pub(crate) struct Matchers {
    pub include: Option<GlobSet>,
    pub exclude: Option<GlobSet>,
    pub tensors: Option<GlobSet>,
}

impl Matchers {
    /// True if node `name` passes the include / exclude lists.
    pub fn node_selected(&self, name: &str) -> bool {
        self.include.as_ref().is_none_or(|g| g.is_match(name))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(name))
    }

    /// True if tensor `name` is excluded.
    pub fn tensor_excluded(&self, name: &str) -> bool {
        self.tensors.as_ref().is_some_and(|g| g.is_match(name))
    }
}

/// Exact names and globs: a pattern without glob metacharacters matches only itself.
pub(super) fn build_globset(key: &str, patterns: &[String]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = Glob::new(p).map_err(|e| Error::BadOptionValue {
            key: key.to_string(),
            value: p.clone(),
            expected: format!("a valid glob ({e})"),
        })?;
        b.add(glob);
    }
    b.build().map(Some).map_err(|e| Error::BadOptionValue {
        key: key.to_string(),
        value: patterns.join(","),
        expected: format!("valid globs ({e})"),
    })
}
