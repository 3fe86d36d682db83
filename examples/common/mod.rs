//! What the examples share: where the Redis nodes come from.

use std::env::VarError;
use std::process::ExitCode;

/// Any error, for examples that report and exit.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The node URLs from `REDMUTEX_NODES` (comma-separated), or else 5 local nodes started for this
/// run, returned with the cluster that owns them (dropping it stops them).
pub fn nodes() -> Result<(Vec<String>, Option<redmutex_testenv::Cluster>), BoxError> {
    match std::env::var("REDMUTEX_NODES") {
        Ok(list) => {
            let urls = list
                .split(',')
                .map(str::trim)
                .filter(|url| !url.is_empty())
                .map(String::from)
                .collect();
            Ok((urls, None))
        }
        Err(VarError::NotPresent) => {
            let cluster = redmutex_testenv::Cluster::try_start(5)?;
            Ok((cluster.urls(), Some(cluster)))
        }
        Err(VarError::NotUnicode(_)) => Err("REDMUTEX_NODES is not valid UTF-8".into()),
    }
}

/// The exit code for an example's outcome: success only if it ran and showed what it should.
pub fn exit_code(outcome: Result<bool, BoxError>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
