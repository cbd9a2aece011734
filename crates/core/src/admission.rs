//! ValidatingAdmissionPolicies generated from the intent catalog; the API server evaluates
//! their CEL, so they need no webhook server.
//! - The catalog policy: `kubectl apply` of a SecurityIntent with an unknown intent ID or
//!   parameter, or a parameter value outside the words it takes, prints a warning naming what
//!   is known (what `nimbus validate` reports, so that the API server and the CLI agree). It only warns (Nimbus accepted any ID and
//!   parameter; so do we).
//! - The sensitive-intents policy: only someone who may create ClusterSecurityIntentBindings
//!   may create or change a sensitive SecurityIntent. The `allow-sensitive` annotation of a
//!   binding allows an intent *name*; what that intent grants comes from whoever writes it, so
//!   writing it must take the same trust as writing the binding.
//! - The intent-author policy (a MutatingAdmissionPolicy): stamps who last wrote each
//!   SecurityIntent, so that a binding can say who changed what it enforces.
//! - The exception-requester policy (a MutatingAdmissionPolicy): stamps who asked for each
//!   SecurityIntentException, at its creation, and keeps it through every update.
//! - The exception-approval policies: a change to an exception's spec withdraws its approval
//!   (a MutatingAdmissionPolicy), and only someone who may `approve` it, and did not ask for
//!   it, may approve it, in their own name (a ValidatingAdmissionPolicy).

use crate::catalog::INTENTS;
use crate::params::ParamKind;
use nimbus_api::{
    APPROVED_BY_ANNOTATION, EXCEPTION_GROUP, GROUP, REQUESTED_BY_ANNOTATION, VERSION,
};
use serde_json::{Value, json};

/// Name of the catalog policy and of its binding.
pub const POLICY_NAME: &str = "nimbus-intent-catalog";
/// Name of the sensitive-intents policy and of its binding.
pub const SENSITIVE_POLICY_NAME: &str = "nimbus-sensitive-intents";

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
    // Each parameter that takes one of a few words, checked as `catalog::check_params` checks
    // it: every value when all are used, else the first.
    let choices: Vec<String> = INTENTS
        .iter()
        .flat_map(|i| i.params.iter().map(move |p| (i.id, p)))
        .filter_map(|(id, p)| match p.kind {
            ParamKind::OneOf(words) => {
                let (name, words) = (literal(p.name), list(words.iter().map(|w| literal(w))));
                let values = format!("object.spec.intent.params[{name}]");
                let check = if p.multiple {
                    format!("{values}.all(v, v in {words})")
                } else {
                    format!("{values}.size() == 0 || {values}[0] in {words}")
                };
                Some(format!(
                    "!(variables.id == {} && {name} in object.spec.intent.params) || {check}",
                    literal(id)
                ))
            }
            _ => None,
        })
        .map(|c| format!("({c})"))
        .collect();
    let described: Vec<String> = INTENTS
        .iter()
        .flat_map(|i| i.params.iter().map(move |p| (i.id, p)))
        .filter_map(|(id, p)| match p.kind {
            ParamKind::OneOf(words) => Some(format!("{id} {}: {}", p.name, words.join(" or "))),
            _ => None,
        })
        .collect();
    let spec = json!({
        "failurePolicy": "Ignore",
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
            {
                "expression": format!("!has(object.spec.intent.params) || ({})", choices.join(" && ")),
                "message": format!("a parameter value is not one the intent knows (the default applies instead): {}", described.join("; ")),
                "reason": "Invalid",
            },
        ],
    });
    on_intents(POLICY_NAME, spec, "Warn")
}

/// The sensitive-intents policy and its binding, in this order. It denies (and fails closed:
/// an unevaluated check must not let a grant through) creating or updating a SecurityIntent
/// whose ID is sensitive, unless the requester may create ClusterSecurityIntentBindings, as
/// the API server's own authorizer answers. Status writes (a subresource) are not matched.
pub fn sensitive_intents_policy() -> [Value; 2] {
    let sensitive = list(
        INTENTS
            .iter()
            .filter(|i| i.sensitive)
            .map(|i| literal(i.id)),
    );
    let spec = json!({
        "failurePolicy": "Fail",
        "matchConditions": [{
            "name": "sensitive-intent",
            "expression": format!(
                "has(object.spec) && has(object.spec.intent) && has(object.spec.intent.id) && object.spec.intent.id in {sensitive}"
            ),
        }],
        "validations": [{
            "expression": format!(
                "authorizer.group({}).resource('clustersecurityintentbindings').check('create').allowed()",
                literal(GROUP)
            ),
            "messageExpression": "'a ' + object.spec.intent.id + ' SecurityIntent grants access or runs workloads: only who may create ClusterSecurityIntentBindings may create or change one, and ' + request.userInfo.username + ' may not'",
            "reason": "Forbidden",
        }],
    });
    on_intents(SENSITIVE_POLICY_NAME, spec, "Deny")
}

