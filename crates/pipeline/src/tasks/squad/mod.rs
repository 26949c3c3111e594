//! SQuAD extractive question answering (start and end logits): the questions with their gold answers ([`data`]),
//! the evaluation that turns logits into answers and scores them ([`evaluate`]), and how the logits are read from
//! a run ([`logits`]).

pub mod data;
pub mod e2e;
pub mod eval;
pub mod evaluate;
pub mod held;
pub mod logits;
pub mod room;
pub mod score;
pub mod screen;
pub mod table;
