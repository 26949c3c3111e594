//! `qdq providers`: the ONNX Runtime library that would be loaded, its execution providers, and the plugin EPs found
//! (registered to list their devices).

use runtime::{Ep, SessionConfig};

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
        // Each EP that comes as a plugin: found (registered) where qdq looks for it, or why not.
        let mut missing = Vec::new();
        for ep in Ep::NAMES.iter().filter_map(|n| Ep::parse(n).ok()).filter(|e| e.plugin_package().is_some()) {
            let cfg = SessionConfig {
                ep: ep.clone(),
                library: self.library.ort_lib.clone(),
                plugins: self.library.ep_plugin.clone(),
                ..SessionConfig::default()
            };
            match cfg.check_available() {
                Ok(()) => {}
                // A plugin given that is not one is the user's mistake, not a missing EP.
                Err(e @ runtime::Error::Plugin { .. }) => return Err(e.into()),
                Err(e) => missing.push((ep.ort_name().to_owned(), e.to_string())),
            }
        }
        Ok(ProvidersReport {
            version: info.version,
            library: info.path,
            providers: info.providers,
            plugins: runtime::plugin::registered(),
            devices: runtime::plugin::devices(self.library.ort_lib.as_deref())?,
            missing,
        })
    }
}
