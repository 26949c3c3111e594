//! The passes the commands share: calibration (the statistics pass, its sessions and the tables), smoothing, GPTQ
//! rounding, a table applied, how a pass runs a model ([`run`]), timing against FP32 and where the time goes
//! ([`speed`], [`ops`]), and how side-by-side sessions share work.

pub mod augment;
pub mod calibrate;
pub mod collect;
pub mod ops;
pub mod output_bias;
pub mod quantize;
pub mod rounding;
pub mod run;
pub mod smooth;
pub mod speed;
pub mod spread;
