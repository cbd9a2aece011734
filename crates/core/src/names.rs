//! Generated object names: Nimbus's scheme, kept within Kubernetes limits.

use nimbus_api::NimbusRule;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Longest name of an object identified by a DNS subdomain (most kinds, custom resources included).
pub const MAX_NAME_LEN: usize = 253;

/// Prefix of the NimbusPolicy a cluster binding generates in each selected namespace.
const CLUSTER_BINDING_POLICY_PREFIX: &str = "nimbus-ctlr-gen-";

/// `nimbus-ctlr-gen-<cluster binding>`, the per-namespace NimbusPolicy of a cluster binding.
pub fn cluster_binding_policy_name(binding: &str) -> String {
    fit(
        &format!("{CLUSTER_BINDING_POLICY_PREFIX}{binding}"),
        MAX_NAME_LEN,
    )
}

/// The key of each of `rules`, which its objects are named after: `<lowercase id>`, and for a
/// second rule with the same ID (another intent of the same kind) `-2`, and so on, so that no
/// two rules share an object.
pub fn rule_keys(rules: &[NimbusRule]) -> Vec<String> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    rules
        .iter()
        .map(|rule| {
            let count = seen.entry(rule.id.as_str()).or_default();
            *count += 1;
            match *count {
                1 => rule.id.to_lowercase(),
                n => format!("{}-{n}", rule.id.to_lowercase()),
            }
        })
        .collect()
}

/// Returns `name` unchanged when it fits in `max` bytes; otherwise a deterministic shortening:
/// a prefix of `name` followed by `-` and 10 hex digits of its SHA-256, so distinct long names
/// stay distinct and the result is still a valid DNS label/subdomain.
pub fn fit(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_owned();
    }
    let hash = digest(name);
    let keep = max.saturating_sub(hash.len() + 1);
    // Names are ASCII (DNS), but never split a multi-byte char if someone passes one.
    let mut cut = keep.min(name.len());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = name[..cut].trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// 10 hex digits of `text`'s SHA-256: short, and distinct for distinct texts in practice.
pub fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_unchanged() {
        assert_eq!(cluster_binding_policy_name("b"), "nimbus-ctlr-gen-b");
    }

    #[test]
    fn long_names_are_shortened_deterministically_and_distinctly() {
        let a = "a".repeat(250);
        let b = format!("{}b", "a".repeat(249));
        let (na, nb) = (
            cluster_binding_policy_name(&a),
            cluster_binding_policy_name(&b),
        );
        assert!(na.len() <= MAX_NAME_LEN && nb.len() <= MAX_NAME_LEN);
        assert_ne!(na, nb);
        assert_eq!(na, cluster_binding_policy_name(&a));
        assert!(na.starts_with("nimbus-ctlr-gen-aaa"));
    }

    #[test]
    fn shortened_names_do_not_end_in_separators_before_the_hash() {
        let name = format!("{}-{}", "x".repeat(52), "y".repeat(20));
        let short = fit(&name, 63);
        assert_eq!(short.len(), 52 + 1 + 10);
        assert!(!short.contains("--"));
    }
}