/// Name of the intent-author policy and of its binding.
pub const AUTHOR_POLICY_NAME: &str = "nimbus-intent-author";

/// The intent-author MutatingAdmissionPolicy and its binding, in this order. On every creation
/// and update of a SecurityIntent (not its status) it sets
/// [`nimbus_api::LAST_WRITTEN_BY_ANNOTATION`] to the requesting user, as the API server
/// authenticated them, overwriting whatever the request said: a binding's status and Events
/// then name who last wrote each intent it binds. Fails closed, so that no write goes through
/// with an author of its own choosing. Needs MutatingAdmissionPolicy v1 (Kubernetes 1.36).
pub fn intent_author_policy() -> [Value; 2] {
    let expression = format!(
        "Object{{metadata: Object.metadata{{annotations: {{{}: request.userInfo.username}}}}}}",
        literal(nimbus_api::LAST_WRITTEN_BY_ANNOTATION)
    );
    mutating(
        AUTHOR_POLICY_NAME,
        intent_writes(),
        json!([{
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": expression},
        }]),
    )
}

/// Name of the exception-requester policy and of its binding.
pub const REQUESTER_POLICY_NAME: &str = "nimbus-exception-requester";

/// The exception-requester MutatingAdmissionPolicy and its binding, in this order. It makes
/// [`REQUESTED_BY_ANNOTATION`] say who created each SecurityIntentException, whatever any
/// request says: on creation it sets it to the requesting user, as the API server
/// authenticated them; on update it puts back the stored value, and removes one an update
/// would add to an exception stored without it (created before the policy was installed), so
/// that nobody can name someone else as its requester. Fails closed. Needs
/// MutatingAdmissionPolicy v1 (Kubernetes 1.36).
pub fn exception_requester_policy() -> [Value; 2] {
    let key = literal(REQUESTED_BY_ANNOTATION);
    let stored =
        format!("has(oldObject.metadata.annotations) && {key} in oldObject.metadata.annotations");
    let stamp =
        |who: &str| format!("Object{{metadata: Object.metadata{{annotations: {{{key}: {who}}}}}}}");
    // The stamp: who creates it, or, on update, what is stored (nothing when nothing is).
    let stamped = format!(
        "request.operation == 'CREATE' ? {} : ({stored} ? {} : Object{{}})",
        stamp("request.userInfo.username"),
        stamp(&format!("oldObject.metadata.annotations[{key}]"))
    );
    // An apply configuration cannot remove a key: a JSON patch removes one an update adds.
    let unclaimed = format!(
        "request.operation == 'UPDATE' && !({stored}) && has(object.metadata.annotations) && \
         {key} in object.metadata.annotations ? [JSONPatch{{op: 'remove', path: \
         '/metadata/annotations/' + jsonpatch.escapeKey({key})}}] : []"
    );
    mutating(
        REQUESTER_POLICY_NAME,
        exception_writes(),
        json!([
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": stamped}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": unclaimed}},
        ]),
    )
}

/// Name of the exception-approval policies (a MutatingAdmissionPolicy and a
/// ValidatingAdmissionPolicy) and of their bindings.
pub const APPROVAL_POLICY_NAME: &str = "nimbus-exception-approval";

/// The verb that approves a SecurityIntentException: RBAC grants it like any other, on
/// `securityintentexceptions`, and only the approval policy asks for it.
pub const APPROVE_VERB: &str = "approve";

