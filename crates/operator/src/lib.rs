//! The operator runtime: shared caches, thin controllers over the pure core, one apply/status
//! mechanism, health endpoints and graceful shutdown.

pub mod apply;
mod availability;
mod cache;
mod context;
mod controllers;
pub mod drift;
mod error;
mod events;
mod health;
pub mod leader;
mod metrics;
mod natives;
pub mod posture;
mod run;

pub use error::Error;
pub use leader::LeaderElection;
pub use run::{Config, DEFAULT_RECONCILE_CONCURRENCY, run};
