//! Tiny BERT builder (milestone 2).
