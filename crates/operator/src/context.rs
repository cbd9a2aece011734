use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use std::time::Duration;

/// What every reconcile reads: the client for writes and the shared caches for reads (a
/// reconcile never lists from the API server).
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// How often an unchanged object is re-checked for drift the watches could not see.
    pub resync: Duration,
    pub intents: Store<SecurityIntent>,
    pub bindings: Store<SecurityIntentBinding>,
    pub cluster_bindings: Store<ClusterSecurityIntentBinding>,
    pub policies: Store<NimbusPolicy>,
    pub cluster_policies: Store<ClusterNimbusPolicy>,
    pub namespaces: Store<Namespace>,
}
