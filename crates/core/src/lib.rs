//! The sans-IO core of the operator: every decision about *what* should exist is a plain
//! function of already-fetched objects. Controllers fetch, call into this crate, and apply.

pub mod cel;
pub mod compile;
pub mod names;
pub mod namespaces;

pub use compile::{
    BindingPlan, ClusterBindingPlan, CompileError, compile_binding, compile_cluster_binding,
};
