//! The enforcer: a small process between `redmutex` and COMMAND that ends COMMAND's tree before
//! the lease's validity ends, whatever happens to `redmutex`.
//!
//! A timer inside `redmutex` keeps no deadline while `redmutex` is stopped (SIGSTOP, Ctrl-Z),
//! and none at all once it is killed. So `redmutex` runs itself again as the enforcer (the same
//! binary, [`SUBCOMMAND`]), in a process group of its own (not the terminal's foreground group,
//! so Ctrl-Z and the terminal's signals never reach it), and the enforcer starts COMMAND. It
//! holds the lease's validity, which `redmutex` reports after every renewal over their socket,
//! and ends COMMAND's tree ([`crate::tree`]) when `redmutex` says the lease is lost, when no
//! renewal arrives in time, or at once when the socket closes (`redmutex` is gone): SIGTERM,
//! then SIGKILL after the grace period and by the validity's end at the latest
//! ([`crate::schedule`]). It is a child subreaper, so orphans of COMMAND's tree come back to it.
//! When COMMAND exits by itself, what it left running goes too (SIGTERM, then SIGKILL after the
//! grace period) before the enforcer reports how COMMAND ended and exits: `redmutex` releases
//! the lease only once nothing of COMMAND's tree is left.
//!
//! It needs no connection, no lock and no clap: it starts in about a millisecond, and nothing
//! in it waits on the network.

use std::ffi::{OsStr, OsString};
use std::io::{self, IoSliceMut, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
use rustix::process::{Pid, Signal, WaitStatus};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{sleep, sleep_until};

use crate::clock::Mono;
use crate::duration::shown;
use crate::schedule::{Act, Schedule, Why};
use crate::tree::{Tree, adopt_orphans, reap};
use crate::wire::{Cut, FRAME, Frame, Order, Reader, Report};

/// The hidden first argument that makes `redmutex` the enforcer. Not a subcommand for people:
/// its arguments are `GRACE_NS INTERVAL_NS -- COMMAND [ARGS...]`, and its standard input must
/// be the socket to `redmutex`.
pub const SUBCOMMAND: &str = "__enforce";

/// How often the enforcer looks for what is left of COMMAND's tree once COMMAND exited or was
/// killed (members of its group that are not its children send it no SIGCHLD).
const SWEEP: Duration = Duration::from_millis(5);

/// What the enforcer was started with.
struct Args {
    grace: Duration,
    interval: Duration,
    program: OsString,
    args: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Option<Args> {
    let nanos = |arg: &OsString| arg.to_str()?.parse().ok().map(Duration::from_nanos);
    match args {
        [grace, interval, dashes, program, rest @ ..] if dashes == "--" => Some(Args {
            grace: nanos(grace)?,
            interval: nanos(interval)?,
            program: program.clone(),
            args: rest.to_vec(),
        }),
        _ => None,
    }
}

/// The enforcer's `main`: `args` are those after [`SUBCOMMAND`].
pub fn main(args: &[OsString]) -> ExitCode {
    let Some(args) = parse(args) else {
        quietly(format!(
            "{SUBCOMMAND} is redmutex's own: it runs only as the enforcer of `redmutex run` and \
             `redmutex elect`"
        ));
        return ExitCode::from(crate::exit::USAGE);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            quietly(format!("cannot start the runtime: {error}"));
            return ExitCode::from(crate::exit::OS_ERROR);
        }
    };
    match runtime.block_on(enforce(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            quietly(format!("{error}"));
            ExitCode::from(crate::exit::OS_ERROR)
        }
    }
}

async fn enforce(args: Args) -> io::Result<()> {
    // `ps` and `top` show the enforcer as redmutex rather than as the file it was run from.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = rustix::thread::set_name(c"redmutex");
    adopt_orphans()?;
    // Standard input is the socket to redmutex.
    let control = UnixStream::from(io::stdin().as_fd().try_clone_to_owned()?);
    let (first, stdin) = receive_first(&control)?;
    let Order::Valid(valid_until) = first else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the first order was not the lease's validity",
        ));
    };
    // Registered before COMMAND starts, so that its exit cannot go unnoticed.
    let mut exits = signal(SignalKind::child())?;
    let mut ignored = Ignored::install()?;
    control.set_nonblocking(true)?;
    let (reports, mut orders) = tokio::net::UnixStream::from_std(control)?.into_split();
    let mut reports = Reader::new(reports);

    let mut command = std::process::Command::new(&args.program);
    command
        .args(&args.args)
        .process_group(0)
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from));
    let command = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let errno = error.raw_os_error().unwrap_or(0);
            send(&mut orders, Report::NotStarted(errno)).await;
            return Ok(());
        }
    };
    let pid = i32::try_from(command.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::other("COMMAND's pid is out of range"))?;
    send(&mut orders, Report::Started(pid.as_raw_nonzero().get())).await;

    let mut enforcer = Enforcer {
        tree: Tree::new(pid),
        schedule: Schedule::new(valid_until, args.interval, args.grace),
        suspended: false,
    };
    let mut status: Option<WaitStatus> = None;
    let mut orphaned = false;
    loop {
        if status.is_some() && !enforcer.tree.is_alive() {
            break;
        }
        let wake = enforcer.schedule.wake_at().map(Mono::to_instant);
        let sweeping = status.is_some() || enforcer.schedule.killed();
        tokio::select! {
            biased;
            _ = exits.recv() => {}
            order = reports.next::<Order>(), if !orphaned => match order {
                Ok(Some(order)) => enforcer.obey(order),
                // redmutex is gone (or talks nonsense): nobody keeps the lease any more.
                Ok(None) | Err(_) => {
                    orphaned = true;
                    enforcer.end(Why::Orphaned);
                }
            },
            () = sleep_until(wake.unwrap_or_else(std::time::Instant::now).into()),
                if wake.is_some() => enforcer.wake(),
            () = sleep(SWEEP), if sweeping => {}
            () = ignored.recv() => {}
        }
        for (exited, wait_status) in reap() {
            if exited == pid {
                status = Some(wait_status);
                let act = enforcer.schedule.command_exited(Mono::now());
                enforcer.act(Some(act));
            }
        }
        if enforcer.schedule.killed() {
            // Orphans adopted since SIGKILL went out, and members of the group.
            enforcer.tree.signal_all(Signal::KILL);
        }
    }
    if !orphaned && let Some(status) = status {
        let cut = match enforcer.schedule.why() {
            Some(Why::Lost) => Some(Cut::Told),
            Some(Why::Overdue) => Some(Cut::Overdue),
            _ => None,
        };
        send(
            &mut orders,
            Report::Exited {
                status: status.as_raw(),
                cut,
            },
        )
        .await;
    }
    Ok(())
}

