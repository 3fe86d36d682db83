//! Model checks with the `stateright` model checker, one module per protocol: the fencing tokens,
//! the semaphore's quorum and the fair line. They need no Redis node and are built apart from the
//! integration suite (`tests/suite`), so that `cargo test --test suite` does not compile them.
//!
//! `cargo test --test models` runs the small configurations and the negative controls in seconds;
//! the larger configurations are `#[ignore]`d and take minutes to hours in a release build, so
//! `.ci/run` does not run them: `cargo test --release --test models fair:: -- --ignored
//! --nocapture` runs one protocol's.

mod model_check;
mod model_cycles;

mod fair;
mod fencing;
mod semaphore;
