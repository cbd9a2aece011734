//! Engine translators: a NimbusPolicy or ClusterNimbusPolicy, plus what the cluster looks like,
//! becomes the exact set of native objects every enabled engine wants, and the problems that
//! keep an intent from being enforced. Pure: no I/O, no clock, no panics on any input.
//!
//! An engine is one module declaring its [`EngineSpec`] as `SPEC`, registered by one line in
//! the `registered_engines!` list (in the `engine` module): [`Engine`], [`Engine::ALL`], the engines'
//! modules and the registry below derive from it. This module declares them and holds the
//! registry, which ties each [`Engine`] to its module's `SPEC`; everything else lives in a
//! module of its own.

mod admin_priorities;
mod build;
mod checks;
mod engine;
mod engine_set;
mod kinds;
pub mod pss;
mod spec;
mod translate;
mod translation;

pub use admin_priorities::{AdminPriorities, Ranked, priorities};
pub use checks::{check_intent, check_rule, sensitive_problem};
pub use engine::{Engine, enforcing};
pub use engine_set::{
    ADMISSION_CONTROL, CLUSTER_NETWORK, EngineSet, HANDOVER, MECHANISMS, Mechanism, Preference,
    PreferenceError, handover_wait,
};
pub use kinds::*;
pub use kyverno::virtual_patch::{self, VirtualPatches};
pub use kyverno::{KyvernoApi, KyvernoKinds};
pub use rbac::sandbox_violations;
pub use spec::{AUDIT, AuditForm, Enforces, EngineSpec, Fact, Permissions, rules_read};
pub use translate::translate;
pub use translation::{
    DEFAULT_K8TLS_IMAGE, DEFAULT_K8TLS_NAMESPACE, DEFAULT_SANDBOX_CLUSTER_ROLES, Environment,
    Generated, PolicyInput, Problem, Translation,
};
// What engine modules build their translations with.
use build::{
    Emitted, NAMESPACE_NAME_LABEL, Output, Rule, by_labels, excepted, excepted_cel, labels_only,
    metadata, namespace_selector, native_name, nth_name, object, selector_cel, selector_json,
};
use spec::{BINDING_OR_CLUSTER, CLUSTER, CLUSTER_BINDING_NAMESPACES, NAMESPACED};

/// Declares the module of each engine of the `registered_engines!` list (whose `SPEC` is the
/// engine's [`EngineSpec`]) and the registry of their specs.
macro_rules! declare_engine_modules {
    ($($(#[$doc:meta])* $variant:ident => $module:ident,)*) => {
        $(mod $module;)*

        /// Every engine's registration, in [`Engine`] order.
        static ENGINES: &[&EngineSpec] = &[$(&$module::SPEC,)*];
    };
}

engine::registered_engines!(declare_engine_modules);

impl Engine {
    /// Its registration: everything about it.
    pub fn spec(self) -> &'static EngineSpec {
        ENGINES[self as usize]
    }
}

/// Whether `engine` can write: every kind it writes is served but its optional ones, or for
/// Kyverno, those of the API `kyverno` puts in force.
pub fn installed(
    engine: Engine,
    kyverno: KyvernoKinds,
    served: impl Fn(&NativeKind) -> bool,
) -> bool {
    match engine {
        Engine::Kyverno => kyverno.in_force(served).is_some(),
        _ => kinds(engine)
            .iter()
            .all(|k| served(k) || engine.spec().optional_kinds.contains(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_registered_once_in_its_place() {
        for engine in Engine::ALL {
            assert_eq!(engine.spec().engine, engine);
            assert_eq!(engine.manager(), format!("nimbus-{}", engine.name()));
        }
    }
}
