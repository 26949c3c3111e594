//! calib (not built yet).
