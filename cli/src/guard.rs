//! `redmutex`'s side of the enforcer ([`crate::enforcer`]): starting it with COMMAND, ordering
//! it, hearing how COMMAND ended, and what to do when the enforcer itself is gone.

use std::ffi::{OsStr, OsString};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use rustix::process::{Pid, Signal};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::Child;

use crate::clock::{Mono, nanos};
use crate::enforcer::SUBCOMMAND;
use crate::tree::{Tree, reap};
use crate::wire::{Frame, Order, Reader, Report};

/// What to run, and how the enforcer must treat it.
pub struct Spec<'a> {
    pub program: &'a OsStr,
    pub args: &'a [OsString],
    /// Set for COMMAND (`REDMUTEX_NAME` and the like).
    pub env: Vec<(&'static str, String)>,
    /// Between SIGTERM and SIGKILL once the lease is lost.
    pub grace: Duration,
    /// How often the lease is renewed.
    pub interval: Duration,
}

/// Why COMMAND did not start.
pub enum NotStarted {
    /// COMMAND itself could not be run (not found, not executable).
    Command(io::Error),
    /// The enforcer could not be started, or ended before it started COMMAND.
    Enforcer(String),
}

/// A running COMMAND under its enforcer.
pub struct Guard {
    enforcer: Child,
    orders: OwnedWriteHalf,
    reports: Reader<OwnedReadHalf>,
    tree: Tree,
}

impl Guard {
    /// Starts the enforcer, which starts COMMAND, under a lease valid until `valid_until`.
    pub async fn start(spec: &Spec<'_>, valid_until: Instant) -> Result<Guard, NotStarted> {
        let gone = |error: io::Error| NotStarted::Enforcer(format!("{error}"));
        let (ours, theirs) = UnixStream::pair().map_err(gone)?;
        let mut command = tokio::process::Command::new(own_binary().map_err(gone)?);
        command
            .arg0("redmutex")
            .arg(SUBCOMMAND)
            .arg(nanos(spec.grace).to_string())
            .arg(nanos(spec.interval).to_string())
            .arg("--")
            .arg(spec.program)
            .args(spec.args)
            .envs(spec.env.iter().map(|(key, value)| (key, value)))
            // Its own process group: not the terminal's foreground group, so that Ctrl-Z and
            // the terminal's signals never reach it.
            .process_group(0)
            .stdin(Stdio::from(OwnedFd::from(theirs)));
        let mut enforcer = command.spawn().map_err(gone)?;
        let first = Order::Valid(Mono::from_instant(valid_until));
        let sent = send_first(&ours, first).and_then(|()| {
            ours.set_nonblocking(true)?;
            tokio::net::UnixStream::from_std(ours)
        });
        let stream = match sent {
            Ok(stream) => stream,
            Err(error) => {
                let _ = enforcer.start_kill();
                let _ = enforcer.wait().await;
                return Err(gone(error));
            }
        };
        let (reports, orders) = stream.into_split();
        let mut reports = Reader::new(reports);
        match reports.next::<Report>().await {
            Ok(Some(Report::Started(pid))) => match Pid::from_raw(pid) {
                Some(pid) => Ok(Guard {
                    enforcer,
                    orders,
                    reports,
                    tree: Tree::new(pid),
                }),
                None => Err(NotStarted::Enforcer(format!(
                    "the enforcer named pid {pid}"
                ))),
            },
            Ok(Some(Report::NotStarted(errno))) => {
                let _ = enforcer.wait().await;
                Err(NotStarted::Command(io::Error::from_raw_os_error(errno)))
            }
            Ok(Some(other)) => Err(NotStarted::Enforcer(format!(
                "the enforcer said {other:?} first"
            ))),
            Ok(None) | Err(_) => {
                let status = enforcer.wait().await;
                Err(NotStarted::Enforcer(format!(
                    "it ended before starting the command ({})",
                    describe(status)
                )))
            }
        }
    }

    /// Sends `order`. A failure means the enforcer is gone, which [`report`](Self::report)
    /// says next.
    pub async fn order(&mut self, order: Order) {
        let _ = self.orders.write_all(&order.encode()).await;
    }

    /// The enforcer's next report; `None` when it is gone.
    ///
    /// Cancel safe.
    pub async fn report(&mut self) -> Option<Report> {
        self.reports.next::<Report>().await.ok().flatten()
    }

    /// After COMMAND's tree is gone: lets the enforcer go, and waits for it to exit.
    pub async fn finish(self) {
        let Guard {
            mut enforcer,
            orders,
            ..
        } = self;
        drop(orders);
        let _ = enforcer.wait().await;
    }

    /// The enforcer is gone while COMMAND ran: nothing would end COMMAND in time were
    /// `redmutex` stopped now. Kills COMMAND's tree (its group, and the orphans that come back
    /// to `redmutex` as their subreaper), and says how the enforcer ended.
    pub async fn enforcer_gone(&mut self) -> String {
        let tree = self.tree;
        let pid = self.enforcer.id();
        let status = self.enforcer.wait().await;
        tree.signal_all(Signal::KILL);
        // A process with SIGKILL pending never runs another instruction, but its orphans come
        // here only once it is gone: kill them as they come, for a while.
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            reap();
            if !tree.is_alive() || Instant::now() >= until {
                break;
            }
            tree.signal_all(Signal::KILL);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        format!(
            "the enforcer (pid {}) ended while the command ran ({})",
            pid.map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
            describe(status)
        )
    }
}

/// How a process ended, in words.
fn describe(status: io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => format!("{status}"),
        },
        Err(error) => format!("cannot tell how: {error}"),
    }
}

/// The binary to run as the enforcer: this one. On Linux through `/proc/self/exe`, which is the
/// running program even if its file was replaced or removed since (an upgrade while `redmutex`
/// waited for its lock), so the enforcer always speaks the same protocol.
fn own_binary() -> io::Result<PathBuf> {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        Ok(PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe()
    }
}

/// Sends the first order with this process's standard input attached, which the enforcer hands
/// to COMMAND (its own standard input is the socket). A closed standard input is not sent;
/// COMMAND then reads from `/dev/null`.
fn send_first(socket: &UnixStream, order: Order) -> io::Result<()> {
    let stdin = io::stdin();
    let open = rustix::io::fcntl_getfd(stdin.as_fd()).is_ok();
    let fds = [stdin.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if open {
        ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    }
    let bytes = order.encode();
    let sent = sendmsg(
        socket,
        &[IoSlice::new(&bytes)],
        &mut ancillary,
        SendFlags::empty(),
    )?;
    if sent < bytes.len() {
        use std::io::Write;
        (&*socket).write_all(&bytes[sent..])?;
    }
    Ok(())
}
