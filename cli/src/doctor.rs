//! `redmutex doctor`: the library's node checks as a table or JSON.

use std::process::ExitCode;

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
    out
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
    json!({
        "ok": !report.has_failures(),
        "quorum": report.quorum(),
        "sound_nodes": report.sound_nodes(),
        "checks": checks,
    })
    .to_string()
}
