//! A hold's series: how many locks are held (`redmutex_held`), how long each was held and how it
//! ended (`redmutex_held_seconds`), and why a held lock was lost (`redmutex_lost_total`).

use std::time::Instant;

use super::Labels;
#[cfg(feature = "metrics")]
use super::{GaugeHandle, Since, kept};

/// How a hold ended (`redmutex_held_seconds`'s `end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// `unlock()` released it.
    Unlocked,
    /// Its validity ran out while held: found gone by `unlock()`, or dropped after it.
    Expired,
    /// An extend or a keep-alive found it gone, taken, or could not keep it.
    Lost,
    /// The last handle was dropped without `unlock()`, while still valid.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(
            dead_code,
            reason = "only `drop_at` ends a hold so, and only with the feature"
        )
    )]
    Dropped,
}

/// One hold, counted in `redmutex_held` from its start until it ends (at most once, whichever
/// path ends it; a hold nobody ended counts as dropped when the held record goes).
pub(crate) struct Hold {
    #[cfg(feature = "metrics")]
    labels: Labels,
    /// The handle the gauge went up by, so that it goes down by the same one whichever recorder
    /// is current where the hold ends (often a `Drop` on another thread).
    #[cfg(feature = "metrics")]
    gauge: GaugeHandle,
    /// `None` where no recorder was installed when the hold started: nothing to time it for.
    #[cfg(feature = "metrics")]
    started: Option<Instant>,
    #[cfg(feature = "metrics")]
    ended: bool,
}

impl Hold {
    #[inline]
    pub(crate) fn start(labels: &Labels) -> Hold {
        #[cfg(feature = "metrics")]
        {
            let current = kept::current();
            let register = || metrics::gauge!("redmutex_held", labels.alone().pairs());
            let gauge = GaugeHandle::new(current, labels, |series| &series.held, register);
            gauge.get().increment(1.0);
            Hold {
                labels: *labels,
                gauge,
                started: (current != kept::Current::Nothing).then(Instant::now),
                ended: false,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Hold {}
        }
    }

    /// Ends the hold; false if it had ended already.
    #[inline]
    pub(crate) fn end(&mut self, end: End) -> bool {
        #[cfg(feature = "metrics")]
        {
            if self.ended {
                return false;
            }
            self.ended = true;
            self.gauge.get().decrement(1.0);
            let Some(started) = self.started else {
                return true;
            };
            let current = kept::current();
            if current == kept::Current::Nothing {
                return true;
            }
            let labels = &self.labels;
            kept::histogram(
                kept::primitive(current, labels)
                    .and_then(|series| series.held_seconds.get(end as usize)),
                || {
                    let end = match end {
                        End::Unlocked => "unlocked",
                        End::Expired => "expired",
                        End::Lost => "lost",
                        End::Dropped => "dropped",
                    };
                    metrics::histogram!("redmutex_held_seconds", labels.with("end", end).pairs())
                },
                |histogram| histogram.record(Since(started)),
            );
            true
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = end;
            true
        }
    }

    /// Ends a hold whose last handle goes: dropped while valid, expired after `valid_until`.
    #[inline]
    pub(crate) fn drop_at(&mut self, valid_until: Instant) {
        #[cfg(feature = "metrics")]
        {
            if self.ended {
                return;
            }
            // A hold started with no recorder is timed by nothing: no clock to read for it.
            let end = match self.started {
                Some(_) if Instant::now() >= valid_until => End::Expired,
                _ => End::Dropped,
            };
            self.end(end);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = valid_until;
    }
}

/// Why a held lock was lost (`redmutex_lost_total`'s `reason`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lost {
    /// An extend found the key gone.
    Expired,
    /// An extend found another owner's value.
    Taken,
    /// A keep-alive's extend failed otherwise (no quorum, errors).
    KeepAliveFailed,
    /// A keep-alive's extends did not succeed before the validity ran out.
    KeepAliveTimedOut,
}

/// A lock lost while held; `hold` ends as lost, and the loss counts once however many paths
/// report it.
#[inline]
pub(crate) fn lost(labels: &Labels, hold: &mut Hold, reason: Lost) {
    if !hold.end(End::Lost) {
        return;
    }
    #[cfg(feature = "metrics")]
    {
        let current = kept::current();
        if current == kept::Current::Nothing {
            return;
        }
        kept::counter(
            kept::primitive(current, labels).and_then(|series| series.lost.get(reason as usize)),
            || {
                let reason = match reason {
                    Lost::Expired => "expired",
                    Lost::Taken => "taken",
                    Lost::KeepAliveFailed => "keep_alive_failed",
                    Lost::KeepAliveTimedOut => "keep_alive_timed_out",
                };
                metrics::counter!("redmutex_lost_total", labels.with("reason", reason).pairs())
            },
            |counter| counter.increment(1),
        );
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, reason);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::time::Duration;

    use metrics_util::debugging::DebugValue;

    use super::*;
    use crate::engine::metrics::testing::{MUTEX, names, recorded};

    /// A hold's gauge goes down in the recorder it went up in, whichever recorder is current
    /// where the hold ends (a lock dropped on another thread, or outside the caller's recorder).
    #[test]
    fn a_hold_ends_in_the_recorder_it_started_in() {
        let labels = Labels {
            primitive: "mutex",
            use_label: Some("moved"),
        };
        let mut hold = None;
        let started = recorded(|| hold = Some(Hold::start(&labels)));
        let mut hold = hold.expect("started");
        let elsewhere = recorded(|| {
            hold.end(End::Unlocked);
        });
        let gauge = |series: &[(String, DebugValue)]| {
            series.iter().find_map(|(name, value)| match value {
                DebugValue::Gauge(gauge) if name == "redmutex_held{primitive=mutex,use=moved}" => {
                    Some(gauge.into_inner())
                }
                _ => None,
            })
        };
        assert_eq!(gauge(&started), Some(1.0), "the start counts");
        assert_eq!(
            gauge(&elsewhere),
            None,
            "the end does not count where it did not start"
        );
    }
    #[test]
    fn a_hold_ends_once_whichever_path_ends_it() {
        let series = recorded(|| {
            let labels = Labels {
                primitive: "write",
                use_label: Some("catalog"),
            };
            let mut hold = Hold::start(&labels);
            lost(&labels, &mut hold, Lost::Taken);
            lost(&labels, &mut hold, Lost::KeepAliveFailed);
            assert!(!hold.end(End::Unlocked));
            hold.drop_at(Instant::now());
        });
        assert_eq!(
            names(&series),
            [
                "redmutex_held_seconds{primitive=write,end=lost,use=catalog}",
                "redmutex_held{primitive=write,use=catalog}",
                "redmutex_lost_total{primitive=write,reason=taken,use=catalog}",
            ]
        );
        assert_eq!(series[1].1, DebugValue::Gauge(0.0.into()));
        assert_eq!(series[2].1, DebugValue::Counter(1));
    }

    #[test]
    fn a_hold_dropped_after_its_validity_ended_expired() {
        let series = recorded(|| {
            let mut valid = Hold::start(&MUTEX);
            valid.drop_at(Instant::now() + Duration::from_secs(60));
            let mut late = Hold::start(&MUTEX);
            late.drop_at(Instant::now());
        });
        assert_eq!(
            names(&series),
            [
                "redmutex_held_seconds{primitive=mutex,end=dropped}",
                "redmutex_held_seconds{primitive=mutex,end=expired}",
                "redmutex_held{primitive=mutex}",
            ]
        );
    }
}
