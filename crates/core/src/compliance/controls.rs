//! Every control the catalog names, and looking them up.

use super::model::{Control, Framework, Mapping};

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

pub fn control(framework: Framework, id: &str) -> Option<&'static Control> {
    CONTROLS
        .iter()
        .find(|c| c.framework == framework && c.id == id)
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

impl Mapping {
    pub fn control(&self) -> &'static Control {
        control(self.framework, self.control)
            .unwrap_or_else(|| panic!("{} {} is not in CONTROLS", self.framework, self.control))
    }
}
