//! The compliance catalog: which controls of which framework each intent addresses, fully or
//! partly, and the public source that says so. Every control named here exists in the
//! framework's published list, vendored under `upstream/` (see upstream/README.md); the unit
//! tests check the names and IDs against those files and each machine-checkable source
//! against the text it cites.

pub mod bundles;
pub mod coverage;
pub mod report;

use crate::intents::id;
use std::fmt;

/// A framework a control belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Framework {
    /// MITRE ATT&CK v18.1, the techniques of its Containers platform.
    Attack,
    /// CIS Kubernetes Benchmark v1.12.0 (sections as Kubescape's framework lists them).
    Cis,
    /// NSA/CISA Kubernetes Hardening Guide (controls as Kubescape's NSA framework lists them).
    Nsa,
    /// MITRE FiGHT (5G Hierarchy of Threats) v3.0.1.
    Fight,
}

impl Framework {
    pub const ALL: [Framework; 4] = [
        Framework::Attack,
        Framework::Cis,
        Framework::Nsa,
        Framework::Fight,
    ];

    /// Short name, as `nimbus frameworks`, the posture and the bundles spell it.
    pub fn name(self) -> &'static str {
        match self {
            Framework::Attack => "mitre-attack",
            Framework::Cis => "cis-kubernetes",
            Framework::Nsa => "nsa-cisa",
            Framework::Fight => "mitre-fight",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Framework::Attack => "MITRE ATT&CK for Containers",
            Framework::Cis => "CIS Kubernetes Benchmark",
            Framework::Nsa => "NSA/CISA Kubernetes Hardening Guide",
            Framework::Fight => "MITRE FiGHT (5G)",
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            Framework::Attack => "v18.1",
            Framework::Cis => "v1.12.0",
            Framework::Nsa => "(as Kubescape regolibrary ce7ef32a lists it)",
            Framework::Fight => "v3.0.1",
        }
    }

    /// Where a control's page is, for people.
    pub fn control_url(self, control: &str) -> String {
        match self {
            Framework::Attack => format!(
                "https://attack.mitre.org/techniques/{}",
                control.replace('.', "/")
            ),
            Framework::Cis => "https://www.cisecurity.org/benchmark/kubernetes".to_owned(),
            Framework::Nsa => format!("https://hub.armosec.io/docs/{}", control.to_lowercase()),
            Framework::Fight => format!("https://fight.mitre.org/techniques/{control}"),
        }
    }
}

impl fmt::Display for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Framework {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Framework::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let known: Vec<_> = Framework::ALL.iter().map(|f| f.name()).collect();
                format!("unknown framework `{s}` (known: {})", known.join(", "))
            })
    }
}

/// One control of a framework, as its published list names it.
#[derive(Debug, PartialEq, Eq)]
pub struct Control {
    pub framework: Framework,
    pub id: &'static str,
    pub name: &'static str,
    /// No longer in the framework's current release (still cited by others).
    pub withdrawn: bool,
}

/// How much of a control an intent takes care of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Strength {
    Addresses,
    PartiallyAddresses,
}

impl Strength {
    pub fn as_str(self) -> &'static str {
        match self {
            Strength::Addresses => "addresses",
            Strength::PartiallyAddresses => "partially addresses",
        }
    }
}

/// What a source says, and how the tests check it where they can.
#[derive(Debug)]
pub enum Evidence {
    /// A file vendored under `upstream/` contains this text.
    Vendored {
        file: &'static str,
        text: &'static str,
    },
    /// ATT&CK relates this mitigation to the technique (upstream/mitre-attack).
    AttackMitigation { mitigation: &'static str },
    /// The control's own text, as the vendored framework list words it (the intent's effect,
    /// as its engines declare it, is what the control asks for).
    ControlText,
    /// A published page, not vendored.
    Published,
}

#[derive(Debug)]
pub struct Source {
    /// Who says it, where.
    pub cite: &'static str,
    pub url: &'static str,
    pub evidence: Evidence,
}

/// One claim: `intent` addresses (or partially addresses) `control` of `framework`, because
/// `source` says so; `note` says how, for people.
#[derive(Debug)]
pub struct Mapping {
    pub intent: &'static str,
    pub framework: Framework,
    pub control: &'static str,
    pub strength: Strength,
    pub source: &'static Source,
    pub note: &'static str,
}

impl Mapping {
    pub fn control(&self) -> &'static Control {
        control(self.framework, self.control)
            .unwrap_or_else(|| panic!("{} {} is not in CONTROLS", self.framework, self.control))
    }
}

