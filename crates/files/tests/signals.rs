//! SIGINT and SIGTERM during a commit: the output is put in place whole, then the process ends by the signal.
//! Each case runs in a child process (this test binary again, with `FILES_CHILD` naming the case), because the
//! signal ends it.

#![cfg(unix)]

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::Command;

const BYTES: usize = 3 << 20;

fn payload() -> Vec<u8> {
    (0..BYTES).map(|i| (i % 251) as u8).collect()
}

/// The child's side: defer, then signal ourselves at the point the case names and write `out.bin` in `dir`.
fn child(case: &str, dir: &Path) {
    qdq_files::signals::defer_during_commits();
    let path = dir.join("out.bin");
    // `raise` signals this thread, so the handler runs before it returns; `kill(getpid())` let another thread of the
    // test harness take it while this one ran on into `unreachable!` (a failure under load).
    let raise = |sig| unsafe {
        libc::raise(sig);
    };
    match case {
        // The signal arrives inside a hold (as it would inside a commit's sync): the file still lands whole.
        "held" => {
            let held = qdq_files::signals::hold();
            raise(libc::SIGTERM);
            qdq_files::write_atomic(&path, &payload()).unwrap();
            // A second output committed under the same hold: the pair lands together.
            qdq_files::write_atomic(&dir.join("second.bin"), b"2").unwrap();
            drop(held);
            unreachable!("the held SIGTERM ends the process when the hold drops");
        }
        // The signal arrives while the output is being written, before its commit: nothing appears.
        "writing" => {
            let mut file = qdq_files::AtomicFile::create(&path).unwrap();
            file.write_all(&payload()).unwrap();
            raise(libc::SIGINT);
            unreachable!("SIGINT outside a hold ends the process at once");
        }
        // Scratch files a signal ends the process with are removed; one whose guard dropped stays.
        "scratch" => {
            let scratch = dir.join("scratch");
            std::fs::create_dir(&scratch).unwrap();
            let _dir = qdq_files::signals::remove_on_signal(&scratch);
            let big = scratch.join("augmented.onnx");
            std::fs::write(&big, payload()).unwrap();
            let _big = qdq_files::signals::remove_on_signal(&big);
            let kept = dir.join("kept.txt");
            std::fs::write(&kept, b"k").unwrap();
            drop(qdq_files::signals::remove_on_signal(&kept));
            raise(libc::SIGINT);
            unreachable!("SIGINT ends the process");
        }
        // A run directory the run made: removed when nothing was written yet, marked when something was.
        "run_empty" | "run_written" => {
            qdq_files::signals::say_on_signal("test: interrupted");
            let _run = qdq_files::RunDir::open(&dir.join("out/run"), "the test").unwrap();
            if case == "run_written" {
                qdq_files::write_atomic(&dir.join("out/run/model.onnx"), b"m").unwrap();
            }
            raise(libc::SIGINT);
            unreachable!("SIGINT ends the process");
        }
        other => panic!("unknown case {other}"),
    }
}

fn run_child(case: &str, test: &str) -> (std::process::ExitStatus, tempfile::TempDir) {
    let (output, dir) = run_child_saying(case, test);
    (output.status, dir)
}

fn run_child_saying(case: &str, test: &str) -> (std::process::Output, tempfile::TempDir) {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    // The child starts with SIGINT and SIGTERM at their defaults: tests run as a background job of a script inherit
    // SIGINT ignored, and the library rightly keeps a signal ignored that the process started with ignored.
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe, runs.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let output = command
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("FILES_CHILD", case)
        .env("FILES_CHILD_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    (output, dir)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn as_child() -> bool {
    if let (Ok(case), Some(dir)) = (std::env::var("FILES_CHILD"), std::env::var_os("FILES_CHILD_DIR")) {
        child(&case, Path::new(&dir));
        true
    } else {
        false
    }
}

#[test]
fn a_signal_during_a_hold_waits_for_the_commit() {
    if as_child() {
        return;
    }
    let (status, dir) = run_child("held", "a_signal_during_a_hold_waits_for_the_commit");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the child should end by the held SIGTERM: {status}");
    assert_eq!(names(dir.path()), ["out.bin", "second.bin"], "both outputs whole, no temporary name");
    assert_eq!(std::fs::read(dir.path().join("out.bin")).unwrap(), payload());
}

#[test]
fn a_signal_before_the_commit_leaves_nothing() {
    if as_child() {
        return;
    }
    let (status, dir) = run_child("writing", "a_signal_before_the_commit_leaves_nothing");
    assert_eq!(status.signal(), Some(libc::SIGINT), "the child should end by SIGINT at once: {status}");
    assert!(names(dir.path()).is_empty(), "left {:?}", names(dir.path()));
}

#[test]
fn scratch_files_go_with_the_signal() {
    if as_child() {
        return;
    }
    let (status, dir) = run_child("scratch", "scratch_files_go_with_the_signal");
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status}");
    assert_eq!(names(dir.path()), ["kept.txt"], "the scratch directory and its file removed, nothing else");
}