/// The exception-approval policies and their bindings, in this order: the
/// MutatingAdmissionPolicy and its binding, the ValidatingAdmissionPolicy and its binding.
/// - An update that changes an exception's `spec` removes [`APPROVED_BY_ANNOTATION`],
///   whoever sends it: an approval is of what was approved, so approving takes a request of
///   its own, that changes no spec.
/// - A creation or update that sets that annotation, or changes its value, is refused unless
///   it names the requesting user, who may [`APPROVE_VERB`] that exception (as the API
///   server's authorizer answers) and is not who asked for it ([`REQUESTED_BY_ANNOTATION`];
///   an exception that names no requester cannot be approved). A creation never passes: its
///   requester is who sends it.
/// - Changing the spec takes `update`, so that the `patch` an approver needs to set the
///   annotation does not let them rewrite what they approve.
///
/// Both fail closed. Needs MutatingAdmissionPolicy v1 (Kubernetes 1.36) and the requester
/// policy ([`exception_requester_policy`]), which the two-person rule reads.
pub fn exception_approval_policy() -> [Value; 4] {
    let approved = literal(APPROVED_BY_ANNOTATION);
    let withdrawn = format!(
        "request.operation == 'UPDATE' && object.spec != oldObject.spec && \
         has(object.metadata.annotations) && {approved} in object.metadata.annotations ? \
         [JSONPatch{{op: 'remove', path: '/metadata/annotations/' + \
         jsonpatch.escapeKey({approved})}}] : []"
    );
    let [mutating_policy, mutating_binding] = mutating(
        APPROVAL_POLICY_NAME,
        exception_writes(),
        json!([{"patchType": "JSONPatch", "jsonPatch": {"expression": withdrawn}}]),
    );
    let annotation = |object: &str, key: &str| {
        format!(
            "has({object}.metadata.annotations) && {key} in {object}.metadata.annotations ? \
             {object}.metadata.annotations[{key}] : ''"
        )
    };
    let may = |verb: &str| {
        format!(
            "authorizer.group({}).resource(request.resource.resource)\
             .namespace(variables.scope).name(variables.name).check({}).allowed()",
            literal(EXCEPTION_GROUP),
            literal(verb)
        )
    };
    let spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": exception_writes(),
        "variables": [
            {"name": "name", "expression": "has(object.metadata.name) ? object.metadata.name : ''"},
            // Cluster exceptions have no namespace.
            {"name": "scope", "expression": "has(request.namespace) ? request.namespace : ''"},
            {"name": "where", "expression": "variables.scope == '' ? '' : ' in ' + variables.scope"},
            {"name": "approvedBy", "expression": annotation("object", &approved)},
            {"name": "requestedBy", "expression": annotation("object", &literal(REQUESTED_BY_ANNOTATION))},
            {"name": "approving", "expression": format!(
                "variables.approvedBy != '' && (request.operation == 'CREATE' || \
                 variables.approvedBy != ({}))",
                annotation("oldObject", &approved)
            )},
        ],
        "validations": [
            {
                "expression": "!variables.approving || variables.approvedBy == request.userInfo.username",
                "messageExpression": format!("'{APPROVED_BY_ANNOTATION} names who approves, in the same request: ' + request.userInfo.username + ', not ' + variables.approvedBy"),
                "reason": "Forbidden",
            },
            {
                "expression": "!variables.approving || (variables.requestedBy != '' && variables.requestedBy != request.userInfo.username)",
                "messageExpression": "variables.requestedBy == '' ? 'this exception names no requester (it was created before the nimbus-exception-requester policy): recreate it to have it approved' : variables.requestedBy + ' asked for this exception: someone else must approve it'",
                "reason": "Forbidden",
            },
            {
                "expression": format!("!variables.approving || {}", may(APPROVE_VERB)),
                "messageExpression": format!("request.userInfo.username + ' may not approve ' + request.resource.resource + variables.where + ' (the verb {APPROVE_VERB} on ' + request.resource.resource + '.{EXCEPTION_GROUP})'"),
                "reason": "Forbidden",
            },
            {
                "expression": format!("request.operation != 'UPDATE' || object.spec == oldObject.spec || {}", may("update")),
                "messageExpression": "request.userInfo.username + ' may not update ' + request.resource.resource + variables.where + ': approving lets one set the approval, not change the spec'",
                "reason": "Forbidden",
            },
        ],
    });
    let [validating_policy, validating_binding] = validating(APPROVAL_POLICY_NAME, spec, "Deny");
    [
        mutating_policy,
        mutating_binding,
        validating_policy,
        validating_binding,
    ]
}

/// The MutatingAdmissionPolicy `name` making `mutations` to what `rules` match, failing
/// closed, and its binding.
fn mutating(name: &str, rules: Value, mutations: Value) -> [Value; 2] {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": rules,
            "mutations": mutations,
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name},
    });
    [policy, binding]
}

/// The creation and update of SecurityIntentExceptions (their status excluded).
fn exception_writes() -> Value {
    json!({"resourceRules": [{
        "apiGroups": [EXCEPTION_GROUP],
        "apiVersions": [VERSION],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["securityintentexceptions", "clustersecurityintentexceptions"],
    }]})
}

/// The creation and update of SecurityIntents (their status, a subresource, excluded).
fn intent_writes() -> Value {
    json!({"resourceRules": [{
        "apiGroups": [GROUP],
        "apiVersions": [VERSION],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["securityintents"],
    }]})
}

