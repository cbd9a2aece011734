//! Chaos: a seeded, time-bounded churn of intents, bindings, cluster bindings, namespaces and
//! hand edits of every generated kind (a key added, a value changed, a delete: every pair at
//! least once, those the churn's draws left out made right after it), while the
//! leading operator replica is SIGKILLed and restarted again and again, kube-apiserver is
//! restarted twice and etcd once. Then an auditor compares the cluster with `nimbus translate`
//! of the manifests read back from it (the same core the operator runs: this proves
//! convergence to what the core decides, not that decision): every expected object present,
//! nothing stale (compared exactly with the expected object in the API server's form, see
//! `common::generated`; no field owned by anyone else; owners alive), nothing orphaned, and
//! every binding's status about its current generation.
//!
//! `NIMBUS_CHAOS_SECONDS` (default 40) and `NIMBUS_CHAOS_SEED` (default 1) size it; `make
//! chaos` runs a long version with several seeds.

mod common;

use common::cases::Rng;
use common::generated::{ServerForms, differences, generated_kinds, native_kinds};
use common::monitor::{Monitor, Watched};
use common::oracle::Server;
use common::replica::Replica;
use common::{CONVERGE, get};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_testenv::ControlPlane;
use nimbus_testenv::eventually;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const GROUP: &str = "intent.security.nimbus.com/v1alpha1";
const NAMESPACES: [&str; 4] = ["chaos-a", "chaos-b", "chaos-c", "chaos-d"];
const LEASE: &str = "nimbus-chaos";
/// The replicas' namespace (protected from fan-out, like the operator's own in a cluster).
const OPERATOR_NAMESPACE: &str = "nimbus-system";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start_replica(name: &'static str, cp: &ControlPlane, dir: &Path) -> Replica {
    let election = [
        "--leader-elect",
        "--leader-elect-namespace",
        OPERATOR_NAMESPACE,
        "--leader-elect-lease-name",
        LEASE,
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "1s",
    ];
    Replica::start(name, cp.kubeconfig_path(), dir, &election)
}

