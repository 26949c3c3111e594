//! The integration tests of calib, one binary (one link, one run), a module per subject: collectors, range methods, tables and merging.

mod common;

mod merge;
mod options;
mod ranges;
mod tables;
mod tails;
