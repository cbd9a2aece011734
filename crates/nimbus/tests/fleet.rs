//! Open Cluster Management (OCM) rolls intents and a binding out to two managed clusters, a
//! canary in shadow mode and one enforcing, and the hub sees each cluster's compliance as the
//! operator there judges it. The real OCM controllers (v0.19.0, built from the modules pinned
//! in tools/ocm by hack/build-ocm.sh) run as processes: the policy propagator on a hub control
//! plane, a policy framework addon per managed one, with our operator in-process on each,
//! installed from the chart and calling with nothing but its ServiceAccount's token. No
//! registration agent or placement controller: nimbus_testenv::ocm writes the ManagedClusters,
//! their namespaces and the PlacementDecision itself (`nimbus dev --fleet` starts the same).
//!
//! The story, with the example manifests of examples/fleet/: the Policy carries two
//! SecurityIntents and a ClusterSecurityIntentBinding whose mode is each cluster's rollout label
//! (an OCM hub template). They reach both clusters; the canary audits and previews what
//! enforcing would block, the other enforces; the hub shows both Compliant, the canary's
//! message with the preview. KubeArmor's CRD is deleted on the enforcing cluster: NonCompliant
//! there on the hub within a bound measured and printed, the canary untouched; installed again:
//! Compliant. The canary is promoted by relabelling its ManagedCluster: it enforces, the hub
//! says so, and nothing of the enforcing cluster's binding or natives changes on the way. An
//! error of OCM's addon about a template is followed on the hub by the operator's verdict
//! again. Each operator's Events hold exactly the transitions, and each template's newest
//! entry on the hub is the operator's; promtool fires the hub alert
//! of examples/fleet/ on the propagator's own metric for the NonCompliant cluster alone, the
//! example PolicySet rolls the Policy up, and `nimbus fleet report`, rendered by headless
//! Chromium, shows each cluster what `nimbus fleet status` says; the enforcing cluster's API
//! server restarting mid-break, and the hub's mid-repair, lose no transition; at steady state
//! neither operator writes; `nimbus fleet status` reads the roll-up back.

mod common;
#[path = "fleet/ocm.rs"]
mod ocm;
#[path = "fleet/policyset.rs"]
mod policyset;
#[path = "fleet/report.rs"]
mod report;

use common::counted::writes;
use common::{apply, install_engine_crd};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use nimbus_api::ClusterSecurityIntentBinding;
use nimbus_core::engines::KUBEARMOR_POLICY;
use nimbus_core::fleet::{CLUSTER_NAMESPACE_LABEL, PARENT_POLICY_LABEL};
use nimbus_testenv::upstream::KUBEARMOR_POLICY as KUBEARMOR_CRD;
use nimbus_testenv::{apply_yaml, eventually, http_get};
use ocm::{CLUSTERS, Fleet, Managed, POLICY_YAML, REPLICATED, ROLLOUT_LABEL, ROOT_NAMESPACE};
use ocm::{HUB_ALERTS_YAML, RESYNC, ROOT_POLICY, root_policy};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The binding the Policy delivers, and the namespace of the workloads it selects.
const BINDING: &str = "shop-hardening";
const SHOP: &str = "shop";

/// From a change on a managed cluster to the hub's Policy status: the operator's verdict
/// settles for 2 s (nimbus_core::fleet::SETTLE), then the framework addon's status sync copies
/// it to the hub and the propagator rolls it up. Measured on 2 shared cores: see
/// docs/src/fleet.md; the bound leaves room for a loaded machine.
const HUB_LAG: Duration = Duration::from_secs(60);
/// From the Policy on the hub to what it delivers enforced on the managed clusters (the
/// controllers starting, their caches listing, one resync of each).
const DELIVERY: Duration = Duration::from_secs(120);

