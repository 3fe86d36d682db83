//! `redmutex`: run a command under a distributed lock held on a quorum of Redis nodes, and the
//! operator's tools around such locks (status, forced unlock, node checks).
//!
//! A thin shell over the `redmutex` library's public API; its documentation is `cli/README.md`.

mod args;
mod clock;
mod doctor;
mod duration;
mod elect;
mod enforcer;
mod exit;
mod guard;
mod members;
mod metrics;
mod redact;
mod run;
mod schedule;
mod status;
mod supervise;
mod tree;
mod waiting;
mod wire;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use redmutex::{Error, Redlock};

use crate::args::{Cli, Command};
use crate::exit::{OS_ERROR, USAGE, fail};
use crate::redact::redact;

fn main() -> ExitCode {
    // The enforcer of `run` and `elect` is this binary run again; it parses its own arguments.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == enforcer::SUBCOMMAND) {
        return enforcer::main(&args[2..]);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            if error.use_stderr() {
                // clap echoes arguments, which may be URLs with passwords.
                let _ = write!(io::stderr(), "{}", redact(&error.render().to_string()));
                if let Some(hint) = args::hint(&error, &args) {
                    let _ = writeln!(io::stderr(), "\n{hint}");
                }
                return ExitCode::from(USAGE);
            }
            // --help and --version: fixed text, no argument echoed.
            let _ = write!(io::stdout(), "{}", error.render());
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(OS_ERROR, format!("cannot start the runtime: {error}")),
    };
    let metrics_file = cli.metrics_file.clone();
    let recorder = match metrics_file
        .as_ref()
        .map(|_| metrics::install())
        .transpose()
    {
        Ok(recorder) => recorder,
        Err(message) => return fail(OS_ERROR, message),
    };
    let code = runtime.block_on(dispatch(cli));
    if let (Some(path), Some(handle)) = (metrics_file, recorder) {
        // The command's exit code stands: a snapshot that cannot be written is only reported.
        if let Err(message) = metrics::write(&handle, &path) {
            exit::say(message);
        }
    }
    code
}

async fn dispatch(cli: Cli) -> ExitCode {
    let urls = match node_urls(cli.nodes) {
        Ok(urls) => urls,
        Err(message) => return fail(USAGE, message),
    };
    let redlock = match Redlock::connect(&urls).await {
        Ok(redlock) => redlock,
        // The entries are the operator's list: name the option, not the library's field.
        Err(Error::Config { field, rule }) if field.starts_with("urls") => {
            return fail(USAGE, format!("--nodes: {rule}"));
        }
        Err(error) => return fail(USAGE, error.to_string()),
    };
    match cli.command {
        Command::Run(args) => run::run(&redlock, args).await,
        Command::Elect(args) => elect::elect(&redlock, args).await,
        Command::Status(args) => status::status(&redlock, args).await,
        Command::Unlock(args) => status::unlock(&redlock, args).await,
        Command::Doctor(args) => doctor::doctor(&redlock, args).await,
    }
}

/// The node URLs from `--nodes`, else from `REDMUTEX_NODES`.
fn node_urls(option: Option<String>) -> Result<Vec<String>, String> {
    let list = match option {
        Some(list) => list,
        None => std::env::var("REDMUTEX_NODES").unwrap_or_default(),
    };
    let urls: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect();
    if urls.is_empty() {
        return Err("no nodes: give --nodes URL,URL,... or set REDMUTEX_NODES".to_owned());
    }
    Ok(urls)
}