async fn leader(client: &Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    leases
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

/// Server-side apply as the "user"; errors (the apiserver may be restarting) are counted.
async fn upsert<K>(api: &Api<K>, name: &str, obj: &Value, stats: &mut Stats, what: &'static str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply("chaos-user").force();
    let result = api.patch(name, &params, &Patch::Apply(obj)).await;
    stats.record(what, result.is_ok());
}

async fn remove<K>(api: &Api<K>, name: &str, stats: &mut Stats, what: &'static str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let result = api.delete(name, &DeleteParams::background()).await;
    let ok = match result {
        Ok(_) => true,
        Err(kube::Error::Api(s)) => s.code == 404,
        Err(_) => false,
    };
    stats.record(what, ok);
}

#[derive(Default)]
struct Stats {
    actions: BTreeMap<&'static str, (u32, u32)>,
    /// Tampers that took, by kind and edit; no-ops and refusals apart.
    tampers: BTreeMap<(String, &'static str), u32>,
    tampers_not_counted: BTreeMap<String, u32>,
}

impl Stats {
    /// Counts a tamper that took (`Ok(true)`); a no-op or a refusal apart.
    fn tamper(&mut self, kind: &str, edit: &'static str, result: Result<bool, kube::Error>) {
        let apart = match result {
            Ok(true) => {
                *self.tampers.entry((kind.to_owned(), edit)).or_default() += 1;
                return;
            }
            Ok(false) => format!("{kind} {edit}: no-op"),
            Err(kube::Error::Api(s)) => format!("{kind} {edit}: refused ({})", s.reason),
            Err(e) => format!("{kind} {edit}: failed ({e})"),
        };
        *self.tampers_not_counted.entry(apart).or_default() += 1;
    }

    fn record(&mut self, what: &'static str, ok: bool) {
        let entry = self.actions.entry(what).or_default();
        if ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
}

const INTENTS: [&str; 5] = ["si-0", "si-1", "si-2", "si-3", "si-4"];

fn random_intent(rng: &mut Rng, name: &str) -> Value {
    let id = *rng.pick(&[
        "dnsManipulation",
        "denyExternalNetworkAccess",
        "swDeploymentTools",
        "escapeToHost",
        "unAuthorizedSaTokenAccess",
        "preventExecutionFromTempOrLogsFolders",
        "cocoWorkload",
        // Sensitive: enforced only through cluster bindings that allow them.
        "assessTLS",
        "namespaceSandbox",
    ]);
    let mut intent = json!({"id": id, "action": rng.pick(&["Block", "Audit"])});
    match id {
        "escapeToHost" if rng.chance(60) => {
            intent["params"] = json!({"psaLevel": [rng.pick(&["baseline", "restricted"])]});
        }
        "assessTLS" => {
            if rng.chance(50) {
                intent["params"]["schedule"] = json!([rng.pick(&["@daily", "0 * * * *"])]);
            }
            // A list of addresses to scan is a ConfigMap (nothing is scanned: no pod runs).
            if rng.chance(50) {
                intent["params"]["external_addresses"] = json!(["127.0.0.1:443"]);
            }
        }
        "namespaceSandbox" => {
            intent["params"] = json!({"group": ["chaos-team-{namespace}"],
                                      "clusterRole": [rng.pick(&["edit", "view"])]});
        }
        _ => {}
    }
    json!({"apiVersion": GROUP, "kind": "SecurityIntent", "metadata": {"name": name},
           "spec": {"intent": intent}})
}

fn random_intents(rng: &mut Rng) -> Vec<Value> {
    let mut names = rng.subset(&INTENTS);
    if names.is_empty() {
        names.push(*rng.pick(&INTENTS));
    }
    names.into_iter().map(|n| json!({"name": n})).collect()
}

fn random_binding(rng: &mut Rng, name: &str) -> Value {
    let labels: BTreeMap<&str, &str> = rng
        .subset(&["app", "tier", "team"])
        .into_iter()
        .map(|k| (k, *rng.pick(&["web", "fe", "blue"])))
        .collect();
    let selector = match rng.below(3) {
        0 => json!({}),
        1 => json!({"workloadSelector": {}}),
        _ => json!({"workloadSelector": {"matchLabels": labels}}),
    };
    let mut spec = json!({"intents": random_intents(rng), "selector": selector});
    if rng.chance(30) {
        let cel: Vec<&str> = rng.subset(&[
            r#"labels["env"] == "prod""#,
            r#"labels["zone"] in ["a", "b"]"#,
            r#"has(labels.canary)"#,
        ]);
        spec["cel"] = json!(cel);
    }
    json!({"apiVersion": GROUP, "kind": "SecurityIntentBinding", "metadata": {"name": name},
           "spec": spec})
}

fn random_cluster_binding(rng: &mut Rng, name: &str) -> Value {
    let ns_selector = if rng.chance(40) {
        json!({"matchNames": ["*"], "excludeNames": rng.subset(&NAMESPACES)})
    } else {
        let mut names = rng.subset(&NAMESPACES);
        if names.is_empty() {
            names.push(*rng.pick(&NAMESPACES));
        }
        json!({"matchNames": names})
    };
    let mut binding = json!({"apiVersion": GROUP, "kind": "ClusterSecurityIntentBinding",
           "metadata": {"name": name},
           "spec": {"intents": random_intents(rng), "selector": {"nsSelector": ns_selector}}});
    if rng.chance(50) {
        binding["metadata"]["annotations"] =
            json!({nimbus_api::ALLOW_SENSITIVE_ANNOTATION: "namespaceSandbox,assessTLS"});
    }
    binding
}

/// Generated objects by kind (ours only: the k8tls environment also holds the chart's
/// ConfigMaps), for the kinds that have any, with the kind set on each.
async fn generated_objects(client: &Client) -> Vec<(ApiResource, bool, Vec<Value>)> {
    let mut out = Vec::new();
    for (resource, namespaced) in generated_kinds() {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let Ok(list) = all.list(&ListParams::default()).await else {
            continue;
        };
        let ours: Vec<Value> = list
            .items
            .into_iter()
            .filter(|o| !o.owner_references().is_empty())
            .filter_map(|o| serde_json::to_value(o).ok())
            .map(|mut v| {
                v["kind"] = json!(resource.kind);
                v
            })
            .collect();
        if !ours.is_empty() {
            out.push((resource, namespaced, ours));
        }
    }
    out
}

/// The three hand edits of a generated object.
const EDITS: [&str; 3] = ["additive edit", "changed value", "delete"];

/// A hand edit of `object` the schema keeps (a merge patch): a key its body lacks when
/// `additive`, else a value it holds, changed.
fn tamper_patch(object: &Value, additive: bool) -> Value {
    let spec = &object["spec"];
    let flip = |v: &Value| json!(!v.as_bool().unwrap_or(false));
    let kind = object["kind"].as_str().unwrap_or_default();
    match (kind, additive) {
        ("NetworkPolicy", true) => {
            json!({"spec": {"podSelector": {"matchLabels": {"chaos": "added"}}}})
        }
        ("NetworkPolicy", false) => {
            let egress = spec["policyTypes"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("Egress")));
            let types = if egress {
                json!(["Ingress"])
            } else {
                json!(["Ingress", "Egress"])
            };
            json!({"spec": {"policyTypes": types}})
        }
        ("KubeArmorPolicy" | "NimbusPolicy", true) => {
            json!({"spec": {"selector": {"matchLabels": {"chaos": "added"}}}})
        }
        ("KubeArmorPolicy", false) => {
            let action = if spec["action"] == "Audit" {
                "Block"
            } else {
                "Audit"
            };
            json!({"spec": {"action": action}})
        }
        ("NimbusPolicy" | "ClusterNimbusPolicy", false) => json!({"spec": {"rules": []}}),
        ("ClusterNimbusPolicy", true) => {
            json!({"spec": {"nodeSelector": {"matchLabels": {"chaos": "added"}}}})
        }
        ("Policy" | "ClusterPolicy", true) => json!({"spec": {"webhookTimeoutSeconds": 7}}),
        ("Policy" | "ClusterPolicy", false) => {
            json!({"spec": {"background": flip(&spec["background"])}})
        }
        ("CronJob", true) => json!({"spec": {"startingDeadlineSeconds": 7}}),
        ("CronJob", false) => json!({"spec": {"suspend": flip(&spec["suspend"])}}),
        ("ConfigMap", true) => json!({"data": {"chaos": "added"}}),
        ("ConfigMap", false) => {
            let data = object["data"].as_object().cloned().unwrap_or_default();
            json!({"data": data.keys().map(|k| (k.clone(), json!("tampered"))).collect::<serde_json::Map<_, _>>()})
        }
        ("RoleBinding", _) => {
            let intruder = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "chaos-intruder"});
            let mut subjects = object["subjects"].as_array().cloned().unwrap_or_default();
            match additive {
                true => subjects.push(intruder),
                false => subjects = vec![intruder],
            }
            json!({"subjects": subjects})
        }
        _ => panic!("no tamper for {kind}: every generated kind needs one"),
    }
}

