//! The public sources the catalog's claims cite, and how each can be checked.

use super::model::{Evidence, Source};

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
