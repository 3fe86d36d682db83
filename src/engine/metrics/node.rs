//! The node series of each fan-out: each node's requests by outcome
//! (`redmutex_node_requests_total`) and its reply times (`redmutex_node_seconds`), labelled by
//! the node's index; and what one lock and unlock records, for the benchmarks.

use std::time::Instant;

#[cfg(feature = "metrics")]
use super::{Acquiring, End, Hold, Labels, Since, attempt, kept};
#[cfg(feature = "metrics")]
use crate::error::Error;
use crate::error::NodeErrorKind;

/// A node series' handle, registered with the current recorder. For the first 16 nodes its key
/// is a `static` (the label values are literals): no label list to allocate, no hash to compute.
#[cfg(feature = "metrics")]
macro_rules! node_series {
    (requests, $node:expr, $outcome:literal) => {
        node_series!(@requests $node, $outcome; NODES)
    };
    (seconds, $node:expr) => {
        node_series!(@seconds $node; NODES)
    };
    (@$which:ident $node:expr $(, $outcome:literal)?; NODES) => {
        node_series!(@$which $node $(, $outcome)?;
            0 "0" 1 "1" 2 "2" 3 "3" 4 "4" 5 "5" 6 "6" 7 "7"
            8 "8" 9 "9" 10 "10" 11 "11" 12 "12" 13 "13" 14 "14" 15 "15")
    };
    (@requests $node:expr, $outcome:literal; $($n:literal $s:literal)*) => {
        match $node {
            $($n => metrics::counter!(
                "redmutex_node_requests_total", "node" => $s, "outcome" => $outcome
            ),)*
            n => metrics::counter!(
                "redmutex_node_requests_total", "node" => n.to_string(), "outcome" => $outcome
            ),
        }
    };
    (@seconds $node:expr; $($n:literal $s:literal)*) => {
        match $node {
            $($n => metrics::histogram!("redmutex_node_seconds", "node" => $s),)*
            n => metrics::histogram!("redmutex_node_seconds", "node" => n.to_string()),
        }
    };
}

/// How a node's request ended (`redmutex_node_requests_total`'s `outcome`), in
/// `kept::NODE_REQUESTS`'s order.
#[cfg(feature = "metrics")]
#[derive(Clone, Copy)]
enum NodeOutcome {
    Ok,
    Timeout,
    Refused,
    Error,
}

/// Counts one request of node `node` that ended as `outcome`.
#[cfg(feature = "metrics")]
fn node_request(node: usize, outcome: NodeOutcome, kept: bool) {
    let cell = kept
        .then(|| kept::NODE_REQUESTS.get(node))
        .flatten()
        .and_then(|outcomes| outcomes.get(outcome as usize));
    kept::counter(
        cell,
        || match outcome {
            NodeOutcome::Ok => node_series!(requests, node, "ok"),
            NodeOutcome::Timeout => node_series!(requests, node, "timeout"),
            NodeOutcome::Refused => node_series!(requests, node, "refused"),
            NodeOutcome::Error => node_series!(requests, node, "error"),
        },
        |counter| counter.increment(1),
    );
}

/// The node series of one fan-out (`redmutex_node_requests_total` and `redmutex_node_seconds`):
/// which recorder its replies go to is learned once, when its requests go out, rather than at each
/// reply. A fan-out that starts with no recorder installed records none of its replies, and one
/// that starts with the global recorder current records them all there; with another recorder,
/// each reply registers its series with the recorder current when it comes in.
#[derive(Clone, Copy)]
pub(crate) struct NodeReplies {
    #[cfg(feature = "metrics")]
    current: kept::Current,
    #[cfg(feature = "metrics")]
    sent: Instant,
}

