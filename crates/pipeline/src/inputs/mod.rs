//! What runs through the models: SQuAD questions ([`squad`]), other inputs from files ([`files`]), the batches
//! calibration reads from either ([`feeds`]), and which model inputs and outputs they feed and read ([`roles`],
//! [`shape`]).

pub mod feeds;
pub mod files;
pub mod roles;
pub mod shape;
pub mod squad;
