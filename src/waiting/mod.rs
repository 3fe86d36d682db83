//! Waiting: what a `lock()` call does between its attempts, and the loop of "attempt, then wait"
//! that uses it.
//!
//! Owns the acquire loop (`acquire`: one attempt is the engine's, then a wait, until the lock is
//! held or the tries are spent), the interface between that loop and the ways of waiting
//! (`wait`): plain sleeping for the retry delay, waiting for release notices (`notices`, fed by
//! the client's `hub`, whose listeners `listeners` starts on first use), and the fair line across
//! clients (`fair`, whose protocol, keys and scripts live there). It acts for an engine
//! [`Resource`](crate::engine::resource::Resource), never for a primitive.
//!
//! Uses `engine`, `nodes` and `error`.

pub(crate) mod acquire;
pub(crate) mod fair;
pub(crate) mod hub;
pub(crate) mod listeners;
mod notices;
mod wait;

pub(crate) use notices::{KEPT_MARK, MARK_TTL};
pub(crate) use wait::{Resume, Waiting};