impl NodeReplies {
    /// A fan-out whose requests went out at `sent`.
    #[inline]
    pub(crate) fn sent(sent: Instant) -> NodeReplies {
        #[cfg(feature = "metrics")]
        {
            NodeReplies {
                current: kept::current(),
                sent,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = sent;
            NodeReplies {}
        }
    }

    /// Node `node` answered.
    #[inline]
    pub(crate) fn reply<T>(&self, node: usize, reply: &Result<T, NodeErrorKind>) {
        #[cfg(feature = "metrics")]
        {
            if self.current == kept::Current::Nothing {
                return;
            }
            let outcome = match reply {
                // An answer, whatever it says of the lock: the node is healthy.
                Ok(_)
                | Err(
                    NodeErrorKind::Taken
                    | NodeErrorKind::Missing
                    | NodeErrorKind::Repaired
                    | NodeErrorKind::InLine { .. }
                    | NodeErrorKind::LineAhead,
                ) => NodeOutcome::Ok,
                Err(NodeErrorKind::Timeout(_)) => NodeOutcome::Timeout,
                Err(kind) if kind.is_refusal() => NodeOutcome::Refused,
                Err(_) => NodeOutcome::Error,
            };
            let kept = self.current == kept::Current::Global;
            kept::histogram(
                kept.then(|| kept::NODE_SECONDS.get(node)).flatten(),
                || node_series!(seconds, node),
                |histogram| histogram.record(Since(self.sent)),
            );
            node_request(node, outcome, kept);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (node, reply);
    }

    /// Node `node` did not answer within the node timeout: a `timeout` in
    /// `redmutex_node_requests_total` (and no reply time).
    #[inline]
    pub(crate) fn timed_out(&self, node: usize) {
        #[cfg(feature = "metrics")]
        if self.current != kept::Current::Nothing {
            node_request(
                node,
                NodeOutcome::Timeout,
                self.current == kept::Current::Global,
            );
        }
        #[cfg(not(feature = "metrics"))]
        let _ = node;
    }
}

/// What one uncontended `lock()` + `unlock()` of a mutex records, in the order it records it:
/// the call starts, each node answers the acquire, the attempt is counted, the hold starts, the
/// call returns, each node answers the release, the hold ends. For `internals::record_cycle`.
#[cfg(feature = "metrics")]
pub(crate) fn record_cycle(nodes: usize, sent: Instant) {
    const LABELS: Labels = Labels {
        primitive: "mutex",
        use_label: None,
    };
    let acquired = Ok::<(), Error>(());
    let call = Acquiring::start(&LABELS);
    let replies = NodeReplies::sent(sent);
    for node in 0..nodes {
        replies.reply(node, &Ok::<(), NodeErrorKind>(()));
    }
    attempt(&LABELS, &acquired);
    let mut hold = Hold::start(&LABELS);
    call.returned(&acquired);
    let replies = NodeReplies::sent(sent);
    for node in 0..nodes {
        replies.reply(node, &Ok::<(), NodeErrorKind>(()));
    }
    hold.end(End::Unlocked);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::DebugValue;

    use super::*;
    use crate::engine::metrics::testing::{names, recorded};

    #[test]
    fn a_node_that_answers_anything_is_ok_and_a_refusal_is_not_an_error() {
        let started = Instant::now();
        let series = recorded(|| {
            let replies = NodeReplies::sent(started);
            replies.reply(0, &Ok::<u64, _>(1));
            replies.reply(1, &Err::<u64, _>(NodeErrorKind::Taken));
            replies.reply(2, &Err::<u64, _>(NodeErrorKind::CrossSlot));
            replies.reply(
                20,
                &Err::<u64, _>(NodeErrorKind::UnexpectedReply("x".into())),
            );
            replies.timed_out(3);
        });
        assert_eq!(
            names(&series),
            [
                "redmutex_node_requests_total{node=0,outcome=ok}",
                "redmutex_node_requests_total{node=1,outcome=ok}",
                "redmutex_node_requests_total{node=2,outcome=refused}",
                "redmutex_node_requests_total{node=20,outcome=error}",
                "redmutex_node_requests_total{node=3,outcome=timeout}",
                "redmutex_node_seconds{node=0}",
                "redmutex_node_seconds{node=1}",
                "redmutex_node_seconds{node=20}",
                "redmutex_node_seconds{node=2}",
            ]
        );
    }

    /// Two recorders one after the other on one thread, which may share an address: each gets
    /// its own recordings (handles kept across recordings, keyed by the recorder's address, fail
    /// this).
    #[test]
    fn node_series_follow_the_recorder() {
        let reply = || NodeReplies::sent(Instant::now()).reply(0, &Ok::<u64, _>(1));
        let first = recorded(reply);
        let second = recorded(reply);
        for series in [first, second] {
            let ok = series
                .iter()
                .find(|(name, _)| name == "redmutex_node_requests_total{node=0,outcome=ok}");
            assert_eq!(ok.map(|(_, value)| value), Some(&DebugValue::Counter(1)));
        }
    }
}
