//! `qdq quantize`: Q/DQ pairs into a model, with ranges from any table qdq reads, or weights int8 and inputs
//! quantized at run time (`--mode dynamic`); or a recipe of `qdq tune` replayed.

use std::path::{Path, PathBuf};

use qdq::Policy;

use crate::disk::check_writable;
use crate::error::{Error, Result};
use crate::guard::InOut;
use crate::inputs::folder::carry_folder;
use crate::job::Job;
use crate::model::{carry_tokenizer_files, load_for_quantization, resolve_model, save_model};
use crate::progress::Progress;
use crate::report::quantize::QuantizeReport;
use crate::settings::policy::{Mode, PolicySettings, Target, describe_policies};
use crate::settings::recipe::Recipe;
use crate::steps::quantize::{float_matmul_like, plan, read_table};

/// `qdq quantize`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct QuantizeJob {
    /// The FP32 ONNX model (calibrate's model_smoothed.onnx if smoothed)
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "FILE",
            required_unless_present_any = ["list_policies", "recipe"],
            help_heading = "Model and data"
        )
    )]
    pub model: Option<PathBuf>,
    /// Ranges: any table qdq or ONNX Runtime writes, or a TensorRT cache
    ///
    /// calibration.json of `qdq calibrate`, any of the three files ONNX Runtime's write_calibration_table writes
    /// (calibration.json, .flatbuffers, .cache), or a TensorRT calibration cache; told apart by content. Required
    /// unless --mode dynamic.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub ranges: Option<PathBuf>,
    /// A recipe of `qdq tune` (recipe.toml): its model, ranges and whole policy
    ///
    /// Replays the model `qdq tune` chose, byte for byte; the policy is the recipe's, option by option, so no
    /// policy flag goes with it.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "FILE",
            conflicts_with_all = ["model", "ranges", "preset", "options", "exclude_nodes", "ort_quant", "mode", "strict"],
            help_heading = "Model and data"
        )
    )]
    pub recipe: Option<PathBuf>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub policy: PolicySettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub target: Target,
    /// Describe the presets and options, then exit
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Placement"))]
    pub list_policies: bool,
    /// Where to write the QDQ model
    #[cfg_attr(
        feature = "cli",
        arg(long, short = 'o', alias = "output", value_name = "FILE", help_heading = "Output")
    )]
    pub out: Option<PathBuf>,
    /// Print what would be inserted where; write nothing
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Output"))]
    pub dry_run: bool,
}

impl Job for QuantizeJob {
    type Report = QuantizeReport;

    fn run(&self, _: &dyn Progress) -> Result<QuantizeReport> {
        if self.list_policies {
            return Ok(QuantizeReport::Policies(describe_policies()));
        }
        if self.out.is_none() && !self.dry_run {
            return Err(Error::Usage("qdq quantize needs --out FILE (or --dry-run)".into()));
        }
        if let (Some(out), false) = (&self.out, self.dry_run) {
            check_writable(out, "--out")?;
        }
        if let Some(recipe) = &self.recipe {
            let r = Recipe::read(recipe)?;
            tracing::info!(
                "policy of the recipe {} (preset {}, every option as written)",
                recipe.display(),
                r.policy.preset
            );
            return self.quantize_static(&resolve_model(&r.model)?, &r.ranges, (&r.policy, None));
        }
        let Some(model) = &self.model else {
            return Err(Error::Usage("qdq quantize needs --model FILE (or --recipe FILE)".into()));
        };
        let model = resolve_model(model)?;
        let (policy, choice) = self.policy.policy(&self.target.ep())?;
        tracing::info!("{choice}");
        if self.policy.mode == Mode::Dynamic {
            return self.quantize_dynamic(&model, &policy);
        }
        let Some(ranges) = &self.ranges else {
            return Err(Error::Usage("qdq quantize needs --ranges FILE (or --mode dynamic, which needs none)".into()));
        };
        self.quantize_static(&model, ranges, (&policy, choice.target_cpu))
    }
}

impl QuantizeJob {
    /// Q/DQ pairs placed by `policy` with the ranges of the table `ranges` into the model at `model_path`, the kind of
    /// CPU its layout was made for (`target_cpu`) recorded in it.
    fn quantize_static(
        &self,
        model_path: &Path,
        ranges: &Path,
        (policy, target_cpu): (&Policy, Option<runtime::CpuKind>),
    ) -> Result<QuantizeReport> {
        self.guard(model_path, Some(ranges))?;
        let model = load_for_quantization(model_path)?;
        let table = read_table(ranges, &model, model_path, policy)?;
        let plan = plan(&model, model_path, &table, policy)?;
        let (Some(output), false) = (&self.out, self.dry_run) else {
            return Ok(QuantizeReport::Planned(plan));
        };
        let mut model = model;
        plan.apply(&mut model)?;
        crate::model::record_target_cpu(&mut model, target_cpu);
        save_model(&model, output)?;
        carry_tokenizer_files(model_path, output)?;
        carry_folder(model_path, output)?;
        Ok(QuantizeReport::Written {
            output: output.clone(),
            tensors: plan.tensors.len(),
            skipped: plan.skipped.iter().map(|s| format!("{}: {}", s.tensor, s.reason)).collect(),
            float_matmul_like: float_matmul_like(&model),
            integer_forms: plan.integer_forms(),
        })
    }

    /// The output against the inputs ([`InOut`]), when there is one.
    fn guard(&self, model_path: &Path, ranges: Option<&Path>) -> Result<()> {
        let (Some(out), false) = (&self.out, self.dry_run) else { return Ok(()) };
        let model_flag = if self.recipe.is_some() { "the recipe's model" } else { "--model" };
        let ranges_flag = if self.recipe.is_some() { "the recipe's ranges" } else { "--ranges" };
        InOut::new()
            .model(model_flag, model_path)
            .input(ranges_flag, ranges)
            .input("--recipe", self.recipe.as_deref())
            .out_file("--out", out)
            .check()
    }

    /// `--mode dynamic`: no ranges ([`qdq::quantize_dynamic`]).
    fn quantize_dynamic(&self, model_path: &Path, policy: &Policy) -> Result<QuantizeReport> {
        if self.ranges.is_some() {
            tracing::warn!("--ranges is not used in dynamic mode");
        }
        self.guard(model_path, None)?;
        let model = load_for_quantization(model_path)?;
        let (qmodel, plan) = qdq::quantize_dynamic(&model, policy)?;
        let (Some(output), false) = (&self.out, self.dry_run) else {
            return Ok(QuantizeReport::PlannedDynamic(plan));
        };
        save_model(&qmodel, output)?;
        carry_tokenizer_files(model_path, output)?;
        carry_folder(model_path, output)?;
        Ok(QuantizeReport::Written {
            output: output.clone(),
            tensors: plan.matmuls.len(),
            skipped: vec![],
            float_matmul_like: float_matmul_like(&qmodel),
            integer_forms: plan.contrib.lines(),
        })
    }
}
