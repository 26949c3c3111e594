//! What runs through the models: how text becomes inputs ([`config`]), inputs from files ([`files`]), the batches
//! calibration reads from either ([`feeds`]), which model inputs and outputs they feed and read ([`roles`],
//! [`shape`]), how a text file's rows are laid out ([`text`]: GLUE's TSVs, JSONL, text lines), what a model's folder says of it ([`folder`]: sentence-transformers' modules, pooling and length) and
//! how token states become one vector per text ([`pooling`]).

pub mod config;
pub mod feeds;
pub mod files;
pub mod folder;
pub mod pooling;
pub mod roles;
pub mod shape;
pub(crate) mod text;