/// The SecurityIntents the example Policy delivers beside the binding.
fn intents() -> Vec<String> {
    let policy = root_policy();
    let templates = policy["spec"]["policy-templates"].as_array().cloned();
    (templates.unwrap_or_default().iter())
        .filter(|t| t["objectDefinition"]["kind"] == "SecurityIntent")
        .filter_map(|t| {
            t["objectDefinition"]["metadata"]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// The compliance the hub's replicated Policy holds for each template, newest first:
/// `template -> ["Compliant; …", …]`.
fn histories(policy: &DynamicObject) -> BTreeMap<String, Vec<String>> {
    let details = policy.data["status"]["details"].as_array().cloned();
    (details.unwrap_or_default().iter())
        .map(|d| {
            let name = d["templateMeta"]["name"].as_str().unwrap_or_default();
            let history = d["history"].as_array().cloned().unwrap_or_default();
            let messages = history
                .iter()
                .map(|h| h["message"].as_str().unwrap_or_default().to_owned())
                .collect();
            (name.to_owned(), messages)
        })
        .collect()
}

/// What OCM's framework addon says in a template's history when it could not sync it.
const OCM_ERROR: &str = "template-error;";

fn state(message: &str) -> &str {
    message.split(';').next().unwrap_or_default()
}

/// Waits until the hub shows `cluster` `compliance` for the binding with a message containing
/// `saying`: the latest entry of its history in the replicated Policy, and the root Policy's
/// roll-up for the cluster (what `kubectl get policy -A` lists); returns that message and how
/// long it took from `since`.
async fn hub_shows(
    fleet: &Fleet,
    cluster: &str,
    compliance: &str,
    saying: &str,
    since: Instant,
) -> (String, Duration) {
    let (replicated, roots) = (
        ocm::hub_policies(fleet, cluster),
        ocm::hub_policies(fleet, ROOT_NAMESPACE),
    );
    let message = eventually(
        &format!("the hub to show {BINDING} {compliance} on {cluster}, saying {saying:?}"),
        HUB_LAG,
        async |seen| {
            let policy = replicated.get_opt(REPLICATED).await.ok()??;
            let root = roots.get_opt(ROOT_POLICY).await.ok()??;
            let rolled_up = root.data["status"]["status"].as_array().cloned();
            let histories = histories(&policy);
            *seen = format!("{histories:#?}; root: {rolled_up:?}");
            let latest = histories.get(BINDING)?.first()?;
            let rolled_up = rolled_up?
                .into_iter()
                .find(|c| c["clustername"] == cluster)?;
            (state(latest) == compliance
                && latest.contains(saying)
                && rolled_up["compliant"] == compliance)
                .then(|| latest.clone())
        },
    )
    .await;
    (message, since.elapsed())
}

/// Waits until `cluster` enforces (`Block`) or audits (`Audit`) the binding: its label, the
/// actions of its KubeArmorPolicies, and its NetworkPolicy written or not (a NetworkPolicy
/// has no audit form).
async fn natives(cluster: &Managed, action: &str) {
    let client = ocm::client(cluster);
    let binding = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    let kubearmor: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), SHOP, &KUBEARMOR_POLICY.api_resource());
    let netpols: Api<NetworkPolicy> = Api::namespaced(client, SHOP);
    let mode = if action == "Block" {
        "enforce"
    } else {
        "shadow"
    };
    let count = intents().len();
    eventually(
        &format!("{} to {action} what the binding asks", cluster.name),
        DELIVERY,
        async |seen| {
            let labels = binding.get_opt(BINDING).await.ok()??.labels().clone();
            let actions: Vec<String> = (kubearmor.list(&ListParams::default()).await.ok()?)
                .items
                .iter()
                .map(|p| {
                    p.data["spec"]["action"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            let written = netpols.list(&ListParams::default()).await.ok()?.items.len();
            *seen = format!(
                "labels {labels:?}, KubeArmor actions {actions:?}, {written} NetworkPolicies"
            );
            (labels.get(ROLLOUT_LABEL).map(String::as_str) == Some(mode)
                && labels.get(PARENT_POLICY_LABEL).map(String::as_str) == Some(REPLICATED)
                && labels.get(CLUSTER_NAMESPACE_LABEL).map(String::as_str)
                    == Some(cluster.name.as_str())
                && actions.len() == count
                && actions.iter().all(|a| a == action)
                && (written > 0) == (action == "Block"))
                .then_some(())
        },
    )
    .await;
}

/// The resourceVersions of the binding and every native object of `cluster`'s `shop`: equal
/// before and after a change elsewhere, nothing of them was deleted, re-created or rewritten.
async fn versions(cluster: &Managed) -> BTreeMap<String, String> {
    let client = ocm::client(cluster);
    let mut seen = BTreeMap::new();
    let binding = Api::<ClusterSecurityIntentBinding>::all(client.clone())
        .get(BINDING)
        .await
        .expect("the binding");
    seen.insert(
        format!("binding {BINDING}"),
        binding.resource_version().unwrap_or_default(),
    );
    let kinds = [
        KUBEARMOR_POLICY.api_resource(),
        ApiResource::erase::<NetworkPolicy>(&()),
    ];
    for kind in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), SHOP, &kind);
        for object in api
            .list(&ListParams::default())
            .await
            .expect("natives")
            .items
        {
            let name = format!("{} {}", kind.kind, object.name_any());
            seen.insert(name, object.resource_version().unwrap_or_default());
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_rollout_shows_on_the_hub_and_each_clusters_compliance_changes_once() {
    let fleet = ocm::start().await;
    let hub = fleet.hub.client().expect("hub client");
    let [canary, enforcing] = &fleet.managed[..] else {
        panic!("two managed clusters");
    };
    for cluster in &fleet.managed {
        workloads(&ocm::client(cluster)).await;
    }

    // Delivered: the templates reach both clusters, labelled by the framework addon, the
    // binding in the mode of the cluster's rollout label; the canary audits, the other
    // enforces.
    // The example's binding takes its mode as `nimbus bundle --ocm --canary` writes it.
    let policy = root_policy();
    let templates = policy["spec"]["policy-templates"].as_array().cloned();
    let binding = (templates.unwrap_or_default().into_iter())
        .find(|t| t["objectDefinition"]["kind"] == "ClusterSecurityIntentBinding")
        .expect("the example's binding");
    let mode = &binding["objectDefinition"]["metadata"]["labels"][ROLLOUT_LABEL];
    assert_eq!(mode, nimbus_core::fleet::MODE_FROM_CLUSTER);

    let started = Instant::now();
    apply_yaml(&hub, POLICY_YAML)
        .await
        .expect("the root Policy");
    policyset::apply(&hub).await;
    natives(canary, "Audit").await;
    natives(enforcing, "Block").await;
    println!("delivered to both clusters after {:?}", started.elapsed());

    // Both Compliant on the hub; the canary's message previews what enforcing would block.
    let (message, took) =
        hub_shows(&fleet, &canary.name, "Compliant", "(shadow mode)", started).await;
    println!(
        "{}: Compliant on the hub after {took:?}: {message}",
        canary.name
    );
    for expected in [
        "every workload it selects is audited",
        "preview: enforcing would deny 1 connection of 1 workload (Pod shop/web: Egress to Service shop/db 5432/TCP)",
        "not previewed: DecidedAtRunTime",
    ] {
        assert!(message.contains(expected), "{expected:?} in {message}");
    }
    let protected = "every workload it selects is protected";
    let (message, took) = hub_shows(&fleet, &enforcing.name, "Compliant", protected, started).await;
    println!(
        "{}: Compliant on the hub after {took:?}: {message}",
        enforcing.name
    );
    assert!(!message.contains("preview"), "{message}");

    // An engine missing on the enforcing cluster: NonCompliant there, saying why.
    let crds: Api<CustomResourceDefinition> = Api::all(ocm::client(enforcing));
    let broken = Instant::now();
    crds.delete(&KUBEARMOR_CRD.name(), &DeleteParams::default())
        .await
        .expect("deleting KubeArmor's CRD");
    // Its API server restarts before the new verdict is reported (it settles for 2 s): the
    // operator reports the truth once the server is back.
    (enforcing.control_plane.restart("kube-apiserver").await)
        .expect("restarting the enforcing cluster's API server");
    let (message, lag) = hub_shows(
        &fleet,
        &enforcing.name,
        "NonCompliant",
        "EngineNotInstalled",
        broken,
    )
    .await;
    println!("KubeArmor's CRD deleted: NonCompliant on the hub after {lag:?}: {message}");
    assert!(message.contains("Pod shop/web"), "{message}");
    hub_alert_fires_for(&fleet, &enforcing.name).await;
    policyset::shows(&hub, "NonCompliant", HUB_LAG).await;
    // The HTML report, one cluster NonCompliant and the other not, against `fleet status`.
    let rows = report::shows_what_fleet_status_says(&fleet, HUB_LAG).await;
    let compliance = |cluster: &str| -> Vec<(&str, &str)> {
        (rows.iter().filter(|r| r["cluster"] == cluster))
            .filter_map(|r| Some((r["name"].as_str()?, r["compliance"].as_str()?)))
            .collect()
    };
    assert!(
        compliance(&canary.name)
            .iter()
            .all(|(_, c)| *c == "Compliant"),
        "{rows:#?}"
    );
    assert!(
        compliance(&enforcing.name).contains(&(BINDING, "NonCompliant")),
        "{rows:#?}"
    );
    // Each cluster's workloads and engines in force, as its operator counted them: the
    // canary audits web, the enforcing cluster cannot protect it without KubeArmor.
    let (audited, unprotected) = (
        json!({"protected": 0, "audited": 1, "excepted": 0, "unprotected": 0}),
        json!({"protected": 0, "audited": 0, "excepted": 0, "unprotected": 1}),
    );
    let canary_row = binding_row(&rows, &canary.name);
    assert_eq!(canary_row["workloads"], audited, "{canary_row:#}");
    assert!(
        engines(canary_row).contains(&"kubearmor (auditing)"),
        "{canary_row:#}"
    );
    let enforcing_row = binding_row(&rows, &enforcing.name);
    assert_eq!(enforcing_row["workloads"], unprotected, "{enforcing_row:#}");
    assert!(
        engines(enforcing_row)
            .iter()
            .all(|e| !e.starts_with("kubearmor")),
        "{enforcing_row:#}"
    );

    // Repaired: Compliant again (once the deleted CRD is gone: until then it is terminating,
    // and nothing of its kind can be created).
    common::gone(&crds, &KUBEARMOR_CRD.name()).await;
    let repaired = Instant::now();
    install_engine_crd(&ocm::client(enforcing), KUBEARMOR_CRD).await;
    // The hub's API server restarts on the way: the transition reaches it all the same, and
    // the histories below hold it once.
    (fleet.hub.restart("kube-apiserver").await).expect("restarting the hub's API server");
    let (message, lag) = hub_shows(&fleet, &enforcing.name, "Compliant", protected, repaired).await;
    println!("KubeArmor's CRD back: Compliant on the hub after {lag:?}: {message}");
    natives(enforcing, "Block").await;

    // Promotion: the canary's ManagedCluster relabelled on the hub. The propagator re-renders
    // its copy of the Policy only; the canary enforces, and nothing of the other cluster's
    // binding or natives is touched on the way.
    let before = versions(enforcing).await;
    let promoted = Instant::now();
    let clusters: Api<DynamicObject> = Api::all_with(
        hub.clone(),
        &ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "cluster.open-cluster-management.io",
            "v1",
            "ManagedCluster",
        )),
    );
    clusters
        .patch(
            &canary.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {ROLLOUT_LABEL: "enforce"}}})),
        )
        .await
        .expect("promoting the canary");
    natives(canary, "Block").await;
    println!(
        "promoted: the canary enforces {:?} after its relabelling",
        promoted.elapsed()
    );
    let (message, lag) = hub_shows(&fleet, &canary.name, "Compliant", protected, promoted).await;
    println!("promoted: Compliant on the hub after {lag:?}: {message}");
    assert!(!message.contains("not enforced"), "{message}");
    assert!(message.contains("1 protected, 0 audited"), "{message}");
    assert_eq!(
        versions(enforcing).await,
        before,
        "the enforcing cluster was touched"
    );

    // OCM's framework addon writes its own error about a template into the same history and,
    // for kinds other than its own, never asks for a new report once it is gone: the operator
    // says its verdict again, and the hub shows the truth.
    let intent = &intents()[0];
    let overwritten = Instant::now();
    let error = ocm::addon_cannot_sync(enforcing, intent).await;
    eventually(
        &format!("{intent} on {} Compliant again on the hub", enforcing.name),
        HUB_LAG,
        async |seen| {
            let replicated = ocm::hub_policies(&fleet, &enforcing.name);
            let histories = histories(&replicated.get_opt(REPLICATED).await.ok()??);
            let history = histories.get(intent)?;
            *seen = format!("{history:#?}");
            let shown = history.iter().position(|m| *m == error)?;
            (shown > 0 && state(&history[0]) == "Compliant").then_some(())
        },
    )
    .await;
    println!(
        "the addon's template-error: {intent} Compliant again on the hub after {:?}",
        overwritten.elapsed()
    );

    // Exactly the transitions: one Event of ours per change of verdict on each managed
    // cluster, and the hub's newest word for each template ours, saying the last of them; the
    // intents, unaffected, Compliant. OCM's framework addon writes its own errors into the same
    // histories (`template-error; ...`, while a restarted API server does not serve our kinds
    // yet): the operator then says its verdict again, so ours may repeat, never change.
    // Histories and Events only grow: one transition too many never matches.
    let mut templates: Vec<(String, Vec<&str>)> = intents()
        .into_iter()
        .map(|i| (i, vec!["Compliant"]))
        .collect();
    for (cluster, binding_states) in [
        (canary, vec!["Compliant", "Compliant"]),
        (enforcing, vec!["Compliant", "NonCompliant", "Compliant"]),
    ] {
        templates.retain(|(t, _)| t != BINDING);
        templates.push((BINDING.to_owned(), binding_states));
        let replicated = ocm::hub_policies(&fleet, &cluster.name);
        let events: Api<Event> = Api::namespaced(ocm::client(cluster), &cluster.name);
        for (template, expected) in &templates {
            let reason = ListParams::default().fields(&format!("reason=policy: {template}"));
            eventually(
                &format!("{template}'s transitions on {} and its hub", cluster.name),
                HUB_LAG,
                async |seen| {
                    let histories = histories(&replicated.get_opt(REPLICATED).await.ok()??);
                    let mut ours: Vec<Event> = (events.list(&reason).await.ok()?.items)
                        .into_iter()
                        .filter(|e| !e.message.as_deref().unwrap_or_default().contains(OCM_ERROR))
                        .collect();
                    ours.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                    // Said again, a verdict repeats its message: one transition.
                    let mut messages: Vec<&str> = (ours.iter())
                        .map(|e| e.message.as_deref().unwrap_or_default())
                        .collect();
                    let emitted = messages.len();
                    messages.dedup();
                    let states: Vec<&str> = messages.into_iter().map(state).collect();
                    let newest = histories.get(template)?.first()?;
                    *seen = format!("ours: {states:?} of {emitted}; hub: {histories:#?}");
                    (states == *expected
                        && !newest.contains(OCM_ERROR)
                        && Some(state(newest)) == expected.last().copied())
                    .then_some(())
                },
            )
            .await;
        }
    }

    // Steady state: with nothing changing, over two resync periods, neither operator writes
    // anything (no Event, no status) but its lease renewals.
    tokio::time::sleep(RESYNC).await;
    let before: Vec<_> = (fleet.managed.iter())
        .map(|m| m.operator.requests.snapshot())
        .collect();
    tokio::time::sleep(RESYNC * 2).await;
    for (cluster, before) in fleet.managed.iter().zip(before) {
        let window = cluster.operator.requests.snapshot().since(&before);
        let written = window.matching(|r| writes(&r.verb) && r.resource != "leases");
        assert!(
            written.is_empty(),
            "{}: writes at steady state:\n{}",
            cluster.name,
            written.join("\n")
        );
    }

    // The roll-up, as `nimbus fleet status` reads it from the hub, and the PolicySet's.
    policyset::shows(&hub, "Compliant", HUB_LAG).await;
    let rows = report::fleet_status(&fleet);
    let table: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (text("cluster"), text("name"), text("compliance"))
        })
        .collect();
    let mut expected = Vec::new();
    for (cluster, _) in CLUSTERS {
        for name in intents().iter().map(String::as_str).chain([BINDING]) {
            expected.push((cluster.to_owned(), name.to_owned(), "Compliant".to_owned()));
        }
    }
    assert_eq!(table, expected, "{rows:#?}");
    assert!(
        (rows.iter()).all(|r| r["name"] != BINDING
            || r["message"].as_str().is_some_and(|m| m.contains(protected))),
        "{rows:#?}"
    );
    let protected = json!({"protected": 1, "audited": 0, "excepted": 0, "unprotected": 0});
    for (cluster, _) in CLUSTERS {
        let row = binding_row(&rows, cluster);
        assert_eq!(row["workloads"], protected, "{row:#}");
        assert!(engines(row).contains(&"kubearmor"), "{row:#}");
    }
}

