//! What a virtual patch's generator is made of, whichever of Kyverno's APIs it is written in.

use super::database::Patch;
use crate::engines::kyverno::api::KyvernoApi;
use crate::engines::{
    KUBEARMOR_POLICY, KYVERNO_POLICY, NETWORK_POLICY, NativeKind, PolicyInput, Rule,
};
use serde_json::{Map, Value};

pub(super) const CONTAINER_LABEL: &str = "kubearmor.io/container.name";

/// The kinds of native policy a patch may hold, in the order they are processed.
#[derive(Clone, Copy)]
pub(super) enum Target {
    KubeArmor,
    Kyverno,
    NetworkPolicy,
}

impl Target {
    pub(super) const ALL: [Target; 3] = [Target::KubeArmor, Target::Kyverno, Target::NetworkPolicy];

    /// The database key, also used in generated names.
    pub(super) fn key(self) -> &'static str {
        match self {
            Target::KubeArmor => "karmor",
            Target::Kyverno => "kyverno",
            Target::NetworkPolicy => "netpol",
        }
    }

    /// The kind of the generated object.
    pub(super) fn kind(self) -> &'static NativeKind {
        match self {
            Target::KubeArmor => &KUBEARMOR_POLICY,
            Target::Kyverno => &KYVERNO_POLICY,
            Target::NetworkPolicy => &NETWORK_POLICY,
        }
    }

    pub(super) fn of(self, patch: &Patch) -> Option<&Value> {
        match self {
            Target::KubeArmor => patch.karmor.as_ref(),
            Target::Kyverno => patch.kyverno.as_ref(),
            Target::NetworkPolicy => patch.netpol.as_ref(),
        }
    }
}

/// What every generator policy of one rule shares.
pub(super) struct Context<'a> {
    pub(super) policy: &'a PolicyInput<'a>,
    pub(super) rule: &'a Rule<'a>,
    pub(super) namespace: &'a str,
    /// Prefix of generated names after the policy name: empty for the first virtualPatch rule
    /// of the policy (Nimbus's names), `<key>-` for further ones so they cannot collide.
    pub(super) prefix: String,
    pub(super) selector: Value,
    pub(super) owner: Value,
    /// The API the generators are written in.
    pub(super) api: KyvernoApi,
}

/// One patch, ready to be generated: the native object but for its kind (and, for KubeArmor,
/// the name and container label of the Pod it is generated for).
pub(super) struct Generated<'a> {
    pub(super) target: Target,
    pub(super) image: &'a str,
    /// The database's name of the native object.
    pub(super) name: String,
    pub(super) data: Map<String, Value>,
    /// Of the generator's name, after the policy's.
    pub(super) suffix: String,
    /// Of the legacy generator's rule.
    pub(super) rule_name: String,
}
