//! Finding the `redis-server` and `redis-cli` binaries, and installing Debian's packages when they
//! are missing.

use std::env;
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::Error;
use crate::error::tail;

/// A program testenv runs, the Debian package that ships it, and the variable that overrides it.
#[derive(Debug)]
pub(crate) struct Program {
    pub(crate) name: &'static str,
    pub(crate) package: &'static str,
    pub(crate) variable: &'static str,
}

pub(crate) const REDIS_SERVER: Program = Program {
    name: "redis-server",
    package: "redis-server",
    variable: "REDMUTEX_REDIS_SERVER",
};

// Debian's `redis-server` depends on `redis-tools`, so this is there whenever the server came from
// the package; the separate install covers a server taken from elsewhere.
pub(crate) const REDIS_CLI: Program = Program {
    name: "redis-cli",
    package: "redis-tools",
    variable: "REDMUTEX_REDIS_CLI",
};

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
    let path = find_or_install(&REDIS_SERVER, env::var_os(REDIS_SERVER.variable), None)?;
    Ok(FOUND.get_or_init(|| path).clone())
}

/// Returns the path of the `redis-cli` binary, the tool that joins Redis Cluster nodes, installing
/// it first if needed and possible.
///
/// The binary is `$REDMUTEX_REDIS_CLI` if that is set; else `redis-cli` beside
/// `$REDMUTEX_REDIS_SERVER` if that is set and has one (a build tree has both, of one version);
/// else `redis-cli` on `PATH` or in `/usr/bin`, `/usr/sbin` or `/usr/local/bin`. If none is found
/// and we run as root where `apt-get` exists, Debian's `redis-tools` package is installed (once).
/// The answer is remembered for the life of the process.
///
/// # Errors
///
/// As for [`redis_server_binary`], naming `redis-cli`, the package `redis-tools` and the variable
/// `REDMUTEX_REDIS_CLI`.
///
/// # Examples
///
/// ```
/// let cli = redmutex_testenv::redis_cli_binary().unwrap();
/// assert!(cli.ends_with("redis-cli"));
/// ```
pub fn redis_cli_binary() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    if let Some(path) = FOUND.get() {
        return Ok(path.clone());
    }
    let beside_server = env::var_os(REDIS_SERVER.variable)
        .filter(|p| !p.is_empty())
        .and_then(|server| Some(Path::new(&server).parent()?.join(REDIS_CLI.name)));
    let path = find_or_install(
        &REDIS_CLI,
        env::var_os(REDIS_CLI.variable),
        beside_server.as_deref(),
    )?;
    Ok(FOUND.get_or_init(|| path).clone())
}

/// Finds `program`: the override if set, else `first_choice` if it is executable, else a search;
/// installs its package if none is found and we can.
fn find_or_install(
    program: &Program,
    override_path: Option<OsString>,
    first_choice: Option<&Path>,
) -> Result<PathBuf, Error> {
    if let Some(path) = override_path.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        // An explicit choice is never second-guessed by a search or an install.
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(Error::BadOverride {
                program: program.name,
                variable: program.variable,
                path,
            })
        };
    }
    if let Some(path) = first_choice.filter(|path| is_executable(path)) {
        return Ok(path.to_owned());
    }
    if let Some(path) = search(program.name) {
        return Ok(path);
    }
    let not_found = |reason: &str| Error::NotFound {
        program: program.name,
        package: program.package,
        variable: program.variable,
        reason: reason.into(),
    };
    if !rustix::process::getuid().is_root() {
        return Err(not_found(
            "not on PATH nor in /usr/bin, /usr/sbin, /usr/local/bin; not root, so not installing it",
        ));
    }
    let Some(apt_get) = search("apt-get") else {
        return Err(not_found(
            "not on PATH nor in /usr/bin, /usr/sbin, /usr/local/bin; no apt-get to install it with",
        ));
    };
    install_with_lock(program, &apt_get)
}