mod sources {
    use super::{Evidence, Source};

    pub static NIMBUS_TUTORIAL: Source = Source {
        cite: "Nimbus quick tutorial: \"DNS Manipulation\" links FiGHT FGT5006 \
               (5GSEC/nimbus docs/quick-tutorials.md, 67712a9)",
        url: "https://github.com/5GSEC/nimbus/blob/67712a9/docs/quick-tutorials.md",
        evidence: Evidence::Published,
    };
    pub static NIMBUS_ASSESS_TLS: Source = Source {
        cite: "Nimbus example assesstls-default.yaml: \"Reference: MITRE ATT&CK Technique: FGT5011\"",
        url: "https://github.com/5GSEC/nimbus/blob/67712a9/examples/clusterscoped/assesstls-default.yaml",
        evidence: Evidence::Vendored {
            file: "nimbus/examples/clusterscoped/assesstls-default.yaml",
            text: "Reference: MITRE ATT&CK Technique: FGT5011",
        },
    };
    pub static NIMBUS_EXPLOIT_PFA: Source = Source {
        cite: "Nimbus example exploit-pfa-si-sib.yaml: preventExecutionFromTempOrLogsFolders \
               \"Mitigate the execution of harmful binaries which may result in exploiting \
               public facing application\"",
        url: "https://github.com/5GSEC/nimbus/blob/67712a9/examples/namespaced/exploit-pfa-si-sib.yaml",
        evidence: Evidence::Vendored {
            file: "nimbus/examples/namespaced/exploit-pfa-si-sib.yaml",
            text: "may result in exploiting public facing application",
        },
    };
    pub static SECURITY_INTENTS_DNS: Source = Source {
        cite: "5GSEC/security-intents threats/mitre/dnsManipulation.yaml (8f01f6d): FGT5006 \
               mitigated by preventLocalDNSHijack, \"prevent writes to the /etc/resolv.conf\"",
        url: "https://github.com/5GSEC/security-intents/blob/8f01f6d/threats/mitre/dnsManipulation.yaml",
        evidence: Evidence::Published,
    };
    pub static SECURITY_INTENTS_SW: Source = Source {
        cite: "5GSEC/security-intents threats/mitre/softwareDeploymentTools.yaml (8f01f6d): \
               FGT1072 mitigated by preventPkgInstall, \"prevent package install\"",
        url: "https://github.com/5GSEC/security-intents/blob/8f01f6d/threats/mitre/softwareDeploymentTools.yaml",
        evidence: Evidence::Published,
    };
    pub static ATTACK_M1026: Source = Source {
        cite: "ATT&CK v18.1 mitigation M1026 Privileged Account Management of this technique \
               (Pod Security Standards against privileged containers; disabling service \
               account tokens pods do not need)",
        url: "https://attack.mitre.org/mitigations/M1026",
        evidence: Evidence::AttackMitigation {
            mitigation: "M1026",
        },
    };
    pub static ATTACK_M1042: Source = Source {
        cite: "ATT&CK v18.1 mitigation M1042 Disable or Remove Feature or Program of this \
               technique: \"Remove unnecessary tools and software from containers\"",
        url: "https://attack.mitre.org/mitigations/M1042",
        evidence: Evidence::AttackMitigation {
            mitigation: "M1042",
        },
    };
    pub static ATTACK_M1037: Source = Source {
        cite: "ATT&CK v18.1 mitigation M1037 Filter Network Traffic of this technique: \
               \"Restrict outbound network traffic from public-facing servers\"",
        url: "https://attack.mitre.org/mitigations/M1037",
        evidence: Evidence::AttackMitigation {
            mitigation: "M1037",
        },
    };
    pub static ATTACK_M1018: Source = Source {
        cite: "ATT&CK v18.1 mitigation M1018 User Account Management of this technique: role-based \
               access control restricting users to the least privileges required",
        url: "https://attack.mitre.org/mitigations/M1018",
        evidence: Evidence::AttackMitigation {
            mitigation: "M1018",
        },
    };
    pub static ATTACK_PEIRATES: Source = Source {
        cite: "ATT&CK software S0683 Peirates, technique T1528: \"Peirates gathers Kubernetes \
               service account tokens\"",
        url: "https://attack.mitre.org/software/S0683/",
        evidence: Evidence::Published,
    };
    pub static FIGHT_FROM_ATTACK: Source = Source {
        cite: "FiGHT v3.0.1 FGT1611 \"Escape to Host\" is ATT&CK T1611 taken into FiGHT",
        url: "https://fight.mitre.org/techniques/FGT1611",
        evidence: Evidence::Vendored {
            file: "mitre-fight/techniques.tsv",
            text: "FGT1611\tEscape to Host",
        },
    };
    pub static PSS_BASELINE: Source = Source {
        cite: "Kubernetes Pod Security Standards, Baseline profile (enforced by the Kyverno \
               engine's podSecurity rule): no privileged pods, host namespaces, hostPath \
               volumes or host ports; added capabilities only from a default list",
        url: "https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline",
        evidence: Evidence::ControlText,
    };
    pub static CONTROL_TEXT: Source = Source {
        cite: "the control's text in the framework list (Kubescape regolibrary ce7ef32a)",
        url: "https://github.com/kubescape/regolibrary/tree/ce7ef32a/frameworks",
        evidence: Evidence::ControlText,
    };
}

