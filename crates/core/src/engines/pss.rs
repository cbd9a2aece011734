//! The Pod Security Standards as CEL validations of a pod spec, for the engines whose policies
//! are CEL: Kyverno's ValidatingPolicies read a Pod (`object`; Kyverno derives the checks of pod
//! controllers' templates, rewriting `object.spec` and `object.metadata`), the admission engine's
//! ValidatingAdmissionPolicies a variable holding a Pod's or a workload template's spec.
//!
//! They follow the checks of Kubernetes's pod-security-admission (k8s.io/pod-security-admission
//! `policy/check_*.go`) as `latest` in Kubernetes 1.36, the version the test control plane runs:
//! Kubernetes' own PodSecurity admission is the oracle they are held to, case for case, by the
//! differential test (`tests/efficacy/pod_security.rs`). Kyverno 1.19's legacy `podSecurity`
//! rule enforces its own vendored copy as `latest`, which predates 1.35's relaxations for pods in
//! a user namespace (`hostUsers: false`); the table of deliberate differences in docs/src/proofs.md says so.
//! Absent fields take the value the API server would default or the check reads them as
//! (`orValue`).

use nimbus_api::PodSecurityControl as Control;
use std::collections::BTreeSet;

/// A Pod Security Standards level, as the `psaLevel` parameter names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(level: &str) -> Option<Self> {
        match level {
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }
}

/// One check: the control it belongs to, a CEL expression true of a compliant pod, and what a
/// violating pod is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The Pod Security Standards control, as an exception names it: `None` for Host Probes /
    /// Lifecycle Hooks, which Kyverno's control names leave out, so that an exception cannot
    /// let a workload out of it in one engine and not in another.
    pub control: Option<Control>,
    pub expression: String,
    pub message: &'static str,
}

/// Where the checks find the pod: CEL expressions of its spec and of its annotations (a map).
#[derive(Clone, Copy, Debug)]
pub struct Pod<'a> {
    pub spec: &'a str,
    pub annotations: &'a str,
}

/// A Pod admitted or scanned (`object`).
pub const OBJECT: Pod<'static> = Pod {
    spec: "object.spec",
    annotations: "object.metadata.?annotations.orValue({})",
};

/// The checks of `level` (restricted includes baseline's) on `pod`.
pub fn checks(level: Level, pod: Pod) -> Vec<Check> {
    let mut checks = baseline(pod);
    if level == Level::Restricted {
        checks.extend(restricted(pod));
    }
    checks
}

/// The controls `level`'s checks belong to: those an exception can let a workload out of at
/// that level (restricted's own mean nothing at baseline).
pub fn controls(level: Level) -> BTreeSet<Control> {
    checks(level, OBJECT)
        .into_iter()
        .filter_map(|c| c.control)
        .collect()
}

impl Check {
    /// This check, passed by whatever `letting_out` (CEL) holds of, when anything does.
    pub fn unless(self, letting_out: Option<&str>) -> Check {
        match letting_out {
            Some(out) => Check {
                expression: format!("({out}) || ({})", self.expression),
                ..self
            },
            None => self,
        }
    }
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];
const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn baseline(pod: Pod) -> Vec<Check> {
    let mut checks = baseline_host_access(pod);
    checks.extend(baseline_confinement(pod));
    checks
}

