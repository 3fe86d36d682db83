//! The command does not outlive `redmutex run`.
//!
//! `redmutex` extends the lock while the command runs and stops the command when the lock is lost.
//! SIGKILL (an OOM kill, `kill -9`, a container runtime's stop after its grace period) cannot be
//! caught: without more, the command would run on with nobody extending its lock, and keep
//! running after the lock expired and another holder took it. So on Linux the child asks the
//! kernel, between `fork` and `exec`, to send it SIGKILL when its parent dies
//! (`PR_SET_PDEATHSIG`). The request survives `exec`; it is cleared only for set-user-ID programs.
//!
//! The kernel ties the request to the thread that forked the child, not the process: `redmutex`
//! runs on one thread, the main one, so the signal comes exactly when the process ends.
//!
//! It reaches the command's own process only: processes that the command started and that do not
//! end with it (a shell's background jobs) are not covered. On other systems nothing asks for the
//! signal, and a SIGKILLed `redmutex` leaves its command running without the lock.

use tokio::process::Command;

/// Arranges for the command to receive SIGKILL when this process dies, where the system offers it.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn die_with_parent(command: &mut Command) {
    use rustix::process::{Signal, getpid, getppid, set_parent_process_death_signal};

    let parent = getpid();
    let ask = move || {
        set_parent_process_death_signal(Some(Signal::KILL))?;
        // Had the parent died before the request, no signal would ever come: the child has been
        // handed to another parent already. Refuse to run then (the error needs no allocation).
        if getppid() != Some(parent) {
            return Err(rustix::io::Errno::SRCH.into());
        }
        Ok(())
    };
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed; it makes two system calls (prctl, getppid) through rustix and builds an
    // error from an errno, without allocating or taking a lock.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(ask);
    }
}

/// Nothing to arrange: this system has no parent-death signal that `redmutex` uses.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn die_with_parent(_command: &mut Command) {}
