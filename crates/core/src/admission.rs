//! A ValidatingAdmissionPolicy generated from the intent catalog: `kubectl apply` of a
//! SecurityIntent with an unknown intent ID or parameter prints a warning naming what is known.
//! It only warns (Nimbus accepted any ID and parameter; so do we) and needs no webhook server:
//! the API server evaluates its CEL.

use crate::catalog::INTENTS;
use serde_json::{Value, json};

/// Name of the policy and of its binding.
pub const POLICY_NAME: &str = "nimbus-intent-catalog";

/// A CEL string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// The policy and its binding, in this order.
pub fn intent_catalog_policy() -> [Value; 2] {
    let ids = list(INTENTS.iter().map(|i| literal(i.id)));
    let params = format!(
        "{{{}}}",
        INTENTS
            .iter()
            .map(|i| format!(
                "{}: {}",
                literal(i.id),
                list(i.params.iter().map(|p| literal(p.name)))
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [nimbus_api::GROUP],
                "apiVersions": [nimbus_api::VERSION],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["securityintents"],
            }]},
            "variables": [
                {"name": "id", "expression": "object.spec.intent.id"},
                {"name": "known", "expression": params},
            ],
            "validations": [
                {
                    "expression": format!("variables.id in {ids}"),
                    "messageExpression": format!(
                        "'unknown intent ID \"' + variables.id + '\": no engine enforces it; known IDs: ' + {ids}.join(', ')"
                    ),
                    "reason": "Invalid",
                },
                {
                    "expression": "!has(object.spec.intent.params) || !(variables.id in variables.known) || object.spec.intent.params.all(p, p in variables.known[variables.id])",
                    "messageExpression": "'unknown parameters of ' + variables.id + ': ' + object.spec.intent.params.filter(p, !(p in variables.known[variables.id])).join(', ') + ' (it takes: ' + (variables.known[variables.id].size() == 0 ? 'none' : variables.known[variables.id].join(', ')) + ')'",
                    "reason": "Invalid",
                },
            ],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Warn"]},
    });
    [policy, binding]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_intent_and_parameter_of_the_catalog_is_known_to_the_policy() {
        let [policy, binding] = intent_catalog_policy();
        let validations = policy["spec"]["validations"].to_string();
        let known = policy["spec"]["variables"][1]["expression"].to_string();
        for intent in INTENTS {
            assert!(
                validations.contains(&format!("'{}'", intent.id)),
                "{}",
                intent.id
            );
            for param in intent.params {
                assert!(
                    known.contains(&format!("'{}'", param.name)),
                    "{}",
                    param.name
                );
            }
        }
        assert_eq!(binding["spec"]["validationActions"], json!(["Warn"]));
    }

    #[test]
    fn literals_are_escaped() {
        assert_eq!(literal("it's"), r"'it\'s'");
    }
}
