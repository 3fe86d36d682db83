//! `redmutex status` and `redmutex unlock --force`.

use std::process::ExitCode;
use std::time::Duration;

use redmutex::{Error, Holder, LeaderInfo, LockState, NodeAnswer, Redlock};
use serde_json::{Value, json};

use crate::args::{StatusArgs, UnlockArgs};
use crate::exit::{HELD, USAGE, advised, fail, query_code, show};

pub async fn status(redlock: &Redlock, args: StatusArgs) -> ExitCode {
    let state = match redlock.new_mutex(args.name.as_str()).inspect().await {
        Ok(state) => state,
        Err(error) => {
            let message = advised(format!("{}: {error}", args.name), &error);
            return fail(query_code(&error), message);
        }
    };
    // Only a held name can have a leader; an error reading it leaves the row out.
    let leader = match state.is_held() {
        true => redlock.new_election(args.name.as_str()).leader().await,
        false => Ok(None),
    };
    let leader = leader.ok().flatten();
    let text = if args.json {
        let mut state = json_state(&args.name, &state);
        state["leader"] = json!(leader.map(|l| json!({"identity": l.identity, "epoch": l.epoch})));
        state.to_string()
    } else {
        table(&args.name, &state, leader.as_ref())
    };
    show(text);
    ExitCode::SUCCESS
}

