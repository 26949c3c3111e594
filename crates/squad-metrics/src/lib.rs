//! squad-metrics (not built yet).