/// Tampers with a generated object: the kind and edit done least so far among the kinds
/// that have objects (so that every kind gets every edit), one of its objects at random.
async fn tamper(client: &Client, rng: &mut Rng, stats: &mut Stats) {
    let candidates = generated_objects(client).await;
    let done = |kind: &str, edit: &'static str| {
        stats
            .tampers
            .get(&(kind.to_owned(), edit))
            .copied()
            .unwrap_or(0)
    };
    let choices: Vec<(usize, &'static str, u32)> = candidates
        .iter()
        .enumerate()
        .flat_map(|(i, (resource, _, _))| EDITS.map(|e| (i, e, done(&resource.kind, e))))
        .collect();
    let Some(least) = choices.iter().map(|c| c.2).min() else {
        return;
    };
    let choices: Vec<_> = choices.into_iter().filter(|c| c.2 == least).collect();
    let &(i, edit, _) = rng.pick(&choices);
    let (resource, namespaced, items) = &candidates[i];
    tamper_with(client, resource, *namespaced, rng.pick(items), edit, stats).await;
}

/// Makes `edit` to `object` (of `resource`) as an intruder would, and counts it.
async fn tamper_with(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    object: &Value,
    edit: &'static str,
    stats: &mut Stats,
) {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, resource),
        _ => Api::all_with(client.clone(), resource),
    };
    let intruder = PatchParams {
        field_manager: Some("chaos-intruder".into()),
        ..Default::default()
    };
    let result = match edit {
        "delete" => api
            .delete(name, &DeleteParams::background())
            .await
            .map(|_| true),
        _ => {
            let patch = tamper_patch(object, edit == "additive edit");
            // An edit the API server stored as it was (a value the object already had)
            // tampered with nothing: it is counted apart, not as a tamper.
            api.patch(name, &intruder, &Patch::Merge(&patch))
                .await
                .map(|stored| {
                    json!(stored.resource_version()) != object["metadata"]["resourceVersion"]
                })
        }
    };
    stats.tamper(&resource.kind, edit, result);
}

/// Coverage by construction: every (kind, edit) pair the churn's draws left out is made now,
/// each retried until it takes (its kind's objects exist all along, through the anchors, but
/// one may be being re-created after an earlier tamper), so that a slow machine that drew
/// fewer tampers in its time still tampers with everything before the audit.
async fn tamper_every_pair(client: &Client, pairs: &[(String, &'static str)], stats: &mut Stats) {
    for (kind, edit) in pairs {
        let key = (kind.clone(), *edit);
        let counted = |stats: &Stats| stats.tampers.get(&key).copied().unwrap_or(0);
        let before = counted(stats);
        if before > 0 {
            continue;
        }
        let deadline = Instant::now() + CONVERGE;
        while counted(stats) == before {
            assert!(
                Instant::now() < deadline,
                "{kind} {edit}: no tamper took in {CONVERGE:?}: {:?}",
                stats.tampers_not_counted
            );
            let candidates = generated_objects(client).await;
            if let Some((resource, namespaced, items)) =
                candidates.iter().find(|(r, ..)| &r.kind == kind)
            {
                tamper_with(client, resource, *namespaced, &items[0], edit, stats).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One churn step.
async fn churn(client: &Client, rng: &mut Rng, stats: &mut Stats) {
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match rng.below(100) {
        0..15 => {
            let name = *rng.pick(&INTENTS);
            upsert(
                &intents,
                name,
                &random_intent(rng, name),
                stats,
                "intent: upsert",
            )
            .await;
        }
        15..20 => {
            remove(
                &intents,
                rng.pick::<&str>(&INTENTS),
                stats,
                "intent: delete",
            )
            .await
        }
        20..50 => {
            let ns = *rng.pick(&NAMESPACES);
            let name = *rng.pick(&["b-0", "b-1", "b-2"]);
            let api: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns);
            upsert(
                &api,
                name,
                &random_binding(rng, name),
                stats,
                "binding: upsert",
            )
            .await;
        }
        50..57 => {
            let ns = *rng.pick(&NAMESPACES);
            let api: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns);
            remove(
                &api,
                rng.pick::<&str>(&["b-0", "b-1", "b-2"]),
                stats,
                "binding: delete",
            )
            .await;
        }
        57..70 => {
            let name = *rng.pick(&["c-0", "c-1"]);
            upsert(
                &csibs,
                name,
                &random_cluster_binding(rng, name),
                stats,
                "cluster binding: upsert",
            )
            .await;
        }
        70..74 => {
            remove(
                &csibs,
                rng.pick::<&str>(&["c-0", "c-1"]),
                stats,
                "cluster binding: delete",
            )
            .await
        }
        74..79 => {
            let ns = *rng.pick(&NAMESPACES);
            if rng.chance(50) {
                let obj =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                upsert(&namespaces, ns, &obj, stats, "namespace: upsert").await;
            } else {
                remove(&namespaces, ns, stats, "namespace: delete").await;
            }
        }
        _ => tamper(client, rng, stats).await,
    }
}

/// The manifests a user wrote, read back from the cluster, as `nimbus translate` input.
async fn manifests(client: &Client) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let strip = |mut v: Value| {
        let meta = v["metadata"].take();
        v["metadata"] = json!({"name": meta["name"], "namespace": meta["namespace"],
                               "labels": meta["labels"], "annotations": meta["annotations"]});
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        v
    };
    let mut docs = Vec::new();
    for si in Api::<SecurityIntent>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        docs.push(strip(serde_json::to_value(si)?));
    }
    for sib in Api::<SecurityIntentBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        docs.push(strip(serde_json::to_value(sib)?));
    }
    for csib in Api::<ClusterSecurityIntentBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        docs.push(strip(serde_json::to_value(csib)?));
    }
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| n.name_any())
        .collect();
    Ok((docs, namespaces))
}