/// The binding's row of `cluster` in `nimbus fleet status -o json`.
fn binding_row<'r>(rows: &'r [Value], cluster: &str) -> &'r Value {
    (rows.iter())
        .find(|r| r["cluster"] == cluster && r["name"] == BINDING)
        .unwrap_or_else(|| panic!("{BINDING} on {cluster} in {rows:#?}"))
}

/// The engines in force a row lists.
fn engines(row: &Value) -> Vec<&str> {
    let engines = row["engines"].as_array().into_iter().flatten();
    engines.filter_map(Value::as_str).collect()
}

/// The hub alert of examples/fleet/hub-alerts.yaml, judged by promtool on OCM's own metric as
/// the propagator exports it now: it fires for `cluster` once the cluster's NonCompliant has
/// held for the rule's 15 minutes, not before, and for no other cluster.
async fn hub_alert_fires_for(fleet: &Fleet, cluster: &str) {
    let port = fleet.propagator_metrics;
    let labelled = format!("cluster_namespace=\"{cluster}\"");
    let series = eventually(
        "the propagator's metric to say NonCompliant",
        HUB_LAG,
        async |seen| {
            let (_, body) = http_get(port, "/metrics").await?;
            let series: Vec<(String, String)> = (body.lines())
                .filter(|l| l.starts_with("policy_governance_info{"))
                .filter_map(|l| l.rsplit_once(' '))
                .map(|(s, v)| (s.to_owned(), v.to_owned()))
                .collect();
            *seen = format!("{series:?}");
            (series.iter())
                .any(|(s, v)| s.contains(&labelled) && v == "1")
                .then_some(series)
        },
    )
    .await;
    let rule: Value =
        serde_yaml_ng::from_str(HUB_ALERTS_YAML).expect("examples/fleet/hub-alerts.yaml");
    let alert = &rule["spec"]["groups"][0]["rules"][0];
    let labels = [
        ("policy_namespace", ROOT_NAMESPACE),
        ("policy", ROOT_POLICY),
        ("cluster_namespace", cluster),
    ];
    // The annotations as Prometheus expands them for those labels.
    let expand = |text: &Value| {
        let mut text = text.as_str().unwrap_or_default().to_owned();
        for (name, value) in labels {
            text = text.replace(&format!("{{{{ $labels.{name} }}}}"), value);
        }
        text
    };
    let mut exp_labels: serde_json::Map<String, Value> = (labels.iter())
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    exp_labels.insert("severity".into(), alert["labels"]["severity"].clone());
    let fired = json!([{
        "exp_labels": exp_labels,
        "exp_annotations": {
            "summary": expand(&alert["annotations"]["summary"]),
            "description": expand(&alert["annotations"]["description"]),
        }
    }]);
    let name = alert["alert"].clone();
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": (series.iter())
                .map(|(s, v)| json!({"series": s, "values": format!("{v}x30")}))
                .collect::<Vec<_>>(),
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": name, "exp_alerts": []},
                {"eval_time": "20m", "alertname": name, "exp_alerts": fired},
            ]
        }]
    });
    let dir = tempfile::tempdir().expect("temporary directory");
    let (rules, test) = (dir.path().join("rules.yaml"), dir.path().join("test.yaml"));
    let yaml = |v: &Value| serde_yaml_ng::to_string(v).expect("YAML");
    std::fs::write(&rules, yaml(&rule["spec"])).expect("writing the rules");
    std::fs::write(&test, yaml(&tests)).expect("writing the rule test");
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8 path").to_owned();
    let checked = common::run_tool("promtool", &["check", "rules", &path(&rules)]);
    assert!(checked.contains("SUCCESS: 1 rules found"), "{checked}");
    let tested = common::run_tool("promtool", &["test", "rules", &path(&test)]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    println!("hub alert judged by promtool on the propagator's metric: {series:?}");
}

/// The workloads of `shop`: `web`, which the binding selects, and `db` behind a Service web
/// reaches (what dnsManipulation's NetworkPolicy would cut, so the canary's preview lists it).
/// Bare pods, given their IPs by the test: addresses are data only, nothing connects.
async fn workloads(client: &Client) {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SHOP}});
    apply(&Api::<Namespace>::all(client.clone()), SHOP, &namespace).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), SHOP);
    for (name, ip, ports) in [
        ("web", "10.244.7.10", json!([])),
        (
            "db",
            "10.244.7.11",
            json!([{"name": "pg", "containerPort": 5432}]),
        ),
    ] {
        common::pod_with_ip(&pods, name, ip, ports).await;
    }
    apply(
        &Api::<Service>::namespaced(client.clone(), SHOP),
        "db",
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                "spec": {"selector": {"app": "db"}, "ports": [{"port": 5432, "targetPort": 5432}]}}),
    )
    .await;
}
