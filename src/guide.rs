#![doc = include_str!("../doc/rustdoc-links.md")]
#![doc = include_str!("../doc/README.md")]

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/waiting.md")]
pub mod waiting {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/multi-name.md")]
pub mod multi_name {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/keys.md")]
pub mod keys {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/production.md")]
pub mod production {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/safety.md")]
pub mod safety {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/limits.md")]
pub mod limits {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/observability.md")]
pub mod observability {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/performance.md")]
pub mod performance {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/testing.md")]
pub mod testing {}

#[doc = include_str!("../doc/rustdoc-links.md")]
#[doc = include_str!("../doc/metrics.md")]
pub mod metrics {}
