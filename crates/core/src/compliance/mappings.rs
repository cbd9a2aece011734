//! Every claim of the catalog: which controls each intent addresses, and which intents
//! address none.

use super::model::{Framework, Mapping, Source, Strength};
use super::sources::*;
use crate::intents::id;
use Framework::{Attack, Cis, Fight, Nsa};
use Strength::{Addresses, PartiallyAddresses as Partially};

const fn m(
    intent: &'static str,
    framework: Framework,
    control: &'static str,
    strength: Strength,
    source: &'static Source,
    note: &'static str,
) -> Mapping {
    Mapping {
        intent,
        framework,
        control,
        strength,
        source,
        note,
    }
}

const PSS: &str = "Pod Security Standards (baseline, or restricted) refuse such pods";

/// Every claim of the catalog.
pub static MAPPINGS: &[Mapping] = &[
    m(
        id::ESCAPE_TO_HOST,
        Attack,
        "T1611",
        Addresses,
        &ATTACK_M1026,
        "privileged and host-namespace pods refused; chroot and dangerous capabilities blocked",
    ),
    m(
        id::ESCAPE_TO_HOST,
        Fight,
        "FGT1611",
        Addresses,
        &FIGHT_FROM_ATTACK,
        "as ATT&CK T1611",
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.2",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.3",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.4",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.5",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.9",
        Partially,
        &PSS_BASELINE,
        "baseline allows added capabilities from a default list; restricted allows only \
         NET_BIND_SERVICE",
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.12",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Cis,
        "5.2.13",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Nsa,
        "C-0057",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Nsa,
        "C-0038",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Nsa,
        "C-0041",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Nsa,
        "C-0044",
        Addresses,
        &PSS_BASELINE,
        PSS,
    ),
    m(
        id::ESCAPE_TO_HOST,
        Nsa,
        "C-0046",
        Partially,
        &PSS_BASELINE,
        "baseline allows added capabilities from a default list",
    ),
    m(
        id::UNAUTHORIZED_SA_TOKEN_ACCESS,
        Attack,
        "T1528",
        Partially,
        &ATTACK_PEIRATES,
        "KubeArmor: processes cannot read the mounted token; the admission engine (cluster \
         bindings): new pods get none; other tokens are not covered",
    ),
    m(
        id::UNAUTHORIZED_SA_TOKEN_ACCESS,
        Attack,
        "T1552.007",
        Partially,
        &ATTACK_M1026,
        "the pod's token is unreadable or not mounted: the API is out of reach with its identity",
    ),
    m(
        id::UNAUTHORIZED_SA_TOKEN_ACCESS,
        Cis,
        "5.1.6",
        Partially,
        &CONTROL_TEXT,
        "KubeArmor leaves it mounted but unreadable; the admission engine mounts none on new pods",
    ),
    m(
        id::UNAUTHORIZED_SA_TOKEN_ACCESS,
        Nsa,
        "C-0034",
        Partially,
        &CONTROL_TEXT,
        "KubeArmor leaves it mapped but unreadable; the admission engine maps none on new pods",
    ),
    m(
        id::SW_DEPLOYMENT_TOOLS,
        Fight,
        "FGT1072",
        Partially,
        &SECURITY_INTENTS_SW,
        "package managers and downloaders blocked inside containers",
    ),
    m(
        id::SW_DEPLOYMENT_TOOLS,
        Attack,
        "T1609",
        Partially,
        &ATTACK_M1042,
        "the tools an attacker would install or run are blocked",
    ),
    m(
        id::DNS_MANIPULATION,
        Fight,
        "FGT5006",
        Partially,
        &SECURITY_INTENTS_DNS,
        "/etc/resolv.conf read-only, DNS only through the cluster DNS",
    ),
    m(
        id::DNS_MANIPULATION,
        Fight,
        "FGT5006",
        Partially,
        &NIMBUS_TUTORIAL,
        "Nimbus's own reference for this intent",
    ),
    m(
        id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS,
        Attack,
        "T1190",
        Partially,
        &NIMBUS_EXPLOIT_PFA,
        "a payload dropped into /tmp or a log folder by an exploit cannot run",
    ),
    m(
        id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS,
        Fight,
        "FGT1190",
        Partially,
        &NIMBUS_EXPLOIT_PFA,
        "as ATT&CK T1190",
    ),
    m(
        id::DENY_EXTERNAL_NETWORK_ACCESS,
        Attack,
        "T1190",
        Partially,
        &ATTACK_M1037,
        "an exploited pod cannot call out beyond private networks",
    ),
    m(
        id::DENY_EXTERNAL_NETWORK_ACCESS,
        Cis,
        "5.3.2",
        Partially,
        &CONTROL_TEXT,
        "NetworkPolicies in each bound namespace, for the selected workloads",
    ),
    m(
        id::DENY_EXTERNAL_NETWORK_ACCESS,
        Nsa,
        "C-0030",
        Partially,
        &CONTROL_TEXT,
        "egress limited to private networks; ingress is left open",
    ),
    m(
        id::ASSESS_TLS,
        Fight,
        "FGT5011",
        Partially,
        &NIMBUS_ASSESS_TLS,
        "assesses TLS configuration (reports, does not block)",
    ),
    m(
        id::NAMESPACE_SANDBOX,
        Cis,
        "5.7.1",
        Partially,
        &CONTROL_TEXT,
        "a group's role is bound per namespace, never cluster-wide",
    ),
    m(
        id::NAMESPACE_SANDBOX,
        Attack,
        "T1609",
        Partially,
        &ATTACK_M1018,
        "a group gets its ClusterRole only inside the selected namespaces",
    ),
];

/// Intents without a mapping to a current control, and why.
pub static UNMAPPED: &[(&str, &str)] = &[
    (
        id::COCO_WORKLOAD,
        "confidential containers protect data in use from the host; none of these frameworks \
         has such a control and no public mapping names one",
    ),
    (
        id::VIRTUAL_PATCH,
        "what it mitigates depends on the CVEs listed; no public mapping names a control",
    ),
    (
        id::DNS_MANIPULATION,
        "the control Nimbus and 5GSEC cite, FiGHT FGT5006 DNS Manipulation, was withdrawn \
         after FiGHT v1.0.1; no current control of these frameworks names it",
    ),
];

/// The claims about one intent, in catalog order.
pub fn mappings(intent: &str) -> impl Iterator<Item = &'static Mapping> + '_ {
    MAPPINGS.iter().filter(move |m| m.intent == intent)
}

/// Why an intent maps to no current control, if it does not.
pub fn unmapped(intent: &str) -> Option<&'static str> {
    UNMAPPED.iter().find(|(i, _)| *i == intent).map(|(_, r)| *r)
}
