//! `cargo xtask download`: the data and models the end-to-end run needs, from the internet or a local mirror.
//!
//! Every file is written as `<name>.part` and renamed only after its size and SHA-256 check out, so an interrupted or
//! corrupted download never looks complete. HTTPS downloads resume from the `.part` file (curl `-C -`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

pub use crate::flags::DownloadArgs;
use crate::flags::MIRROR_ENV;
use crate::workspace::run_cmd;

/// One file of the manifest. `path` is relative both to the destination and to a mirror directory.
pub struct Asset {
    pub set: &'static str,
    pub path: &'static str,
    /// Where to fetch it with internet; `None` for files that exist only in a mirror (not published anywhere).
    pub url: Option<&'static str>,
    /// `None` where no checksum is pinned yet: the computed one is printed so it can be pinned.
    pub sha256: Option<&'static str>,
    pub size: Option<u64>,
}

/// The manifest. Set `minilm` is the project's reference models (a mirror of ../shared/assets: the SQuAD model, and
/// the two sentence-embedding models: paraphrase-MiniLM-L3 in its sentence-transformers folder, all-MiniLM-L6-v2 in
/// the Hugging Face hub layout); set `distilbert` is the public SQuAD ONNX export
/// used when there is internet and no mirror.
pub const MANIFEST: &[Asset] = &[
    Asset {
        set: "squad",
        path: "squad/dev-v1.1.json",
        url: Some("https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json"),
        sha256: Some("95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"),
        size: Some(4_854_279),
    },
    Asset {
        set: "minilm",
        path: "squad/train-v1.1-calib.json",
        url: None,
        sha256: Some("511b1440eb6080775bff5ec85f75cdc403068281375a1903a72d075949556895"),
        size: Some(1_697_030),
    },
    Asset {
        set: "minilm",
        path: "models/minilm-l6-squad/model.onnx",
        url: None,
        sha256: Some("bc9deb7dd36aadd0b830a7f085137a48b63f68c96ba8d0be7e0ba30d9f1fa0e2"),
        size: Some(90_340_778),
    },
    Asset {
        set: "minilm",
        path: "models/minilm-l6-squad/vocab.txt",
        url: None,
        sha256: Some("07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
        size: Some(231_508),
    },
    Asset {
        set: "minilm",
        path: "models/minilm-l6-squad/reference_metrics.json",
        url: None,
        sha256: Some("538dfe052369f2dd64a10aec67fc8f12708c38bc9fcc8d241697a662948f2e14"),
        size: Some(428),
    },
    Asset {
        set: "minilm",
        path: "models/minilm-l6-squad/predictions_dev.json",
        url: None,
        sha256: Some("e0587bdb2464177fe6b20f7ccf7727c04ff0c203023a51665682833be541d9f1"),
        size: Some(567_952),
    },
    Asset {
        set: "minilm",
        path: "models/paraphrase-minilm-l3/model.onnx",
        url: None,
        sha256: Some("b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"),
        size: Some(69_060_623),
    },
    Asset {
        set: "minilm",
        path: "models/paraphrase-minilm-l3/vocab.txt",
        url: None,
        sha256: Some("07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
        size: Some(231_508),
    },
    Asset {
        set: "minilm",
        path: "models/paraphrase-minilm-l3/modules.json",
        url: None,
        sha256: Some("743587278a4867459578b918ef2abab78993c076895abe6d768123c122d02ef5"),
        size: Some(190),
    },
    Asset {
        set: "minilm",
        path: "models/paraphrase-minilm-l3/1_Pooling/config.json",
        url: None,
        sha256: Some("d3df094e6ed9803b2b9aa3bbbc6816f79492a5bf2a4b058b03168084d48709a7"),
        size: Some(191),
    },
    Asset {
        set: "minilm",
        path: "models/paraphrase-minilm-l3/sentence_bert_config.json",
        url: None,
        sha256: Some("e1e8e1346dfc366ef83522c735098ecf64b5a1cd26d01f83757585e6a7786335"),
        size: Some(54),
    },
    Asset {
        set: "minilm",
        path: "models/paraphrase-minilm-l3/tokenizer_config.json",
        url: None,
        sha256: Some("3b9fc90cc05f51d22eb78a3881efdd0c1b6d2c4784a350e12514ed566483f7bf"),
        size: Some(252),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/onnx/model.onnx",
        url: None,
        sha256: Some("e0b45292abc0e1c3d7cf101190ee58019e327955ed9951b8f28c74e77aa54e07"),
        size: Some(90_362_391),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/config.json",
        url: None,
        sha256: Some("953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
        size: Some(612),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/config_sentence_transformers.json",
        url: None,
        sha256: Some("061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
        size: Some(116),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/modules.json",
        url: None,
        sha256: Some("84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        size: Some(349),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/sentence_bert_config.json",
        url: None,
        sha256: Some("fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
        size: Some(53),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/special_tokens_map.json",
        url: None,
        sha256: Some("303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
        size: Some(112),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/tokenizer.json",
        url: None,
        sha256: Some("be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
        size: Some(466_247),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/tokenizer_config.json",
        url: None,
        sha256: Some("acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
        size: Some(350),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/vocab.txt",
        url: None,
        sha256: Some("07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
        size: Some(231_508),
    },
    Asset {
        set: "minilm",
        path: "models/all-minilm-l6-v2/1_Pooling/config.json",
        url: None,
        sha256: Some("4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
        size: Some(190),
    },
    Asset {
        set: "distilbert",
        path: "squad/train-v1.1.json",
        url: Some("https://rajpurkar.github.io/SQuAD-explorer/dataset/train-v1.1.json"),
        sha256: None,
        size: None,
    },
    Asset {
        set: "distilbert",
        path: "models/distilbert-squad/model.onnx",
        url: Some("https://huggingface.co/Xenova/distilbert-base-uncased-distilled-squad/resolve/main/onnx/model.onnx"),
        sha256: None,
        size: None,
    },
    Asset {
        set: "distilbert",
        path: "models/distilbert-squad/vocab.txt",
        url: Some("https://huggingface.co/Xenova/distilbert-base-uncased-distilled-squad/resolve/main/vocab.txt"),
        sha256: Some("07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
        size: Some(231_508),
    },
];

pub fn download(args: &DownloadArgs) -> Result<PathBuf> {
    let set = args.set();
    if !MANIFEST.iter().any(|a| a.set == set) {
        bail!("unknown asset set `{set}` (valid: minilm, distilbert)");
    }
    let dest = args.dest();
    let missing = MANIFEST.iter().filter(|a| a.set == set).any(|a| !dest.join(a.path).is_file());
    if set == "minilm" && args.mirror.is_none() && missing {
        bail!(
            "asset set `minilm` is not published on the internet: pass --mirror DIR (a copy of the project's shared \
             assets) or set {MIRROR_ENV}; or use --assets distilbert with internet"
        );
    }
    if let Some(m) = &args.mirror
        && !m.is_dir()
    {
        bail!("mirror directory {} does not exist", m.display());
    }
    for asset in MANIFEST.iter().filter(|a| a.set == set || a.set == "squad") {
        fetch(asset, args.mirror.as_deref(), &dest)?;
    }
    Ok(dest)
}

fn fetch(asset: &Asset, mirror: Option<&Path>, dest: &Path) -> Result<()> {
    let target = dest.join(asset.path);
    if target.is_file() && verify(asset, &target).is_ok() {
        eprintln!("xtask: {} ok", asset.path);
        return Ok(());
    }
    let parent = target.parent().context("asset path has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let part = target.with_extension(format!(
        "{}part",
        target.extension().map(|e| format!("{}.", e.to_string_lossy())).unwrap_or_default()
    ));
    match (mirror.map(|m| m.join(asset.path)), asset.url) {
        (Some(src), _) if src.is_file() => {
            eprintln!("xtask: {} <- {}", asset.path, src.display());
            let _ = std::fs::remove_file(&part);
            if std::fs::hard_link(&src, &part).is_err() {
                std::fs::copy(&src, &part).with_context(|| format!("cannot copy {}", src.display()))?;
            }
        }
        (_, Some(url)) => {
            eprintln!("xtask: {} <- {url}", asset.path);
            run_cmd(
                Command::new("curl")
                    .args(["--fail", "--location", "--silent", "--show-error", "--retry", "3", "-C", "-", "-o"])
                    .arg(&part)
                    .arg(url),
            )
            .with_context(|| format!("downloading {url} failed (no internet? pass --mirror DIR)"))?;
        }
        (Some(src), None) => {
            bail!("{} is not in the mirror ({} missing) and has no public URL", asset.path, src.display())
        }
        (None, None) => bail!("{} is available only from a mirror: pass --mirror DIR", asset.path),
    }
    if let Err(e) = verify(asset, &part) {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    std::fs::rename(&part, &target).with_context(|| format!("cannot rename {} to {}", part.display(), target.display()))
}

fn verify(asset: &Asset, file: &Path) -> Result<()> {
    let len = std::fs::metadata(file).with_context(|| format!("cannot stat {}", file.display()))?.len();
    if let Some(size) = asset.size
        && len != size
    {
        bail!("{}: {} bytes, expected {size}", file.display(), len);
    }
    let digest = sha256_file(file)?;
    match asset.sha256 {
        Some(want) if want != digest => bail!("{}: sha256 {digest}, expected {want}", file.display()),
        Some(_) => Ok(()),
        None => {
            eprintln!("xtask: {} has no pinned sha256; it is {digest} ({len} bytes)", asset.path);
            Ok(())
        }
    }
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_rejects_wrong_size_and_digest() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let f = dir.join("a.txt");
        std::fs::write(&f, b"abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let ok = Asset { set: "t", path: "a.txt", url: None, sha256: Some(abc), size: Some(3) };
        assert!(verify(&ok, &f).is_ok());
        let bad_size = Asset { size: Some(4), ..ok };
        assert!(verify(&bad_size, &f).unwrap_err().to_string().contains("expected 4"));
        let bad_sha = Asset { set: "t", path: "a.txt", url: None, sha256: Some("00"), size: None };
        assert!(verify(&bad_sha, &f).unwrap_err().to_string().contains("sha256"));
    }
}
