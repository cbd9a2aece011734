//! What is in force is exactly what the bindings say, and a binding's status never claims more:
//! narrowing, widening and emptying selectors, removing `cel` entries and parameters, additive
//! edits of generated objects, and readiness that follows the generated policies' results.

mod common;

use common::{CONVERGE, apply, create_intent, get, intent, native, unique};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use nimbus_api::{ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntentBinding};
use nimbus_core::engines::{KUBEARMOR_POLICY, KYVERNO_POLICY};
use nimbus_testenv::eventually;
use serde_json::{Value, json};

async fn env(prefix: &str) -> common::Env {
    common::cluster_with_engines();
    common::env(prefix).await
}

fn sib(name: &str, intents: &[&str], selector: Value, cel: Option<Vec<&str>>) -> Value {
    let mut spec = json!({
        "intents": intents.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
        "selector": selector,
    });
    if let Some(cel) = cel {
        spec["cel"] = json!(cel);
    }
    json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": name}, "spec": spec,
    })
}

/// Waits until the binding reports `Ready=True` for its current generation, and returns it.
async fn ready(bindings: &Api<SecurityIntentBinding>, name: &str) -> SecurityIntentBinding {
    eventually(
        &format!("{name} to be Ready=True at its generation"),
        CONVERGE,
        async |seen| {
            let b = get(bindings, name).await.expect("binding");
            let s = b.status.as_ref();
            let c = s.and_then(|s| s.conditions.first());
            if s.is_some_and(|s| s.observed_generation == b.metadata.generation)
                && c.is_some_and(|c| {
                    c.status == "True" && c.observed_generation == b.metadata.generation
                })
            {
                return Some(b);
            }
            *seen = format!("generation {:?}: {:#?}", b.metadata.generation, b.status);
            None
        },
    )
    .await
}

/// The selector of the policy and of its NetworkPolicy, as JSON (absent maps as `{}`).
async fn selectors(e: &common::Env, name: &str) -> (Value, Value) {
    let np = get(&e.policies, name).await.expect("policy");
    let netpols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), e.ns.name());
    let netpol = get(&netpols, &format!("{name}-dnsmanipulation"))
        .await
        .expect("netpol");
    let normalize = |v: Value| if v.is_null() { json!({}) } else { v };
    (
        normalize(serde_json::to_value(np.spec.selector).expect("json")),
        normalize(serde_json::to_value(netpol.spec.expect("spec").pod_selector).expect("json")),
    )
}

