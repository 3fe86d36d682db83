//! The connection layer: one node, and the connection to it.

pub(crate) mod script;
