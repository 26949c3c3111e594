//! `--profile-ops` of an e2e run: where FP32's and the quantized model's time goes, per operator type.

use std::path::Path;
use std::time::Instant;

use runtime::SessionConfig;

use crate::commands::e2e::config::{E2eConfig, Phases};
use crate::error::Result;
use crate::progress::Progress;
use crate::report::results::{E2eResults, OpProfiles};
use crate::steps::ops::op_table;
use crate::steps::speed::OpProfile;

/// `--profile-ops` (else nothing): FP32 (`cfg.model` on its session) and INT8 (`int8`: the model and its session)
/// each profiled by `profile`, shown, and kept in `results`.
pub(crate) fn profile_both(
    cfg: &E2eConfig,
    int8: (&Path, &SessionConfig),
    results: &mut E2eResults,
    phases: &mut Phases,
    progress: &dyn Progress,
    profile: impl Fn(&Path, &SessionConfig) -> Result<OpProfile>,
) -> Result<()> {
    if !cfg.profile_ops {
        return Ok(());
    }
    let t = Instant::now();
    let p = OpProfiles { fp32: profile(&cfg.model, &cfg.eval.session)?, int8: profile(int8.0, int8.1)? };
    progress.note(&format!("Where the time goes:\n{}", op_table(&[("FP32", &p.fp32), ("INT8", &p.int8)])));
    results.op_profile = Some(p);
    phases.insert("op_profile".to_owned(), t.elapsed().as_secs_f64());
    Ok(())
}
