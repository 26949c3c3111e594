//! `qdq providers`: the ONNX Runtime library that would be loaded, and its execution providers.

use crate::error::Result;
use crate::job::Job;
use crate::progress::Progress;
use crate::report::providers::ProvidersReport;
use crate::settings::runtime::OrtLibrary;

/// `qdq providers`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ProvidersJob {
    #[cfg_attr(feature = "cli", command(flatten))]
    pub library: OrtLibrary,
}

impl Job for ProvidersJob {
    type Report = ProvidersReport;

    fn run(&self, _: &dyn Progress) -> Result<ProvidersReport> {
        let info = runtime::init(self.library.ort_lib.as_deref())?;
        Ok(ProvidersReport { version: info.version, library: info.path, providers: info.providers })
    }
}
