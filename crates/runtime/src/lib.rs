//! runtime (not built yet).
