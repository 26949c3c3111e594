//! The integration tests of runtime, one binary (one link, one run), a module per subject: library loading and sessions.

mod library;
mod observe;
mod tiny_bert;
