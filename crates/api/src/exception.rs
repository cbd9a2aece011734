//! `exceptions.security.nimbus.com/v1alpha1`: ours, not Nimbus's. A SecurityIntentException
//! lets workloads of its namespace out of some intents of one binding, for a reason and until a
//! time; a ClusterSecurityIntentException lets workloads of several namespaces, named, out of a
//! cluster binding's. Writing one is a permission of its own, apart from writing bindings:
//! whoever may bind intents in a namespace must not be able to undo a cluster binding there.

use crate::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// API group of SecurityIntentExceptions.
pub const EXCEPTION_GROUP: &str = "exceptions.security.nimbus.com";
/// Who asked for an exception: the user who created it, as the API server authenticated them,
/// stamped by the `nimbus-exception-requester` MutatingAdmissionPolicy and kept on every
/// update.
pub const REQUESTED_BY_ANNOTATION: &str = "exceptions.security.nimbus.com/requested-by";
/// Who approved an exception: set by the approver, in their own name, and refused by the
/// `nimbus-exception-approval` ValidatingAdmissionPolicy unless they may `approve` it and did
/// not ask for it.
pub const APPROVED_BY_ANNOTATION: &str = "exceptions.security.nimbus.com/approved-by";

/// The binding an exception is taken from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
pub struct ExceptedBinding {
    /// `SecurityIntentBinding` (in the exception's namespace) or `ClusterSecurityIntentBinding`.
    #[x_kube(validation = Rule::new("self == 'SecurityIntentBinding' || self == 'ClusterSecurityIntentBinding'").message("kind must be SecurityIntentBinding or ClusterSecurityIntentBinding"))]
    pub kind: String,
    /// Its name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Lets workloads of its namespace out of intents of one binding until `expiresAt`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "exceptions.security.nimbus.com",
    version = "v1alpha1",
    kind = "SecurityIntentException",
    plural = "securityintentexceptions",
    shortname = "siex",
    namespaced,
    status = "SecurityIntentExceptionStatus",
    doc = "SecurityIntentException lets the workloads it selects out of some intents of one binding, for a reason, until it expires",
    printcolumn(name = "Binding", type_ = "string", json_path = ".spec.binding.name"),
    printcolumn(name = "Expires", type_ = "date", json_path = ".spec.expiresAt"),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Active\")].status"
    ),
    printcolumn(
        name = "Requested-By",
        type_ = "string",
        json_path = ".status.requestedBy"
    ),
    printcolumn(
        name = "Approved-By",
        type_ = "string",
        json_path = ".status.approvedBy"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.reason",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SecurityIntentExceptionSpec {
    /// The binding whose intents it lets the workloads out of.
    pub binding: ExceptedBinding,
    /// Names of SecurityIntents the binding binds; at least one. The workloads stay held to
    /// the binding's other intents.
    #[schemars(length(min = 1))]
    pub intents: Vec<String>,
    /// Which workloads of the exception's namespace, by their own labels (a pod's, or a
    /// workload controller's); empty selects every workload of the namespace.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Why, for whoever reviews it.
    #[schemars(length(min = 1))]
    pub reason: String,
    /// When it ends: from then on every engine enforces the intents on the workloads again.
    /// At most the operator's `--exception-max-duration` after the exception's creation.
    pub expires_at: Time,
}

/// What the operator made of a SecurityIntentException.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityIntentExceptionStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Active` says whether the engines honour it now, and if not, why (`Expired`,
    /// `TooLong`, `BindingNotFound`, `IntentNotBound`, `NotApproved`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Who asked for it: its `exceptions.security.nimbus.com/requested-by` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Who approved it: its `exceptions.security.nimbus.com/approved-by` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// Lets workloads of the namespaces it names out of intents of one cluster binding until
/// `expiresAt`: one exception where a SecurityIntentException per namespace would be needed.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "exceptions.security.nimbus.com",
    version = "v1alpha1",
    kind = "ClusterSecurityIntentException",
    plural = "clustersecurityintentexceptions",
    shortname = "csiex",
    status = "SecurityIntentExceptionStatus",
    doc = "ClusterSecurityIntentException lets the workloads it selects in the namespaces it names out of some intents of one cluster binding, for a reason, until it expires",
    printcolumn(name = "Binding", type_ = "string", json_path = ".spec.binding.name"),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(name = "Expires", type_ = "date", json_path = ".spec.expiresAt"),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Active\")].status"
    ),
    printcolumn(
        name = "Requested-By",
        type_ = "string",
        json_path = ".status.requestedBy"
    ),
    printcolumn(
        name = "Approved-By",
        type_ = "string",
        json_path = ".status.approvedBy"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.reason",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("self.binding.kind == 'ClusterSecurityIntentBinding'").message("a ClusterSecurityIntentException lets workloads out of a ClusterSecurityIntentBinding; a SecurityIntentBinding's exceptions are SecurityIntentExceptions in its namespace"))]
#[serde(rename_all = "camelCase")]
pub struct ClusterSecurityIntentExceptionSpec {
    /// The cluster binding whose intents it lets the workloads out of (kind
    /// `ClusterSecurityIntentBinding`).
    pub binding: ExceptedBinding,
    /// Names of SecurityIntents the binding binds; at least one. The workloads stay held to
    /// the binding's other intents.
    #[schemars(length(min = 1))]
    pub intents: Vec<String>,
    /// The namespaces, by name, whose workloads it lets out; at least one. By name and not by
    /// label: whoever may label a namespace must not be able to bring it under an exception.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Vec<String>,
    /// Which workloads of those namespaces, by their own labels (a pod's, or a workload
    /// controller's); empty selects every workload of the namespaces.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Why, for whoever reviews it.
    #[schemars(length(min = 1))]
    pub reason: String,
    /// When it ends: from then on every engine enforces the intents on the workloads again.
    /// At most the operator's `--exception-max-duration` after the exception's creation.
    pub expires_at: Time,
}