/// The enforcer's state while COMMAND runs.
struct Enforcer {
    tree: Tree,
    schedule: Schedule,
    suspended: bool,
}

impl Enforcer {
    fn obey(&mut self, order: Order) {
        match order {
            Order::Valid(valid_until) => self.schedule.renewed(valid_until),
            Order::Lost => self.end(Why::Lost),
            Order::Signal(number) => {
                if let Some(signal) = Signal::from_named_raw(number) {
                    self.tree.signal_group(signal);
                }
            }
            Order::Suspend => {
                self.suspended = true;
                self.tree.signal_group(Signal::STOP);
            }
            Order::Resume => {
                self.suspended = false;
                // A lease that is lost, or about to be, never lets COMMAND run again.
                if self.schedule.may_resume(Mono::now()) {
                    self.tree.signal_group(Signal::CONT);
                }
            }
        }
    }

    fn end(&mut self, why: Why) {
        let now = Mono::now();
        let act = self.schedule.end(why, now);
        if why == Why::Orphaned && act.is_some() {
            self.tell(now, "redmutex ended while the command ran");
        }
        self.act(act);
    }

    /// A deadline came.
    fn wake(&mut self) {
        let now = Mono::now();
        let ending = self.schedule.why().is_some();
        let act = self.schedule.due(now);
        if !ending && self.schedule.why() == Some(Why::Overdue) {
            self.tell(
                now,
                "no renewal of the lease reached the enforcer in time (is redmutex stopped?)",
            );
        }
        self.act(act);
    }

    /// Says why COMMAND is being ended, and when SIGKILL is due.
    fn tell(&self, now: Mono, cause: &str) {
        match self.schedule.wake_at() {
            Some(kill_at) if !self.schedule.killed() => quietly(format!(
                "{cause}: sending SIGTERM to the command's process group, SIGKILL follows in \
                 {} at the latest",
                shown(kill_at.since(now))
            )),
            _ => quietly(format!(
                "{cause}: sending SIGKILL to the command's process group"
            )),
        }
    }

