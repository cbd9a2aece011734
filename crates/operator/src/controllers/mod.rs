//! Thin controllers: observe (the caches), plan (the pure core), execute ([`crate::write`]),
//! report (the status the core decides).

pub mod binding;
pub mod cluster_binding;
pub mod exception;
pub mod intent;
mod keep;
pub mod policy;
mod report;
mod translated;

pub use report::{error_policy, object_key};
