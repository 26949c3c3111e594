//! Compiles `proto/onnx.proto` (inside this crate, so it packages on its own; the workspace's top-level
//! `proto/` is a link to it) into Rust types with prost, parsing the
//! schema with protox so no system `protoc` is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest.join("proto");
    let proto_file = proto_dir.join("onnx.proto");
    println!("cargo:rerun-if-changed={}", proto_file.display());
    let fds = protox::compile([&proto_file], [&proto_dir])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
