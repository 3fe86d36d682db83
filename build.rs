//! Assembles the Lua scripts under `src/` for `include_str!` (see `src/nodes/script.rs`).
//!
//! Each `.lua` file under `src/` is one script, or a piece that scripts include. A file starts with
//! its header, the comment lines (`--`) before its first other line: the script's documentation,
//! which is not sent to the nodes. The rest is sent as it is, from the blank line after the header,
//! but for the lines `--- @include "piece.lua"` (a path relative to the file), each replaced by that
//! file, assembled the same way. For every file, `OUT_DIR/lua/<path under src>` receives the
//! assembled text, `.sha1` its SHA1 in hex (the digest EVALSHA names it by), and `.origin` the file
//! and line each assembled line comes from, one per line, for the test that loads every script and
//! reports a syntax error where it was written. `benches/node_instructions.sh` assembles the same
//! way, in awk.

use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let src = Path::new("src");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("lua");
    let mut files = Vec::new();
    lua_files(src, &mut files);
    files.sort();
    for file in &files {
        println!("cargo::rerun-if-changed={}", file.display());
        let mut text = String::new();
        let mut origin = String::new();
        assemble(file, &mut Vec::new(), &mut text, &mut origin);
        let relative = file.strip_prefix(src).expect("found under src");
        let target = out.join(relative);
        fs::create_dir_all(target.parent().expect("a file has a folder"))
            .expect("OUT_DIR is writable");
        let digest = sha1_smol::Sha1::from(&text).digest().to_string();
        write(&target, &text);
        write(&with_suffix(&target, ".sha1"), &digest);
        write(&with_suffix(&target, ".origin"), &origin);
    }
    // A folder that gains or loses a script, or a script that moves.
    println!("cargo::rerun-if-changed=src");
}

/// Every `.lua` file under `dir`.
fn lua_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a readable folder").path();
        if path.is_dir() {
            lua_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "lua") {
            files.push(path);
        }
    }
}

/// Appends `file`, assembled, to `text`, and where each line came from to `origin`. `within` is the
/// chain of files including this one, so that a file including itself is an error, not a loop.
fn assemble(file: &Path, within: &mut Vec<PathBuf>, text: &mut String, origin: &mut String) {
    if within.iter().any(|outer| outer == file) {
        panic!("{}: includes itself (through {within:?})", file.display());
    }
    let source = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    within.push(file.to_owned());
    let mut header = true;
    for (number, line) in source.lines().enumerate() {
        let include = line
            .strip_prefix("--- @include \"")
            .and_then(|rest| rest.strip_suffix('"'));
        if header && line.starts_with("--") && include.is_none() {
            continue;
        }
        header = false;
        match include {
            Some(piece) => {
                let piece = file.parent().expect("a file has a folder").join(piece);
                assemble(&piece, within, text, origin);
            }
            None => {
                text.push_str(line);
                text.push('\n');
                origin.push_str(&format!("{}:{}\n", file.display(), number + 1));
            }
        }
    }
    within.pop();
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes `text` unless the file holds it already, so that an unchanged script does not make
/// cargo build the crate again.
fn write(path: &Path, text: &str) {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
