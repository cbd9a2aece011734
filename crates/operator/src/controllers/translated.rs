//! The two kinds of policy the operator translates, NimbusPolicy and ClusterNimbusPolicy, as
//! the controllers handle them alike.

use crate::cache::Creations;
use crate::context::Context;
use crate::write::Policy;
use kube::{Api, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy, NimbusPolicyStatus};
use nimbus_core::engines::PolicyInput;
use nimbus_core::policy::Claim;

/// A policy the operator translates: a NimbusPolicy or a ClusterNimbusPolicy.
pub(crate) trait Translated: Policy {
    /// What the translators read, with `uid` for the owner reference.
    fn input(&self, uid: &str) -> PolicyInput<'_>;
    fn status(&self) -> Option<&NimbusPolicyStatus>;
    fn set_status(&mut self, status: NimbusPolicyStatus);
    /// Whether it may be translated, from the caches.
    fn claim(&self, ctx: &Context) -> Claim;
    fn api(&self, ctx: &Context) -> Api<Self>;
    /// Those of its kind this process created and the cache does not show yet.
    fn created(ctx: &Context) -> &Creations;
}

impl Translated for NimbusPolicy {
    fn input(&self, uid: &str) -> PolicyInput<'_> {
        PolicyInput::namespaced(self, uid)
    }
    fn status(&self) -> Option<&NimbusPolicyStatus> {
        self.status.as_ref()
    }
    fn set_status(&mut self, status: NimbusPolicyStatus) {
        self.status = Some(status);
    }
    fn claim(&self, ctx: &Context) -> Claim {
        ctx.claim(self)
    }
    fn api(&self, ctx: &Context) -> Api<Self> {
        Api::namespaced(ctx.client.clone(), &self.namespace().unwrap_or_default())
    }
    fn created(ctx: &Context) -> &Creations {
        &ctx.policies_created
    }
}

impl Translated for ClusterNimbusPolicy {
    fn input(&self, uid: &str) -> PolicyInput<'_> {
        PolicyInput::cluster(self, uid)
    }
    fn status(&self) -> Option<&NimbusPolicyStatus> {
        self.status.as_ref()
    }
    fn set_status(&mut self, status: NimbusPolicyStatus) {
        self.status = Some(status);
    }
    fn claim(&self, ctx: &Context) -> Claim {
        ctx.cluster_claim(self)
    }
    fn api(&self, ctx: &Context) -> Api<Self> {
        Api::all(ctx.client.clone())
    }
    fn created(ctx: &Context) -> &Creations {
        &ctx.cluster_policies_created
    }
}
