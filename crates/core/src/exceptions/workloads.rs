//! Exceptions by workload name (`spec.workloads`): which workloads an exception names, which
//! engines can leave exactly those out, and the CEL that picks them out at admission.
//!
//! A workload is let out when the exception's selector selects it and, where the exception
//! names workloads, it is one of them. The posture knows each workload's kind and name; an
//! admission engine sees one object at a time (the workload controller, an object it makes, or
//! a pod) and follows the names along owner references, as the controllers name what they make.

use super::Excepted;
use nimbus_api::{ExceptedWorkload, WorkloadKind};

/// Whether `excepted` names the workload of `kind` and `name` (a pod's top-level controller,
/// or `Pod` for a bare pod, as the posture groups them): every workload when it names none.
pub fn names(excepted: &Excepted, kind: &str, name: &str) -> bool {
    excepted.workloads.is_empty()
        || excepted
            .workloads
            .iter()
            .any(|w| w.kind.as_str() == kind && w.name == name)
}

/// How an engine picks out the workloads it leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// By pod labels only (a NetworkPolicy's `podSelector`, a KubeArmor policy's selector): it
    /// cannot tell two workloads with the same labels apart.
    Labels,
    /// By the admitted object itself, its name and owners (CEL at admission).
    Names,
}

/// Whether an engine reaching `reach` can leave out exactly the workloads `excepted` lets out.
/// An engine that cannot must not leave out more (every workload with the selected labels):
/// it keeps enforcing on them and says so, rather than letting out what nobody excepted.
pub fn honoured(reach: Reach, excepted: &Excepted) -> bool {
    reach == Reach::Names || excepted.workloads.is_empty()
}

/// `excepted` split into those an engine reaching `reach` honours and those it does not.
pub fn split<'a>(
    excepted: &[&'a Excepted],
    reach: Reach,
) -> (Vec<&'a Excepted>, Vec<&'a Excepted>) {
    excepted.iter().partition(|e| honoured(reach, e))
}

/// CEL true for the object being admitted (`object`) when it is one of `workloads` or made by
/// one: the controller itself; a Deployment's ReplicaSets (owned by it) and their pods (owned
/// by a ReplicaSet `<name>-<pod-template-hash>`, a hash without hyphens); a StatefulSet's,
/// DaemonSet's or Job's pods; a CronJob's Jobs (owned by it) and their pods (owned by a Job
/// `<name>-<digits>`); a bare pod by its name. `None` when it names none (no condition).
pub fn cel(workloads: &[ExceptedWorkload]) -> Option<String> {
    let each: Vec<String> = workloads.iter().map(one_cel).collect();
    (!each.is_empty()).then(|| each.join(" || "))
}

fn one_cel(workload: &ExceptedWorkload) -> String {
    const KIND: &str = "object.kind";
    const NAME: &str = "object.metadata.?name.orValue('')";
    const OWNERS: &str = "object.metadata.?ownerReferences.orValue([])";
    let name = literal(&workload.name);
    let kind = workload.kind.as_str();
    let itself = format!("({KIND} == '{kind}' && {NAME} == {name})");
    let owned_by = |object: &str, owner: &str| {
        format!(
            "({KIND} == '{object}' && {OWNERS}.exists(o, o.kind == '{owner}' && o.name == {name}))"
        )
    };
    // The name a controller gives what it makes: `<name>-<suffix>`. Escaped, so that a name is
    // matched as written (a `.` in it is no wildcard).
    let made = |object: &str, owner: &str, suffix: &str| {
        let pattern = literal(&format!("^{}-{suffix}$", regex_escape(&workload.name)));
        format!(
            "({KIND} == '{object}' && {OWNERS}.exists(o, o.kind == '{owner}' && o.name.matches({pattern})))"
        )
    };
    let terms = match workload.kind {
        WorkloadKind::Deployment => vec![
            itself,
            owned_by("ReplicaSet", "Deployment"),
            made("Pod", "ReplicaSet", "[a-z0-9]+"),
        ],
        WorkloadKind::StatefulSet | WorkloadKind::DaemonSet | WorkloadKind::Job => {
            vec![itself, owned_by("Pod", kind)]
        }
        WorkloadKind::CronJob => vec![
            itself,
            owned_by("Job", "CronJob"),
            made("Pod", "Job", "[0-9]+"),
        ],
        // A bare pod: one a controller owns belongs to that controller's workload.
        WorkloadKind::Pod => vec![format!(
            "({KIND} == 'Pod' && {NAME} == {name} && \
             !{OWNERS}.exists(o, o.?controller.orValue(false)))"
        )],
    };
    format!("({})", terms.join(" || "))
}

