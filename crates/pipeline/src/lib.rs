//! pipeline (not built yet).
