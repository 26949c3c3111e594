//! The typed settings of the `qdq` commands, grouped as the command line groups its flags, and the one place that
//! turns them into the configurations the steps take (sessions, data, range methods, the placement policy). With
//! feature `cli` each group derives `clap::Args`: a setting, its flag and its help are declared once.

pub mod calib;
pub mod data;
#[cfg(feature = "cli")]
pub mod parsers;
pub mod policy;
pub mod recipe;
pub mod runtime;
