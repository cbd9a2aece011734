//! The intent catalog: every intent ([`crate::intents`]: IDs, meanings, parameters) with the
//! engines that enforce it, as each engine declares ([`crate::engines`]). The operator's status
//! conditions and the CLI read this; the translators read the intents and their own
//! declarations.

use crate::engines;
pub use crate::engines::Engine;
pub use crate::intents::*;
use std::collections::BTreeSet;

impl IntentSpec {
    /// The engines that enforce this intent (each engine declares its intents).
    pub fn engines(&self) -> BTreeSet<Engine> {
        engines::enforcing(self.id, None)
    }

    /// Engines that enforce this intent when bound by a binding of `kind`.
    pub fn engines_for(&self, kind: BindingKind) -> BTreeSet<Engine> {
        engines::enforcing(self.id, Some(kind))
    }

    /// Whether `engine` acts on this intent in a policy of `origin`.
    pub fn handled_by(&self, engine: Engine, origin: Origin) -> bool {
        engine.handles(self.id, origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::engines::Enforces;

    #[test]
    fn ids_are_unique_and_engine_names_round_trip() {
        let ids: BTreeSet<_> = INTENTS.iter().map(|i| i.id).collect();
        assert_eq!(ids.len(), INTENTS.len());
        for e in Engine::ALL {
            assert_eq!(e.name().parse::<Engine>(), Ok(e));
        }
        assert!("nope".parse::<Engine>().unwrap_err().contains("netpol"));
    }

    #[test]
    fn engines_depend_on_the_binding_kind() {
        let tls = intent("assessTLS").unwrap();
        assert!(tls.engines_for(BindingKind::Namespaced).is_empty());
        assert_eq!(
            tls.engines_for(BindingKind::Cluster),
            BTreeSet::from([Engine::K8tls])
        );
        let escape = intent("escapeToHost").unwrap();
        assert!(escape.handled_by(Engine::Kyverno, Origin::Cluster));
        assert!(!escape.handled_by(Engine::Kyverno, Origin::ClusterBindingNamespace));
        assert!(escape.handled_by(Engine::KubeArmor, Origin::ClusterBindingNamespace));
    }

    #[test]
    fn sandboxes_come_only_from_cluster_bindings() {
        let sandbox = intent("namespaceSandbox").unwrap();
        assert!(sandbox.engines_for(BindingKind::Namespaced).is_empty());
        assert_eq!(
            sandbox.engines_for(BindingKind::Cluster),
            BTreeSet::from([Engine::Rbac])
        );
        assert!(!sandbox.handled_by(Engine::Rbac, Origin::Binding));
        assert!(sandbox.handled_by(Engine::Rbac, Origin::ClusterBindingNamespace));
    }

    #[test]
    fn engines_enforce_exactly_the_catalog_intents() {
        for engine in Engine::ALL {
            for Enforces {
                intent, origins, ..
            } in engine.spec().enforces
            {
                assert!(
                    catalog::intent(intent).is_some(),
                    "{engine}: unknown `{intent}`"
                );
                assert!(
                    !origins.is_empty(),
                    "{engine} enforces `{intent}` from nowhere"
                );
            }
        }
        for intent in catalog::INTENTS {
            assert!(
                !intent.engines().is_empty(),
                "nobody enforces {}",
                intent.id
            );
        }
    }
}
