//! Tidy checks: rules of docs/ARCHITECTURE.md checked against the code itself, as `#[test]`s (in the spirit of
//! rust-analyzer's tidy tests). `cargo xtask test` runs them with every other test; a failure names the rule, the
//! crate or file, and what to do.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    use crate::workspace::root;

    /// The workspace crates each crate may use in its code (normal dependencies; dev-dependencies are free, as
    /// tests build models with onnx-ir). Layering: a crate only depends on crates above it in this list.
    const ALLOWED: &[(&str, &[&str])] = &[
        ("qdq-files", &[]),
        ("qdq-squad-metrics", &[]),
        ("qdq-calib", &["qdq-files"]),
        ("qdq-onnx-ir", &["qdq-files"]),
        ("qdq-runtime", &[]),
        ("qdq-tokenizer", &["qdq-files"]),
        ("qdq-squad", &["qdq-files", "qdq-squad-metrics", "qdq-tokenizer"]),
        ("qdq", &["qdq-calib", "qdq-onnx-ir", "qdq-model-io"]),
        ("qdq-model-io", &["qdq-onnx-ir", "qdq"]),
        (
            "qdq-pipeline",
            &[
                "qdq-files",
                "qdq-squad-metrics",
                "qdq-calib",
                "qdq-onnx-ir",
                "qdq-runtime",
                "qdq-tokenizer",
                "qdq-squad",
                "qdq",
                "qdq-model-io",
            ],
        ),
        ("qdq-cli", &["qdq-pipeline"]),
        (
            "xtask",
            &[
                "qdq-files",
                "qdq-squad-metrics",
                "qdq-tokenizer",
                "qdq-squad",
                "qdq-onnx-ir",
                "qdq-calib",
                "qdq",
                "qdq-pipeline",
            ],
        ),
    ];

    /// Third-party crates a crate may depend on, where the architecture limits them: squad-metrics is serde alone
    /// (users can take just the scorer), calib sees no ONNX and no ONNX Runtime.
    const ONLY_EXTERNAL: &[(&str, &[&str])] = &[("qdq-squad-metrics", &["serde", "serde_json"])];
    const NO_EXTERNAL: &[(&str, &[&str])] = &[("qdq-calib", &["ort", "prost", "protox"]), ("qdq", &["ort"])];

    /// `package -> [(dependency package, kind)]` of the workspace, from `cargo metadata`.
    fn dependencies() -> BTreeMap<String, Vec<(String, String)>> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
            .current_dir(root())
            .output()
            .expect("cargo metadata runs");
        assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
        let mut deps = BTreeMap::new();
        for p in meta["packages"].as_array().expect("packages") {
            let list = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| {
                    (
                        d["name"].as_str().unwrap_or_default().to_owned(),
                        d["kind"].as_str().unwrap_or("normal").to_owned(),
                    )
                })
                .collect();
            deps.insert(p["name"].as_str().unwrap_or_default().to_owned(), list);
        }
        deps
    }

    fn ours(deps: &BTreeMap<String, Vec<(String, String)>>, name: &str) -> bool {
        deps.contains_key(name)
    }

    #[test]
    fn crates_depend_only_on_the_crates_the_architecture_allows() {
        let deps = dependencies();
        let mut wrong = Vec::new();
        for (package, list) in &deps {
            let Some((_, allowed)) = ALLOWED.iter().find(|(p, _)| p == package) else {
                wrong
                    .push(format!("{package} is not in the tidy table: add it to ALLOWED and to docs/ARCHITECTURE.md"));
                continue;
            };
            for (dep, kind) in list {
                if kind == "normal" && ours(&deps, dep) && !allowed.contains(&dep.as_str()) {
                    wrong.push(format!("{package} depends on {dep}; allowed: [{}]", allowed.join(", ")));
                }
            }
            for (p, only) in ONLY_EXTERNAL.iter().filter(|(p, _)| p == package) {
                for (dep, kind) in list.iter().filter(|(d, k)| k == "normal" && !ours(&deps, d)) {
                    if !only.contains(&dep.as_str()) {
                        wrong.push(format!("{p} depends on {dep} ({kind}); it may only use {}", only.join(", ")));
                    }
                }
            }
            for (p, never) in NO_EXTERNAL.iter().filter(|(p, _)| p == package) {
                for (dep, _) in list.iter().filter(|(d, k)| k == "normal" && never.contains(&d.as_str())) {
                    wrong.push(format!("{p} depends on {dep}, which the architecture keeps out of it"));
                }
            }
        }
        assert!(wrong.is_empty(), "dependency rules of docs/ARCHITECTURE.md broken:\n  {}", wrong.join("\n  "));
    }

    fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(rust_files(&p));
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
        out.sort();
        out
    }

    #[test]
    fn the_cli_talks_to_pipeline_only() {
        let mut wrong = Vec::new();
        for f in rust_files(&root().join("crates/cli/src")) {
            let text = std::fs::read_to_string(&f).unwrap();
            for (i, line) in text.lines().enumerate() {
                if ["calib::", "qdq::", "onnx_ir::", "runtime::", "squad::"].iter().any(|c| line.contains(c)) {
                    wrong.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
        assert!(wrong.is_empty(), "the CLI names a library crate other than pipeline:\n  {}", wrong.join("\n  "));
    }

    /// Every file a library crate writes goes through `files` (atomic, signal-safe commits; docs/ARCHITECTURE.md):
    /// outside tests, no crate but `files` writes with `std::fs::write`, `File::create` or atomic-write-file itself.
    #[test]
    fn outputs_are_written_through_files() {
        let mut wrong = Vec::new();
        for entry in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
            if entry.file_name() == "files" {
                continue;
            }
            let src = entry.path().join("src");
            for f in if src.is_dir() { rust_files(&src) } else { vec![] } {
                let text = std::fs::read_to_string(&f).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for (i, line) in code.lines().enumerate() {
                    // `File::create(` as std's, not as the tail of `AtomicFile::create(`.
                    let std_create = line
                        .match_indices("File::create(")
                        .any(|(at, _)| !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
                    if std_create || ["atomic_write_file", "fs::write("].iter().any(|c| line.contains(c)) {
                        wrong.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "a crate writes a file itself; use files::AtomicFile / files::write_atomic:\n  {}",
            wrong.join("\n  ")
        );
    }

    /// Functions of `text` longer than `max` lines (a `fn` line to the `}` at its indentation), as (line, name, len).
    /// A declaration without a body (a trait's) is not a function here.
    fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let rest =
                ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| trimmed.strip_prefix(p)).unwrap_or(trimmed);
            let Some(name) = rest.strip_prefix("fn ").map(|r| r.split(['(', '<']).next().unwrap_or("").to_owned())
            else {
                continue;
            };
            // The signature ends at the first line ending in `{` (a body) or `;` (a declaration).
            let Some(end) = lines[i..].iter().find(|l| l.trim_end().ends_with(['{', ';'])) else { continue };
            if end.trim_end().ends_with(';') {
                continue;
            }
            let close = format!("{}}}", &line[..line.len() - trimmed.len()]);
            if let Some(end) = lines[i + 1..].iter().position(|l| *l == close) {
                let len = end + 2;
                if len > max {
                    out.push((i + 1, name, len));
                }
            }
        }
        out
    }

    #[test]
    fn functions_stay_short() {
        let sample = "fn a() {\n    x;\n}\nfn b() {\n    y;\n    z;\n}\ntrait T {\n    fn c();\n}\nfn d() {}\n";
        assert_eq!(long_functions(sample, 3), vec![(4, "b".into(), 4)]);
        let mut wrong = Vec::new();
        // Every crate's sources and examples, and xtask's; test modules (at the end of a file) and tests/ are free.
        let mut dirs = vec![root().join("xtask/src")];
        for c in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
            dirs.extend(["src", "examples"].map(|d| c.path().join(d)).into_iter().filter(|d| d.is_dir()));
        }
        for dir in dirs {
            for f in rust_files(&dir) {
                let text = std::fs::read_to_string(&f).unwrap();
                let code = text.split("\n#[cfg(test)]\nmod tests").next().unwrap();
                for (line, name, len) in long_functions(code, 60) {
                    wrong.push(format!("{}:{line}: fn {name} has {len} lines", f.display()));
                }
            }
        }
        assert!(wrong.is_empty(), "functions over 60 lines (split them by step):\n  {}", wrong.join("\n  "));
    }

    /// The pipeline files outside `tasks/` that still name a task room's own types (results.json's per-task fields
    /// and report.md's tables, the held-out readers): the list only shrinks. Every other file reaches a task
    /// through `tasks::Task` and its methods.
    const NAME_TASK_TYPES: &[&str] = &[];

    /// The task rooms of `crates/pipeline/src/tasks/`: its folders (a new task's room is guarded as soon as it is
    /// there); its files are the shape every task shares (`Task`, `TaskData`, `score`, `default_float`).
    fn rooms(tasks: &Path) -> Vec<String> {
        let mut rooms: Vec<String> = std::fs::read_dir(tasks)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        rooms.sort();
        rooms
    }

    /// The types (`struct`, `enum`, `type`, `trait`) defined in a task room, with the room's name.
    fn room_types(tasks: &Path) -> Vec<(String, String)> {
        let (mut out, rooms) = (Vec::new(), rooms(tasks));
        for f in rust_files(tasks) {
            let room = f.strip_prefix(tasks).unwrap().components().next().unwrap().as_os_str().to_string_lossy();
            let room = room.trim_end_matches(".rs").to_owned();
            if !rooms.contains(&room) {
                continue;
            }
            for l in std::fs::read_to_string(&f).unwrap().lines().map(str::trim_start) {
                let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub ")).unwrap_or("");
                for kind in ["struct ", "enum ", "type ", "trait "] {
                    if let Some(rest) = l.strip_prefix(kind) {
                        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        out.push((name, room.clone()));
                    }
                }
            }
        }
        out
    }

    /// Where `name` occurs in `text` as a whole word.
    fn names(text: &str, name: &str) -> bool {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        text.match_indices(name).any(|(i, _)| !text[..i].ends_with(word) && !text[i + name.len()..].starts_with(word))
    }

    /// A task's own types and crates are named only inside its room: SQuAD's scoring crate (`squad_metrics`, but for
    /// its statistics `Proportion` / `PairedDifference`, which every task reports with), the rooms' paths
    /// (`tasks::squad` ...) and every type a room defines. lib.rs (the public API) and tests are free.
    #[test]
    fn task_types_stay_in_their_rooms() {
        assert!(names("a Corpus,", "Corpus") && !names("Corpusx", "Corpus") && !names("MyCorpus", "Corpus"));
        let src = root().join("crates/pipeline/src");
        let types = room_types(&src.join("tasks"));
        assert!(types.iter().any(|(n, r)| n == "Corpus" && r == "squad"), "no room types read: {types:?}");
        let (mut wrong, mut clean) = (Vec::new(), Vec::new());
        for f in rust_files(&src) {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            if rel.starts_with("tasks/") || rel == "lib.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let stats =
                ["squad_metrics::Proportion", "squad_metrics::PairedDifference", "squad_metrics::paired_difference"];
            let scoring =
                code.match_indices("squad_metrics::").any(|(i, _)| !stats.iter().any(|s| code[i..].starts_with(s)));
            let mut named: Vec<String> =
                types.iter().filter(|(n, _)| names(&code, n)).map(|(n, r)| format!("{r}::{n}")).collect();
            named.extend(
                rooms(&src.join("tasks"))
                    .iter()
                    .filter(|r| code.contains(&format!("tasks::{r}")))
                    .map(|r| format!("tasks::{r}")),
            );
            if scoring {
                named.push("squad_metrics".into());
            }
            named.dedup();
            match (named.is_empty(), NAME_TASK_TYPES.contains(&rel.as_str())) {
                (false, false) => wrong.push(format!("{rel} names {}", named.join(", "))),
                (true, true) => clean.push(rel),
                _ => {}
            }
        }
        assert!(
            wrong.is_empty(),
            "a task's own types are named outside its room (move the code into crates/pipeline/src/tasks/<room>/, or \
             reach the task through tasks::Task):\n  {}",
            wrong.join("\n  ")
        );
        assert!(
            clean.is_empty(),
            "these files no longer name a task's types: take them off NAME_TASK_TYPES: {clean:?}"
        );
    }

    /// pipeline's lib.rs is its table of contents: module declarations and re-exports, no item of its own.
    #[test]
    fn pipeline_lib_only_declares_and_re_exports() {
        let text = std::fs::read_to_string(root().join("crates/pipeline/src/lib.rs")).unwrap();
        let items = ["fn ", "struct ", "enum ", "impl ", "trait ", "const ", "static ", "type ", "macro_rules!"];
        let wrong: Vec<&str> = text
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with("//"))
            .filter(|l| items.iter().any(|i| l.starts_with(i) || l.starts_with(&format!("pub {i}"))))
            .collect();
        assert!(
            wrong.is_empty(),
            "pipeline/src/lib.rs defines items; move them into a module:\n  {}",
            wrong.join("\n  ")
        );
    }

    /// Inside pipeline every `crate::` path starts at a module, never at a name lib.rs re-exports: a module that
    /// imports from lib.rs (which declares every module) would run an arrow back up the crate.
    #[test]
    fn pipeline_modules_import_where_names_are_defined() {
        let src = root().join("crates/pipeline/src");
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        let modules: Vec<&str> = lib
            .lines()
            .filter_map(|l| l.trim().strip_prefix("mod ").or_else(|| l.trim().strip_prefix("pub mod ")))
            .map(|m| m.trim_end_matches(';'))
            .collect();
        let mut wrong = Vec::new();
        for f in rust_files(&src).into_iter().filter(|f| !f.ends_with("lib.rs")) {
            let text = std::fs::read_to_string(&f).unwrap();
            for (i, line) in text.lines().enumerate() {
                for (at, _) in line.match_indices("crate::") {
                    let name: String =
                        line[at + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() && !modules.contains(&name.as_str()) {
                        wrong.push(format!("{}:{}: crate::{name}", f.display(), i + 1));
                    }
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "pipeline code names lib.rs's re-exports; import from the module that defines the name:\n  {}",
            wrong.join("\n  ")
        );
    }

    /// The wildcard arms (`_ =>`) of `text` in a match whose other arms name `Task` or `Ep` variants, as
    /// (line, first such arm): an arm that decides for a task or an EP it does not know (issue 77).
    fn wildcard_arms_over_variants(text: &str) -> Vec<(usize, String)> {
        let lines: Vec<&str> = text.lines().collect();
        let indent = |l: &str| l.len() - l.trim_start().len();
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if !(t.starts_with("_ =>") || t.starts_with("_ if ")) {
                continue;
            }
            let at = indent(line);
            for prev in lines[..i].iter().rev() {
                if prev.trim().is_empty() || indent(prev) > at {
                    continue;
                }
                if indent(prev) < at {
                    break;
                }
                let arm = prev.trim_start().trim_start_matches(['(', '|', ' ']);
                let arm = arm.trim_start_matches("runtime::").trim_start_matches("crate::tasks::");
                if arm.starts_with("Task::") || arm.starts_with("Ep::") {
                    out.push((i + 1, prev.trim().to_owned()));
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn no_wildcard_arm_decides_for_a_task_or_an_ep() {
        let sample =
            "match t {\n    Task::Squad => 1,\n    _ => 2,\n}\nmatch s {\n    \"a\" => Ep::Cpu,\n    _ => x,\n}\n";
        assert_eq!(wildcard_arms_over_variants(sample), [(3, "Task::Squad => 1,".to_owned())]);
        let mut wrong = Vec::new();
        for dir in ["crates/pipeline/src", "crates/runtime/src"] {
            for f in rust_files(&root().join(dir)) {
                let text = std::fs::read_to_string(&f).unwrap();
                for (line, arm) in wildcard_arms_over_variants(&text) {
                    wrong.push(format!("{}:{line}: `_ =>` beside `{arm}`", f.display()));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "a wildcard arm decides for the Task / Ep variants it does not name; list them:\n  {}",
            wrong.join("\n  ")
        );
    }
}