    fn act(&mut self, act: Option<Act>) {
        match act {
            Some(Act::Term) => {
                self.tree.signal_all(Signal::TERM);
                // What COMMAND left behind while the lease holds may run its SIGTERM handler
                // even if it was stopped; a lost lease never lets a stopped process run again.
                if self.schedule.why() == Some(Why::Finished) && !self.suspended {
                    self.tree.signal_all(Signal::CONT);
                }
            }
            Some(Act::Kill) => self.tree.signal_all(Signal::KILL),
            None => {}
        }
    }
}

/// The first frame, with COMMAND's standard input passed along (`SCM_RIGHTS`): the enforcer's
/// own is the socket.
fn receive_first(control: &UnixStream) -> io::Result<(Order, Option<OwnedFd>)> {
    let mut bytes = [0u8; FRAME];
    let mut filled = 0;
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut stdin = None;
    while filled < FRAME {
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = recvmsg(
            control,
            &mut [IoSliceMut::new(&mut bytes[filled..])],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                for fd in fds {
                    stdin.get_or_insert(fd);
                }
            }
        }
        if received.bytes == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        filled += received.bytes;
    }
    Ok((Order::decode(bytes)?, stdin))
}

async fn send(orders: &mut OwnedWriteHalf, report: Report) {
    // redmutex gone: the end of its orders says so.
    let _ = orders.write_all(&report.encode()).await;
}

/// Signals the enforcer takes and does nothing with: a `kill` without `-9`, or a terminal's
/// signal sent to every process, must not end the one process that keeps the deadline. (SIGTTOU
/// is not among them: the enforcer never writes where it would raise it, see [`quietly`].)
struct Ignored(Vec<tokio::signal::unix::Signal>);

impl Ignored {
    fn install() -> io::Result<Ignored> {
        let kinds = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
            SignalKind::quit(),
            SignalKind::from_raw(Signal::TSTP.as_raw()),
            SignalKind::from_raw(Signal::TTIN.as_raw()),
        ];
        kinds
            .into_iter()
            .map(signal)
            .collect::<io::Result<_>>()
            .map(Ignored)
    }

    async fn recv(&mut self) {
        std::future::poll_fn(|cx| {
            for stream in &mut self.0 {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })
        .await;
    }
}

/// Prints `message` on stderr, unless that would stop the enforcer: a process outside the
/// terminal's foreground group that writes to the terminal with `stty tostop` set gets SIGTTOU,
/// whose default is to stop it, and a stopped enforcer enforces nothing.
fn quietly(message: impl AsRef<str>) {
    let stderr = io::stderr();
    if !may_write(stderr.as_fd()) {
        return;
    }
    let of = std::env::var_os("REDMUTEX_NAME")
        .map(|name| format!(" of {}", OsStr::new(&name).to_string_lossy()))
        .unwrap_or_default();
    let _ = writeln!(
        stderr.lock(),
        "redmutex: enforcer{of}: {}",
        message.as_ref()
    );
}

/// Whether a write to `fd` cannot raise SIGTTOU.
fn may_write(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use rustix::termios::{LocalModes, isatty, tcgetattr, tcgetpgrp};
    if !isatty(fd) {
        return true;
    }
    match tcgetattr(fd) {
        Ok(modes) if !modes.local_modes.contains(LocalModes::TOSTOP) => true,
        Ok(_) => tcgetpgrp(fd).ok() == Some(rustix::process::getpgrp()),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_grace_interval_and_the_command() {
        let args: Vec<OsString> = ["5000000000", "333000000", "--", "sh", "-c", "true"]
            .into_iter()
            .map(OsString::from)
            .collect();
        let parsed = parse(&args).unwrap();
        assert_eq!(parsed.grace, Duration::from_secs(5));
        assert_eq!(parsed.interval, Duration::from_millis(333));
        assert_eq!(parsed.program, "sh");
        assert_eq!(parsed.args, ["-c", "true"]);
        assert!(parse(&args[..3]).is_none());
        assert!(parse(&[]).is_none());
    }
}
