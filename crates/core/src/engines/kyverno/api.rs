//! Which of Kyverno's policy APIs the engine writes in: the legacy `kyverno.io/v1` kinds or the
//! CEL `policies.kyverno.io/v1` ones, the kinds each needs served, and which one
//! `--kyverno-kinds` puts in force given what the cluster serves.

use crate::engines::{
    KYVERNO_CEL_POLICY_EXCEPTION, KYVERNO_CLUSTER_POLICY, KYVERNO_MUTATING_POLICY,
    KYVERNO_NAMESPACED_MUTATING_POLICY, KYVERNO_NAMESPACED_VALIDATING_POLICY, KYVERNO_POLICY,
    KYVERNO_POLICY_EXCEPTION, KYVERNO_VALIDATING_POLICY, NativeKind,
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
