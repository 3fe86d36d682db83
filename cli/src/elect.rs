//! `redmutex elect`: campaign, run the command while leading, resign.

use std::process::ExitCode;

use redmutex::{Election, Leadership, Redlock};

use crate::args::ElectArgs;
use crate::exit::{LOST, OS_ERROR, USAGE, acquire_code, advised, fail, same_server, say};
use crate::guard::Spec;
use crate::members::Members;
use crate::run::{signal_code, start, status_code};
use crate::supervise::{Leading, Outcome, Signals, supervise};
use crate::waiting::tell_leader;

/// The per-node timeout as a fraction of the lease (the library's default, spelled out as
/// `run` does).
const TIMEOUT_FACTOR: f64 = 0.05;

pub async fn elect(redlock: &Redlock, args: ElectArgs) -> ExitCode {
    if args.name.is_empty() {
        return fail(USAGE, "NAME must not be empty");
    }
    if args.id.is_empty() {
        return fail(USAGE, "--id must not be empty");
    }
    if args.command.is_empty() {
        return fail(USAGE, "no COMMAND given after --");
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => return fail(OS_ERROR, format!("cannot handle signals: {error}")),
    };
    let election = redlock
        .new_election(args.name.as_str())
        .with_expiry(args.expiry)
        .with_timeout_factor(TIMEOUT_FACTOR)
        .with_fail_fast(args.fail_fast);
    loop {
        let campaign = tokio::select! {
            campaign = election.campaign(args.id.as_str()) => campaign,
            never = tell_leader(&election, &args.id), if !args.talk.quiet => match never {},
            signal = signals.pass_on() => {
                // A campaign cut short releases what it took in the background.
                tokio::time::sleep(args.expiry.mul_f64(TIMEOUT_FACTOR)).await;
                return ExitCode::from(signal_code(signal));
            }
        };
        let leadership = match campaign {
            Ok(leadership) => match same_server(&leadership.failing_nodes()) {
                None => leadership,
                Some(message) => {
                    resign(leadership).await;
                    return fail(USAGE, message);
                }
            },
            Err(error) => {
                let message = advised(format!("{}: {error}", args.name), &error);
                return fail(acquire_code(&error), message);
            }
        };
        let code = lead(&election, redlock.len(), leadership, &args, &mut signals).await;
        // A signal passed on to COMMAND ends the loop: it was meant for both.
        let restart = args.restart && signals.take_received().is_none();
        match code {
            Led::Exited(code) if !restart => return ExitCode::from(code),
            Led::Lost if !restart => return ExitCode::from(LOST),
            Led::Failed(code) => return code,
            // With --restart: campaign again.
            Led::Exited(_) | Led::Lost => {}
        }
    }
}

/// How one term ended.
enum Led {
    /// The command exited with this status; the leadership was resigned.
    Exited(u8),
    /// The leadership was lost, and the command ended.
    Lost,
    /// The command could not run, or was lost track of.
    Failed(ExitCode),
}

/// Runs the command while `leadership` holds.
async fn lead(
    election: &Election,
    total: usize,
    leadership: Leadership,
    args: &ElectArgs,
    signals: &mut Signals,
) -> Led {
    let Some((program, program_args)) = args.command.split_first() else {
        return Led::Failed(fail(USAGE, "no COMMAND given after --"));
    };
    let fingerprint = match args.talk.verbose {
        true => format!(", fingerprint {}", leadership.fingerprint()),
        false => String::new(),
    };
    if !args.talk.quiet {
        say(format!(
            "{}: {} leads with epoch {}{fingerprint}",
            args.name,
            leadership.identity(),
            leadership.epoch()
        ));
    }
    let spec = Spec {
        program,
        args: program_args,
        env: vec![
            ("REDMUTEX_NAME", args.name.clone()),
            ("REDMUTEX_ID", args.id.clone()),
            ("REDMUTEX_EPOCH", leadership.epoch().to_string()),
            ("REDMUTEX_FINGERPRINT", leadership.fingerprint()),
        ],
        grace: args.grace,
        interval: election.renew_every(),
    };
    let mut guard = match start(&spec, leadership.valid_until()).await {
        Ok(guard) => guard,
        Err((code, message)) => {
            resign(leadership).await;
            return Led::Failed(fail(code, message));
        }
    };
    let mut lease = Leading {
        name: election.name(),
        leadership: &leadership,
    };
    let mut members = Members::new(&args.name, args.talk.quiet);
    members.taken(leadership.failing_nodes(), total);
    let outcome = supervise(
        &mut guard,
        &mut lease,
        &mut members,
        args.grace,
        spec.interval,
        signals,
    )
    .await;
    let led = match outcome {
        Outcome::Exited(status) => {
            resign(leadership).await;
            Led::Exited(status_code(status))
        }
        Outcome::Lost => {
            // Nodes that still hold this term's value let go, so the next leader need not wait.
            let _ = leadership.resign().await;
            Led::Lost
        }
        Outcome::EnforcerGone(how) => {
            resign(leadership).await;
            Led::Failed(fail(
                OS_ERROR,
                format!(
                    "{how}: killed the command's process group, which nothing would have ended \
                     in time were redmutex stopped; resigned"
                ),
            ))
        }
    };
    guard.finish().await;
    led
}

/// Resigns after the command; a failure only costs the standbys the rest of the lease.
async fn resign(leadership: Leadership) {
    if let Err(error) = leadership.resign().await {
        say(format!(
            "could not resign ({error}); the lease expires on its own"
        ));
    }
}
