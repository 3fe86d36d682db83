//! Lines while `run` or `elect` waits: who holds the name, and for how long yet, when the wait
//! starts and every few seconds after, so a waiting job is not silent until it gives up.

use std::convert::Infallible;
use std::time::Duration;

use redmutex::{Election, Mutex};

use crate::duration::shown;
use crate::exit::say;

/// How often the line is said again while the wait goes on.
const EVERY: Duration = Duration::from_secs(5);

/// Says who holds `mutex`'s name now and every [`EVERY`]; never returns (select it against the
/// wait). A reading that fails is skipped: the wait reports its own errors.
pub async fn tell_holder(mutex: &Mutex) -> Infallible {
    loop {
        if let Ok(state) = mutex.inspect().await
            && state.is_held()
        {
            let by = match (state.fingerprint(), state.holder()) {
                (Some(fingerprint), _) => format!("held by {fingerprint}"),
                (None, Some(holder)) => format!("held ({})", holder.kind()),
                (None, None) => "held".to_owned(),
            };
            let left = state
                .ttl()
                .map_or_else(String::new, |ttl| format!(", {} left", shown(ttl)));
            say(format!("waiting for {}: {by}{left}", mutex.name()));
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// Says who leads `election` now and every [`EVERY`], as [`tell_holder`] does.
pub async fn tell_leader(election: &Election, identity: &str) -> Infallible {
    loop {
        if let Ok(Some(leader)) = election.leader().await
            && leader.identity != identity
        {
            say(format!(
                "waiting for {}: led by {} (epoch {}), {} left",
                election.name(),
                leader.identity,
                leader.epoch,
                shown(leader.time_left)
            ));
        }
        tokio::time::sleep(EVERY).await;
    }
}
