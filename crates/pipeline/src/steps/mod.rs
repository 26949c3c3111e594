//! The passes the commands share: calibration (the statistics pass, its sessions and the tables), smoothing,
//! evaluation (SQuAD), held-out measurements (logit agreement, each pair's error, each node's
//! sensitivity), timing against FP32, and how side-by-side sessions share work.

pub mod augment;
pub mod calibrate;
pub mod collect;
pub mod evaluate;
pub mod held_out;
pub mod logits;
pub mod pairs;
pub mod quantize;
pub mod rounding;
pub mod smooth;
pub mod speed;
pub mod spread;