/// Baseline's checks of what reaches the host: HostProcess, host namespaces, privileged
/// containers, added capabilities, hostPath volumes, host ports.
fn baseline_host_access(pod: Pod) -> Vec<Check> {
    let Pod { spec, .. } = pod;
    let context = format!("{spec}.?securityContext");
    let every_container = |check: &str| every_container(spec, check);
    vec![
        check(
            Some(Control::HostProcess),
            format!(
                "!{context}.?windowsOptions.?hostProcess.orValue(false) && {}",
                every_container("!c.?securityContext.?windowsOptions.?hostProcess.orValue(false)")
            ),
            "HostProcess containers are disallowed: securityContext.windowsOptions.hostProcess \
             must be unset or false.",
        ),
        check(
            Some(Control::HostNamespaces),
            format!(
                "!{spec}.?hostNetwork.orValue(false) && !{spec}.?hostPID.orValue(false) \
                 && !{spec}.?hostIPC.orValue(false)"
            ),
            "Sharing the host namespaces is disallowed: spec.hostNetwork, spec.hostPID and \
             spec.hostIPC must be unset or false.",
        ),
        check(
            Some(Control::PrivilegedContainers),
            every_container("!c.?securityContext.?privileged.orValue(false)"),
            "Privileged containers are disallowed: securityContext.privileged must be unset or \
             false.",
        ),
        check(
            Some(Control::Capabilities),
            every_container(&format!(
                "c.?securityContext.?capabilities.?add.orValue([]).all(cap, cap in {})",
                list(BASELINE_CAPABILITIES)
            )),
            "Adding capabilities beyond the default set is disallowed: \
             securityContext.capabilities.add may name only AUDIT_WRITE, CHOWN, DAC_OVERRIDE, \
             FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID and \
             SYS_CHROOT.",
        ),
        check(
            Some(Control::HostPathVolumes),
            format!("{spec}.?volumes.orValue([]).all(v, !has(v.hostPath))"),
            "HostPath volumes are disallowed: spec.volumes[*].hostPath must be unset.",
        ),
        check(
            Some(Control::HostPorts),
            every_container("c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0)"),
            "Host ports are disallowed: ports[*].hostPort must be unset or 0.",
        ),
    ]
}

/// Baseline's checks of what confines the containers (AppArmor, SELinux, /proc, seccomp,
/// sysctls), and of probes and hooks naming a host.
fn baseline_confinement(pod: Pod) -> Vec<Check> {
    let Pod { spec, annotations } = pod;
    let context = format!("{spec}.?securityContext");
    let every_container = |check: &str| every_container(spec, check);
    let probes = ["livenessProbe", "readinessProbe", "startupProbe"]
        .iter()
        .map(|p| format!("c.?{p}"))
        .chain(["postStart", "preStop"].map(|h| format!("c.?lifecycle.?{h}")))
        .map(|handler| {
            format!(
                "{handler}.?httpGet.?host.orValue('') == '' && \
                 {handler}.?tcpSocket.?host.orValue('') == ''"
            )
        })
        .collect::<Vec<_>>()
        .join(" && ");
    vec![
        check(
            Some(Control::AppArmor),
            format!(
                "{context}.?appArmorProfile.?type.orValue('RuntimeDefault') in \
                 ['RuntimeDefault', 'Localhost'] && {} && \
                 {annotations}.all(k, \
                 !k.startsWith('container.apparmor.security.beta.kubernetes.io/') || \
                 {annotations}[k] in ['', 'runtime/default'] || \
                 {annotations}[k].startsWith('localhost/'))",
                every_container(
                    "c.?securityContext.?appArmorProfile.?type.orValue('RuntimeDefault') in \
                     ['RuntimeDefault', 'Localhost']"
                )
            ),
            "Overriding the default AppArmor profile is disallowed: appArmorProfile.type must be \
             RuntimeDefault or Localhost.",
        ),
        check(
            Some(Control::SeLinux),
            format!(
                "{} && {}",
                selinux(&context),
                every_container(&selinux("c.?securityContext"))
            ),
            "Setting a custom SELinux user or role, or a type other than container_t, \
             container_init_t, container_kvm_t or container_engine_t, is disallowed.",
        ),
        check(
            Some(Control::ProcMountType),
            // Since 1.35, any value in a user namespace.
            format!(
                "{} || ({})",
                in_user_namespace(spec),
                default_proc_mount(spec)
            ),
            "Unmasking /proc is disallowed: securityContext.procMount must be unset or Default.",
        ),
        check(
            Some(Control::Seccomp),
            format!(
                "{context}.?seccompProfile.?type.orValue('') != 'Unconfined' && {}",
                every_container(
                    "c.?securityContext.?seccompProfile.?type.orValue('') != 'Unconfined'"
                )
            ),
            "Seccomp profile Unconfined is disallowed.",
        ),
        check(
            Some(Control::Sysctls),
            format!(
                "{context}.?sysctls.orValue([]).all(s, s.name in {})",
                list(SAFE_SYSCTLS)
            ),
            "Setting sysctls outside the safe set is disallowed.",
        ),
        check(
            None,
            every_container(&probes),
            "Probes and lifecycle hooks may not name a host: their httpGet.host and \
             tcpSocket.host must be unset.",
        ),
    ]
}

