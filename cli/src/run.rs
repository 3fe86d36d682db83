//! `redmutex run`: take the lock, run the command under it, release it.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use redmutex::{Error, Lock, Mutex, Redlock};
use rustix::process::Signal;

use crate::args::RunArgs;
use crate::duration::shown;
use crate::exit::{
    CANNOT_EXECUTE, HELD, LOST, NOT_FOUND, OS_ERROR, UNAVAILABLE, USAGE, acquire_code, advised,
    fail, same_server, say,
};
use crate::guard::{Guard, NotStarted, Spec};
use crate::members::Members;
use crate::supervise::{KeptLock, Outcome, Signals, supervise};
use crate::tree::adopt_orphans;
use crate::waiting::tell_holder;

/// The per-node timeout as a fraction of the expiry (the library's default, spelled out because
/// the cleanup pause below depends on it).
const TIMEOUT_FACTOR: f64 = 0.05;

/// Extensions per expiry while the command runs.
const EXTENSIONS_PER_EXPIRY: u32 = 3;

pub async fn run(redlock: &Redlock, args: RunArgs) -> ExitCode {
    if args.name.is_empty() {
        return counted("usage", fail(USAGE, "NAME must not be empty"));
    }
    let Some((program, program_args)) = args.command.split_first() else {
        return counted("usage", fail(USAGE, "no COMMAND given after --"));
    };
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            return counted(
                "error",
                fail(OS_ERROR, format!("cannot handle signals: {error}")),
            );
        }
    };
    let mutex = redlock
        .new_mutex(args.name.as_str())
        .with_expiry(args.expiry())
        .with_timeout_factor(TIMEOUT_FACTOR)
        .with_fencing(args.fencing)
        .with_fail_fast(args.fail_fast)
        .with_wake_on_release(true);
    let acquired = tokio::select! {
        acquired = acquire(&mutex, &args) => acquired,
        signal = signals.pass_on() => {
            // A lock() cut short releases what it took in the background: give that time to go out.
            cleanup_pause(&args).await;
            return counted("signal", ExitCode::from(signal_code(signal)));
        }
    };
    let lock = match acquired {
        Ok(lock) => lock,
        Err((outcome, code)) => return counted(outcome, code),
    };
    let taken = Instant::now();

    let interval = args.expiry() / EXTENSIONS_PER_EXPIRY;
    let fingerprint = lock.fingerprint();
    if args.talk.verbose {
        let token = lock
            .token()
            .map(|t| format!(", token {t}"))
            .unwrap_or_default();
        say(format!(
            "{}: acquired, fingerprint {fingerprint}{token}",
            args.name
        ));
    }
    let mut env = vec![
        ("REDMUTEX_NAME", args.name.clone()),
        ("REDMUTEX_FINGERPRINT", fingerprint),
    ];
    if let Some(token) = lock.token() {
        env.push(("REDMUTEX_TOKEN", token.to_string()));
    }
    let spec = Spec {
        program,
        args: program_args,
        env,
        grace: args.grace,
        interval,
    };
    let mut guard = match start(&spec, lock.valid_until()).await {
        Ok(guard) => guard,
        Err((code, message)) => {
            release(&lock).await;
            let outcome = if code == OS_ERROR {
                "error"
            } else {
                "not_started"
            };
            return counted(outcome, fail(code, message));
        }
    };

    let mut members = Members::new(&args.name, args.talk.quiet);
    members.taken(lock.failing_nodes(), redlock.len());
    let mut kept = KeptLock::new(&lock, &mutex, interval, args.grace);
    let outcome = supervise(
        &mut guard,
        &mut kept,
        &mut members,
        args.grace,
        interval,
        &mut signals,
    )
    .await;
    drop(kept);
    let code = match outcome {
        Outcome::Exited(status) => {
            match args.hold_at_least {
                // The lock expires on the nodes an expiry (at least D) after it was taken, or
                // later: left there, nobody takes it sooner.
                Some(at_least) if taken.elapsed() < at_least => lock.clone().leave(),
                _ => release(&lock).await,
            }
            let code = status_code(status);
            counted(code.to_string(), ExitCode::from(code))
        }
        Outcome::Lost => {
            // Nodes that still hold this lock's value let go, so the next holder need not wait.
            let _ = lock.unlock().await;
            counted("lost", ExitCode::from(LOST))
        }
        Outcome::EnforcerGone(how) => {
            release(&lock).await;
            let message = format!(
                "{how}: killed the command's process group, which nothing would have ended in \
                 time were redmutex stopped; the lock is released"
            );
            counted("error", fail(OS_ERROR, message))
        }
    };
    guard.finish().await;
    code
}