/// Every control the catalog names, with the name its framework's list gives it.
pub static CONTROLS: &[Control] = &[
    c(
        Framework::Attack,
        "T1190",
        "Exploit Public-Facing Application",
    ),
    c(Framework::Attack, "T1528", "Steal Application Access Token"),
    c(Framework::Attack, "T1552.007", "Container API"),
    c(
        Framework::Attack,
        "T1609",
        "Container Administration Command",
    ),
    c(Framework::Attack, "T1611", "Escape to Host"),
    c(
        Framework::Cis,
        "5.1.6",
        "Ensure that Service Account Tokens are only mounted where necessary",
    ),
    c(
        Framework::Cis,
        "5.2.2",
        "Minimize the admission of privileged containers",
    ),
    c(
        Framework::Cis,
        "5.2.3",
        "Minimize the admission of containers wishing to share the host process ID namespace",
    ),
    c(
        Framework::Cis,
        "5.2.4",
        "Minimize the admission of containers wishing to share the host IPC namespace",
    ),
    c(
        Framework::Cis,
        "5.2.5",
        "Minimize the admission of containers wishing to share the host network namespace",
    ),
    c(
        Framework::Cis,
        "5.2.9",
        "Minimize the admission of containers with added capabilities",
    ),
    c(
        Framework::Cis,
        "5.2.12",
        "Minimize the admission of HostPath volumes",
    ),
    c(
        Framework::Cis,
        "5.2.13",
        "Minimize the admission of containers which use HostPorts",
    ),
    c(
        Framework::Cis,
        "5.3.2",
        "Ensure that all Namespaces have Network Policies defined",
    ),
    c(
        Framework::Cis,
        "5.7.1",
        "Create administrative boundaries between resources using namespaces",
    ),
    c(Framework::Nsa, "C-0030", "Ingress and Egress blocked"),
    c(
        Framework::Nsa,
        "C-0034",
        "Automatic mapping of service account",
    ),
    c(Framework::Nsa, "C-0038", "Host PID/IPC privileges"),
    c(Framework::Nsa, "C-0041", "HostNetwork access"),
    c(Framework::Nsa, "C-0044", "Container hostPort"),
    c(Framework::Nsa, "C-0046", "Insecure capabilities"),
    c(Framework::Nsa, "C-0057", "Privileged container"),
    c(Framework::Fight, "FGT1072", "Software Deployment Tools"),
    c(
        Framework::Fight,
        "FGT1190",
        "Exploit Public-Facing Application",
    ),
    c(Framework::Fight, "FGT1611", "Escape to Host"),
    c(
        Framework::Fight,
        "FGT5011",
        "Unauthorized Access To Network Exposure Function (NEF) Via Token Fraud",
    ),
    Control {
        framework: Framework::Fight,
        id: "FGT5006",
        name: "DNS Manipulation",
        withdrawn: true,
    },
];