/// Installs the package while holding a lock file, so parallel test processes install it once.
fn install_with_lock(program: &Program, apt_get: &Path) -> Result<PathBuf, Error> {
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
    if let Some(path) = search(program.name) {
        return Ok(path);
    }
    eprintln!(
        "testenv: {} not found; installing Debian's package {} with apt-get",
        program.name, program.package
    );
    run_apt(program, apt_get, &["update"])?;
    run_apt(
        program,
        apt_get,
        &[
            "install",
            "-y",
            "--no-install-recommends",
            // Wait for another apt (say, unattended upgrades) rather than fail at once.
            "-o",
            "DPkg::Lock::Timeout=300",
            program.package,
        ],
    )?;
    // The lock is released when `lock` is dropped, after the binary is in place.
    search(program.name).ok_or_else(|| Error::InstallFailed {
        package: program.package,
        variable: program.variable,
        reason: format!("apt-get succeeded but no {} binary appeared", program.name),
    })
}

fn run_apt(program: &Program, apt_get: &Path, args: &[&str]) -> Result<(), Error> {
    let step = format!("apt-get {}", args.join(" "));
    let output = Command::new(apt_get)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::InstallFailed {
            package: program.package,
            variable: program.variable,
            reason: format!("could not run `{step}`: {e}"),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Err(Error::InstallFailed {
        package: program.package,
        variable: program.variable,
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
        let err = find_or_install(
            &REDIS_SERVER,
            Some("/nonexistent/redis-server".into()),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, Error::BadOverride { .. }), "{err:?}");
        assert!(err.to_string().contains("REDMUTEX_REDIS_SERVER"), "{err}");
    }

    #[test]
    fn override_to_a_directory_is_rejected() {
        let err = find_or_install(&REDIS_SERVER, Some("/tmp".into()), None).unwrap_err();
        assert!(matches!(err, Error::BadOverride { .. }), "{err:?}");
    }

    #[test]
    fn override_to_an_executable_is_taken_as_is() {
        let path = find_or_install(&REDIS_SERVER, Some("/bin/sh".into()), None).unwrap();
        assert_eq!(path, PathBuf::from("/bin/sh"));
    }

    #[test]
    fn empty_override_is_ignored() {
        // Falls through to the search (and maybe the install); either way not a BadOverride.
        let result = find_or_install(&REDIS_SERVER, Some(OsString::new()), None);
        assert!(
            !matches!(result, Err(Error::BadOverride { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn cli_override_names_its_own_variable() {
        let err =
            find_or_install(&REDIS_CLI, Some("/nonexistent/redis-cli".into()), None).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("REDMUTEX_REDIS_CLI"), "{message}");
        assert!(message.contains("redis-cli binary"), "{message}");
    }

    #[test]
    fn first_choice_wins_over_the_search_when_executable() {
        let path = find_or_install(&REDIS_CLI, None, Some(Path::new("/bin/sh"))).unwrap();
        assert_eq!(path, PathBuf::from("/bin/sh"));
        // A first choice that is not there falls through to the search.
        let result = find_or_install(&REDIS_CLI, None, Some(Path::new("/nonexistent/redis-cli")));
        assert_ne!(result.ok(), Some(PathBuf::from("/nonexistent/redis-cli")));
    }

    #[test]
    fn not_found_message_says_what_to_do() {
        let err = Error::NotFound {
            program: REDIS_SERVER.name,
            package: REDIS_SERVER.package,
            variable: REDIS_SERVER.variable,
            reason: "test".into(),
        };
        assert!(err.to_string().contains(
            "install Debian's package `redis-server` (`apt-get install redis-server`) \
             or set REDMUTEX_REDIS_SERVER to the binary's path"
        ));
        let err = Error::NotFound {
            program: REDIS_CLI.name,
            package: REDIS_CLI.package,
            variable: REDIS_CLI.variable,
            reason: "test".into(),
        };
        assert!(
            err.to_string().starts_with("redis-cli not found (test)"),
            "{err}"
        );
        assert!(err.to_string().contains(
            "install Debian's package `redis-tools` (`apt-get install redis-tools`) \
             or set REDMUTEX_REDIS_CLI to the binary's path"
        ));
    }
}
