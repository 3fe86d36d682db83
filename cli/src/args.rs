//! The command line, as clap reads it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration::parse_duration;

const ABOUT: &str = "Run a command under a distributed lock held on a quorum of Redis nodes \
                     (Redlock), and inspect, break or check such locks.";

const EXIT_CODES: &str = "\
Exit codes:
  0-255  run, elect: the command's own status (128 + N when it died of signal N)
  1      doctor: a check failed
  64     usage or configuration error (bad option, no nodes, malformed URL, one server listed
         twice: by one address, or found once connected by its run_id)
  69     no quorum of nodes reachable
  70     run: the lock was lost while the command ran, and the command was terminated
  70     elect: the leadership was lost while the command ran (without --restart)
  71     run, elect: the enforcer could not start or died (the command was killed)
  75     run: the lock is held elsewhere (--no-wait), or the --wait time ran out; unlock --purge:
         the name is held or waited for
  77     run, elect, status, unlock, doctor: the nodes refused the credentials (NOAUTH or
         WRONGPASS), too many for a quorum
  126    run: the command could not be started (127: not found)

Nodes come from --nodes or REDMUTEX_NODES; passwords in their URLs never appear in output.";

/// A hint for a mistake clap reports in its own terms: `redmutex run job echo hi` is "unexpected
/// argument 'echo'" to clap, since COMMAND starts only after `--`.
pub fn hint(error: &clap::Error, args: &[OsString]) -> Option<String> {
    if error.kind() != clap::error::ErrorKind::UnknownArgument || args.iter().any(|a| a == "--") {
        return None;
    }
    let subcommand = args
        .iter()
        .skip(1)
        .find(|arg| *arg == "run" || *arg == "elect")?;
    let subcommand = subcommand.to_string_lossy();
    Some(format!(
        "hint: put `--` before the command, so that its own options and arguments are not \
         taken for {subcommand}'s: redmutex {subcommand} [OPTIONS] NAME -- COMMAND [ARGS]..."
    ))
}

/// How much `run` and `elect` say on stderr besides errors.
#[derive(Debug, Args)]
pub struct Talk {
    /// Also say when the lock (or the leadership) is taken, with its fingerprint (as
    /// `redmutex status` shows the holder's, and COMMAND gets in REDMUTEX_FINGERPRINT) and token.
    #[arg(long, short, conflicts_with = "quiet")]
    pub verbose: bool,

    /// No warnings about members that are down or refusing, no lines while waiting, and no
    /// `elect` line when leading (errors and a lost lock are still said).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `redmutex`: the command line.
#[derive(Debug, Parser)]
#[command(name = "redmutex", version, about = ABOUT, after_help = EXIT_CODES)]
pub struct Cli {
    /// The Redis nodes, comma-separated (redis://[[user]:password@]host:port[/db]).
    /// Default: the REDMUTEX_NODES environment variable.
    #[arg(long, global = true, value_name = "URL,...")]
    pub nodes: Option<String>,

    /// On exit, write what redmutex recorded (its metrics, and for `run` the outcome in
    /// redmutex_run_total) to PATH as a Prometheus text snapshot, e.g. into the node exporter's
    /// textfile collector directory (PATH ending in .prom). Written to a temporary file beside
    /// PATH, then renamed over it.
    #[arg(long, global = true, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    Run(RunArgs),
    Elect(ElectArgs),
    Status(StatusArgs),
    Unlock(UnlockArgs),
    Doctor(DoctorArgs),
}

/// Run COMMAND while holding the lock NAME; exit with its status.
///
/// Takes the lock (waiting for it unless --no-wait or --wait say otherwise), starts COMMAND
/// without a shell in its own process group (stdin, stdout and stderr inherited, REDMUTEX_NAME
/// and REDMUTEX_FINGERPRINT set, and REDMUTEX_TOKEN with --fencing), extends the lock while it
/// runs, and releases the lock when it exits. If the lock is lost (an extension fails, or its validity runs out), COMMAND's
/// process group gets SIGTERM at once and SIGKILL when --grace has passed or the lock's validity
/// ends, whichever comes first: COMMAND never runs past the lock. SIGINT, SIGTERM, SIGHUP and
/// SIGQUIT sent to redmutex are passed on to COMMAND; the lock is released once it exited.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct RunArgs {
    /// How long the nodes keep the lock without an extension; it is extended three times per
    /// expiry while COMMAND runs. Written as 500ms, 8s, 2m or 1h.
    #[arg(long, value_name = "DURATION", default_value = "8s", value_parser = parse_duration)]
    pub expiry: Duration,

    /// Give up (exit 75) if the lock is not free within DURATION. Default: wait as long as it
    /// takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// One attempt: if the lock is held elsewhere, exit 75 without running COMMAND.
    #[arg(long)]
    pub no_wait: bool,

