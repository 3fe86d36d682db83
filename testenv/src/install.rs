//! Finding the `redis-server` binary, and installing Debian's package when it is missing.

use std::env;
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::Error;
use crate::error::tail;

/// The environment variable that names the `redis-server` binary explicitly.
const OVERRIDE_VAR: &str = "REDMUTEX_REDIS_SERVER";

/// Directories searched after `PATH`: test runners and CI often run with a trimmed `PATH`.
const SYSTEM_DIRS: [&str; 3] = ["/usr/bin", "/usr/sbin", "/usr/local/bin"];

/// The file that serializes installs between test processes running at once.
const INSTALL_LOCK_FILE: &str = "testenv-redis-install.lock";

/// Returns the path of the `redis-server` binary, installing it first if needed and possible.
///
/// The binary is `$REDMUTEX_REDIS_SERVER` if that is set, else `redis-server` on `PATH` or in
/// `/usr/bin`, `/usr/sbin` or `/usr/local/bin`. If none is found and we run as root where
/// `apt-get` exists, Debian's `redis-server` package is installed (once, even with many test
/// processes starting together). The answer is remembered for the life of the process.
///
/// # Errors
///
/// [`Error::BadOverride`] if the variable names no executable file, [`Error::NotFound`] if there is
/// no binary and no way to install one, [`Error::InstallFailed`] if `apt-get` failed.
pub fn redis_server_binary() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    if let Some(path) = FOUND.get() {
        return Ok(path.clone());
    }
    // Failures are not cached: they are cheap to recompute, and the next call may succeed.
    let path = find_or_install(env::var_os(OVERRIDE_VAR))?;
    Ok(FOUND.get_or_init(|| path).clone())
}

fn find_or_install(override_path: Option<OsString>) -> Result<PathBuf, Error> {
    if let Some(path) = override_path.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        // An explicit choice is never second-guessed by a search or an install.
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(Error::BadOverride { path })
        };
    }
    if let Some(path) = search("redis-server") {
        return Ok(path);
    }
    if !rustix::process::getuid().is_root() {
        return Err(Error::NotFound {
            reason: "not on PATH nor in /usr/bin, /usr/sbin, /usr/local/bin; \
                     not root, so not installing it"
                .into(),
        });
    }
    let Some(apt_get) = search("apt-get") else {
        return Err(Error::NotFound {
            reason: "not on PATH nor in /usr/bin, /usr/sbin, /usr/local/bin; \
                     no apt-get to install it with"
                .into(),
        });
    };
    install_with_lock(&apt_get)
}

/// Installs the package while holding a lock file, so parallel test processes install it once.
fn install_with_lock(apt_get: &Path) -> Result<PathBuf, Error> {
    let lock_path = env::temp_dir().join(INSTALL_LOCK_FILE);
    let lock = File::create(&lock_path).map_err(|e| {
        Error::io(
            format!("creating the install lock {}", lock_path.display()),
            e,
        )
    })?;
    lock.lock()
        .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;

    // Another process may have finished the install while we waited for the lock.
    if let Some(path) = search("redis-server") {
        return Ok(path);
    }
    eprintln!("testenv: redis-server not found; installing Debian's package with apt-get");
    run_apt(apt_get, &["update"])?;
    run_apt(
        apt_get,
        &[
            "install",
            "-y",
            "--no-install-recommends",
            // Wait for another apt (say, unattended upgrades) rather than fail at once.
            "-o",
            "DPkg::Lock::Timeout=300",
            "redis-server",
        ],
    )?;
    // The lock is released when `lock` is dropped, after the binary is in place.
    search("redis-server").ok_or_else(|| Error::InstallFailed {
        reason: "apt-get succeeded but no redis-server binary appeared".into(),
    })
}

fn run_apt(apt_get: &Path, args: &[&str]) -> Result<(), Error> {
    let step = format!("apt-get {}", args.join(" "));
    let output = Command::new(apt_get)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::InstallFailed {
            reason: format!("could not run `{step}`: {e}"),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Err(Error::InstallFailed {
        reason: format!("`{step}` {}:\n{}", output.status, tail(&text, 20)),
    })
}

/// Finds an executable by name on `PATH`, then in the usual system directories.
fn search(name: &str) -> Option<PathBuf> {
    let path_dirs = env::var_os("PATH")
        .map(|paths| env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_to_a_missing_file_is_rejected_without_searching() {
        let err = find_or_install(Some("/nonexistent/redis-server".into())).unwrap_err();
        assert!(matches!(err, Error::BadOverride { .. }), "{err:?}");
        assert!(err.to_string().contains("REDMUTEX_REDIS_SERVER"), "{err}");
    }

    #[test]
    fn override_to_a_directory_is_rejected() {
        let err = find_or_install(Some("/tmp".into())).unwrap_err();
        assert!(matches!(err, Error::BadOverride { .. }), "{err:?}");
    }

    #[test]
    fn override_to_an_executable_is_taken_as_is() {
        let path = find_or_install(Some("/bin/sh".into())).unwrap();
        assert_eq!(path, PathBuf::from("/bin/sh"));
    }

    #[test]
    fn empty_override_is_ignored() {
        // Falls through to the search (and maybe the install); either way not a BadOverride.
        let result = find_or_install(Some(OsString::new()));
        assert!(
            !matches!(result, Err(Error::BadOverride { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn not_found_message_says_what_to_do() {
        let err = Error::NotFound {
            reason: "test".into(),
        };
        assert!(err.to_string().contains(
            "install Debian's package `redis-server` (`apt-get install redis-server`) \
             or set REDMUTEX_REDIS_SERVER to the binary's path"
        ));
    }
}
