//! SecurityIntentExceptions, read from the caches: where each stands now, which are in force for
//! a policy, and which policies an exception concerns (to re-translate them when it changes).

use crate::context::Context;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, MatchIntent, NimbusPolicy,
    SecurityIntentBinding,
};
use nimbus_core::exceptions::{self, BindingRef, Excepted, Exception, Standing};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

impl Context {
    /// Where `exception` stands at `now`, given its binding and the intents it binds.
    pub fn standing<'a>(&self, exception: impl Into<Exception<'a>>, now: Timestamp) -> Standing {
        let exception = exception.into();
        let bound = self.bound_intents(&BindingRef::of(exception));
        exceptions::standing(exception, bound.as_ref(), now, self.exceptions.rules)
    }

    /// The exceptions in force at `now` for a policy enforcing `binding` (in `namespace`, for a
    /// cluster binding's policy there), and when that next changes by itself (the first of
    /// their expiries).
    pub fn exceptions_in_force(
        &self,
        binding: Option<&BindingRef>,
        namespace: Option<&str>,
        now: Timestamp,
    ) -> (Vec<Excepted>, Option<Timestamp>) {
        let Some(binding) = binding else {
            return (Vec::new(), None);
        };
        exceptions::in_force(
            self.exceptions.known().iter(),
            binding,
            || self.bound_intents(binding),
            namespace,
            now,
            self.exceptions.rules,
        )
    }

    /// The SecurityIntents `binding` binds, by name, with their intent IDs; `None` when the
    /// binding does not exist.
    fn bound_intents(&self, binding: &BindingRef) -> Option<BTreeMap<String, String>> {
        let names: Vec<MatchIntent> = match &binding.namespace {
            Some(ns) => self
                .bindings
                .get(&ObjectRef::<SecurityIntentBinding>::new(&binding.name).within(ns))?
                .spec
                .intents
                .clone(),
            None => self
                .cluster_bindings
                .get(&ObjectRef::<ClusterSecurityIntentBinding>::new(
                    &binding.name,
                ))?
                .spec
                .intents
                .clone(),
        };
        Some(exceptions::bound_intents(&names, |name| {
            let intent = self.intents.get(&ObjectRef::new(name))?;
            Some(intent.spec.intent.id.clone())
        }))
    }
}

/// How long until `at`, from `now` (at least a millisecond: a timer set for the past fires at
/// once, and the expiry is judged again then).
pub fn until(at: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now))
        .unwrap_or_default()
        .max(Duration::from_millis(1))
}

/// The NimbusPolicies `exception` concerns: its SecurityIntentBinding's, or its cluster
/// binding's in each namespace whose workloads it lets out.
pub fn policies_of<'a>(
    policies: &Store<NimbusPolicy>,
    exception: impl Into<Exception<'a>>,
) -> Vec<ObjectRef<NimbusPolicy>> {
    let exception = exception.into();
    let binding = BindingRef::of(exception);
    let namespaces = exception.namespaces();
    policies
        .state()
        .iter()
        .filter(|p| {
            p.namespace().is_some_and(|ns| namespaces.contains(&ns))
                && controlled_by(p.owner_references(), &binding)
        })
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// The ClusterNimbusPolicy `exception` concerns: its cluster binding's.
pub fn cluster_policies_of<'a>(
    policies: &Store<ClusterNimbusPolicy>,
    exception: impl Into<Exception<'a>>,
) -> Vec<ObjectRef<ClusterNimbusPolicy>> {
    let binding = BindingRef::of(exception);
    policies
        .state()
        .iter()
        .filter(|p| controlled_by(p.owner_references(), &binding))
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// The exceptions in `store` naming `binding`.
pub fn naming<K>(store: &Store<K>, binding: &BindingRef) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
    for<'a> &'a Arc<K>: Into<Exception<'a>>,
{
    store
        .state()
        .iter()
        .filter(|e| BindingRef::of(*e) == *binding)
        .map(|e| ObjectRef::from_obj(&**e))
        .collect()
}

fn controlled_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    binding: &BindingRef,
) -> bool {
    owners
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == binding.kind && o.name == binding.name)
}