fn translate(docs: &[Value], namespaces: &[String], dir: &Path) -> Vec<Value> {
    let file = dir.join("manifests.json");
    let text = docs
        .iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    std::fs::write(&file, text).expect("writing manifests");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args([
            "translate",
            "-o",
            "json",
            "--namespaces",
            &namespaces.join(","),
        ])
        .args([
            "--protected-namespaces",
            &format!("kube-system,nimbus-k8tls-env,{OPERATOR_NAMESPACE}"),
        ])
        .arg("-f")
        .arg(&file)
        .output()
        .expect("running nimbus translate");
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "nimbus translate output is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    parsed["items"].as_array().cloned().unwrap_or_default()
}

type Key = (String, String, String);

fn key(obj: &Value) -> Key {
    (
        obj["kind"].as_str().unwrap_or_default().to_owned(),
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// Paths of a `fieldsV1` tree outside `metadata` and `status`: what a manager owns of the body.
fn owns_body(fields: &Value) -> bool {
    fields.as_object().is_some_and(|f| {
        f.keys().any(|k| {
            !matches!(
                k.as_str(),
                "f:metadata" | "f:status" | "f:apiVersion" | "f:kind"
            )
        })
    })
}

#[derive(Debug, Default)]
struct Audit {
    expected: usize,
    in_deleted_namespaces: usize,
    missing: Vec<Key>,
    stale: Vec<(Key, String)>,
    orphaned: Vec<Key>,
    /// Unexpected objects whose owner no longer exists.
    awaiting_gc: Vec<Key>,
    untruthful: Vec<String>,
}

impl Audit {
    fn clean(&self) -> bool {
        self.missing.is_empty()
            && self.stale.is_empty()
            && self.orphaned.is_empty()
            && self.untruthful.is_empty()
    }
}

async fn audit(
    client: &Client,
    dir: &Path,
    server: &Server,
    forms: &mut ServerForms,
) -> anyhow::Result<Audit> {
    let (docs, namespaces) = manifests(client).await?;
    let mut expected: BTreeMap<Key, Value> = translate(&docs, &namespaces, dir)
        .into_iter()
        .map(|o| (key(&o), o))
        .collect();
    // A binding can outlive its namespace when kube-controller-manager's namespace controller
    // finalizes a namespace while the apiserver restarts (its discovery misses our CRDs):
    // nothing can be created there, by anyone. Counted, not expected.
    let live: std::collections::BTreeSet<&str> = namespaces.iter().map(String::as_str).collect();
    let before = expected.len();
    expected.retain(|(_, ns, _), _| ns.is_empty() || live.contains(ns.as_str()));
    let in_deleted_namespaces = before - expected.len();

    let mut observed: BTreeMap<Key, Value> = BTreeMap::new();
    let managed = ListParams::default().labels("app.kubernetes.io/managed-by");
    for kind in native_kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
        for o in api.list(&managed).await? {
            let mut v = serde_json::to_value(o)?;
            // List items carry no kind of their own.
            v["kind"] = json!(kind.kind);
            let manager = v["metadata"]["labels"]["app.kubernetes.io/managed-by"]
                .as_str()
                .unwrap_or_default();
            if manager.starts_with("nimbus-") && manager != "nimbus-testenv" {
                observed.insert(key(&v), v);
            }
        }
    }
    for np in Api::<NimbusPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        let v = serde_json::to_value(np)?;
        observed.insert(key(&v), v);
    }
    for cnp in Api::<ClusterNimbusPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        let v = serde_json::to_value(cnp)?;
        observed.insert(key(&v), v);
    }
    // Objects in the k8tls environment that are not generated (ConfigMaps of the chart).
    observed.retain(|k, v| {
        expected.contains_key(k)
            || v["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| !o.is_empty())
    });

    observed.retain(|(_, ns, _), _| ns.is_empty() || live.contains(ns.as_str()));
    let mut audit = Audit {
        expected: expected.len(),
        in_deleted_namespaces,
        ..Audit::default()
    };
    let mut live_uids: std::collections::BTreeSet<String> = observed
        .values()
        .filter_map(|v| v["metadata"]["uid"].as_str().map(str::to_owned))
        .collect();
    for sib in Api::<SecurityIntentBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        live_uids.extend(sib.uid());
    }
    for csib in Api::<ClusterSecurityIntentBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        live_uids.extend(csib.uid());
    }
    for (k, want) in &expected {
        let Some(have) = observed.get(k) else {
            audit.missing.push(k.clone());
            continue;
        };
        let form = match forms.get(server, want).await {
            Ok(form) => form,
            Err(e) => {
                audit.stale.push((
                    k.clone(),
                    format!("no server form of the expected object: {e}"),
                ));
                continue;
            }
        };
        let differences = differences(have, form, want);
        if !differences.is_empty() {
            let writers: Vec<String> = have["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| format!("{} {} {}", e["manager"], e["operation"], e["time"]))
                .collect();
            audit.stale.push((
                k.clone(),
                format!(
                    "{differences:?} (generation {}, written by {writers:?})",
                    have["metadata"]["generation"]
                ),
            ));
        }
        let dead_owners: Vec<&Value> = have["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| !o["uid"].as_str().is_some_and(|u| live_uids.contains(u)))
            .collect();
        if !dead_owners.is_empty() {
            audit.stale.push((
                k.clone(),
                format!("owned by no live object: {dead_owners:?}"),
            ));
        }
        let intruders: Vec<&str> = have["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["subresource"].as_str().is_none_or(str::is_empty))
            .filter(|e| {
                !e["manager"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("nimbus-")
            })
            .filter(|e| owns_body(&e["fieldsV1"]))
            .filter_map(|e| e["manager"].as_str())
            .collect();
        if !intruders.is_empty() {
            audit
                .stale
                .push((k.clone(), format!("fields owned by {intruders:?}")));
        }
    }
    // An unexpected object whose controlling owner still exists is the operator's to remove;
    // one whose owner is gone is the garbage collector's (kube-controller-manager retries what
    // failed during the restarts with a per-item backoff of up to ~17 min): counted apart.
    // One with our label and no controlling owner at all is nobody's to remove: orphaned too.
    for (k, v) in observed.iter().filter(|(k, _)| !expected.contains_key(*k)) {
        let controller = v["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["controller"] == true);
        let owner_gone = controller
            .and_then(|o| o["uid"].as_str())
            .is_some_and(|u| !live_uids.contains(u));
        if owner_gone {
            audit.awaiting_gc.push(k.clone());
        } else {
            audit.orphaned.push(k.clone());
        }
    }

    // Every binding's status speaks of its current generation and is decided; one left in a
    // namespace that no longer exists (see above) can have no status written, by anyone.
    let sibs: Vec<SecurityIntentBinding> = Api::<SecurityIntentBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|b| b.namespace().is_some_and(|ns| live.contains(ns.as_str())))
        .collect();
    let csibs = Api::<ClusterSecurityIntentBinding>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let statuses = sibs
        .iter()
        .map(|b| {
            let s = b.status.as_ref();
            (
                format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any()),
                b.metadata.generation,
                s.and_then(|s| s.observed_generation),
                s.and_then(|s| s.conditions.first().cloned()),
            )
        })
        .chain(csibs.iter().map(|b| {
            let s = b.status.as_ref();
            (
                b.name_any(),
                b.metadata.generation,
                s.and_then(|s| s.observed_generation),
                s.and_then(|s| s.conditions.first().cloned()),
            )
        }));
    for (name, generation, observed_generation, ready) in statuses {
        match ready {
            _ if observed_generation != generation => audit.untruthful.push(format!(
                "{name}: observedGeneration {observed_generation:?}, generation {generation:?}"
            )),
            Some(c) if c.status != "Unknown" && c.observed_generation == generation => {}
            other => audit.untruthful.push(format!("{name}: Ready {other:?}")),
        }
    }
    // A binding that says Ready=True has its policy Ready=True too.
    for b in &sibs {
        let says_ready = b
            .status
            .as_ref()
            .and_then(|s| s.conditions.first())
            .is_some_and(|c| c.status == "True");
        if !says_ready {
            continue;
        }
        let nps: Api<NimbusPolicy> =
            Api::namespaced(client.clone(), &b.namespace().unwrap_or_default());
        let np_ready = get(&nps, &b.name_any())
            .await
            .and_then(|p| p.status)
            .and_then(|s| s.conditions.first().cloned())
            .is_some_and(|c| c.status == "True");
        if !np_ready {
            audit.untruthful.push(format!(
                "{}/{} Ready=True but its NimbusPolicy is not",
                b.namespace().unwrap_or_default(),
                b.name_any()
            ));
        }
    }
    Ok(audit)
}

#[tokio::test]
async fn chaos_then_audit_finds_the_cluster_exactly_as_translated() {
    let seconds: u64 = env_or("NIMBUS_CHAOS_SECONDS", 40);
    let seed: u64 = env_or("NIMBUS_CHAOS_SEED", 1);
    let cp = common::cluster_with_engines();
    let client = cp.client().expect("client");
    let server = Server::discover(client.clone()).await;
    let mut forms = ServerForms::default();
    let dir = tempfile::tempdir().expect("dir");
    let mut rng = Rng::new(seed);
    let mut stats = Stats::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in NAMESPACES
        .iter()
        .chain(["chaos-probe", OPERATOR_NAMESPACE].iter())
    {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        upsert(&namespaces, ns, &obj, &mut stats, "namespace: upsert").await;
    }
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    let probe_intent = json!({"apiVersion": GROUP, "kind": "SecurityIntent", "metadata": {"name": "probe"},
                              "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}});
    upsert(
        &intents,
        "probe",
        &probe_intent,
        &mut stats,
        "intent: upsert",
    )
    .await;

    // Anchors the churn never touches, so that every generated kind exists all along and is
    // tampered with: the sensitive intents (allowed) and escapeToHost through a cluster
    // binding, escapeToHost and dnsManipulation through a binding, all in chaos-probe.
    let anchors = [
        (
            "anchor-escape",
            json!({"id": "escapeToHost", "action": "Block"}),
        ),
        (
            "anchor-dns",
            json!({"id": "dnsManipulation", "action": "Block"}),
        ),
        (
            "anchor-tls",
            json!({"id": "assessTLS", "action": "Block",
                              "params": {"external_addresses": ["127.0.0.1:443"]}}),
        ),
        (
            "anchor-sandbox",
            json!({"id": "namespaceSandbox", "action": "Block",
                                  "params": {"group": ["chaos-anchor"], "clusterRole": ["view"]}}),
        ),
    ];
    for (name, intent) in anchors {
        let obj = json!({"apiVersion": GROUP, "kind": "SecurityIntent", "metadata": {"name": name},
                         "spec": {"intent": intent}});
        upsert(&intents, name, &obj, &mut stats, "anchor").await;
    }
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let anchor = json!({"apiVersion": GROUP, "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": "anchor", "annotations":
            {nimbus_api::ALLOW_SENSITIVE_ANNOTATION: "namespaceSandbox,assessTLS"}},
        "spec": {"intents": [{"name": "anchor-escape"}, {"name": "anchor-tls"}, {"name": "anchor-sandbox"}],
                 "selector": {"nsSelector": {"matchNames": ["chaos-probe"]}}}});
    upsert(&csibs, "anchor", &anchor, &mut stats, "anchor").await;
    let sibs: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), "chaos-probe");
    let anchor = json!({"apiVersion": GROUP, "kind": "SecurityIntentBinding", "metadata": {"name": "anchor"},
        "spec": {"intents": [{"name": "anchor-escape"}, {"name": "anchor-dns"}], "selector": {}}});
    upsert(&sibs, "anchor", &anchor, &mut stats, "anchor").await;

    let names = ["replica-0", "replica-1"];
    let mut replicas: Vec<Replica> = names
        .iter()
        .map(|n| start_replica(n, cp, dir.path()))
        .collect();
    for r in &replicas {
        eventually(&format!("{} ready", r.name), CONVERGE, async |_| {
            r.ready().await.ok()
        })
        .await;
    }

    let total = Duration::from_secs(seconds);
    let started = Instant::now();
    let mut kills = 0u32;
    let mut recoveries = Vec::new();
    let mut restarts: Vec<(f64, &str)> = vec![
        (0.3, "kube-apiserver"),
        (0.5, "etcd"),
        (0.7, "kube-apiserver"),
    ];
    // Kills at 10%, 30%, ..., 90% of the churn; one that finds no leader is tried again.
    let kill_every = total / LEADER_KILLS;
    let mut next_kill = kill_every / 2;
    // Every kill happens, by construction: on a busy machine the recoveries take longer, and
    // the churn goes on past its time until the last kill is done.
    while started.elapsed() < total || kills < LEADER_KILLS {
        assert!(
            started.elapsed() < total * 4,
            "only {kills} of {LEADER_KILLS} leader kills in {:?}: no leader to kill",
            started.elapsed()
        );
        churn(&client, &mut rng, &mut stats).await;
        let elapsed = started.elapsed();
        if let Some(&(at, component)) = restarts.first()
            && elapsed.as_secs_f64() >= at * total.as_secs_f64()
        {
            restarts.remove(0);
            cp.restart(component)
                .await
                .unwrap_or_else(|e| panic!("restarting {component}: {e}"));
            eprintln!("chaos: restarted {component} at {elapsed:?}");
        }
        if elapsed >= next_kill
            && let Some(holder) = leader(&client).await
            && let Some(r) = replicas.iter_mut().find(|r| r.name == holder)
        {
            next_kill += kill_every;
            r.process.kill();
            kills += 1;
            let killed = Instant::now();
            // Recovery: a change made right after the kill is enforced.
            let probe = format!("probe-{kills}");
            let sibs: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), "chaos-probe");
            let obj = json!({"apiVersion": GROUP, "kind": "SecurityIntentBinding", "metadata": {"name": probe},
                             "spec": {"intents": [{"name": "probe"}], "selector": {}}});
            upsert(&sibs, &probe, &obj, &mut stats, "probe binding").await;
            let name = names
                .into_iter()
                .find(|n| *n == holder)
                .expect("a replica's name");
            *r = start_replica(name, cp, dir.path());
            let nps: Api<NimbusPolicy> = Api::namespaced(client.clone(), "chaos-probe");
            eventually(
                &format!("{probe} enforced after killing {holder}"),
                CONVERGE,
                async |_| {
                    let s = get(&nps, &probe).await?.status?;
                    (s.number_of_adapter_policies > 0).then_some(())
                },
            )
            .await;
            recoveries.push(killed.elapsed());
            remove(&sibs, &probe, &mut stats, "probe binding").await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(60) as u64)).await;
    }
    for (_, component) in restarts {
        cp.restart(component)
            .await
            .unwrap_or_else(|e| panic!("restarting {component}: {e}"));
    }

    // The engines that stand by here, under the default preference with every engine installed
    // (admission for Kyverno, clusternetworkpolicy for netpol), write nothing: there is nothing
    // of their kinds to tamper with.
    let engines = nimbus_core::engines::EngineSet::all();
    let standing_by: Vec<&str> = (nimbus_core::catalog::Engine::ALL.into_iter())
        .filter(|e| {
            let mut origins = e.spec().enforces.iter().flat_map(|x| x.origins);
            origins.all(|o| engines.preference.stands_by(*e, *o, &engines))
        })
        .flat_map(|e| e.spec().kinds.iter().map(|k| k.kind))
        .collect();
    // PolicyExceptions are written only for SecurityIntentExceptions, which the churn makes
    // none of (they expire: the audit would have to translate at the operator's instant).
    let exceptions = nimbus_core::engines::KyvernoApi::Legacy.exceptions();
    let every_pair: Vec<(String, &str)> = generated_kinds()
        .into_iter()
        .filter(|(kind, _)| !standing_by.contains(&kind.kind.as_str()))
        .filter(|(kind, _)| *kind != exceptions.api_resource())
        .flat_map(|(kind, _)| EDITS.map(|edit| (kind.kind.clone(), edit)))
        .collect();
    tamper_every_pair(&client, &every_pair, &mut stats).await;

    // The churn is over: the cluster must converge to exactly the translation.
    let settle = Instant::now();
    let mut last = Audit::default();
    let converged = loop {
        match audit(&client, dir.path(), &server, &mut forms).await {
            Ok(a) if a.clean() => break Some(a),
            Ok(a) => last = a,
            Err(e) => eprintln!("audit failed, retrying: {e}"),
        }
        if settle.elapsed() > Duration::from_secs(90) {
            break None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };

    eprintln!("chaos: seed {seed}, {seconds} s of churn");
    for (what, (ok, failed)) in &stats.actions {
        eprintln!("  {what:<28} {ok:>5} ok {failed:>4} failed");
    }
    for ((kind, what), n) in &stats.tampers {
        eprintln!("  tamper: {kind:<20} {what:<14} {n:>5}");
    }
    for (what, n) in &stats.tampers_not_counted {
        eprintln!("  tamper not counted: {what}: {n}");
    }
    eprintln!("  leader kills: {kills}; recovery (change after kill enforced): {recoveries:?}");
    match &converged {
        Some(a) => eprintln!(
            "  audit: {} expected objects, 0 missing, 0 stale, 0 orphaned, 0 untruthful ({} more expected in namespaces that no longer exist; {} whose owner is gone awaiting the garbage collector); converged {:?} after the churn",
            a.expected,
            a.in_deleted_namespaces,
            a.awaiting_gc.len(),
            settle.elapsed()
        ),
        None => panic!(
            "replica logs kept in {}; not converged {:?} after the churn: {} expected, missing {:?}, stale {:?}, orphaned {:?}, untruthful {:?}\nleader log:\n{}",
            dir.keep().display(),
            settle.elapsed(),
            last.expected,
            last.missing,
            last.stale,
            last.orphaned,
            last.untruthful,
            replicas
                .iter()
                .map(|r| r.process.output())
                .collect::<Vec<_>>()
                .join("\n-----\n")
        ),
    }
    assert_eq!(kills, LEADER_KILLS, "leader kills during the churn");
    let untampered: Vec<&(String, &str)> = every_pair
        .iter()
        .filter(|k| !stats.tampers.contains_key(*k))
        .collect();
    assert!(
        untampered.is_empty(),
        "generated kinds never tampered with so: {untampered:?}"
    );
    assert!(converged.is_some_and(|a| a.expected > 0));

    // At rest, nothing is to change: whatever happens to the replicas or the control plane, no
    // generated object may be deleted and re-created, even for a moment. The churn's last
    // reconciles and the Events they queued are done first, and the namespaces it deleted are
    // gone: a Warning or a deletion the churn caused is not the disruptions' doing.
    eventually(
        "the namespaces the churn deleted to be gone",
        CONVERGE,
        async |seen| {
            let terminating: Vec<String> = namespaces
                .list(&ListParams::default())
                .await
                .ok()?
                .into_iter()
                .filter(|n| n.metadata.deletion_timestamp.is_some())
                .map(|n| n.name_any())
                .collect();
            *seen = format!("terminating: {terminating:?}");
            terminating.is_empty().then_some(())
        },
    )
    .await;
    settled(&client, &replicas).await;
    let monitor = Monitor::start(
        &client,
        Watched {
            objects: generated_kinds()
                .into_iter()
                .map(|(kind, _)| kind)
                .collect(),
            statuses: vec![
                kube::api::ApiResource::erase::<SecurityIntentBinding>(&()),
                kube::api::ApiResource::erase::<ClusterSecurityIntentBinding>(&()),
                kube::api::ApiResource::erase::<NimbusPolicy>(&()),
                kube::api::ApiResource::erase::<ClusterNimbusPolicy>(&()),
            ],
        },
    )
    .await;
    let at_rest = monitor.present().len();
    for disruption in Disruption::ALL {
        let started = Instant::now();
        disruption
            .run(cp, &client, &mut replicas, &names, dir.path())
            .await;
        settled(&client, &replicas).await;
        eprintln!(
            "  at rest: {disruption:?}, settled after {:?}",
            started.elapsed()
        );
    }
    // An object still awaiting the garbage collector after the churn may go meanwhile;
    // anything that comes back was deleted while wanted.
    let mut findings = monitor.findings();
    findings.gaps.retain(|g| g.absent.is_some());
    assert!(
        findings.is_clean(),
        "disruptions at rest lowered protection or misreported it: {findings}"
    );
    let audit = audit(&client, dir.path(), &server, &mut forms)
        .await
        .expect("the audit at rest");
    assert!(
        audit.clean(),
        "after the disruptions at rest: missing {:?}, stale {:?}, orphaned {:?}, untruthful {:?}",
        audit.missing,
        audit.stale,
        audit.orphaned,
        audit.untruthful
    );
    eprintln!(
        "  at rest: {} objects watched through {} disruptions: 0 deleted and re-created, 0 uid changes, 0 Warning Events, 0 Ready=False",
        at_rest,
        Disruption::ALL.len()
    );
}

