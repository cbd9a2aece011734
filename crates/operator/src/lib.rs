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
mod serial;
pub mod write;

pub use error::Error;
pub use leader::LeaderElection;
pub use run::{Config, DEFAULT_RECONCILE_CONCURRENCY, run};