    /// Pass a fencing token to COMMAND as REDMUTEX_TOKEN (a decimal number that grows with every
    /// acquisition of NAME), for COMMAND to hand to the resource it protects.
    #[arg(long)]
    pub fencing: bool,

    /// After the lock is lost: how long COMMAND may take to exit on SIGTERM before SIGKILL, at
    /// most until the lock's validity ends.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Return from taking and renewing the lock as soon as a quorum decided, without waiting for
    /// the farthest nodes (the library's with_fail_fast); `doctor` says when that pays.
    #[arg(long)]
    pub fail_fast: bool,

    /// Keep the lock taken for at least DURATION from when it was taken, even when COMMAND ends
    /// sooner: it is then left to expire on the nodes instead of released (nobody renews it for
    /// that), so a job that cron starts on several hosts whose clocks differ runs once per
    /// period. The lock is taken with an expiry of at least DURATION (--expiry if longer).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub hold_at_least: Option<Duration>,

    #[command(flatten)]
    pub talk: Talk,

    /// The lock's name: the Redis key on every node.
    pub name: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// The lock's expiry: `--expiry`, or `--hold-at-least` if longer, so that a lock left to
    /// expire lives that long.
    pub fn expiry(&self) -> Duration {
        self.hold_at_least
            .map_or(self.expiry, |at_least| self.expiry.max(at_least))
    }
}

/// Campaign in the election NAME as ID; run COMMAND while leading; exit with its status.
///
/// A standby waits (woken at once when the leader resigns; a leader that crashed is replaced
/// once its lease ran out). The leader starts COMMAND as `run` does, with REDMUTEX_NAME,
/// REDMUTEX_ID, REDMUTEX_EPOCH and REDMUTEX_FINGERPRINT set (the epoch is a fencing token that grows with every
/// leader), renews its lease while COMMAND runs, and resigns when it exits. If the leadership
/// is lost, COMMAND gets SIGTERM at once and SIGKILL when --grace has passed or the lease's
/// validity ends, whichever comes first. With --restart, a former leader campaigns again after
/// COMMAND ended (or was ended), until a signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT), passed on to
/// COMMAND, ends both.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct ElectArgs {
    /// This candidate's identity, public: `redmutex status NAME` shows the leader's.
    #[arg(long, value_name = "ID")]
    pub id: String,

    /// How long the nodes keep a leader that stopped renewing (the lease); renewed three times
    /// per lease. Written as 500ms, 8s, 2m or 1h.
    #[arg(long, value_name = "DURATION", default_value = "8s", value_parser = parse_duration)]
    pub expiry: Duration,

    /// Campaign again after COMMAND ended, instead of exiting with its status.
    #[arg(long)]
    pub restart: bool,

    /// After the leadership is lost: how long COMMAND may take to exit on SIGTERM before
    /// SIGKILL, at most until the lease's validity ends.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Return from taking and renewing the lock as soon as a quorum decided, without waiting for
    /// the farthest nodes (the library's with_fail_fast); `doctor` says when that pays.
    #[arg(long)]
    pub fail_fast: bool,

    #[command(flatten)]
    pub talk: Talk,

    /// The election's name: the Redis key on every node.
    pub name: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Show whether NAME is held, for how long, and each node's answer (never the lock value).
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One JSON object: name, held, ttl_ms, quorum, fingerprint, nodes (and leader, for an
    /// election).
    #[arg(long)]
    pub json: bool,

    /// The lock's name.
    pub name: String,
}

/// Break the lock NAME: delete its key on every node, whatever its holder.
///
/// For a lock whose holder is known to be dead or hung. A holder that is still running keeps
/// going as if it held the lock until its next extension fails, while someone else may take the
/// lock: this breaks mutual exclusion on purpose, so it needs --force. Waiters are woken at once.
/// The fencing counter is kept, so tokens go on increasing.
#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Required: confirms that breaking the lock is intended.
    #[arg(long)]
    pub force: bool,

    /// Also delete what redmutex keeps beside NAME for good (its fencing counter, an election's
    /// leader record, a read-write lock's and a fair line's keys), for a name that is retired.
    /// Refused (exit 75) on nodes where NAME is held or waited for; without --force, a held lock
    /// is never broken.
    #[arg(long)]
    pub purge: bool,

    /// The lock's name.
    pub name: String,
}

/// Check every node: reachable, distinct servers, independent masters, no eviction, persistence,
/// permissions.
///
/// One row per node and check, each pass, warn, skip or fail with a one-line reason. Exits 0 when
/// nothing fails (warnings allowed), 1 when a check fails.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// One JSON object: ok, quorum, sound_nodes, checks.
    #[arg(long)]
    pub json: bool,

    /// The bound on each question to a node.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// The prefix of the scratch name the permissions check locks; pick one your ACL key
    /// patterns allow.
    #[arg(long, value_name = "PREFIX", default_value = "redmutex:check:")]
    pub scratch_prefix: String,
}
