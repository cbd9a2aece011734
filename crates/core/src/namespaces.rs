//! Which namespaces a cluster binding fans out to.

use nimbus_api::{NamespaceSelector, WORKLOAD_ALL_NAMESPACES};

/// Never selected by a cluster binding, whatever its selector says (as in Nimbus).
pub const PROTECTED_NAMESPACE: &str = "kube-system";

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
        _ => Ok(()),
    }
}

/// Whether a live (not terminating) namespace is selected. Call only with a valid selector.
pub fn selects(selector: &NamespaceSelector, namespace: &str) -> bool {
    if namespace == PROTECTED_NAMESPACE {
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
    }

    #[test]
    fn selection_follows_names_and_never_takes_kube_system() {
        let all = sel(Some(&["*"]), None);
        assert!(selects(&all, "default") && !selects(&all, "kube-system"));
        let listed = sel(Some(&["a", "kube-system"]), None);
        assert!(
            selects(&listed, "a") && !selects(&listed, "b") && !selects(&listed, "kube-system")
        );
        let except = sel(None, Some(&["b"]));
        assert!(selects(&except, "a") && !selects(&except, "b"));
        let all_except = sel(Some(&["*"]), Some(&["b"]));
        assert!(selects(&all_except, "a") && !selects(&all_except, "b"));
    }
}
