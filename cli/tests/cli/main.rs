//! The `redmutex` command's tests: the built binary run against real nodes that `testenv` starts,
//! one module per area, in one test binary (`cargo test -p redmutex-cli --test cli run::` runs
//! one area).

mod support;

mod commands;
mod degraded;
mod elect;
mod enforce;
mod run;
