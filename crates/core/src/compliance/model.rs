//! What the catalog is made of: frameworks, their controls, and claims about intents.

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
