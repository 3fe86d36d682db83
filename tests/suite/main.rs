//! The integration tests against real `redis-server` nodes (started by `testenv`), one module per
//! area, in one binary so that the crate, tokio and redis are linked once rather than once per
//! area. Tests are named `area::test`: `cargo test --test suite rwlock::` runs one area.
//!
//! The slow scenarios are `#[ignore]`d so that `cargo test` stays quick; `.ci/run` runs them with
//! `cargo test --test suite -- --ignored`. Two other binaries sit beside this one: `tests/models`
//! (the stateright model checks, which need no nodes) and `tests/tls.rs` (built only with the
//! `tls` feature: compiling it alone costs far less than compiling this suite a second time with
//! the feature).
//!
//! Every test shares this process with the others, so none changes process-wide state for its own
//! ends: traces are captured through `support::capture::set_default` (one thread's subscriber),
//! and a panic hook counts only the panics of its own threads.

mod support;

mod acl;
mod acquire;
mod cancel;
mod checks;
mod cluster_keys;
mod cluster_member;
mod cluster_primitives;
mod config;
mod connecting;
mod contention;
mod election;
mod entries;
mod extend_unlock;
mod fair;
mod faults;
mod fencing;
mod inspect;
mod interop;
mod keep_alive;
mod keys;
mod max_wait;
mod metrics;
mod multi;
mod network;
mod recovery;
mod repair;
mod replica_acks;
mod run;
mod rwlock;
mod safety;
mod same_server;
mod semaphore;
mod semaphore_safety;
mod soak_controls;
mod tracing;
mod versions;
mod wake;
