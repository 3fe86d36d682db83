//! `redmutex doctor`: the library's node checks as a table or JSON.

use std::process::ExitCode;
use std::time::Duration;

use redmutex::{CheckReport, Redlock};
use serde_json::json;

use crate::args::DoctorArgs;
use crate::exit::{CHECK_FAILED, NO_PERMISSION, say, show};

pub async fn doctor(redlock: &Redlock, args: DoctorArgs) -> ExitCode {
    let report = redlock
        .checkup()
        .with_timeout(args.timeout)
        .with_scratch_prefix(args.scratch_prefix)
        .run()
        .await;
    let text = if args.json {
        json_report(&report)
    } else {
        table(&report, redlock.len())
    };
    show(text);
    let refused = report.refused_authentication();
    if refused > 0 && redlock.len().saturating_sub(refused) < report.quorum() {
        say(format!(
            "authentication refused by {refused} of {} nodes (NOAUTH or WRONGPASS): check the \
             user and password in the --nodes URLs",
            redlock.len()
        ));
        return ExitCode::from(NO_PERMISSION);
    }
    if report.has_failures() {
        ExitCode::from(CHECK_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

fn table(report: &CheckReport, nodes: usize) -> String {
    let address = |a: &Option<String>| a.clone().unwrap_or_else(|| "-".to_owned());
    let width = report
        .checks()
        .iter()
        .map(|c| address(&c.address).len())
        .max()
        .unwrap_or(0)
        .max("ADDRESS".len());
    let mut out = format!(
        "NODE  {:width$}  {:11}  {:6}  REASON\n",
        "ADDRESS", "CHECK", "STATUS"
    );
    for c in report.checks() {
        out.push_str(&format!(
            "{:<4}  {:width$}  {:11}  {:6}  {}\n",
            c.node,
            address(&c.address),
            c.kind.name(),
            c.status.name(),
            c.reason
        ));
    }
    let verdict = if report.has_failures() {
        "some checks failed"
    } else {
        "no check failed"
    };
    out.push_str(&format!(
        "\n{verdict}: {} of {nodes} nodes sound, a lock needs {}",
        report.sound_nodes(),
        report.quorum()
    ));
    if let Some(advice) = fail_fast_advice(report) {
        out.push_str(&format!("\n{advice}"));
    }
    out
}

/// How many times the quorum's round trip the farthest member's must be before waiting for it
/// is worth a word, and by how much at least (below that, the difference is noise).
const FAR: (u32, Duration) = (4, Duration::from_millis(5));

/// When the farthest member answers several times slower than the quorum's: that a lock waits
/// for it by default, and what returns at the quorum instead.
fn fail_fast_advice(report: &CheckReport) -> Option<String> {
    let mut known: Vec<(Duration, usize)> = report
        .round_trips()
        .iter()
        .enumerate()
        .filter_map(|(node, rtt)| rtt.map(|rtt| (rtt, node)))
        .collect();
    known.sort();
    let (quorum, _) = *known.get(report.quorum().checked_sub(1)?)?;
    let &(farthest, node) = known.last()?;
    if farthest < quorum.saturating_mul(FAR.0) || farthest - quorum < FAR.1 {
        return None;
    }
    let address = report
        .checks()
        .iter()
        .find(|check| check.node == node)
        .and_then(|check| check.address.clone())
        .unwrap_or_else(|| format!("node {node}"));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Some(format!(
        "round trips: the farthest member, {address}, answers in {:.1} ms, {:.0}x the {:.1} ms in \
         which a quorum ({}) answers. Each lock waits for it by default; `run --fail-fast` and \
         `elect --fail-fast` (the library's with_fail_fast(true)) return once a quorum decided",
        ms(farthest),
        ms(farthest) / ms(quorum).max(0.001),
        ms(quorum),
        report.quorum()
    ))
}

fn json_report(report: &CheckReport) -> String {
    let checks: Vec<_> = report
        .checks()
        .iter()
        .map(|c| {
            json!({
                "node": c.node,
                "address": c.address,
                "check": c.kind.name(),
                "status": c.status.name(),
                "reason": c.reason,
            })
        })
        .collect();
    let round_trips: Vec<_> = report
        .round_trips()
        .iter()
        .map(|rtt| rtt.map(|rtt| rtt.as_secs_f64() * 1000.0))
        .collect();
    json!({
        "ok": !report.has_failures(),
        "quorum": report.quorum(),
        "sound_nodes": report.sound_nodes(),
        "checks": checks,
        "round_trips_ms": round_trips,
        "advice": fail_fast_advice(report),
    })
    .to_string()
}