/// A CEL string literal (JSON's quoting is CEL's for strings).
fn literal(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `s` as an RE2 pattern matching exactly `s`.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exceptions::{ExceptionKind, Signatures};
    use std::collections::BTreeSet;

    fn excepted(workloads: &[(WorkloadKind, &str)]) -> Excepted {
        Excepted {
            kind: ExceptionKind::Namespaced,
            name: "vendor-agent".into(),
            namespace: "shop".into(),
            selector: Default::default(),
            workloads: workloads
                .iter()
                .map(|(kind, name)| ExceptedWorkload {
                    kind: *kind,
                    name: (*name).to_owned(),
                })
                .collect(),
            intents: BTreeSet::from(["escapeToHost".to_owned()]),
            reason: "until 2.4".into(),
            expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            signatures: Signatures::default(),
            controls: None,
        }
    }

    #[test]
    fn an_exception_names_the_workloads_it_lists_or_every_one() {
        let named = excepted(&[
            (WorkloadKind::Deployment, "agent"),
            (WorkloadKind::Pod, "debug"),
        ]);
        // (case, exception, kind, name, named)
        let cases = [
            (
                "no names: every workload",
                excepted(&[]),
                "Deployment",
                "web",
                true,
            ),
            (
                "named deployment",
                named.clone(),
                "Deployment",
                "agent",
                true,
            ),
            (
                "same name, other kind",
                named.clone(),
                "StatefulSet",
                "agent",
                false,
            ),
            (
                "unnamed sibling",
                named.clone(),
                "Deployment",
                "agent-2",
                false,
            ),
            ("named bare pod", named.clone(), "Pod", "debug", true),
            (
                "a kind no exception names",
                named,
                "ReplicaSet",
                "agent",
                false,
            ),
        ];
        for (case, e, kind, name, want) in cases {
            assert_eq!(names(&e, kind, name), want, "{case}");
        }
    }

    #[test]
    fn an_engine_selecting_by_labels_honours_no_exception_naming_workloads() {
        let by_labels = excepted(&[]);
        let by_name = excepted(&[(WorkloadKind::Deployment, "agent")]);
        // (case, reach, exception, honoured)
        let cases = [
            ("labels, selector only", Reach::Labels, &by_labels, true),
            ("labels, names", Reach::Labels, &by_name, false),
            ("names, selector only", Reach::Names, &by_labels, true),
            ("names, names", Reach::Names, &by_name, true),
        ];
        for (case, reach, e, want) in cases {
            assert_eq!(honoured(reach, e), want, "{case}");
        }
        let (honoured, not) = split(&[&by_labels, &by_name], Reach::Labels);
        assert_eq!((honoured.len(), not.len()), (1, 1));
        assert!(not[0].workloads.len() == 1);
        let (honoured, not) = split(&[&by_labels, &by_name], Reach::Names);
        assert_eq!((honoured.len(), not.len()), (2, 0));
    }

    #[test]
    fn names_are_matched_as_written_in_cel() {
        assert_eq!(cel(&[]), None);
        let dotted = ExceptedWorkload {
            kind: WorkloadKind::Deployment,
            name: "a.b\"c".into(),
        };
        let got = cel(&[dotted]).unwrap_or_default();
        // The name as a CEL literal, and in the pattern with its `.` escaped (and escaped again
        // as a CEL literal).
        assert!(got.contains(r#"== "a.b\"c""#), "{got}");
        assert!(got.contains(r#"matches("^a\\.b\"c-[a-z0-9]+$")"#), "{got}");
        let cron = ExceptedWorkload {
            kind: WorkloadKind::CronJob,
            name: "nightly".into(),
        };
        let got = cel(&[cron]).unwrap_or_default();
        assert!(got.contains("object.kind == 'Job' && object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'CronJob' && o.name == \"nightly\")"), "{got}");
        assert!(got.contains(r#"matches("^nightly-[0-9]+$")"#), "{got}");
    }
}
