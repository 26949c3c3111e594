//! One module per command: its settings (with feature `cli`, its flags) and its [`crate::job::Job::run`].

pub mod calibrate;
pub mod debug;
pub mod e2e;
pub mod eval;
pub mod inspect;
pub mod providers;
pub mod quantize;
pub mod tune;