pub async fn unlock(redlock: &Redlock, args: UnlockArgs) -> ExitCode {
    if args.purge && !args.force {
        return purge(redlock, &args.name).await;
    }
    if !args.force {
        return fail(
            USAGE,
            format!(
                "refusing to unlock {name} without --force: only its holder can release a lock \
                 safely. A forced unlock deletes the lock whoever holds it, so a holder that is \
                 still running loses it without noticing until its next extension, while \
                 someone else may take it. Check `redmutex status {name}` first, then run \
                 `redmutex unlock --force {name}` if the holder is dead or hung.",
                name = args.name
            ),
        );
    }
    // Wake-up on release, so waiters (such as `redmutex run`) get the lock at once.
    let mutex = redlock
        .new_mutex(args.name.as_str())
        .with_wake_on_release(true);
    match mutex.force_unlock().await {
        Ok(deleted) => {
            show(format!(
                "{}: deleted on {deleted} of {} nodes",
                args.name,
                redlock.len()
            ));
            if args.purge {
                return purge(redlock, &args.name).await;
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(
            query_code(&error),
            advised(
                format!("{}: the lock may still stand: {error}", args.name),
                &error,
            ),
        ),
    }
}

/// `unlock --purge`: deletes what redmutex keeps beside `name`, unless it is held or waited for.
async fn purge(redlock: &Redlock, name: &str) -> ExitCode {
    match redlock.new_mutex(name).purge().await {
        Ok(deleted) => {
            show(format!("{name}: purged, {deleted} keys deleted"));
            ExitCode::SUCCESS
        }
        Err(Error::Taken { nodes }) => fail(
            HELD,
            format!(
                "{name}: held or waited for on {} of {} nodes, not purged there: check \
                 `redmutex status {name}`; `redmutex unlock --force --purge {name}` breaks a \
                 lock whose holder is dead",
                nodes.len(),
                redlock.len()
            ),
        ),
        Err(error) => fail(
            query_code(&error),
            advised(format!("{name}: not purged: {error}"), &error),
        ),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Seconds with millisecond precision, as people read a TTL.
fn seconds(duration: Duration) -> String {
    format!("{:.3}s", duration.as_secs_f64())
}

/// What holds the name, for the first line: nothing for a lock value (the line has always read
/// `NAME: held, ...` for it), else who.
fn held_by(holder: Option<&Holder>) -> String {
    match holder {
        Some(Holder::Readers { count, .. }) => format!(" by {count} reader{}", plural(*count)),
        Some(Holder::Permits { held, permits, .. }) => {
            format!(" by a semaphore, {held} of {permits} permits")
        }
        Some(Holder::Foreign { kind, .. }) => format!(" by a {kind} that is not a redmutex lock"),
        _ => String::new(),
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

fn table(name: &str, state: &LockState, leader: Option<&LeaderInfo>) -> String {
    let by = held_by(state.holder());
    let mut out = match (state.is_held(), state.ttl()) {
        (true, Some(ttl)) => format!(
            "{name}: held{by}, ttl {} (on {} of {} nodes, quorum {})",
            seconds(ttl),
            state.holders(),
            state.nodes().len(),
            state.quorum()
        ),
        (true, None) => format!("{name}: held{by}, without expiry"),
        (false, _) => format!("{name}: free"),
    };
    if let Some(fingerprint) = state.fingerprint() {
        out.push_str(&format!(", holder fingerprint {fingerprint}"));
    }
    out.push('\n');
    if let Some(leader) = leader {
        out.push_str(&format!(
            "  leader {} (epoch {})\n",
            leader.identity, leader.epoch
        ));
    }
    let width = state
        .nodes()
        .iter()
        .map(|node| address(node.address.as_deref()).len())
        .max()
        .unwrap_or(0);
    for node in state.nodes() {
        let mut answer = match &node.answer {
            NodeAnswer::Free => "free".to_owned(),
            NodeAnswer::Held {
                fingerprint,
                ttl: Some(ttl),
            } => format!("held {fingerprint} ttl {}", seconds(*ttl)),
            NodeAnswer::Held { fingerprint, .. } => format!("held {fingerprint} no expiry"),
            NodeAnswer::Readers { readers, .. } => {
                format!("{} reader{}", readers.len(), plural(readers.len()))
            }
            NodeAnswer::Permits {
                holders,
                permits: Some(permits),
                ..
            } => format!("{} of {permits} permits held", holders.len()),
            NodeAnswer::Failed(error) => format!("error: {error}"),
            other => other.to_string(),
        };
        if let Some(mark) = node.writer_waiting {
            answer.push_str(&format!(
                ", a writer waits (new readers refused for {})",
                seconds(mark)
            ));
        }
        out.push_str(&format!(
            "  node {}  {:width$}  {answer}\n",
            node.node,
            address(node.address.as_deref())
        ));
    }
    out.trim_end().to_owned()
}

fn address(address: Option<&str>) -> &str {
    address.unwrap_or("-")
}

fn json_state(name: &str, state: &LockState) -> Value {
    let nodes: Vec<Value> = state
        .nodes()
        .iter()
        .map(|node| {
            let mut fields = json!({
                "node": node.node,
                "address": node.address,
                "fingerprint": null,
                "ttl_ms": null,
                "error": null,
                "writer_waiting_ms": node.writer_waiting.map(millis),
            });
            let state = match &node.answer {
                NodeAnswer::Free => "free",
                NodeAnswer::Held { fingerprint, ttl } => {
                    fields["fingerprint"] = json!(fingerprint);
                    fields["ttl_ms"] = json!(ttl.map(millis));
                    "held"
                }
                NodeAnswer::Readers { readers, ttl, .. } => {
                    fields["readers"] = json!(readers.len());
                    fields["ttl_ms"] = json!(ttl.map(millis));
                    "readers"
                }
                NodeAnswer::Permits {
                    holders,
                    permits,
                    ttl,
                    ..
                } => {
                    fields["permits_held"] = json!(holders.len());
                    fields["permits"] = json!(permits);
                    fields["ttl_ms"] = json!(ttl.map(millis));
                    "semaphore"
                }
                NodeAnswer::Foreign { kind, ttl, .. } => {
                    fields["type"] = json!(kind);
                    fields["ttl_ms"] = json!(ttl.map(millis));
                    "foreign"
                }
                NodeAnswer::Failed(error) => {
                    fields["error"] = json!(error.to_string());
                    "error"
                }
                other => {
                    fields["error"] = json!(other.to_string());
                    "error"
                }
            };
            fields["state"] = json!(state);
            fields
        })
        .collect();
    let holder = state.holder();
    json!({
        "name": name,
        "held": state.is_held(),
        "kind": holder.map(Holder::kind),
        "readers": match holder {
            Some(Holder::Readers { count, .. }) => Some(*count),
            _ => None,
        },
        "permits_held": match holder {
            Some(Holder::Permits { held, .. }) => Some(*held),
            _ => None,
        },
        "permits": match holder {
            Some(Holder::Permits { permits, .. }) => Some(*permits),
            _ => None,
        },
        "ttl_ms": state.ttl().map(millis),
        "quorum": state.quorum(),
        "holders": state.holders(),
        "fingerprint": state.fingerprint(),
        "nodes": nodes,
    })
}
