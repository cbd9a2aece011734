//! The sans-IO core of the operator: every decision about *what* should exist is a plain
//! function of already-fetched objects. Controllers fetch, call into this crate, and apply.

// Shape rule (issue #43): no function longer than clippy.toml's `too-many-lines-threshold`.
// Non-test code only: a test reads best as one table or one story, and test builds
// (`cfg(test)`, tests/) do not see this line.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod admission;
pub mod authors;
pub mod catalog;
pub mod cel;
pub mod compile;
pub mod compliance;
pub mod engines;
pub mod exceptions;
pub mod fleet;
pub mod intents;
pub mod names;
pub mod namespaces;
pub mod netpol;
pub mod objects;
pub mod params;
pub mod plan;
pub mod policy;
pub mod posture;
pub mod preview;
pub mod probes;
pub mod reports;
pub mod status;
pub mod validation;

pub use compile::{
    BindingPlan, ClusterBindingPlan, CompileError, compile_binding, compile_cluster_binding,
};