/// The ValidatingAdmissionPolicy `name` with `spec`, matching the creation and update of
/// SecurityIntents, and its binding with `action`.
fn on_intents(name: &str, mut spec: Value, action: &str) -> [Value; 2] {
    spec["matchConstraints"] = intent_writes();
    validating(name, spec, action)
}

/// The ValidatingAdmissionPolicy `name` with `spec`, and its binding with `action`.
fn validating(name: &str, spec: Value, action: &str) -> [Value; 2] {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": [action]},
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
    fn exactly_the_sensitive_intents_are_guarded_and_denied() {
        let [policy, binding] = sensitive_intents_policy();
        let condition = policy["spec"]["matchConditions"][0]["expression"].to_string();
        for intent in INTENTS {
            assert_eq!(
                condition.contains(&format!("'{}'", intent.id)),
                intent.sensitive,
                "{}",
                intent.id
            );
        }
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    }

    #[test]
    fn the_author_policy_stamps_the_requesting_user_on_intents_only() {
        let [policy, binding] = intent_author_policy();
        let expression = policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
            .as_str()
            .expect("an expression");
        assert_eq!(
            expression,
            "Object{metadata: Object.metadata{annotations: \
             {'intent.security.nimbus.com/last-written-by': request.userInfo.username}}}"
        );
        assert_eq!(
            policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
            json!(["securityintents"])
        );
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        assert_eq!(binding["spec"]["policyName"], AUTHOR_POLICY_NAME);
    }

    #[test]
    fn the_requester_policy_stamps_exceptions_on_creation_and_keeps_the_stamp() {
        let [policy, binding] = exception_requester_policy();
        let stamp = policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
            .as_str()
            .expect("an expression");
        assert!(
            stamp.starts_with(
                "request.operation == 'CREATE' ? Object{metadata: Object.metadata{annotations: \
                 {'exceptions.security.nimbus.com/requested-by': request.userInfo.username}}}"
            ),
            "{stamp}"
        );
        assert!(
            stamp.contains(
                "oldObject.metadata.annotations['exceptions.security.nimbus.com/requested-by']"
            ),
            "{stamp}"
        );
        assert_eq!(policy["spec"]["mutations"][1]["patchType"], "JSONPatch");
        let rules = &policy["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(
            rules["apiGroups"],
            json!(["exceptions.security.nimbus.com"])
        );
        assert_eq!(
            rules["resources"],
            json!([
                "securityintentexceptions",
                "clustersecurityintentexceptions"
            ])
        );
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        assert_eq!(binding["spec"]["policyName"], REQUESTER_POLICY_NAME);
    }

    #[test]
    fn the_approval_policies_withdraw_on_a_spec_change_and_ask_the_authorizer_for_approve() {
        let [mutating, mutating_binding, validating, validating_binding] =
            exception_approval_policy();
        assert_eq!(mutating["kind"], "MutatingAdmissionPolicy");
        let withdrawn = mutating["spec"]["mutations"][0]["jsonPatch"]["expression"]
            .as_str()
            .expect("an expression");
        assert!(
            withdrawn.starts_with("request.operation == 'UPDATE' && object.spec != oldObject.spec"),
            "{withdrawn}"
        );
        assert!(withdrawn.contains("'exceptions.security.nimbus.com/approved-by'"));
        assert_eq!(validating["kind"], "ValidatingAdmissionPolicy");
        let checks = validating["spec"]["validations"].to_string();
        for check in [
            "variables.approvedBy == request.userInfo.username",
            "variables.requestedBy != request.userInfo.username",
            "authorizer.group('exceptions.security.nimbus.com').resource(request.resource.resource)\
             .namespace(variables.scope).name(variables.name).check('approve').allowed()",
            "check('update').allowed()",
        ] {
            assert!(checks.contains(check), "{check} in {checks}");
        }
        for policy in [&mutating, &validating] {
            assert_eq!(policy["spec"]["failurePolicy"], "Fail");
            assert_eq!(
                policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
                json!([
                    "securityintentexceptions",
                    "clustersecurityintentexceptions"
                ])
            );
        }
        assert_eq!(mutating_binding["spec"]["policyName"], APPROVAL_POLICY_NAME);
        assert_eq!(
            validating_binding["spec"]["validationActions"],
            json!(["Deny"])
        );
    }

    #[test]
    fn literals_are_escaped() {
        assert_eq!(literal("it's"), r"'it\'s'");
    }
}
