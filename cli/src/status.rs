//! `redmutex status` and `redmutex unlock --force`.

use std::process::ExitCode;
use std::time::Duration;

use redmutex::{LockState, NodeAnswer, Redlock};
use serde_json::{Value, json};

use crate::args::{StatusArgs, UnlockArgs};
use crate::exit::{USAGE, fail, query_code, show};

pub async fn status(redlock: &Redlock, args: StatusArgs) -> ExitCode {
    let state = match redlock.new_mutex(args.name.as_str()).inspect().await {
        Ok(state) => state,
        Err(error) => return fail(query_code(&error), format!("{}: {error}", args.name)),
    };
    let text = if args.json {
        json_state(&args.name, &state).to_string()
    } else {
        table(&args.name, &state)
    };
    show(text);
    ExitCode::SUCCESS
}

pub async fn unlock(redlock: &Redlock, args: UnlockArgs) -> ExitCode {
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
            ExitCode::SUCCESS
        }
        Err(error) => fail(
            query_code(&error),
            format!("{}: the lock may still stand: {error}", args.name),
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

fn table(name: &str, state: &LockState) -> String {
    let mut out = match (state.is_held(), state.ttl()) {
        (true, Some(ttl)) => format!(
            "{name}: held, ttl {} (on {} of {} nodes, quorum {})",
            seconds(ttl),
            state.holders(),
            state.nodes().len(),
            state.quorum()
        ),
        (true, None) => format!("{name}: held, without expiry"),
        (false, _) => format!("{name}: free"),
    };
    if let Some(fingerprint) = state.fingerprint() {
        out.push_str(&format!(", holder fingerprint {fingerprint}"));
    }
    out.push('\n');
    let width = state
        .nodes()
        .iter()
        .map(|node| address(node.address.as_deref()).len())
        .max()
        .unwrap_or(0);
    for node in state.nodes() {
        let answer = match &node.answer {
            NodeAnswer::Free => "free".to_owned(),
            NodeAnswer::Held {
                fingerprint,
                ttl: Some(ttl),
            } => format!("held {fingerprint} ttl {}", seconds(*ttl)),
            NodeAnswer::Held { fingerprint, .. } => format!("held {fingerprint} no expiry"),
            NodeAnswer::Failed(error) => format!("error: {error}"),
            other => other.to_string(),
        };
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
            let (answer, fingerprint, ttl, error) = match &node.answer {
                NodeAnswer::Free => ("free", None, None, None),
                NodeAnswer::Held { fingerprint, ttl } => {
                    ("held", Some(fingerprint.clone()), ttl.map(millis), None)
                }
                NodeAnswer::Failed(error) => ("error", None, None, Some(error.to_string())),
                other => ("error", None, None, Some(other.to_string())),
            };
            json!({
                "node": node.node,
                "address": node.address,
                "state": answer,
                "fingerprint": fingerprint,
                "ttl_ms": ttl,
                "error": error,
            })
        })
        .collect();
    json!({
        "name": name,
        "held": state.is_held(),
        "ttl_ms": state.ttl().map(millis),
        "quorum": state.quorum(),
        "holders": state.holders(),
        "fingerprint": state.fingerprint(),
        "nodes": nodes,
    })
}