const fn c(framework: Framework, id: &'static str, name: &'static str) -> Control {
    Control {
        framework,
        id,
        name,
        withdrawn: false,
    }
}

use Framework::{Attack, Cis, Fight, Nsa};
use Strength::{Addresses, PartiallyAddresses as Partially};
use sources::*;

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

pub fn control(framework: Framework, id: &str) -> Option<&'static Control> {
    CONTROLS
        .iter()
        .find(|c| c.framework == framework && c.id == id)
}

/// The claims about one intent, in catalog order.
pub fn mappings(intent: &str) -> impl Iterator<Item = &'static Mapping> + '_ {
    MAPPINGS.iter().filter(move |m| m.intent == intent)
}

/// Why an intent maps to no current control, if it does not.
pub fn unmapped(intent: &str) -> Option<&'static str> {
    UNMAPPED.iter().find(|(i, _)| *i == intent).map(|(_, r)| *r)
}

/// The controls of a framework the catalog names, current ones only, in ID order.
pub fn controls(framework: Framework) -> Vec<&'static Control> {
    let mut out: Vec<_> = CONTROLS
        .iter()
        .filter(|c| c.framework == framework && !c.withdrawn)
        .collect();
    out.sort_by(|a, b| natural(a.id).cmp(&natural(b.id)));
    out
}

/// Sort key that orders `5.2.9` before `5.2.12`.
fn natural(id: &str) -> Vec<(u64, &str)> {
    id.split(['.', '-'])
        .map(|part| {
            let digits = part.trim_start_matches(|c: char| !c.is_ascii_digit());
            (digits.parse().unwrap_or(0), part)
        })
        .collect()
}

/// The mapping as a Markdown table, one row per intent and framework (the book's "Compliance", docs/src/compliance.md).
pub fn markdown_table() -> String {
    let mut out = String::from("| Intent | Framework | Controls (source) |\n|---|---|---|\n");
    for intent in crate::catalog::INTENTS {
        for framework in Framework::ALL {
            let mut cells: Vec<String> = Vec::new();
            for m in mappings(intent.id).filter(|m| m.framework == framework) {
                let c = m.control();
                let partial = match m.strength {
                    Strength::Addresses => "",
                    Strength::PartiallyAddresses => ", partially",
                };
                let withdrawn = if c.withdrawn { ", withdrawn" } else { "" };
                cells.push(format!(
                    "{} {}{partial}{withdrawn} ([source]({}))",
                    c.id, c.name, m.source.url
                ));
            }
            if !cells.is_empty() {
                out.push_str(&format!(
                    "| {} | {} | {} |\n",
                    intent.id,
                    framework.title(),
                    cells.join("; ")
                ));
            }
        }
        if let Some(why) = unmapped(intent.id) {
            out.push_str(&format!("| {} | none | {why} |\n", intent.id));
        }
    }
    out
}

#[cfg(test)]
mod tests;
