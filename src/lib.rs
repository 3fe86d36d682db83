#![doc = include_str!("../README.md")]

mod acquire;
mod delay;
mod error;
mod fanout;
mod lock;
mod mutex;
mod node;
mod quorum;
mod redact;
mod redlock;
mod scripts;
mod settings;
mod value;

pub use error::{Error, NodeError, NodeErrorKind};
pub use lock::Lock;
pub use mutex::Mutex;
pub use node::NodeConnection;
pub use redlock::Redlock;
