//! `qdq`: the command-line front end. Arguments, progress and printing only; the work is in `pipeline`.

mod args;
mod config;
mod progress;

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::FromArgMatches;
use pipeline::Report as _;

use args::{Cli, Command};

fn main() -> ExitCode {
    // `qdq inspect model.onnx | head` must end quietly when the reader goes away, as other Unix tools do, instead
    // of panicking in println! on EPIPE (Rust ignores SIGPIPE by default); a write past `ulimit -f` must be an error
    // naming the file (EFBIG), not a silent death by SIGXFSZ.
    #[cfg(unix)]
    // SAFETY: setting the disposition of two signals at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // Ctrl-C or SIGTERM while an output is being put in place waits for it (a few milliseconds), so a stopped run
    // leaves whole outputs and no temporary name.
    pipeline::signals::defer_during_commits();
    // Ctrl-C says one line: that it stopped, and what became of the output directory (left marked INCOMPLETE, or
    // removed when nothing was written yet).
    pipeline::signals::say_on_signal("qdq: interrupted");
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args::asks_version(&argv) {
        println!("qdq {}", env!("QDQ_VERSION"));
        return ExitCode::SUCCESS;
    }
    let cmd = args::command();
    let cli = match config::expand(argv, &cmd).and_then(|argv| {
        for line in args::deprecated(&argv) {
            eprintln!("qdq: warning: {line}");
        }
        let matches = cmd.clone().try_get_matches_from(argv).map_err(usage_error)?;
        Ok(Cli::from_arg_matches(&matches)?)
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("qdq: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qdq: error: {}", one_line(&e));
            // Settings that do not go together are usage errors, as a value a flag's parser rejects.
            let usage = matches!(e.downcast_ref::<pipeline::Error>(), Some(pipeline::Error::Usage(_)));
            if usage { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// A command line clap refuses, as every other error is said (`qdq: error: ...`, then clap's tip and usage lines);
/// help and version requests print and exit as clap does.
fn usage_error(e: clap::Error) -> anyhow::Error {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    anyhow::anyhow!("{}", text.trim_end().strip_prefix("error: ").unwrap_or(text.trim_end()).to_owned())
}

/// The error and its causes on one line, skipping a cause whose text the line already holds (library errors
/// often print their source themselves).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    escape_controls(&line.replace('\n', " "))
}

/// Control characters (ESC, CR, ...) from model files or tables written as escapes, so a crafted name cannot rewrite
/// the error line on a terminal.
fn escape_controls(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Logs on stderr. ONNX Runtime's own ERROR events are left out (unless --verbose): each comes back as the error the
/// run fails with, printed once as `qdq: error:`.
fn init_logging(verbose: bool) {
    use tracing_subscriber::{Layer as _, filter, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    let default = if verbose { "debug" } else { "info" };
    let levels = filter::EnvFilter::try_from_env("QDQ_LOG")
        .unwrap_or_else(|_| filter::EnvFilter::new(format!("{default},ort=warn")));
    let ort_error = |m: &tracing::Metadata| m.target().starts_with("ort") && *m.level() == tracing::Level::ERROR;
    // Stops dependencies' `log` records under the level at their call site (1 MB of context took 10 s of `trace!`).
    let hint = levels.max_level_hint().unwrap_or(filter::LevelFilter::TRACE);
    let ort_errors = filter::filter_fn(move |m| verbose || !ort_error(m)).with_max_level_hint(hint);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .with_filter(levels)
        .with_filter(ort_errors);
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

fn run(cli: Cli) -> Result<()> {
    init_logging(cli.verbose);
    match cli.command {
        Command::E2e(mut a) => {
            a.job.invocation = pipeline::Invocation {
                command_line: std::env::args().collect(),
                build_commit: env!("QDQ_GIT_COMMIT").to_owned(),
            };
            go(*a)
        }
        Command::Calibrate(a) => go(*a),
        Command::Quantize(a) => go(*a),
        Command::Eval(a) => go(*a),
        Command::Debug(a) => go(*a),
        Command::Tune(a) => go(*a),
        Command::Inspect(a) => go(*a),
        Command::Providers(a) => go(*a),
        Command::Help(a) => help(a),
    }
}

/// Runs a job and prints its report: its text, or with `--json` its one JSON document (docs/JSON.md); then the
/// run's own verdict (`qdq tune --fail-above`).
fn go<J: pipeline::Job + clap::Args>(a: args::JobArgs<J>) -> Result<()> {
    let mut out = report_stdout();
    let report = a.job.run(&progress::Bars::new())?;
    let text = if a.common.json { serde_json::to_string_pretty(&report.json())? } else { report.to_string() };
    use std::io::Write as _;
    writeln!(out, "{text}").and_then(|()| out.flush())?;
    Ok(report.verdict()?)
}

/// Where a job's report goes. Libraries an EP loads write to stdout themselves (QNN's HTP backend prints a
/// `# LIBNATIVE:` line that C's buffering flushes at exit, after the report), which would break `--json` and every
/// pipe: while a job runs, descriptor 1 is stderr, and the report goes to the stdout qdq was given. Where the
/// descriptors cannot be moved, the report goes to stdout as it is.
fn report_stdout() -> Box<dyn std::io::Write> {
    #[cfg(unix)]
    {
        use std::os::fd::FromRawFd as _;
        // SAFETY: duplicating the process's own standard descriptors before the job starts any thread; the new
        // descriptor is owned by the File alone.
        unsafe {
            let given = libc::dup(1);
            if given >= 0 {
                if libc::dup2(2, 1) >= 0 {
                    return Box::new(std::fs::File::from_raw_fd(given));
                }
                libc::close(given);
            }
        }
    }
    Box::new(std::io::stdout())
}

/// `qdq help [COMMAND]`: clap's own help subcommand rejected `qdq help --help`; this one is a command like the others
/// and prints exactly what `qdq [COMMAND] --help` prints.
fn help(a: args::HelpArgs) -> Result<()> {
    let cmd = args::command();
    let names: Vec<String> = cmd.get_subcommands().map(|c| c.get_name().to_owned()).collect();
    let argv: Vec<&str> = match &a.command {
        None => vec!["qdq", "--help"],
        Some(name) if names.contains(name) => vec!["qdq", name, "--help"],
        Some(name) => bail!("no command `{name}`; commands: {}", names.join(", ")),
    };
    match cmd.try_get_matches_from(argv) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Ok(e.print()?),
        _ => bail!("cannot render the help"),
    }
}
