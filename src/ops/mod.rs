//! The operator's tools: looking at a lock from outside and breaking it (`inspect`, methods on
//! each primitive), and checking that the nodes are fit for Redlock (`checks`). Each judges what
//! the nodes said in pure code, apart from the I/O that asks them.
//!
//! Uses `primitives`, `engine`, `nodes` and `error`.

pub(crate) mod checks;
pub(crate) mod inspect;

use crate::nodes::script::Script;

/// The operators' scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = inspect::SCRIPTS;