#[test]
fn an_interrupted_run_that_wrote_nothing_leaves_nothing() {
    if as_child() {
        return;
    }
    let (o, dir) = run_child_saying("run_empty", "an_interrupted_run_that_wrote_nothing_leaves_nothing");
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{}", o.status);
    assert!(names(dir.path()).is_empty(), "left {:?}", names(dir.path()));
    let said = String::from_utf8_lossy(&o.stderr);
    let line = said.lines().find(|l| l.starts_with("test: interrupted")).unwrap_or_else(|| panic!("{said}"));
    assert!(line.contains("nothing was written") && line.contains("out/run removed"), "{said}");
}

#[test]
fn an_interrupted_run_that_wrote_files_is_marked_unfinished() {
    if as_child() {
        return;
    }
    let (o, dir) = run_child_saying("run_written", "an_interrupted_run_that_wrote_files_is_marked_unfinished");
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{}", o.status);
    let run = dir.path().join("out/run");
    assert_eq!(names(&run), [qdq_files::INCOMPLETE, "model.onnx"]);
    let marker = std::fs::read_to_string(run.join(qdq_files::INCOMPLETE)).unwrap();
    assert!(marker.starts_with("the test writes its outputs here and has not finished"), "{marker}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.lines().any(|l| l.starts_with("test: interrupted") && l.ends_with("INCOMPLETE marks it)")), "{said}");
}

/// Without a signal: finished, the marker goes; dropped unfinished, a directory that existed keeps its files and
/// loses the marker when nothing was written, keeps it when something was.
#[test]
fn a_run_directory_is_marked_until_it_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a/b");
    let run = qdq_files::RunDir::open(&out, "t").unwrap();
    assert_eq!(names(&out), [qdq_files::INCOMPLETE]);
    drop(run);
    assert!(names(tmp.path()).is_empty(), "both made directories go: {:?}", names(tmp.path()));
    std::fs::create_dir(tmp.path().join("old")).unwrap();
    std::fs::write(tmp.path().join("old/results.json"), b"{}").unwrap();
    // A file older than the run: filesystems keep times coarsely, so the run starts visibly later.
    std::thread::sleep(std::time::Duration::from_millis(20));
    drop(qdq_files::RunDir::open(&tmp.path().join("old"), "t").unwrap());
    assert_eq!(names(&tmp.path().join("old")), ["results.json"]);
    let run = qdq_files::RunDir::open(&tmp.path().join("old"), "t").unwrap();
    qdq_files::write_atomic(&tmp.path().join("old/results.json"), b"{\"new\": 1}").unwrap();
    drop(run);
    assert_eq!(names(&tmp.path().join("old")), [qdq_files::INCOMPLETE, "results.json"]);
    let run = qdq_files::RunDir::open(&tmp.path().join("old"), "t").unwrap();
    run.finish().unwrap();
    assert_eq!(names(&tmp.path().join("old")), ["results.json"]);
    // A file on the way, and a directory that cannot be written: errors, nothing made.
    let e = qdq_files::RunDir::open(&tmp.path().join("old/results.json/x"), "t").err().unwrap();
    assert!(e.to_string().contains("results.json is a file"), "{e}");
}

#[test]
fn an_existing_file_is_replaced_whole_and_a_discarded_one_never_appears() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.txt");
    qdq_files::write_atomic(&path, b"old").unwrap();
    qdq_files::write_atomic(&path, b"new").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    let mut f = qdq_files::AtomicFile::create(dir.path().join("b.txt")).unwrap();
    f.write_all(b"x").unwrap();
    f.discard().unwrap();
    assert_eq!(names(dir.path()), ["a.txt"]);
}

#[test]
fn inputs_must_be_regular_files_within_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let err = qdq_files::read_regular(dir.path(), 10).unwrap_err();
    assert!(err.to_string().starts_with("a directory, not a regular file"), "{err}");
    let err = qdq_files::read_regular(Path::new("/dev/null"), 10).unwrap_err();
    assert!(err.to_string().starts_with("a device"), "{err}");
    let path = dir.path().join("big");
    std::fs::write(&path, [0u8; 11]).unwrap();
    let err = qdq_files::read_regular(&path, 10).unwrap_err();
    assert!(err.to_string().contains("11 bytes, more than the 10"), "{err}");
    assert_eq!(qdq_files::read_regular(&path, 11).unwrap().len(), 11);
}