/// Leader kills during the churn.
const LEADER_KILLS: u32 = 5;

/// What happens to the replicas or the control plane while the cluster is at rest.
#[derive(Debug, Clone, Copy)]
enum Disruption {
    LeaderKilled,
    LeaderRestartedAsItself,
    RollingRestart,
    ApiServerRestarted,
    EtcdRestarted,
}

impl Disruption {
    const ALL: [Self; 5] = [
        Self::LeaderKilled,
        Self::LeaderRestartedAsItself,
        Self::RollingRestart,
        Self::ApiServerRestarted,
        Self::EtcdRestarted,
    ];

    async fn run(
        self,
        cp: &ControlPlane,
        client: &Client,
        replicas: &mut [Replica],
        names: &[&'static str],
        dir: &Path,
    ) {
        match self {
            Self::LeaderKilled | Self::LeaderRestartedAsItself => {
                let holder = eventually("a leader", CONVERGE, async |_| leader(client).await).await;
                let i = names
                    .iter()
                    .position(|n| *n == holder)
                    .expect("the leader is a replica");
                let killed = matches!(self, Self::LeaderKilled);
                if killed {
                    replicas[i].process.kill();
                } else {
                    replicas[i].process.terminate();
                }
                wait_exited(&mut replicas[i]).await;
                if killed {
                    // The standby takes over once the dead leader's lease expires.
                    eventually("the standby to take over", CONVERGE, async |_| {
                        leader(client).await.filter(|h| *h != holder)
                    })
                    .await;
                }
                replicas[i] = start_replica(names[i], cp, dir);
            }
            Self::RollingRestart => {
                for i in 0..replicas.len() {
                    replicas[i].process.terminate();
                    wait_exited(&mut replicas[i]).await;
                    replicas[i] = start_replica(names[i], cp, dir);
                    let replica = &replicas[i];
                    eventually(&format!("{} ready", replica.name), CONVERGE, async |_| {
                        replica.ready().await.ok()
                    })
                    .await;
                }
            }
            Self::ApiServerRestarted => cp
                .restart("kube-apiserver")
                .await
                .expect("restarting kube-apiserver"),
            Self::EtcdRestarted => cp.restart("etcd").await.expect("restarting etcd"),
        }
    }
}

async fn wait_exited(replica: &mut Replica) {
    eventually(&format!("{} to exit", replica.name), CONVERGE, async |_| {
        replica.process.has_exited().then_some(())
    })
    .await;
}

/// Waits until a replica leads, every replica is ready, and the leader has nothing in flight.
async fn settled(client: &Client, replicas: &[Replica]) {
    eventually("the replicas to settle", CONVERGE, async |seen| {
        let holder = leader(client).await?;
        let leader = replicas.iter().find(|r| r.name == holder)?;
        for r in replicas {
            if let Err(e) = r.ready().await {
                *seen = format!("{}: {e}", r.name);
                return None;
            }
        }
        let in_flight = leader.metric("nimbus_reconciles_in_flight", "").await;
        let pending = leader.metric("nimbus_watch_events_pending", "").await;
        let queued = leader.metric("nimbus_events_queued", "").await;
        let leading = leader.metric("nimbus_leader", "").await;
        *seen = format!(
            "{holder}: leading {leading}, {in_flight} in flight, {pending} pending, \
             {queued} Events queued"
        );
        (leading == 1.0 && in_flight == 0.0 && pending == 0.0 && queued == 0.0).then_some(())
    })
    .await;
}
#[cfg(test)]
mod exact_comparison {
    use super::*;

