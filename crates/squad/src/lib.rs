//! squad (not built yet).
