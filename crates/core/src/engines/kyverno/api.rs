//! Which of Kyverno's policy APIs the engine writes in: the legacy `kyverno.io/v1` kinds or the
//! CEL `policies.kyverno.io/v1` ones, the kinds each needs served, and which one
//! `--kyverno-kinds` puts in force given what the cluster serves.

use crate::engines::{
    KYVERNO_CEL_POLICY_EXCEPTION, KYVERNO_CLUSTER_POLICY, KYVERNO_MUTATING_POLICY,
    KYVERNO_NAMESPACED_GENERATING_POLICY, KYVERNO_NAMESPACED_MUTATING_POLICY,
    KYVERNO_NAMESPACED_VALIDATING_POLICY, KYVERNO_POLICY, KYVERNO_POLICY_EXCEPTION,
    KYVERNO_VALIDATING_POLICY, NativeKind,
};
use std::fmt;
use std::str::FromStr;

/// Which of Kyverno's policy APIs the engine writes in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KyvernoApi {
    /// `kyverno.io/v1` `Policy` and `ClusterPolicy`, as Nimbus wrote them.
    #[default]
    Legacy,
    /// `policies.kyverno.io/v1` (Namespaced)ValidatingPolicy and (Namespaced)MutatingPolicy.
    Cel,
}

impl KyvernoApi {
    /// The kinds the engine needs served to write in this API.
    pub fn kinds(self) -> &'static [&'static NativeKind] {
        match self {
            KyvernoApi::Legacy => &[&KYVERNO_POLICY, &KYVERNO_CLUSTER_POLICY],
            KyvernoApi::Cel => &[
                &KYVERNO_NAMESPACED_VALIDATING_POLICY,
                &KYVERNO_VALIDATING_POLICY,
                &KYVERNO_NAMESPACED_MUTATING_POLICY,
                &KYVERNO_MUTATING_POLICY,
            ],
        }
    }

    /// The kind SecurityIntentExceptions become in this API (not needed served: without it
    /// the engine enforces, and says an exception is not honoured).
    pub fn exceptions(self) -> &'static NativeKind {
        match self {
            KyvernoApi::Legacy => &KYVERNO_POLICY_EXCEPTION,
            KyvernoApi::Cel => &KYVERNO_CEL_POLICY_EXCEPTION,
        }
    }

    /// Every kind the engine may write in this API: [`Self::kinds`], for the CEL kinds the
    /// generating policies of virtualPatch (an optional kind of the engine: see the kyverno
    /// module), and [`Self::exceptions`].
    pub fn writes(self) -> &'static [&'static NativeKind] {
        match self {
            KyvernoApi::Legacy => &[
                &KYVERNO_POLICY,
                &KYVERNO_CLUSTER_POLICY,
                &KYVERNO_POLICY_EXCEPTION,
            ],
            KyvernoApi::Cel => &[
                &KYVERNO_NAMESPACED_VALIDATING_POLICY,
                &KYVERNO_VALIDATING_POLICY,
                &KYVERNO_NAMESPACED_MUTATING_POLICY,
                &KYVERNO_MUTATING_POLICY,
                &KYVERNO_NAMESPACED_GENERATING_POLICY,
                &KYVERNO_CEL_POLICY_EXCEPTION,
            ],
        }
    }
}

/// Which API the engine is asked to write in (`--kyverno-kinds`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KyvernoKinds {
    /// The CEL kinds where the cluster serves them, else the legacy ones.
    #[default]
    Auto,
    Legacy,
    Cel,
}

impl KyvernoKinds {
    pub const NAMES: [&'static str; 3] = ["auto", "legacy", "cel"];

    /// The API the engine writes in, given which kinds are served; `None` when the one asked
    /// for (any, for `Auto`) is not: Kyverno then counts as not installed.
    pub fn in_force(self, served: impl Fn(&NativeKind) -> bool) -> Option<KyvernoApi> {
        let usable = |api: KyvernoApi| api.kinds().iter().all(|k| served(k)).then_some(api);
        match self {
            KyvernoKinds::Auto => usable(KyvernoApi::Cel).or_else(|| usable(KyvernoApi::Legacy)),
            KyvernoKinds::Legacy => usable(KyvernoApi::Legacy),
            KyvernoKinds::Cel => usable(KyvernoApi::Cel),
        }
    }
}

impl KyvernoKinds {
    /// Why Kyverno counts as not installed where one of its APIs is asked for, in words, given
    /// which kinds are served: the kinds of that API that are not, and the other API where it
    /// would do. `None` when an API is in force, and for `auto` (neither is served: Kyverno's
    /// CRDs are missing, as any engine's).
    pub fn missing(self, served: impl Fn(&NativeKind) -> bool) -> Option<String> {
        if self == KyvernoKinds::Auto || self.in_force(&served).is_some() {
            return None;
        }
        let unserved = |api: KyvernoApi| {
            let kinds: Vec<&str> = api
                .kinds()
                .iter()
                .filter(|k| !served(k))
                .map(|k| k.kind)
                .collect();
            format!("{} not served", kinds.join(", "))
        };
        let usable = |api: KyvernoApi| api.kinds().iter().all(|k| served(k));
        Some(match self {
            KyvernoKinds::Cel if usable(KyvernoApi::Legacy) => format!(
                "--kyverno-kinds cel asks for its CEL policy kinds, {}; its legacy kinds are \
                 served (--kyverno-kinds auto writes those)",
                unserved(KyvernoApi::Cel)
            ),
            KyvernoKinds::Cel => format!(
                "--kyverno-kinds cel asks for its CEL policy kinds, {}",
                unserved(KyvernoApi::Cel)
            ),
            KyvernoKinds::Legacy if usable(KyvernoApi::Cel) => format!(
                "--kyverno-kinds legacy asks for its legacy policy kinds, {}; its CEL kinds are \
                 served (--kyverno-kinds auto writes those)",
                unserved(KyvernoApi::Legacy)
            ),
            KyvernoKinds::Legacy | KyvernoKinds::Auto => format!(
                "--kyverno-kinds legacy asks for its legacy policy kinds, {}",
                unserved(KyvernoApi::Legacy)
            ),
        })
    }
}

impl fmt::Display for KyvernoKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::NAMES[*self as usize])
    }
}

impl FromStr for KyvernoKinds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(KyvernoKinds::Auto),
            "legacy" => Ok(KyvernoKinds::Legacy),
            "cel" => Ok(KyvernoKinds::Cel),
            _ => Err(format!(
                "unknown Kyverno kinds `{s}` (known: {})",
                Self::NAMES.join(", ")
            )),
        }
    }
}
