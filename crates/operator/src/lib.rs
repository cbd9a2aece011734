//! The operator runtime: shared caches, thin controllers over the pure core, one apply/status
//! mechanism, health endpoints and graceful shutdown.

mod availability;
mod cache;
mod context;
mod controllers;
mod error;
mod events;
mod facts;
mod health;
pub mod leader;
mod metrics;
pub mod posture;
mod run;
pub mod write;

// The paths these had before they moved into `write` (the posture and the end-to-end tests
// still name them).
pub use write::drift;
use write::object as apply;

pub use error::Error;
pub use leader::LeaderElection;
pub use run::{Config, DEFAULT_RECONCILE_CONCURRENCY, run};