fn restricted(pod: Pod) -> Vec<Check> {
    let spec = pod.spec;
    let context = format!("{spec}.?securityContext");
    let every_container = |check: &str| every_container(spec, check);
    // Pod API validation refuses these fields on Windows pods, so the checks exempt them.
    let linux =
        |expression: &str| format!("{spec}.?os.?name.orValue('') == 'windows' || ({expression})");
    let volumes: Vec<String> = RESTRICTED_VOLUMES
        .iter()
        .map(|v| format!("has(v.{v})"))
        .collect();
    vec![
        check(
            Some(Control::VolumeTypes),
            format!(
                "{spec}.?volumes.orValue([]).all(v, {})",
                volumes.join(" || ")
            ),
            "Only configMap, csi, downwardAPI, emptyDir, ephemeral, image, \
             persistentVolumeClaim, projected and secret volumes are allowed.",
        ),
        check(
            Some(Control::PrivilegeEscalation),
            linux(&every_container(
                "c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false",
            )),
            "Privilege escalation is disallowed: securityContext.allowPrivilegeEscalation must \
             be false.",
        ),
        check(
            Some(Control::RunningAsNonRoot),
            // Since 1.35, any value in a user namespace (as runAsUser below). A pod that sets
            // false fails even where every container sets true, as PodSecurity judges it.
            format!(
                "{} || ({context}.?runAsNonRoot.orValue(true) && {})",
                in_user_namespace(spec),
                every_container(&format!(
                    "c.?securityContext.?runAsNonRoot.orValue(\
                     {context}.?runAsNonRoot.orValue(false))"
                ))
            ),
            "Containers must run as non-root: securityContext.runAsNonRoot must be true (on the \
             pod or on every container).",
        ),
        check(
            Some(Control::RunningAsNonRootUser),
            format!(
                "{} || ({context}.?runAsUser.orValue(1) != 0 && {})",
                in_user_namespace(spec),
                every_container("c.?securityContext.?runAsUser.orValue(1) != 0")
            ),
            "Running as root (runAsUser 0) is disallowed.",
        ),
        check(
            Some(Control::ProcMountType),
            // Since 1.35: baseline's check, without its user-namespace relaxation.
            default_proc_mount(spec),
            "Unmasking /proc is disallowed: securityContext.procMount must be unset or Default.",
        ),
        check(
            Some(Control::Seccomp),
            linux(&every_container(&format!(
                "c.?securityContext.?seccompProfile.?type.orValue(\
                 {context}.?seccompProfile.?type.orValue('')) in ['RuntimeDefault', 'Localhost']"
            ))),
            "A seccomp profile must be set: seccompProfile.type must be RuntimeDefault or \
             Localhost (on the pod or on every container).",
        ),
        check(
            Some(Control::Capabilities),
            linux(&every_container(
                "'ALL' in c.?securityContext.?capabilities.?drop.orValue([]) && \
                 c.?securityContext.?capabilities.?add.orValue([]).all(cap, \
                 cap == 'NET_BIND_SERVICE')",
            )),
            "Containers must drop ALL capabilities and may add back only NET_BIND_SERVICE.",
        ),
    ]
}

