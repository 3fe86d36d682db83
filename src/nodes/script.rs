//! The Lua scripts as the nodes receive them: each assembled at build time from its `.lua` file
//! under `src/` (see `build.rs`: a file's header comment is its documentation and is not sent; a
//! line `--- @include "piece.lua"` takes in a shared piece), with its SHA1 digest, for EVALSHA.
//!
//! One reply convention for all of them (see `engine::request::Request::interpret`): an acquire
//! script answers the fencing counter (`0` or more; `0` where none was asked for) when it took the
//! lock and `-1` when another owner holds it; every other script answers `1` when it acted on our
//! value, `0` when the lock is gone and `-1` when another owner's value holds it, so the caller
//! can tell an expired lock from a taken one. Anything else is an error reply with a message. Only
//! acquire scripts create keys: a lock that expired stays expired.
//!
//! Scripts check everything before they write: Redis does not undo a script's writes when it
//! fails halfway.

/// A script: where it was written, its text as sent, and its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Script {
    /// Its file, under `src/`.
    path: &'static str,
    text: &'static str,
    /// SHA1 of the text, in lowercase hex.
    digest: &'static str,
}

impl Script {
    /// Made by [`lua!`], from what the build script wrote.
    pub(crate) const fn new(path: &'static str, text: &'static str, digest: &'static str) -> Script {
        Script { path, text, digest }
    }

    /// The file the script was assembled from, under `src/`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) const fn path(&self) -> &'static str {
        self.path
    }

    /// The text as sent with EVAL and SCRIPT LOAD.
    pub(crate) const fn text(&self) -> &'static str {
        self.text
    }

    /// The digest EVALSHA names the script by.
    pub(crate) const fn digest(&self) -> &'static str {
        self.digest
    }
}

/// The script assembled from `src/<path>`, a `.lua` file: `lua!("primitives/mutex/release.lua")`.
macro_rules! lua {
    ($path:literal) => {
        $crate::nodes::script::Script::new(
            $path,
            include_str!(concat!(env!("OUT_DIR"), "/lua/", $path)),
            include_str!(concat!(env!("OUT_DIR"), "/lua/", $path, ".sha1")),
        )
    };
}
pub(crate) use lua;
