//! `qdq inspect`: what a model holds: operators, Q/DQ coverage, and the ranges its pairs encode.

use std::path::PathBuf;

use onnx_ir::Model;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::model::resolve_model;
use crate::progress::Progress;
use crate::report::inspect::Inspection;

/// `qdq inspect`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct InspectJob {
    /// The ONNX model (file or model directory)
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "FILE",
            conflicts_with = "path",
            required_unless_present = "path",
            help_heading = "Model and data"
        )
    )]
    pub model: Option<PathBuf>,
    /// The model, as `qdq inspect MODEL`
    #[cfg_attr(feature = "cli", arg(value_name = "MODEL", help_heading = "Model and data"))]
    pub path: Option<PathBuf>,
    /// List every Q/DQ pair with its scale and the range it encodes
    #[cfg_attr(feature = "cli", arg(long, alias = "ranges", help_heading = "Output"))]
    pub pairs: bool,
}

impl Job for InspectJob {
    type Report = Inspection;

    fn run(&self, _: &dyn Progress) -> Result<Inspection> {
        let given = self.model.as_ref().or(self.path.as_ref());
        let path = resolve_model(given.ok_or_else(|| Error::Usage("qdq inspect needs --model FILE".into()))?)?;
        let model = Model::load_graph_only(&path)?;
        let g = model.graph();
        let names = |v: &[onnx_ir::proto::ValueInfoProto]| v.iter().map(|v| v.name().to_owned()).collect::<Vec<_>>();
        Ok(Inspection {
            ir_version: model.proto.ir_version(),
            opset: model.opset(""),
            producer: (model.proto.producer_name().to_owned(), model.proto.producer_version().to_owned()),
            inputs: names(&g.input),
            outputs: names(&g.output),
            nodes: g.node.len(),
            initializers: g.initializer.len(),
            parameters: g.initializer.iter().map(|t| t.dims.iter().product::<i64>().max(0) as usize).sum(),
            smoothing: qdq::smoothing_record(&model).map(str::to_owned),
            counts: qdq::QdqCounts::of(&model),
            coverage: qdq::coverage(&model),
            pairs: self.pairs,
            path,
        })
    }
}
