//! Status vocabulary shared by every kind.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// `status.status` of an object the operator has processed (the only value Nimbus writes for
/// intents, policies and valid bindings).
pub const STATUS_CREATED: &str = "Created";
/// `status.status` of a cluster binding whose selector is invalid (as in Nimbus).
pub const STATUS_VALIDATION_FAIL: &str = "ValidationFail";

/// Condition types and reasons. Types follow the Kubernetes API conventions (`Ready` is
/// level-based; reasons are CamelCase machine-readable causes).
pub mod condition {
    /// The object has been fully processed and what it describes is in effect.
    pub const READY: &str = "Ready";
    /// kstatus's "abnormal-true" condition: present (`True`) only while the operator is still
    /// working toward the current generation, or waiting for something it watches (an intent,
    /// an engine's CRDs, a namespace); absent otherwise.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus's other "abnormal-true" condition: present (`True`) only when the object cannot
    /// be brought in force until someone changes it or what it refers to (see
    /// `nimbus_core::status::stalls`); absent otherwise.
    pub const STALLED: &str = "Stalled";

    pub const REASON_READY: &str = "Ready";
    /// A binding references intents that do not exist (yet).
    pub const REASON_INTENT_NOT_FOUND: &str = "IntentNotFound";
    /// A binding's selector cannot be turned into a Kubernetes label selector.
    pub const REASON_INVALID_SELECTOR: &str = "InvalidSelector";
    /// The generated policy's name is taken by an object the binding does not own.
    pub const REASON_POLICY_CONFLICT: &str = "PolicyConflict";
    /// A cluster binding's namespace selector is contradictory or empty.
    pub const REASON_INVALID_NAMESPACE_SELECTOR: &str = "InvalidNamespaceSelector";
    /// An intent ID is not in the catalog, or cannot be enforced through this kind of binding.
    pub const REASON_UNSUPPORTED_INTENT: &str = "UnsupportedIntent";
    /// Every engine that could enforce an intent is missing its CRDs.
    pub const REASON_ENGINE_NOT_INSTALLED: &str = "EngineNotInstalled";
    /// Every engine that could enforce an intent is switched off by configuration.
    pub const REASON_ENGINE_DISABLED: &str = "EngineDisabled";
    /// An intent parameter has a value of the wrong shape (its default is used instead).
    pub const REASON_INVALID_PARAMETER: &str = "InvalidParameter";
    /// An engine cannot express the policy's workload selector.
    pub const REASON_UNSUPPORTED_SELECTOR: &str = "UnsupportedSelector";
    /// Something the engine needs in the cluster is missing (a namespace, a database).
    pub const REASON_ENGINE_NOT_READY: &str = "EngineNotReady";
    /// A sensitive intent (one that grants roles or runs workloads) is bound by a binding
    /// whose `intent.security.nimbus.com/allow-sensitive` annotation does not list it.
    pub const REASON_SENSITIVE_INTENT_NOT_ALLOWED: &str = "SensitiveIntentNotAllowed";
    /// Writing a generated object failed.
    pub const REASON_APPLY_FAILED: &str = "ApplyFailed";
    /// A SecurityIntentException in force names an intent an engine enforces without leaving
    /// the excepted workloads out: that engine still enforces the intent on them (non-blocking).
    pub const REASON_EXCEPTION_NOT_HONOURED: &str = "ExceptionNotHonoured";
    /// A NimbusPolicy no binding controls: it is not translated.
    pub const REASON_NOT_BOUND: &str = "NotBound";
    /// An intent's action is `Audit`, and an engine that enforces it has no form that reports
    /// without enforcing (a NetworkPolicy, a RoleBinding, a Kyverno mutate or generate rule):
    /// that engine writes nothing for it.
    pub const REASON_NO_AUDIT_FORM: &str = "NoAuditForm";
    /// A generated policy has not been translated at its current generation yet (`Unknown`).
    pub const REASON_RECONCILING: &str = "Reconciling";
    /// A cluster binding selects no namespace its per-namespace intents could apply to.
    pub const REASON_NO_NAMESPACE_SELECTED: &str = "NoNamespaceSelected";
    /// A server-side dry run of an object the policy forbids was admitted: the engine's
    /// objects are in the cluster, but the engine does not act on them (its webhook is gone,
    /// it ignores failures while down, its binding was removed). Stalls: nothing the operator
    /// writes restores it.
    pub const REASON_ENFORCEMENT_NOT_LIVE: &str = "EnforcementNotLive";
}