/// Starts COMMAND under its enforcer, or gives the exit code and message for why not.
pub async fn start(spec: &Spec<'_>, valid_until: Instant) -> Result<Guard, (u8, String)> {
    // Orphans of COMMAND's tree come here should the enforcer die.
    if let Err(error) = adopt_orphans() {
        return Err((
            OS_ERROR,
            format!("cannot become the subreaper of the command's orphans: {error}"),
        ));
    }
    Guard::start(spec, valid_until)
        .await
        .map_err(|not_started| match not_started {
            NotStarted::Command(error) => {
                let code = match error.kind() {
                    ErrorKind::NotFound => NOT_FOUND,
                    _ => CANNOT_EXECUTE,
                };
                let program = spec.program.to_string_lossy();
                (code, format!("cannot run {program}: {error}"))
            }
            NotStarted::Enforcer(why) => (
                OS_ERROR,
                format!("cannot start the enforcer, so the command was not run: {why}"),
            ),
        })
}

/// Counts the run in `redmutex_run_total` (for `--metrics-file`) with `outcome`: the command's
/// status when it ran and exited, else what kept it from running or ended it.
fn counted(outcome: impl Into<metrics::SharedString>, code: ExitCode) -> ExitCode {
    metrics::counter!("redmutex_run_total", "outcome" => outcome.into()).increment(1);
    code
}

/// The outcome label of a run whose lock was not taken, by its exit code.
fn not_acquired(code: u8) -> &'static str {
    match code {
        HELD => "held",
        UNAVAILABLE => "unavailable",
        USAGE => "usage",
        _ => "error",
    }
}

/// Takes the lock as the options say, or says why not and gives the exit code (and the outcome
/// label of the run).
async fn acquire(mutex: &Mutex, args: &RunArgs) -> Result<Lock, (&'static str, ExitCode)> {
    let started = Instant::now();
    let error = match mutex.try_lock().await {
        Ok(lock) => return one_vote_per_server(lock).await,
        Err(error) => error,
    };
    let code = acquire_code(&error);
    // Too few nodes answered (69) or bad settings (64): waiting would not help.
    if args.no_wait || code != HELD {
        return Err((not_acquired(code), fail(code, why(&args.name, &error))));
    }
    let waiting = mutex
        .clone()
        .with_tries(u32::MAX)
        // Release notices wake the waiter; this delay is the fallback for a lost notice.
        .with_retry_delay_fn(|_| Duration::from_millis(rand::random_range(250..1000)));
    // The wait, with a line about the holder now and then unless --quiet.
    let wait = async {
        tokio::select! {
            waited = waiting.lock() => waited,
            never = tell_holder(mutex), if !args.talk.quiet => match never {},
        }
    };
    let waited = match args.wait {
        None => wait.await,
        Some(limit) => {
            let left = limit.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, wait).await {
                Ok(waited) => waited,
                Err(_) => {
                    cleanup_pause(args).await;
                    return Err((
                        "held",
                        fail(
                            HELD,
                            format!("{}: still held after waiting {}", args.name, shown(limit)),
                        ),
                    ));
                }
            }
        }
    };
    match waited {
        Ok(lock) => one_vote_per_server(lock).await,
        Err(error) => {
            let code = acquire_code(&error);
            Err((not_acquired(code), fail(code, why(&args.name, &error))))
        }
    }
}

fn why(name: &str, error: &Error) -> String {
    match error {
        Error::Taken { .. } => format!("{name}: held elsewhere"),
        other => advised(format!("{name}: {other}"), other),
    }
}

/// After a `lock()` was cut short: the release of its last attempt runs in the background, and
/// must go out before the process ends. It is bounded by the node timeout.
async fn cleanup_pause(args: &RunArgs) {
    tokio::time::sleep(args.expiry.mul_f64(TIMEOUT_FACTOR)).await;
}

/// `lock`, unless two members turned out to be one server: then it is released, and the list
/// of nodes is refused (see `exit::same_server`).
async fn one_vote_per_server(lock: Lock) -> Result<Lock, (&'static str, ExitCode)> {
    match same_server(&lock.failing_nodes()) {
        None => Ok(lock),
        Some(message) => {
            release(&lock).await;
            Err(("usage", fail(USAGE, message)))
        }
    }
}

/// Releases the lock after the command; a failure only costs others the rest of the expiry.
async fn release(lock: &Lock) {
    if let Err(error) = lock.unlock().await {
        say(format!(
            "could not release the lock {} ({error}); it expires on its own",
            lock.name()
        ));
    }
}

/// The command's status as a shell reports it: its exit code, or 128 + the signal that ended it.
pub fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(u8::MAX),
        (None, None) => u8::MAX,
    }
}

pub fn signal_code(signal: Signal) -> u8 {
    u8::try_from((128 + signal.as_raw()) & 0xff).unwrap_or(u8::MAX)
}
