//! What each policy covers, decided as its status is.

use crate::context::Context;
use crate::write::object::is_controlled_by;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use nimbus_api::posture::Reference;
use nimbus_api::{ClusterSecurityIntentBinding, SecurityIntentBinding};
use nimbus_core::engines::{self, PolicyInput};
use nimbus_core::policy::PolicyPlan;
use nimbus_core::posture::{PolicyCoverage, PolicyFacts};

/// What a policy covers, judged by its plan (`plan`, as the policy controller executes it): a
/// policy no binding generates covers nothing, and a native object counts only when the policy
/// controls it (not merely one of that name). One a binding generates that others wrote to is
/// judged by what is in force.
pub(super) fn policy_coverage(
    ctx: &Context,
    input: &PolicyInput,
    plan: &PolicyPlan,
    binding: Option<Reference>,
    conditions: &[nimbus_api::Condition],
) -> PolicyCoverage {
    let present = |g: &engines::Generated| {
        ctx.natives
            .cached(g)
            .is_some_and(|o| is_controlled_by(&*o, &input.owner.uid))
    };
    let intent_names = bound_intent_names(ctx, binding.as_ref());
    let intent_name = |id: &str| {
        intent_names
            .iter()
            .find(|(_, intent_id, ..)| intent_id == id)
            .map(|(name, ..)| name.clone())
    };
    let intent_bundle = |id: &str| {
        intent_names
            .iter()
            .find(|(_, intent_id, ..)| intent_id == id)
            .and_then(|(_, _, bundle, _)| bundle.clone())
    };
    let intent_writer = |id: &str| {
        intent_names
            .iter()
            .find(|(_, intent_id, ..)| intent_id == id)
            .map(|(.., writer)| writer.clone())
    };
    // The leader probes; a standby knows what the leader wrote in the policy's status.
    let leading = *ctx.leading.borrow();
    let probes = ctx.probes.as_ref().map(|probes| {
        let uid = input.owner.uid.clone();
        move |intent: &str, engine| {
            if leading {
                probes.probed(&uid, intent, engine)
            } else {
                nimbus_core::probes::from_status(conditions, intent, engine)
            }
        }
    });
    PolicyCoverage::new(&PolicyFacts {
        input,
        translation: &plan.translation,
        engines: &plan.engines,
        present: &present,
        intent_name: &intent_name,
        intent_bundle: &intent_bundle,
        intent_writer: &intent_writer,
        binding,
        protected: &ctx.protected_namespaces,
        probes: probes.as_ref().map(|p| p as _),
    })
}

/// The binding a policy's controller reference points to.
pub(super) fn controlling_binding(
    owners: &[OwnerReference],
    namespace: Option<&str>,
) -> Option<Reference> {
    let owner = owners.iter().find(|o| o.controller == Some(true))?;
    let namespaced = owner.kind == SecurityIntentBinding::kind(&());
    let cluster = owner.kind == ClusterSecurityIntentBinding::kind(&());
    (namespaced || cluster).then(|| Reference {
        kind: owner.kind.clone(),
        namespace: namespace.filter(|_| namespaced).map(str::to_owned),
        name: owner.name.clone(),
    })
}

/// The names, IDs, bundle labels and writers of the SecurityIntents `binding` binds that
/// exist.
pub(super) fn bound_intent_names(
    ctx: &Context,
    binding: Option<&Reference>,
) -> Vec<(String, String, Option<String>, nimbus_api::IntentWriter)> {
    let Some(binding) = binding else {
        return Vec::new();
    };
    let names: Vec<String> = match &binding.namespace {
        Some(ns) => ctx
            .bindings
            .get(&ObjectRef::new(&binding.name).within(ns))
            .map(|b| b.spec.intents.iter().map(|i| i.name.clone()).collect())
            .unwrap_or_default(),
        None => ctx
            .cluster_bindings
            .get(&ObjectRef::new(&binding.name))
            .map(|b| b.spec.intents.iter().map(|i| i.name.clone()).collect())
            .unwrap_or_default(),
    };
    names
        .into_iter()
        .filter_map(|name| {
            let intent = ctx.intents.get(&ObjectRef::new(&name))?;
            let bundle = intent
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(nimbus_core::compliance::bundles::BUNDLE_LABEL))
                .cloned();
            let writer = nimbus_core::authors::intent_writer(&intent);
            Some((name, intent.spec.intent.id.clone(), bundle, writer))
        })
        .collect()
}
