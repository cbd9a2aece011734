//! Which namespaces a cluster binding fans out to.

use k8s_openapi::api::core::v1::Namespace;
use nimbus_api::{NamespaceSelector, WORKLOAD_ALL_NAMESPACES};
use std::collections::BTreeSet;

/// Always protected by default (as in Nimbus).
pub const KUBE_SYSTEM: &str = "kube-system";

/// Namespaces a cluster binding never fans out to, whatever its selector says: policies there
/// could lock out the control plane, the operator itself, or the k8tls scanner (a
/// namespaceSandbox RoleBinding in the operator's namespace would hand its ServiceAccount's
/// secrets to a team).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedNamespaces(BTreeSet<String>);

impl std::fmt::Display for ProtectedNamespaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(String::as_str).collect();
        f.write_str(&names.join(", "))
    }
}

impl ProtectedNamespaces {
    /// Exactly `names` (empty entries ignored).
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        Self(
            names
                .into_iter()
                .map(|n| n.as_ref().trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
        )
    }

    /// The default: `kube-system`, the operator's own namespace when known, and the k8tls
    /// namespace.
    pub fn defaults(operator_namespace: Option<&str>, k8tls_namespace: &str) -> Self {
        Self::new(
            [KUBE_SYSTEM, k8tls_namespace]
                .into_iter()
                .chain(operator_namespace),
        )
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.0.contains(namespace)
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// Where the k8tls engine runs its scans unless told otherwise (`--k8tls-namespace`): a
/// namespace the operator protects by default. Here, not in the engine, so that the
/// namespaces the operator protects depend on no engine.
pub const DEFAULT_K8TLS_NAMESPACE: &str = "nimbus-k8tls-env";

impl Default for ProtectedNamespaces {
    /// [`ProtectedNamespaces::defaults`] without an operator namespace and with the default
    /// k8tls namespace.
    fn default() -> Self {
        Self::defaults(None, DEFAULT_K8TLS_NAMESPACE)
    }
}

/// Why a namespace selector cannot be used. The CRD rejects these at admission too; the
/// controller re-checks because objects may predate the schema.
pub fn validate(selector: Option<&NamespaceSelector>) -> Result<(), String> {
    let Some(sel) = selector else {
        return Err("selector.nsSelector is required".into());
    };
    let all = sel.match_names.as_deref() == Some(&[WORKLOAD_ALL_NAMESPACES.to_owned()][..]);
    match (&sel.match_names, &sel.exclude_names) {
        (None, None) => Err("nsSelector needs matchNames or excludeNames".into()),
        (Some(names), _) if names.is_empty() => Err("nsSelector.matchNames is empty".into()),
        (Some(names), _) if !all && names.iter().any(|n| n == WORKLOAD_ALL_NAMESPACES) => {
            Err("'*' must be the only entry of matchNames".into())
        }
        (Some(_), Some(_)) if !all => {
            Err("excludeNames can only be combined with matchNames: ['*']".into())
        }
        // A name no namespace can have selects nothing, ever: a typo to report, as the API
        // server would refuse whatever the binding generates there.
        (Some(names), _) if !all => {
            let problems: Vec<String> = names
                .iter()
                .flat_map(|n| crate::validation::namespace_name(n, "nsSelector.matchNames"))
                .collect();
            match problems.is_empty() {
                true => Ok(()),
                false => Err(problems.join("; ")),
            }
        }
        _ => Ok(()),
    }
}

/// Whether a live (not terminating) namespace is selected. Call only with a valid selector.
/// A protected namespace is never selected, not even by name.
pub fn selects(
    selector: &NamespaceSelector,
    namespace: &str,
    protected: &ProtectedNamespaces,
) -> bool {
    if protected.contains(namespace) {
        return false;
    }
    let excluded = selector
        .exclude_names
        .as_ref()
        .is_some_and(|names| names.iter().any(|n| n == namespace));
    if excluded {
        return false;
    }
    match &selector.match_names {
        None => true,
        Some(names) => names
            .iter()
            .any(|n| n == WORKLOAD_ALL_NAMESPACES || n == namespace),
    }
}

/// Whether a namespace is being deleted (it takes its policies with it).
pub fn is_terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// The namespaces `selector` names explicitly in `matchNames` that are protected, so get
/// nothing: worth reporting, since the binding's author asked for them (`*` does not name
/// them, so selecting every namespace reports nothing).
pub fn protected_names(
    selector: &NamespaceSelector,
    protected: &ProtectedNamespaces,
) -> Vec<String> {
    let mut names: Vec<String> = selector
        .match_names
        .iter()
        .flatten()
        .filter(|n| protected.contains(n))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(m: Option<&[&str]>, e: Option<&[&str]>) -> NamespaceSelector {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        NamespaceSelector {
            match_names: m.map(own),
            exclude_names: e.map(own),
        }
    }

    #[test]
    fn validation_accepts_the_four_meaningful_shapes() {
        assert!(validate(Some(&sel(Some(&["*"]), None))).is_ok());
        assert!(validate(Some(&sel(Some(&["a", "b"]), None))).is_ok());
        assert!(validate(Some(&sel(None, Some(&["a"])))).is_ok());
        assert!(validate(Some(&sel(Some(&["*"]), Some(&["a"])))).is_ok());
    }

    #[test]
    fn validation_rejects_nonsense_with_a_reason() {
        assert!(validate(None).unwrap_err().contains("required"));
        assert!(
            validate(Some(&sel(None, None)))
                .unwrap_err()
                .contains("matchNames or")
        );
        assert!(
            validate(Some(&sel(Some(&[]), None)))
                .unwrap_err()
                .contains("empty")
        );
        assert!(
            validate(Some(&sel(Some(&["a", "*"]), None)))
                .unwrap_err()
                .contains("only entry")
        );
        assert!(
            validate(Some(&sel(Some(&["a"]), Some(&["b"]))))
                .unwrap_err()
                .contains("combined")
        );
        assert!(
            validate(Some(&sel(Some(&["a", "Prod_1"]), None)))
                .unwrap_err()
                .contains(r#"nsSelector.matchNames: Invalid value: "Prod_1""#)
        );
    }

    fn protected() -> ProtectedNamespaces {
        ProtectedNamespaces::defaults(Some("nimbus-system"), "nimbus-k8tls-env")
    }

    #[test]
    fn selection_follows_names_and_never_takes_kube_system() {
        let p = protected();
        let all = sel(Some(&["*"]), None);
        assert!(selects(&all, "default", &p) && !selects(&all, "kube-system", &p));
        let listed = sel(Some(&["a", "kube-system"]), None);
        assert!(
            selects(&listed, "a", &p)
                && !selects(&listed, "b", &p)
                && !selects(&listed, "kube-system", &p)
        );
        let except = sel(None, Some(&["b"]));
        assert!(selects(&except, "a", &p) && !selects(&except, "b", &p));
        let all_except = sel(Some(&["*"]), Some(&["b"]));
        assert!(selects(&all_except, "a", &p) && !selects(&all_except, "b", &p));
    }

    #[test]
    fn the_operator_and_k8tls_namespaces_are_protected_by_default() {
        let p = protected();
        for selector in [
            sel(Some(&["*"]), None),
            sel(None, Some(&["x"])),
            sel(Some(&["nimbus-system", "nimbus-k8tls-env"]), None),
        ] {
            for ns in ["kube-system", "nimbus-system", "nimbus-k8tls-env"] {
                assert!(!selects(&selector, ns, &p), "{ns} {selector:?}");
            }
        }
        // Without a known operator namespace, only kube-system and k8tls's.
        let d = ProtectedNamespaces::default();
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            ["kube-system", "nimbus-k8tls-env"]
        );
    }

    #[test]
    fn the_list_is_configurable() {
        let p = ProtectedNamespaces::new(["infra", " ", "kube-system"]);
        let all = sel(Some(&["*"]), None);
        assert!(!selects(&all, "infra", &p) && selects(&all, "nimbus-k8tls-env", &p));
        assert_eq!(p.iter().count(), 2, "empty entries are ignored");
    }

    #[test]
    fn explicitly_named_protected_namespaces_are_reported() {
        let p = protected();
        let named = sel(
            Some(&["kube-system", "a", "nimbus-system", "kube-system"]),
            None,
        );
        assert_eq!(
            protected_names(&named, &p),
            ["kube-system", "nimbus-system"]
        );
        assert!(protected_names(&sel(Some(&["*"]), None), &p).is_empty());
        assert!(protected_names(&sel(None, Some(&["kube-system"])), &p).is_empty());
    }
}