    fn object(spec: Value) -> Value {
        json!({"kind": "X", "metadata": {"name": "a", "labels": {"l": "1"},
               "ownerReferences": [{"name": "o", "uid": "u1"}]}, "spec": spec})
    }

    #[test]
    fn a_missing_key_an_extra_key_and_a_changed_value_all_differ() {
        let want = object(json!({"a": 1, "b": [1, 2]}));
        let printed = json!({"metadata": {"ownerReferences": [{"name": "o", "uid": ""}]}});
        assert!(differences(&want, &want, &printed).is_empty());
        for have in [
            object(json!({"a": 1})),
            object(json!({"a": 1, "b": [1, 2], "c": 3})),
            object(json!({"a": 2, "b": [1, 2]})),
            object(json!({"a": 1, "b": [1]})),
        ] {
            assert_eq!(differences(&have, &want, &printed).len(), 1, "{have}");
        }
        let mut relabelled = want.clone();
        relabelled["metadata"]["labels"]["extra"] = json!("x");
        assert_eq!(differences(&relabelled, &want, &printed).len(), 1);
        let other_owner = json!({"metadata": {"ownerReferences": [{"name": "p", "uid": ""}]}});
        assert_eq!(differences(&want, &want, &other_owner).len(), 1);
        // What the server dropped of the printed object was never in force.
        let mut pruned = printed.clone();
        pruned["spec"] = json!({"a": 1, "b": [1, 2], "unknown": true, "empty": []});
        assert_eq!(differences(&want, &want, &pruned).len(), 1);
    }
}
