//! Negative controls of the nemesis soak (examples/soak): with a known safety bug patched into a
//! copy of the crate, the soak must fail within a short run, naming the property the bug breaks.
//! The library has no switch for such bugs: each control copies the repository into the target
//! directory, replaces one line of the copy (failing loudly when the line is gone, so that a
//! control never silently tests the unpatched code), builds the copy's soak in the same target
//! directory (the dependencies are built already, so only redmutex, testenv and the soak compile)
//! and runs it. Cargo names a path package's artifacts by its place in its workspace, not by
//! the workspace's path, so the copies build to the very files of the repository's own build:
//! the controls run one at a time, and the repository's next build compiles those three again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Held by the control that builds and runs: two would build to the same files.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A bug to patch in: the file, the line as it is, what replaces it, and the violation it must
/// cause.
struct Bug {
    name: &'static str,
    file: &'static str,
    line: &'static str,
    patched: &'static str,
    violation: &'static str,
}

/// A run this long finds either bug (each breaks every contended acquisition of its kind).
const SECONDS: &str = "15";
/// The seed: faults do not matter for these bugs, any seed finds them.
const SEED: &str = "2";

/// A reader admitted while a writer (or a mutex) holds the name: the read script skips its check
/// of the name's key.
const READER_BESIDE_WRITER: Bug = Bug {
    name: "reader-beside-writer",
    file: "src/primitives/rwlock/read_acquire.lua",
    line: "if current[1] and current[1] ~= 'redmutex:readers' then return -1 end",
    patched: "-- the check of a writer's key, patched out by a soak control",
    violation: "reader-beside-writer",
};

/// A multi-name entry counted on a node where only some of its names were taken.
const MULTI_NAME_PARTIAL: Bug = Bug {
    name: "multi-name-partial",
    file: "src/primitives/multi/mod.rs",
    line: "if taken == sets.len() {",
    patched: "if taken > 0 {",
    violation: "multi-name",
};

#[test]
#[ignore = "builds a patched copy of the crate and runs its soak: minutes"]
fn the_soak_finds_a_reader_admitted_beside_a_writer() {
    control(&READER_BESIDE_WRITER);
}

#[test]
#[ignore = "builds a patched copy of the crate and runs its soak: minutes"]
fn the_soak_finds_a_multi_name_lock_counted_on_part_of_its_names() {
    control(&MULTI_NAME_PARTIAL);
}

fn control(bug: &Bug) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = target_dir();
    let copy = target.join("soak-controls").join(bug.name);
    if copy.exists() {
        std::fs::remove_dir_all(&copy).expect("the previous copy goes");
    }
    copy_tree(root, &copy, &target);
    patch(&copy.join(bug.file), bug.line, bug.patched);

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // The whole workspace, as the test run that built the dependencies, so that their features
    // resolve the same and none is built again.
    let build = Command::new(cargo)
        .current_dir(&copy)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--locked", "--workspace", "--example", "soak"])
        .args(["--message-format", "json-render-diagnostics"])
        .output()
        .expect("cargo runs");
    assert!(
        build.status.success(),
        "{}: the patched copy does not build:\n{}",
        bug.name,
        String::from_utf8_lossy(&build.stderr)
    );
    let soak = executable(&String::from_utf8_lossy(&build.stdout), &copy);

    let run = Command::new(&soak)
        .args(["--seconds", SECONDS, "--seed", SEED])
        .output()
        .expect("the soak runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    // The histories of a failed run are kept: not these.
    if let Some(kept) = stdout
        .lines()
        .find_map(|line| line.strip_prefix("soak: histories kept in "))
    {
        let _ = std::fs::remove_dir_all(kept);
    }
    std::fs::remove_dir_all(&copy).expect("the copy goes");
    let summary = stdout
        .lines()
        .find(|line| line.starts_with("soak: violations by kind"))
        .unwrap_or_else(|| {
            panic!(
                "{}: no summary in the soak's output:\n{stdout}\n{}",
                bug.name,
                String::from_utf8_lossy(&run.stderr)
            )
        });
    assert!(
        !run.status.success(),
        "{}: the soak passed with the bug in: {summary}",
        bug.name
    );
    assert!(
        summary.contains(&format!("\"{}\"", bug.violation)),
        "{}: the soak failed without a {} violation: {summary}",
        bug.name,
        bug.violation
    );
}

/// The target directory this test binary was built in (`<target>/debug/deps/suite-...`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<binary>")
        .to_owned()
}

/// Copies the repository at `from` to `to`, leaving out the target directory, Git's own files
/// and npm's packages.
fn copy_tree(from: &Path, to: &Path, target: &Path) {
    std::fs::create_dir_all(to).expect("a directory for the copy");
    for entry in std::fs::read_dir(from).expect("a readable tree") {
        let entry = entry.expect("a readable entry");
        let path = entry.path();
        let name = entry.file_name();
        if path == target || name == ".git" || name == "target" || name == "node_modules" {
            continue;
        }
        let file_type = entry.file_type().expect("a file type");
        if file_type.is_dir() {
            copy_tree(&path, &to.join(&name), target);
        } else if file_type.is_file() {
            std::fs::copy(&path, to.join(&name)).expect("a copied file");
        }
    }
}

/// Replaces the one occurrence of `line` in `file`; panics if it is not there exactly once.
fn patch(file: &Path, line: &str, patched: &str) {
    let text = std::fs::read_to_string(file).expect("the file to patch");
    assert_eq!(
        text.matches(line).count(),
        1,
        "{} no longer holds `{line}` exactly once: update the soak control",
        file.display()
    );
    std::fs::write(file, text.replacen(line, patched, 1)).expect("the patched file");
}

/// The path of the soak built from `copy`, from cargo's JSON messages.
fn executable(messages: &str, copy: &Path) -> PathBuf {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == "soak")
        .filter(|message| {
            message["manifest_path"]
                .as_str()
                .is_some_and(|path| Path::new(path).starts_with(copy))
        })
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the soak it built")
}
