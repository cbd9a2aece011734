//! The operator runtime: shared caches, thin controllers over the pure core, one apply/status
//! mechanism, health endpoints and graceful shutdown.

// Shape rule (issue #43): no function longer than clippy.toml's `too-many-lines-threshold`.
// Non-test code only: a test reads best as one table or one story, and test builds
// (`cfg(test)`, tests/) do not see this line.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod availability;
mod cache;
mod context;
mod controllers;
mod error;
mod events;
mod exceptions;
mod facts;
mod health;
pub mod leader;
mod liveness;
mod metrics;
pub mod posture;
pub mod probes;
mod run;
mod serial;
pub mod write;

pub use error::Error;
pub use leader::LeaderElection;
pub use run::{Config, DEFAULT_RECONCILE_CONCURRENCY, run};
