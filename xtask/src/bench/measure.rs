//! Measuring a child process the same way for both tools (wall time, peak RSS from `wait4`, CPU other processes
//! used meanwhile), and waiting for a quiet machine before each timed step.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::workspace::root;

/// One measured child process.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) wall_s: f64,
    pub(crate) peak_rss_mb: f64,
    /// Exit code (None if killed by a signal).
    pub(crate) code: Option<i32>,
    /// 1-minute load average just before the start.
    pub(super) load1: f64,
    /// CPU seconds other processes used while it ran (a disturbed measurement has a large share).
    pub(super) other_cpu_s: f64,
    /// stderr (and, for the Python side, its prints).
    pub(super) log: PathBuf,
    /// stdout: qdq's `--json` document.
    pub(super) stdout: PathBuf,
}

impl Run {
    pub(super) fn ok(&self) -> bool {
        self.code == Some(0)
    }
    /// Everything the command printed: stderr, then stdout.
    pub(crate) fn log_text(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        read(&self.log) + &read(&self.stdout)
    }
    /// The JSON document qdq printed with `--json` (docs/JSON.md), if it printed one.
    pub(crate) fn stdout_json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&std::fs::read(&self.stdout).ok()?).ok()
    }
}

pub(super) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Runs `cmd` in the workspace root with stdout and stderr going to `log`, and reaps it with `wait4` to get its
/// own peak resident set size (`ru_maxrss`) and wall time. Both tools are measured this way.
pub(crate) fn measure(cmd: &mut Command, log: &Path, commands: &mut Vec<String>) -> Result<Run> {
    commands.push(format!("{cmd:?}"));
    let file = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let stdout = log.with_extension("stdout");
    let out = File::create(&stdout).with_context(|| format!("cannot create {}", stdout.display()))?;
    cmd.current_dir(root()).stdin(Stdio::null()).stdout(out).stderr(file);
    let load1 = load_average();
    let before = processes();
    let started = Instant::now();
    let child = cmd.spawn().with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = libc::pid_t::try_from(child.id()).context("pid out of range")?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to locals; the child is ours and not reaped elsewhere (the Child handle is never
        // waited on).
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err).with_context(|| format!("wait4 on {cmd:?}"));
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let other_cpu_s = cpu_between(&before, &processes(), std::process::id()).iter().map(|(_, s, _)| s).sum();
    drop(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    // ru_maxrss is in KiB on Linux.
    let peak_rss_mb = usage.ru_maxrss as f64 / 1024.0;
    Ok(Run { wall_s, peak_rss_mb, code, load1, other_cpu_s, log: log.to_path_buf(), stdout })
}

/// Like [`measure`], but a failure is an error quoting the end of the log.
pub(super) fn measure_ok(cmd: &mut Command, log: &Path, commands: &mut Vec<String>) -> Result<Run> {
    let run = measure(cmd, log, commands)?;
    if !run.ok() {
        bail!("{cmd:?} failed ({:?}); end of {}:\n{}", run.code, log.display(), tail(&run.log_text(), 15));
    }
    Ok(run)
}

pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------------------------------
// A quiet machine

/// Whether a command line is a `qdq eval|e2e|calibrate` run.
pub(super) fn is_qdq_run(argv: &[String]) -> bool {
    let exe = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a)).unwrap_or("");
    exe == "qdq" && argv.get(1).is_some_and(|c| matches!(c.as_str(), "eval" | "e2e" | "calibrate"))
}

/// utime + stime (clock ticks) from the text of `/proc/<pid>/stat`.
pub(super) fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime and stime are fields 14 and 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Per process: CPU clock ticks used so far and the command line.
pub(super) type Snapshot = BTreeMap<u32, (u64, Vec<String>)>;

pub(super) fn processes() -> Snapshot {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let (Ok(stat), Ok(cmdline)) =
            (std::fs::read_to_string(e.path().join("stat")), std::fs::read(e.path().join("cmdline")))
        else {
            continue;
        };
        let argv = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if let Some(t) = cpu_ticks(&stat) {
            out.insert(pid, (t, argv));
        }
    }
    out
}

/// Other processes that would disturb the timings: `qdq eval|e2e|calibrate` runs, and anything that used more than
/// half a core over a one-second sample.
pub(super) fn disturbers() -> Vec<String> {
    let before = processes();
    std::thread::sleep(Duration::from_secs(1));
    let after = processes();
    let mut out = Vec::new();
    for (pid, used, line) in cpu_between(&before, &after, std::process::id()) {
        let qdq = after.get(&pid).is_some_and(|(_, argv)| is_qdq_run(argv));
        if qdq || used > 0.5 {
            out.push(format!("pid {pid} ({:.0}% cpu): {line}", used * 100.0));
        }
    }
    out
}

/// CPU seconds each process other than `me` used between two snapshots (a process that started in between counts
/// whole), with its command line; processes that used nothing are left out.
pub(super) fn cpu_between(before: &Snapshot, after: &Snapshot, me: u32) -> Vec<(u32, f64, String)> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    after
        .iter()
        .filter(|(pid, _)| **pid != me)
        .filter_map(|(&pid, (ticks, argv))| {
            let used = ticks.saturating_sub(before.get(&pid).map_or(0, |(t, _)| *t));
            (used > 0).then(|| (pid, used as f64 / hz, argv.join(" ").chars().take(160).collect()))
        })
        .collect()
}

/// Waits (polling every 20 s) until [`disturbers`] finds nothing; returns the seconds waited.
pub(crate) fn wait_quiet(enabled: bool) -> f64 {
    if !enabled {
        return 0.0;
    }
    let started = Instant::now();
    let mut said = false;
    loop {
        let busy = disturbers();
        if busy.is_empty() {
            if said {
                eprintln!("xtask: quiet again after {:.0} s", started.elapsed().as_secs_f64());
            }
            return started.elapsed().as_secs_f64();
        }
        if !said {
            eprintln!(
                "xtask: waiting for a quiet machine before timing (--no-wait skips); busy:\n  {}",
                busy.join("\n  ")
            );
            said = true;
        }
        std::thread::sleep(Duration::from_secs(20));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Inputs