fn check(control: Option<Control>, expression: String, message: &'static str) -> Check {
    Check {
        control,
        expression,
        message,
    }
}

/// `check` (of a container `c`) holds for every container, init container and ephemeral
/// container of the pod `spec`. The lists are checked apart: their elements are of different
/// types.
fn every_container(spec: &str, check: &str) -> String {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .map(|list| format!("{spec}.?{list}.orValue([]).all(c, {check})"))
        .collect::<Vec<_>>()
        .join(" && ")
}

/// The pod runs in a user namespace (`hostUsers: false`), where Kubernetes 1.35 relaxes the
/// checks of root and of /proc.
fn in_user_namespace(spec: &str) -> String {
    format!("{spec}.?hostUsers.orValue(true) == false")
}

fn default_proc_mount(spec: &str) -> String {
    every_container(
        spec,
        "c.?securityContext.?procMount.orValue('Default') == 'Default'",
    )
}

fn selinux(context: &str) -> String {
    format!(
        "{context}.?seLinuxOptions.?type.orValue('') in {} && \
         {context}.?seLinuxOptions.?user.orValue('') == '' && \
         {context}.?seLinuxOptions.?role.orValue('') == ''",
        list(SELINUX_TYPES)
    )
}

/// A CEL list of string literals.
fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_adds_to_baseline() {
        let baseline = checks(Level::Baseline, OBJECT);
        let restricted = checks(Level::Restricted, OBJECT);
        assert_eq!(baseline.len(), 12);
        assert_eq!(&restricted[..baseline.len()], &baseline[..]);
        assert_eq!(restricted.len(), baseline.len() + 7);
    }

    #[test]
    fn every_expression_has_balanced_delimiters_and_only_single_quoted_literals() {
        for check in checks(Level::Restricted, OBJECT) {
            let e = &check.expression;
            for (open, close) in [('(', ')'), ('[', ']'), ('{', '}')] {
                assert_eq!(
                    e.matches(open).count(),
                    e.matches(close).count(),
                    "{open}{close} in {e}"
                );
            }
            assert!(!e.contains('"'), "{e}");
            assert_eq!(e.matches('\'').count() % 2, 0, "{e}");
        }
    }

    #[test]
    fn every_control_but_the_probes_has_its_checks_and_restricted_adds_its_own() {
        let baseline = controls(Level::Baseline);
        let restricted = controls(Level::Restricted);
        assert_eq!(restricted, Control::ALL.into_iter().collect());
        let only_restricted = [
            Control::VolumeTypes,
            Control::PrivilegeEscalation,
            Control::RunningAsNonRoot,
            Control::RunningAsNonRootUser,
        ];
        assert_eq!(
            restricted
                .difference(&baseline)
                .copied()
                .collect::<Vec<_>>(),
            only_restricted
        );
        let unnamed: Vec<&str> = checks(Level::Restricted, OBJECT)
            .iter()
            .filter(|c| c.control.is_none())
            .map(|c| c.message)
            .collect();
        assert_eq!(unnamed.len(), 1, "{unnamed:?}");
        assert!(unnamed[0].starts_with("Probes and lifecycle hooks"));
    }

    #[test]
    fn a_check_is_passed_by_what_lets_out_of_it() {
        let check = checks(Level::Baseline, OBJECT).remove(2);
        assert_eq!(check.control, Some(Control::PrivilegedContainers));
        assert_eq!(check.clone().unless(None), check);
        let excepted = check.clone().unless(Some("x == 1"));
        assert_eq!(
            excepted.expression,
            format!("(x == 1) || ({})", check.expression)
        );
        assert_eq!(excepted.message, check.message);
    }

    #[test]
    fn levels_parse_as_the_parameter_names_them() {
        assert_eq!(Level::parse("baseline"), Some(Level::Baseline));
        assert_eq!(Level::parse("restricted"), Some(Level::Restricted));
        assert_eq!(Level::parse("privileged"), None);
    }
}
