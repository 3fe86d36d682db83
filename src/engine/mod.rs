//! The engine: one operation on every node at once, and the verdict over their replies.
//!
//! Owns the fan-out of a request to every node, the quorum arithmetic and the tally of replies,
//! validity, the request to one node and how its reply reads, the settings and what they check,
//! retry delays and lock values, one attempt to acquire (with the fencing raise and the release of
//! a failed attempt), and the held record a lock is made of. What a request sends is a
//! [`Target`](target::Target)'s business: the engine names no primitive, and knows nothing of
//! waiting.
//!
//! Uses `nodes` and `error`.

pub(crate) mod attempt;
pub(crate) mod delay;
pub(crate) mod fanout;
pub(crate) mod held;
pub(crate) mod metrics;
pub(crate) mod quorum;
pub(crate) mod request;
pub(crate) mod resource;
pub(crate) mod settings;
pub(crate) mod tally;
pub(crate) mod target;
pub(crate) mod value;
