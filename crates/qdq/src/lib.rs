//! qdq (not built yet).