/// Once the binding is ready, the policy and the NetworkPolicy select exactly `want`.
async fn selects_exactly(e: &common::Env, name: &str, want: Value) {
    ready(&e.bindings, name).await;
    eventually(
        &format!("{name} selecting exactly {want}"),
        CONVERGE,
        async |_| {
            let (policy, netpol) = selectors(e, name).await;
            (policy == want && netpol == want).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn narrowing_widening_and_emptying_a_selector_reach_every_generated_object() {
    let e = env("widen").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    let deny = create_intent(&e.client, "denyExternalNetworkAccess", "Block").await;
    let labels = |l: Value| json!({"workloadSelector": {"matchLabels": l}});

    apply(
        &e.bindings,
        "w",
        &sib(
            "w",
            &[&dns],
            labels(json!({"app": "web", "tier": "fe"})),
            None,
        ),
    )
    .await;
    selects_exactly(
        &e,
        "w",
        json!({"matchLabels": {"app": "web", "tier": "fe"}}),
    )
    .await;

    // Narrowing the label set widens the selection: the dropped label must go.
    apply(
        &e.bindings,
        "w",
        &sib("w", &[&dns], labels(json!({"app": "web"})), None),
    )
    .await;
    selects_exactly(&e, "w", json!({"matchLabels": {"app": "web"}})).await;

    // Emptying the selector while adding an intent (a server-side apply of `selector: {}`
    // over owned labels) selects every pod.
    apply(&e.bindings, "w", &sib("w", &[&dns, &deny], json!({}), None)).await;
    selects_exactly(&e, "w", json!({})).await;
    let np = get(&e.policies, "w").await.expect("policy");
    assert_eq!(np.spec.rules.len(), 2);

    // A removed `cel` entry takes its requirement with it.
    let cel = vec![
        r#"labels["app"] == "web""#,
        r#"labels["tier"] in ["fe", "be"]"#,
    ];
    apply(&e.bindings, "w", &sib("w", &[&dns], json!({}), Some(cel))).await;
    selects_exactly(
        &e,
        "w",
        json!({"matchLabels": {"app": "web"},
               "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]}),
    )
    .await;
    apply(
        &e.bindings,
        "w",
        &sib(
            "w",
            &[&dns],
            json!({}),
            Some(vec![r#"labels["app"] == "web""#]),
        ),
    )
    .await;
    selects_exactly(&e, "w", json!({"matchLabels": {"app": "web"}})).await;
}

#[tokio::test]
async fn a_removed_parameter_takes_its_value_out_of_the_native_policy() {
    let e = env("param").await;
    let name = unique("pss");
    let mut si = intent(&name, "escapeToHost", "Block");
    si["spec"]["intent"]["params"] = json!({"psaLevel": ["restricted"]});
    apply(&e.intents, &name, &si).await;
    apply(&e.bindings, "p", &sib("p", &[&name], json!({}), None)).await;
    let level = || async {
        let pol = native(
            &e.client,
            &KYVERNO_POLICY,
            Some(e.ns.name()),
            "p-escapetohost",
        )
        .await?;
        pol.data["spec"]["rules"][0]["validate"]["podSecurity"]["level"]
            .as_str()
            .map(str::to_owned)
    };
    eventually("restricted in force", CONVERGE, async |_| {
        level().await.filter(|l| l == "restricted")
    })
    .await;

    si["spec"]["intent"]
        .as_object_mut()
        .expect("intent")
        .remove("params");
    apply(&e.intents, &name, &si).await;
    eventually("the default level back in force", CONVERGE, async |_| {
        level().await.filter(|l| l == "baseline")
    })
    .await;
    let np = get(&e.policies, "p").await.expect("policy");
    assert_eq!(np.spec.rules[0].rule.params, None, "{:?}", np.spec.rules[0]);
}

/// An intruder (another field manager) adds a key inside a map we generate.
async fn intrude<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some("intruder".into()),
        ..Default::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("editing {name}: {e}"));
}

#[tokio::test]
async fn additive_edits_of_generated_objects_are_taken_back() {
    let e = env("additive").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    let selector = json!({"workloadSelector": {"matchLabels": {"app": "web"}}});
    apply(&e.bindings, "a", &sib("a", &[&dns], selector, None)).await;
    selects_exactly(&e, "a", json!({"matchLabels": {"app": "web"}})).await;
    let extra = json!({"matchLabels": {"app": "web", "never": "matches"}});

    let netpols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), e.ns.name());
    intrude(
        &netpols,
        "a-dnsmanipulation",
        json!({"spec": {"podSelector": extra}}),
    )
    .await;
    eventually(
        "the NetworkPolicy's extra label removed",
        CONVERGE,
        async |_| {
            let (_, netpol) = selectors(&e, "a").await;
            (netpol == json!({"matchLabels": {"app": "web"}})).then_some(())
        },
    )
    .await;

    let ksps: Api<DynamicObject> = Api::namespaced_with(
        e.client.clone(),
        e.ns.name(),
        &KUBEARMOR_POLICY.api_resource(),
    );
    intrude(
        &ksps,
        "a-dnsmanipulation",
        json!({"spec": {"selector": extra}}),
    )
    .await;
    eventually(
        "the KubeArmorPolicy's extra label removed",
        CONVERGE,
        async |_| {
            let ksp = native(
                &e.client,
                &KUBEARMOR_POLICY,
                Some(e.ns.name()),
                "a-dnsmanipulation",
            )
            .await?;
            (ksp.data["spec"]["selector"] == json!({"matchLabels": {"app": "web"}})).then_some(())
        },
    )
    .await;

    intrude(&e.policies, "a", json!({"spec": {"selector": extra}})).await;
    eventually(
        "the NimbusPolicy's extra label removed",
        CONVERGE,
        async |_| {
            let (policy, _) = selectors(&e, "a").await;
            (policy == json!({"matchLabels": {"app": "web"}})).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_binding_is_not_ready_when_its_policy_is_not() {
    let e = env("notready").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    // Someone else's NetworkPolicy holds the generated name: the policy cannot be enforced
    // in full, and the binding must say so rather than claim Ready.
    let netpols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), e.ns.name());
    apply(
        &netpols,
        "c-dnsmanipulation",
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "c-dnsmanipulation"}, "spec": {"podSelector": {}}}),
    )
    .await;
    apply(&e.bindings, "c", &sib("c", &[&dns], json!({}), None)).await;
    let condition = eventually("PolicyConflict on the binding", CONVERGE, async |_| {
        let b = get(&e.bindings, "c").await?;
        let c = b.status?.conditions.into_iter().next()?;
        (c.reason == "PolicyConflict").then_some(c)
    })
    .await;
    assert_eq!(condition.status, "False");
    assert!(
        condition
            .message
            .contains("NetworkPolicy/c-dnsmanipulation"),
        "{}",
        condition.message
    );
}

#[tokio::test]
async fn a_cluster_binding_that_selects_nothing_says_so() {
    let e = env("nothing").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    let name = unique("ks");
    let api: Api<ClusterSecurityIntentBinding> = Api::all(e.client.clone());
    apply(
        &api,
        &name,
        &json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": name},
            "spec": {"intents": [{"name": dns}], "selector": {"nsSelector": {"matchNames": ["kube-system"]}}}
        }),
    )
    .await;
    let condition = eventually("NoNamespaceSelected", CONVERGE, async |_| {
        let c = get(&api, &name)
            .await?
            .status?
            .conditions
            .into_iter()
            .next()?;
        (c.reason == "NoNamespaceSelected").then_some(c)
    })
    .await;
    assert_eq!(condition.status, "False");
    let nps: Api<NimbusPolicy> = Api::namespaced(e.client.clone(), "kube-system");
    assert!(
        get(&nps, &format!("nimbus-ctlr-gen-{name}"))
            .await
            .is_none()
    );
}
