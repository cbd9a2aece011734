//! Which built-in engines there are: the one list that registers them
//! ([`registered_engines!`]), the [`Engine`] declared from it, and what an engine is known by
//! (its name, its manager, the intents it handles), read off its registration through
//! [`Engine::spec`] (the registry, in the parent module, where each engine's module lives).

use crate::intents::{BindingKind, Origin};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// Registers the built-in engines, `Variant => module`, in translation order within a rule: the
/// one place an engine is listed. Hands the list to the macro `$then`: [`Engine`]'s variants
/// and [`Engine::ALL`] are declared from it here, the engines' modules (whose `SPEC` is the
/// engine's [`EngineSpec`](super::EngineSpec)) and the registry in the parent module.
macro_rules! registered_engines {
    ($then:ident) => {
        $then! {
            NetworkPolicy => netpol,
            ClusterNetworkPolicy => cluster_netpol,
            KubeArmor => kubearmor,
            Kyverno => kyverno,
            K8tls => k8tls,
            Rbac => rbac,
            Admission => admission,
        }
    };
}
pub(super) use registered_engines;

/// Declares [`Engine`] and [`Engine::ALL`] from the [`registered_engines!`] list.
macro_rules! declare_engine {
    ($($(#[$doc:meta])* $variant:ident => $module:ident,)*) => {
        /// A built-in engine. Everything about it is in its
        /// [`EngineSpec`](super::EngineSpec) ([`Engine::spec`]), declared by its module and
        /// registered in the `registered_engines!` list.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Engine {
            $($(#[$doc])* $variant,)*
        }

        impl Engine {
            /// Every engine, in registration order.
            pub const ALL: [Engine; [$(Engine::$variant,)*].len()] = [$(Engine::$variant,)*];
        }
    };
}

registered_engines!(declare_engine);

impl Engine {
    /// Short name used on the command line (`--disable-engines kubearmor`) and in the Helm
    /// values (`engines.kubearmor`).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// `nimbus-<engine>`: the `app.kubernetes.io/managed-by` value on everything the engine
    /// generates (as Nimbus's adapters set it) and its server-side-apply field manager.
    pub fn manager(self) -> &'static str {
        self.spec().manager
    }

    /// Whether it acts on `intent` in a policy of `origin`.
    pub fn handles(self, intent: &str, origin: Origin) -> bool {
        self.spec()
            .origins(intent)
            .is_some_and(|o| o.contains(&origin))
    }
}

/// The engines that enforce `intent` when bound by a binding of `kind` (of any kind: `None`).
pub fn enforcing(intent: &str, kind: Option<BindingKind>) -> BTreeSet<Engine> {
    Engine::ALL
        .into_iter()
        .filter(|e| {
            e.spec().origins(intent).is_some_and(|o| {
                kind.is_none_or(|kind| o.iter().any(|o| kind.origins().contains(o)))
            })
        })
        .collect()
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Engine::ALL.iter().map(|e| e.name()).collect();
                format!("unknown engine `{s}` (known: {})", names.join(", "))
            })
    }
}
