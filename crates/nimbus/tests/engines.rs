//! The engines on the real control plane, with the upstream KubeArmor and Kyverno CRDs
//! installed: the apiserver validates every generated object against the real schemas.

mod common;

use common::generated::{ServerForms, generated_kinds};
use common::{
    CONVERGE, VIRTUAL_PATCHES, apply, binding, create_intent, delete, entry_object, get,
    install_virtual_patch_db, intent, native, unique,
};
use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use nimbus_api::{
    ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, ClusterSecurityIntentBinding, MODE_LABEL,
    MODE_SHADOW, NimbusPolicy, NimbusPolicyStatus,
};
use nimbus_core::engines::{
    CONFIG_MAP, CRON_JOB, KUBEARMOR_POLICY, KYVERNO_POLICY, MANAGED_BY, NETWORK_POLICY,
    ROLE_BINDING,
};
use nimbus_testenv::eventually;
use serde_json::json;
use std::path::Path;

async fn env(prefix: &str) -> common::Env {
    common::cluster_with_engines();
    common::env(prefix).await
}

/// Waits until a policy's status lists exactly `entries` and returns the status.
async fn entries<K>(api: &Api<K>, name: &str, entries: &[String]) -> NimbusPolicyStatus
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + HasStatus,
{
    eventually(
        &format!("{name}: adapter policies to become {entries:?}"),
        CONVERGE,
        async |seen| {
            let status = get(api, name).await.and_then(|p| p.status());
            if let Some(status) = &status
                && status.adapter_policies.clone().unwrap_or_default() == entries
            {
                return Some(status.clone());
            }
            *seen = format!("status {status:#?}");
            None
        },
    )
    .await
}

trait HasStatus {
    fn status(self) -> Option<NimbusPolicyStatus>;
}
impl HasStatus for NimbusPolicy {
    fn status(self) -> Option<NimbusPolicyStatus> {
        self.status
    }
}
impl HasStatus for ClusterNimbusPolicy {
    fn status(self) -> Option<NimbusPolicyStatus> {
        self.status
    }
}

/// Asserts that every entry exists in `namespace` (or its own), is controlled by `owner_uid`
/// and carries the engine annotation.
async fn assert_natives(
    client: &Client,
    namespace: Option<&str>,
    entries: &[String],
    owner_uid: &str,
) -> Vec<DynamicObject> {
    let mut found = Vec::new();
    for entry in entries {
        let (kind, ns, name) = entry_object(entry, namespace);
        let obj = native(client, kind, ns, name)
            .await
            .unwrap_or_else(|| panic!("{entry} listed in status but missing"));
        let owner = &obj.owner_references()[0];
        assert_eq!(owner.uid, owner_uid, "{entry} owner");
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert!(
            obj.annotations()
                .get(MANAGED_BY)
                .is_some_and(|v| v.starts_with("nimbus-")),
            "{entry} annotations: {:?}",
            obj.annotations()
        );
        found.push(obj);
    }
    found
}

async fn wait_gone(client: &Client, namespace: Option<&str>, entries: &[String]) {
    for entry in entries {
        let (kind, ns, name) = entry_object(entry, namespace);
        eventually(
            &format!("{entry} garbage-collected"),
            CONVERGE,
            async |_| native(client, kind, ns, name).await.is_none().then_some(()),
        )
        .await;
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Which policy of an example to check, and what it must list.
struct Example {
    file: &'static str,
    /// Entries of the NimbusPolicy of the SIB (in the test namespace), or of the CSIB's
    /// NimbusPolicy in `csib_namespace`.
    policy: &'static [&'static str],
    /// Entries of the ClusterNimbusPolicy (cluster bindings only).
    cluster: &'static [&'static str],
    /// Where a cluster binding's NimbusPolicy is checked (`None`: the test namespace).
    csib_namespace: Option<&'static str>,
    /// The allow-sensitive annotation the example's bindings get: a deliberate difference from
    /// Nimbus, whose examples bind sensitive intents without one.
    opt_in: Option<&'static str>,
}

const EXAMPLES: &[Example] = &[
    Example {
        file: "namespaced/dns-manipulation-si-sib.yaml",
        policy: &[
            "NetworkPolicy/dns-manipulation-binding-dnsmanipulation",
            "KubeArmorPolicy/dns-manipulation-binding-dnsmanipulation",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/escape-to-host-si-sib.yaml",
        policy: &[
            "KubeArmorPolicy/escape-to-host-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/escape-to-host-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/escape-to-host-binding-escapetohost-swdeploymenttools",
            "KyvernoPolicy/escape-to-host-binding-escapetohost",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/escape-to-host-with-params.yaml",
        policy: &[
            "KubeArmorPolicy/escape-to-host-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/escape-to-host-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/escape-to-host-binding-escapetohost-swdeploymenttools",
            "KyvernoPolicy/escape-to-host-binding-escapetohost",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/exploit-pfa-si-sib.yaml",
        policy: &["KubeArmorPolicy/exploit-pfa-binding-preventexecutionfromtemporlogsfolders"],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/pkg-mgr-exec-si-sib.yaml",
        policy: &["KubeArmorPolicy/pkg-mgr-execution-binding-swdeploymenttools"],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/multiple-si-sib-namespaced.yaml",
        policy: &[
            "KubeArmorPolicy/multiple-sis-nsscoped-binding-swdeploymenttools",
            "KubeArmorPolicy/multiple-sis-nsscoped-binding-unauthorizedsatokenaccess",
            "NetworkPolicy/multiple-sis-nsscoped-binding-dnsmanipulation",
            "KubeArmorPolicy/multiple-sis-nsscoped-binding-dnsmanipulation",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/cel-multi-si-sib-namespaced.yaml",
        policy: &[
            "KubeArmorPolicy/multiple-sis-nsscoped-binding-swdeploymenttools",
            "KubeArmorPolicy/multiple-sis-nsscoped-binding-unauthorizedsatokenaccess",
            "NetworkPolicy/multiple-sis-nsscoped-binding-dnsmanipulation",
            "KubeArmorPolicy/multiple-sis-nsscoped-binding-dnsmanipulation",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/coco-workload-si-sib.yaml",
        policy: &[
            "KyvernoPolicy/coco-workload-binding-mutateexisting",
            "KyvernoPolicy/coco-workload-binding-mutateoncreate",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "namespaced/virtual-patch-si-sib.yaml",
        policy: &[
            "KyvernoPolicy/virtual-patch-binding-cve-2024-4439-karmor-1",
            "KyvernoPolicy/virtual-patch-binding-cve-2024-4439-kyverno-1",
            "KyvernoPolicy/virtual-patch-binding-cve-2024-4439-netpol-1",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/assesstls-default.yaml",
        policy: &[],
        cluster: &["nimbus-k8tls-env/CronJob/assess-tls-default-assesstls"],
        opt_in: Some("assessTLS"),
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/assesstls-with-schedule.yaml",
        policy: &[],
        cluster: &["nimbus-k8tls-env/CronJob/assess-tls-scheduled-assesstls"],
        opt_in: Some("assessTLS"),
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/assesstls-with-external-addresses.yaml",
        policy: &[],
        cluster: &["nimbus-k8tls-env/CronJob/assess-tls-external-addresses-assesstls"],
        opt_in: Some("assessTLS"),
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/coco-workload-si-sib.yaml",
        policy: &[],
        cluster: &["KyvernoClusterPolicy/coco-workload-binding-cocoworkload"],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/csib-1-all-ns-selector.yaml",
        policy: &[
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-swdeploymenttools",
        ],
        cluster: &["KyvernoClusterPolicy/escape-to-host-binding-escapetohost"],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/csib-2-match-names.yaml",
        policy: &[],
        cluster: &["KyvernoClusterPolicy/escape-to-host-binding-escapetohost"],
        opt_in: None,
        csib_namespace: Some("none"),
    },
    Example {
        file: "clusterscoped/csib-3-exclude-names.yaml",
        policy: &[
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-swdeploymenttools",
        ],
        cluster: &["KyvernoClusterPolicy/escape-to-host-binding-escapetohost"],
        opt_in: None,
        csib_namespace: None,
    },
    Example {
        file: "clusterscoped/deny-external-network-access.yaml",
        policy: &[
            "NetworkPolicy/nimbus-ctlr-gen-deny-ext-nw-access-foo-binding-denyexternalnetworkaccess",
        ],
        cluster: &[],
        opt_in: None,
        csib_namespace: Some("default"),
    },
    Example {
        file: "clusterscoped/escape-to-host-si-csib-with-params.yaml",
        policy: &[
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/nimbus-ctlr-gen-escape-to-host-binding-escapetohost-swdeploymenttools",
        ],
        cluster: &["KyvernoClusterPolicy/escape-to-host-binding-escapetohost"],
        opt_in: None,
        csib_namespace: Some("default"),
    },
];

/// Every Nimbus example applies unchanged, produces exactly the expected native policies
/// (accepted by the real apiserver against the engines' CRDs), reports them in status, and is
/// garbage-collected with its binding. Examples share intent names, so they run in turn.
#[tokio::test]
async fn every_nimbus_example_produces_its_native_policies() {
    let e = env("examples").await;
    install_virtual_patch_db(&e.client).await;
    let root = common::original_nimbus("examples");
    let scratch = tempfile::tempdir().expect("tempdir");
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(e.client.clone());
    let cwnps: Api<ClusterNimbusPolicy> = Api::all(e.client.clone());
    for example in EXAMPLES {
        let mut path = root.join(example.file);
        let yaml = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let mut docs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&yaml) {
            let mut value: serde_json::Value = serde::Deserialize::deserialize(doc).expect("yaml");
            if value.is_null() {
                continue;
            }
            if let Some(opt_in) = example.opt_in
                && value["kind"]
                    .as_str()
                    .is_some_and(|k| k.ends_with("Binding"))
            {
                value["metadata"]["annotations"][ALLOW_SENSITIVE_ANNOTATION] = json!(opt_in);
            }
            docs.push(value);
        }
        if example.opt_in.is_some() {
            // The CLI translates what was applied: the example with its opt-in.
            path = scratch.path().join(example.file.replace('/', "-"));
            let yaml: String = docs
                .iter()
                .map(|d| format!("---\n{}", serde_yaml_ng::to_string(d).expect("yaml")))
                .collect();
            std::fs::write(&path, yaml).expect("write example");
        }
        let mut applied: Vec<(String, String)> = Vec::new();
        for value in docs {
            let kind = value["kind"].as_str().expect("kind").to_owned();
            let name = value["metadata"]["name"].as_str().expect("name").to_owned();
            match kind.as_str() {
                "SecurityIntent" => drop(apply(&e.intents, &name, &value).await),
                "SecurityIntentBinding" => drop(apply(&e.bindings, &name, &value).await),
                "ClusterSecurityIntentBinding" => drop(apply(&csibs, &name, &value).await),
                other => panic!("{}: unexpected kind {other}", example.file),
            }
            applied.push((kind, name));
        }
        let binding = |k: &str| {
            applied
                .iter()
                .find(|(kind, _)| kind == k)
                .map(|(_, n)| n.clone())
        };
        let mut all_natives = Vec::new();
        if let Some(sib) = binding("SecurityIntentBinding") {
            let status = entries(&e.policies, &sib, &strings(example.policy)).await;
            assert_eq!(
                status.number_of_adapter_policies as usize,
                example.policy.len()
            );
            let np = get(&e.policies, &sib).await.expect("policy");
            assert_natives(
                &e.client,
                Some(e.ns.name()),
                &strings(example.policy),
                &np.uid().expect("uid"),
            )
            .await;
            all_natives.push((Some(e.ns.name().to_owned()), strings(example.policy)));
            assert_eq!(
                status.conditions[0].status, "True",
                "{}: {:?}",
                example.file, status.conditions
            );
        }
        if let Some(csib) = binding("ClusterSecurityIntentBinding") {
            let status = entries(&cwnps, &csib, &strings(example.cluster)).await;
            assert_eq!(
                status.conditions[0].status, "True",
                "{}: {:?}",
                example.file, status.conditions
            );
            let cwnp = get(&cwnps, &csib).await.expect("cluster policy");
            assert_natives(
                &e.client,
                None,
                &strings(example.cluster),
                &cwnp.uid().expect("uid"),
            )
            .await;
            all_natives.push((None, strings(example.cluster)));
            let ns = example.csib_namespace.unwrap_or(e.ns.name());
            if ns != "none" {
                let nps: Api<NimbusPolicy> = Api::namespaced(e.client.clone(), ns);
                let name = format!("nimbus-ctlr-gen-{csib}");
                entries(&nps, &name, &strings(example.policy)).await;
                let np = get(&nps, &name).await.expect("namespace policy");
                assert_natives(
                    &e.client,
                    Some(ns),
                    &strings(example.policy),
                    &np.uid().expect("uid"),
                )
                .await;
                all_natives.push((Some(ns.to_owned()), strings(example.policy)));
            }
        }
        let namespaces = format!("{},default", e.ns.name());
        assert_eq!(
            cli_vs_cluster(&e.client, &[&path], e.ns.name(), &namespaces).await,
            Ok(())
        );
        for (kind, name) in applied.iter().rev() {
            match kind.as_str() {
                "SecurityIntent" => delete(&e.intents, name).await,
                "SecurityIntentBinding" => delete(&e.bindings, name).await,
                _ => delete(&csibs, name).await,
            }
        }
        for (ns, natives) in &all_natives {
            wait_gone(&e.client, ns.as_deref(), natives).await;
        }
        for (kind, name) in &applied {
            if kind == "SecurityIntent" {
                eventually(&format!("{name} deleted"), CONVERGE, async |_| {
                    get(&e.intents, name).await.is_none().then_some(())
                })
                .await;
            }
        }
    }
}

/// A native policy edited by hand is reverted; one deleted is re-created; removing an intent
/// from the binding removes its native policies and status entries.
#[tokio::test]
async fn native_policies_are_kept_in_sync() {
    let e = env("drift").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    let sw = create_intent(&e.client, "swDeploymentTools", "Block").await;
    apply(
        &e.bindings,
        "d",
        &binding("d", &[&dns, &sw], json!({"app": "web"})),
    )
    .await;
    let all = strings(&[
        "NetworkPolicy/d-dnsmanipulation",
        "KubeArmorPolicy/d-dnsmanipulation",
        "KubeArmorPolicy/d-swdeploymenttools",
    ]);
    entries(&e.policies, "d", &all).await;
    let ns = Some(e.ns.name());

    // Edit: a user flips the KubeArmor action to Audit.
    let ksp_api: Api<DynamicObject> = Api::namespaced_with(
        e.client.clone(),
        e.ns.name(),
        &KUBEARMOR_POLICY.api_resource(),
    );
    ksp_api
        .patch(
            "d-dnsmanipulation",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"action": "Audit"}})),
        )
        .await
        .expect("user edit");
    eventually("the edit reverted", CONVERGE, async |_| {
        let ksp = native(&e.client, &KUBEARMOR_POLICY, ns, "d-dnsmanipulation").await?;
        (ksp.data["spec"]["action"] == "Block").then_some(())
    })
    .await;
    // Created, and the edit taken back: what the operator created it writes by creates and
    // replaces, never by a server-side apply (which costs the API server more).
    for name in ["d-dnsmanipulation", "d-swdeploymenttools"] {
        let ksp = native(&e.client, &KUBEARMOR_POLICY, ns, name)
            .await
            .expect("the KubeArmorPolicy");
        let manager = ksp.labels().get(MANAGED_BY).cloned();
        let operations: Vec<String> = ksp
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|entry| entry.manager == manager)
            .filter_map(|entry| entry.operation.clone())
            .collect();
        assert!(
            !operations.is_empty() && operations.iter().all(|op| op == "Update"),
            "{name}: the operator's writes were {operations:?}"
        );
    }
    // Unlabel: the object leaves the operator's label-filtered cache, but it still controls it:
    // its create of that name fails, and it takes the object back (label and all), in place.
    let unlabeled = native(&e.client, &KUBEARMOR_POLICY, ns, "d-swdeploymenttools")
        .await
        .expect("the KubeArmorPolicy");
    ksp_api
        .patch(
            "d-swdeploymenttools",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {MANAGED_BY: null}}})),
        )
        .await
        .expect("user edit");
    eventually("the label restored", CONVERGE, async |_| {
        let ksp = native(&e.client, &KUBEARMOR_POLICY, ns, "d-swdeploymenttools").await?;
        ksp.labels().contains_key(MANAGED_BY).then_some(())
    })
    .await;
    let restored = native(&e.client, &KUBEARMOR_POLICY, ns, "d-swdeploymenttools")
        .await
        .expect("the KubeArmorPolicy");
    assert_eq!(
        restored.uid(),
        unlabeled.uid(),
        "taken back, not re-created"
    );
    // Undoing drift is news no binding change announced: the policy says so.
    let events: Api<Event> = Api::namespaced(e.client.clone(), e.ns.name());
    eventually(
        "an event on the policy about the reverted edit",
        CONVERGE,
        async |_| {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|ev| {
                    ev.involved_object.kind.as_deref() == Some("NimbusPolicy")
                        && ev.involved_object.name.as_deref() == Some("d")
                        && ev.reason.as_deref() == Some("NativePoliciesSynced")
                        && ev.message.as_deref()
                            == Some("1 native policy applied, 0 native policies removed")
                })
                .then_some(())
        },
    )
    .await;

    // Delete: the NetworkPolicy comes back as a new object.
    let netpols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), e.ns.name());
    let before = get(&netpols, "d-dnsmanipulation")
        .await
        .expect("netpol")
        .uid();
    delete(&netpols, "d-dnsmanipulation").await;
    eventually("the NetworkPolicy re-created", CONVERGE, async |_| {
        let now = get(&netpols, "d-dnsmanipulation").await?;
        (now.uid() != before).then_some(())
    })
    .await;

    // Remove an intent: its objects and entries go, the rest stays.
    apply(
        &e.bindings,
        "d",
        &binding("d", &[&sw], json!({"app": "web"})),
    )
    .await;
    entries(
        &e.policies,
        "d",
        &strings(&["KubeArmorPolicy/d-swdeploymenttools"]),
    )
    .await;
    wait_gone(&e.client, ns, &all[..2]).await;
    assert!(
        native(&e.client, &KUBEARMOR_POLICY, ns, "d-swdeploymenttools")
            .await
            .is_some()
    );
}

/// The generated objects carry the intent's parameters, read from the rule they belong to.
#[tokio::test]
async fn parameters_come_from_their_own_rule() {
    let e = env("params").await;
    let escape = unique("escape");
    let coco = unique("coco");
    let mut with_params = intent(&escape, "escapeToHost", "Audit");
    with_params["spec"]["intent"]["params"] = json!({"psaLevel": ["restricted"]});
    apply(&e.intents, &escape, &with_params).await;
    let mut coco_intent = intent(&coco, "cocoWorkload", "Block");
    coco_intent["spec"]["intent"]["params"] = json!({"runtimeClass": ["kata-qemu"]});
    apply(&e.intents, &coco, &coco_intent).await;
    // coco first: Nimbus would have read psaLevel from it (the first rule).
    apply(
        &e.bindings,
        "p",
        &binding("p", &[&coco, &escape], json!({"app": "db"})),
    )
    .await;
    entries(
        &e.policies,
        "p",
        &strings(&[
            "KyvernoPolicy/p-mutateexisting",
            "KyvernoPolicy/p-mutateoncreate",
            "KubeArmorPolicy/p-escapetohost-disallowchroot",
            "KubeArmorPolicy/p-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/p-escapetohost-swdeploymenttools",
            "KyvernoPolicy/p-escapetohost",
        ]),
    )
    .await;
    let ns = Some(e.ns.name());
    let pss = native(&e.client, &KYVERNO_POLICY, ns, "p-escapetohost")
        .await
        .expect("policy");
    assert_eq!(
        pss.data["spec"]["rules"][0]["validate"]["podSecurity"]["level"],
        "restricted"
    );
    assert_eq!(pss.data["spec"]["validationFailureAction"], "Audit");
    let mutate = native(&e.client, &KYVERNO_POLICY, ns, "p-mutateoncreate")
        .await
        .expect("policy");
    assert_eq!(
        mutate.data["spec"]["rules"][0]["mutate"]["patchStrategicMerge"]["spec"]["template"]["spec"]
            ["runtimeClassName"],
        "kata-qemu"
    );
    assert_eq!(mutate.data["spec"]["validationFailureAction"], "Enforce");
}

/// An exception to escapeToHost naming two labels: KubeArmor writes each of the intent's three
/// policies once per label left out, which the API server stores as written under the upstream
/// KubeArmorPolicy CRD (a `label NotIn key=value` requirement, not pruned); at expiry the extra
/// ones go and the first ones select as before.
#[tokio::test]
async fn kubearmor_leaves_the_excepted_pods_out_until_the_exception_expires() {
    use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
    let e = env("ka-except").await;
    let escape = create_intent(&e.client, "escapeToHost", "Block").await;
    apply(
        &e.bindings,
        "k",
        &binding("k", &[&escape], json!({"app": "web"})),
    )
    .await;
    let bodies = [
        "k-escapetohost-disallowchroot",
        "k-escapetohost-disallowcapabilities",
        "k-escapetohost-swdeploymenttools",
    ];
    let ksp_api: Api<DynamicObject> = Api::namespaced_with(
        e.client.clone(),
        e.ns.name(),
        &KUBEARMOR_POLICY.api_resource(),
    );
    // name → selector, of the KubeArmorPolicies the API server holds.
    let held = async || -> std::collections::BTreeMap<String, serde_json::Value> {
        let list = ksp_api
            .list(&Default::default())
            .await
            .expect("listing KubeArmorPolicies");
        (list.items.iter())
            .map(|p| (p.name_any(), p.data["spec"]["selector"].clone()))
            .collect()
    };
    let plain: std::collections::BTreeMap<String, serde_json::Value> = bodies
        .iter()
        .map(|b| (b.to_string(), json!({"matchLabels": {"app": "web"}})))
        .collect();
    eventually("the three KubeArmorPolicies", CONVERGE, async |seen| {
        let now = held().await;
        *seen = format!("{now:?}");
        (now == plain).then_some(())
    })
    .await;

    let expires_at = Timestamp::now()
        .round(Unit::Second)
        .expect("rounded")
        .checked_add(SignedDuration::from_secs(20))
        .expect("expiry");
    let exceptions: Api<nimbus_api::SecurityIntentException> =
        Api::namespaced(e.client.clone(), e.ns.name());
    apply(
        &exceptions,
        "vendor-agent",
        &json!({
            "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
            "kind": "SecurityIntentException",
            "metadata": {"name": "vendor-agent"},
            "spec": {
                "binding": {"kind": "SecurityIntentBinding", "name": "k"},
                "intents": [escape],
                "selector": {"matchLabels": {"team": "vendor", "tier": "legacy"}},
                "reason": "the vendor's agent until its 2.4 release",
                "expiresAt": expires_at.to_string(),
            }
        }),
    )
    .await;
    let not = |label: &str| {
        json!({"matchLabels": {"app": "web"},
               "matchExpressions": [{"key": "label", "operator": "NotIn", "values": [label]}]})
    };
    let split: std::collections::BTreeMap<String, serde_json::Value> = bodies
        .iter()
        .flat_map(|b| {
            [
                (b.to_string(), not("team=vendor")),
                (format!("{b}-x1"), not("tier=legacy")),
            ]
        })
        .collect();
    // Until a second before expiry at most: what is seen last is what the exception made.
    let in_force = std::time::Duration::try_from(expires_at.duration_since(Timestamp::now()))
        .unwrap_or_default()
        .saturating_sub(std::time::Duration::from_secs(1));
    eventually(
        "each policy once per label left out",
        in_force,
        async |seen| {
            let now = held().await;
            *seen = format!("{now:?}");
            (now == split).then_some(())
        },
    )
    .await;
    assert!(
        Timestamp::now() < expires_at,
        "the exception took its whole 20 s to be honoured"
    );
    let policy = get(&e.policies, "k").await.expect("the NimbusPolicy");
    let said = serde_json::to_string(&policy.status).expect("status");
    assert!(!said.contains("kubearmor does not honour"), "{said}");

    eventually(
        "back to one policy each at expiry",
        CONVERGE + CONVERGE,
        async |seen| {
            let now = held().await;
            *seen = format!("{now:?}");
            (now == plain).then_some(())
        },
    )
    .await;
    assert!(Timestamp::now() >= expires_at, "widened before expiry");
}

/// Bad input is reported, never silently dropped: an unknown intent ID, an intent that this kind
/// of binding cannot enforce, and a parameter of the wrong shape.
#[tokio::test]
async fn unenforceable_intents_are_reported_on_binding_and_policy() {
    let e = env("honest").await;
    let unknown = create_intent(&e.client, "madeUpIntent", "Block").await;
    let tls = create_intent(&e.client, "assessTLS", "Audit").await;
    apply(
        &e.bindings,
        "u",
        &binding("u", &[&unknown, &tls], json!({})),
    )
    .await;
    let condition = eventually("UnsupportedIntent on the binding", CONVERGE, async |_| {
        let c = get(&e.bindings, "u")
            .await?
            .status?
            .conditions
            .into_iter()
            .next()?;
        (c.reason == "UnsupportedIntent").then_some(c)
    })
    .await;
    assert_eq!(condition.status, "False");
    assert!(
        condition.message.contains("madeUpIntent"),
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains("ClusterSecurityIntentBinding"),
        "{}",
        condition.message
    );
    let np = eventually("UnsupportedIntent on the policy", CONVERGE, async |_| {
        let s = get(&e.policies, "u").await?.status?;
        (s.conditions.first()?.reason == "UnsupportedIntent").then_some(s)
    })
    .await;
    assert_eq!(np.number_of_adapter_policies, 0);

    let bad = unique("bad");
    let mut bad_intent = intent(&bad, "escapeToHost", "Block");
    bad_intent["spec"]["intent"]["params"] = json!({"psaLevel": ["strict"]});
    apply(&e.intents, &bad, &bad_intent).await;
    apply(&e.bindings, "v", &binding("v", &[&bad], json!({}))).await;
    let status = entries(
        &e.policies,
        "v",
        &strings(&[
            "KubeArmorPolicy/v-escapetohost-disallowchroot",
            "KubeArmorPolicy/v-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/v-escapetohost-swdeploymenttools",
            "KyvernoPolicy/v-escapetohost",
        ]),
    )
    .await;
    assert!(
        status.conditions[0].message.contains("psaLevel")
            && status.conditions[0].message.contains("strict"),
        "{:?}",
        status.conditions
    );
    let pss = native(
        &e.client,
        &KYVERNO_POLICY,
        Some(e.ns.name()),
        "v-escapetohost",
    )
    .await
    .expect("policy");
    assert_eq!(
        pss.data["spec"]["rules"][0]["validate"]["podSecurity"]["level"],
        "baseline"
    );
}

/// `action: Audit` enforces nothing: KubeArmor's objects audit every rule, no NetworkPolicy is
/// written (it would cut traffic whatever it is called), and the binding says so while Ready.
/// An intent no engine can audit writes nothing at all and is not Ready.
#[tokio::test]
async fn audited_intents_enforce_nothing_and_say_what_is_not_written() {
    let e = env("audited").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Audit").await;
    let tmp = create_intent(&e.client, "preventExecutionFromTempOrLogsFolders", "Audit").await;
    apply(
        &e.bindings,
        "a",
        &binding("a", &[&dns, &tmp], json!({"app": "web"})),
    )
    .await;
    let status = entries(
        &e.policies,
        "a",
        &strings(&[
            "KubeArmorPolicy/a-dnsmanipulation",
            "KubeArmorPolicy/a-preventexecutionfromtemporlogsfolders",
        ]),
    )
    .await;
    let ready = &status.conditions[0];
    assert_eq!(ready.status, "True", "{ready:?}");
    assert!(
        ready
            .message
            .contains("`dnsManipulation` is audited: netpol"),
        "{ready:?}"
    );
    for name in [
        "a-dnsmanipulation",
        "a-preventexecutionfromtemporlogsfolders",
    ] {
        let policy = native(&e.client, &KUBEARMOR_POLICY, Some(e.ns.name()), name)
            .await
            .expect("the KubeArmorPolicy");
        let text = policy.data["spec"].to_string();
        assert!(
            text.contains(r#""action":"Audit""#) && !text.contains(r#""action":"Block""#),
            "{name}: {text}"
        );
    }
    assert!(
        native(
            &e.client,
            &NETWORK_POLICY,
            Some(e.ns.name()),
            "a-dnsmanipulation"
        )
        .await
        .is_none(),
        "an audited dnsManipulation must write no NetworkPolicy"
    );

    let egress = create_intent(&e.client, "denyExternalNetworkAccess", "Audit").await;
    apply(
        &e.bindings,
        "n",
        &binding("n", &[&egress], json!({"app": "web"})),
    )
    .await;
    let condition = eventually("NoAuditForm on the binding", CONVERGE, async |_| {
        let c = get(&e.bindings, "n")
            .await?
            .status?
            .conditions
            .into_iter()
            .next()?;
        (c.reason == "NoAuditForm").then_some(c)
    })
    .await;
    assert_eq!(condition.status, "False", "{condition:?}");
    let policy = get(&e.policies, "n").await.expect("the policy");
    assert_eq!(
        policy.status.expect("a status").number_of_adapter_policies,
        0
    );
}

/// Shadow mode and promotion: a binding labelled `intent.security.nimbus.com/mode: shadow` (or
/// in a namespace so labelled) enforces nothing, and says so; removing the label enforces.
#[tokio::test]
async fn shadow_mode_enforces_nothing_until_promoted() {
    let e = env("shadow").await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    let mut shadowed = binding("s", &[&dns], json!({"app": "web"}));
    shadowed["metadata"]["labels"][MODE_LABEL] = json!(MODE_SHADOW);
    apply(&e.bindings, "s", &shadowed).await;
    let mode = async |want: &str| {
        eventually(&format!("binding mode {want}"), CONVERGE, async |seen| {
            let status = get(&e.bindings, "s").await?.status?;
            *seen = format!("{status:?}");
            (status.mode.as_deref() == Some(want)).then_some(())
        })
        .await
    };
    let in_force = async |network_policy: bool, action: &str| {
        eventually(
            &format!("NetworkPolicy {network_policy}, KubeArmor {action}"),
            CONVERGE,
            async |seen| {
                let ns = Some(e.ns.name());
                let netpol = native(&e.client, &NETWORK_POLICY, ns, "s-dnsmanipulation").await;
                let ksp = native(&e.client, &KUBEARMOR_POLICY, ns, "s-dnsmanipulation").await?;
                let text = ksp.data["spec"].to_string();
                *seen = format!("netpol {}, {text}", netpol.is_some());
                let actions_ok = text.contains(&format!(r#""action":"{action}""#))
                    && !text.contains(if action == "Audit" {
                        r#""Block""#
                    } else {
                        r#""Audit""#
                    });
                (netpol.is_some() == network_policy && actions_ok).then_some(())
            },
        )
        .await
    };
    mode("Shadow").await;
    in_force(false, "Audit").await;
    let policy = get(&e.policies, "s").await.expect("the policy");
    assert_eq!(policy.spec.rules[0].rule.action, "Audit");

    // Promotion: the label goes, enforcement comes.
    apply(
        &e.bindings,
        "s",
        &binding("s", &[&dns], json!({"app": "web"})),
    )
    .await;
    mode("Enforce").await;
    in_force(true, "Block").await;

    // The namespace's label shadows every binding in it.
    let namespaces: Api<Namespace> = Api::all(e.client.clone());
    let label = json!({"metadata": {"labels": {MODE_LABEL: MODE_SHADOW}}});
    namespaces
        .patch(e.ns.name(), &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("labelling the namespace");
    mode("Shadow").await;
    in_force(false, "Audit").await;
}

/// An object of a generated name that the policy does not own is left alone and reported.
#[tokio::test]
async fn objects_we_do_not_own_are_never_taken_over() {
    let e = env("conflict").await;
    let netpols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), e.ns.name());
    apply(
        &netpols,
        "c-dnsmanipulation",
        &json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "c-dnsmanipulation"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
        }),
    )
    .await;
    let dns = create_intent(&e.client, "dnsManipulation", "Block").await;
    apply(&e.bindings, "c", &binding("c", &[&dns], json!({}))).await;
    let status = eventually("PolicyConflict on the policy", CONVERGE, async |_| {
        let s = get(&e.policies, "c").await?.status?;
        (s.conditions.first()?.reason == "PolicyConflict").then_some(s)
    })
    .await;
    assert_eq!(
        status.adapter_policies,
        Some(strings(&["KubeArmorPolicy/c-dnsmanipulation"]))
    );
    let theirs = get(&netpols, "c-dnsmanipulation")
        .await
        .expect("user's policy");
    assert!(theirs.owner_references().is_empty());
    assert_eq!(
        theirs.spec.and_then(|s| s.policy_types),
        Some(vec!["Ingress".to_owned()])
    );
}

/// A namespace sandbox keeps a RoleBinding in every selected namespace, including one created
/// after the binding, granting the group only there.
#[tokio::test]
async fn sandbox_role_bindings_follow_new_namespaces() {
    let e = env("sandbox").await;
    let team_ns = unique("team");
    let si = unique("sandbox");
    let mut sandbox = intent(&si, "namespaceSandbox", "Block");
    sandbox["spec"]["intent"]["params"] =
        json!({"group": ["team-{namespace}"], "clusterRole": ["view"]});
    apply(&e.intents, &si, &sandbox).await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(e.client.clone());
    let csib = unique("sandbox");
    apply(&csibs, &csib, &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": csib, "annotations": {ALLOW_SENSITIVE_ANNOTATION: "namespaceSandbox"}},
        "spec": {"intents": [{"name": si}], "selector": {"nsSelector": {"matchNames": [team_ns]}}}
    }))
    .await;
    let namespaces: Api<Namespace> = Api::all(e.client.clone());
    apply(
        &namespaces,
        &team_ns,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team_ns}}),
    )
    .await;
    let name = format!("nimbus-ctlr-gen-{csib}-namespacesandbox-role-view");
    let rb = eventually(
        "the sandbox RoleBinding in the new namespace",
        CONVERGE,
        async |_| native(&e.client, &ROLE_BINDING, Some(&team_ns), &name).await,
    )
    .await;
    assert_eq!(
        rb.data["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"})
    );
    assert_eq!(
        rb.data["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": format!("team-{team_ns}")}])
    );
    delete(&csibs, &csib).await;
    delete(&namespaces, &team_ns).await;
    delete(&e.intents, &si).await;
}

/// assessTLS: one CronJob per intent with its schedule, and a per-CronJob address list.
#[tokio::test]
async fn k8tls_cron_jobs_carry_schedule_and_addresses() {
    let e = env("k8tls").await;
    let daily = unique("tls-daily");
    let mut a = intent(&daily, "assessTLS", "Audit");
    a["spec"]["intent"]["params"] = json!({"schedule": ["0 3 * * *"]});
    apply(&e.intents, &daily, &a).await;
    let external = unique("tls-ext");
    let mut b = intent(&external, "assessTLS", "Audit");
    b["spec"]["intent"]["params"] =
        json!({"external_addresses": ["google.com:443", "example.org:8443"]});
    apply(&e.intents, &external, &b).await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(e.client.clone());
    let csib = unique("tls");
    apply(&csibs, &csib, &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": csib, "labels": {"team": "sec"}, "annotations": {ALLOW_SENSITIVE_ANNOTATION: "assessTLS"}},
        "spec": {"intents": [{"name": daily}, {"name": external}], "selector": {"nsSelector": {"matchNames": ["*"]}}}
    }))
    .await;
    let cwnps: Api<ClusterNimbusPolicy> = Api::all(e.client.clone());
    let first = format!("{csib}-assesstls");
    let second = format!("{csib}-assesstls-2");
    entries(
        &cwnps,
        &csib,
        &[
            format!("nimbus-k8tls-env/CronJob/{first}"),
            format!("nimbus-k8tls-env/CronJob/{second}"),
        ],
    )
    .await;
    let ns = Some("nimbus-k8tls-env");
    let cron = native(&e.client, &CRON_JOB, ns, &first)
        .await
        .expect("first");
    assert_eq!(cron.data["spec"]["schedule"], "0 3 * * *");
    assert_eq!(cron.labels().get("team").map(String::as_str), Some("sec"));
    let cron = native(&e.client, &CRON_JOB, ns, &second)
        .await
        .expect("second");
    assert_eq!(cron.data["spec"]["schedule"], "@weekly");
    let pod = &cron.data["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(
        pod["initContainers"][0]["command"],
        json!([
            "./tlsscan",
            "--infile",
            "/var/k8tls/addresses",
            "--compact-json"
        ])
    );
    let list = pod["volumes"][3]["configMap"]["name"]
        .as_str()
        .expect("address volume");
    let cm = native(&e.client, &CONFIG_MAP, ns, list)
        .await
        .expect("address list");
    assert_eq!(
        cm.data["data"]["addresses"],
        "google.com:443 Google\nexample.org:8443 Example"
    );
    delete(&csibs, &csib).await;
    wait_gone(
        &e.client,
        ns,
        &[format!("nimbus-k8tls-env/CronJob/{first}")],
    )
    .await;
}

/// `nimbus translate` of manifests, offline, prints exactly the objects the operator created
/// in the cluster, in both directions: every printed object exists with the same body (key
/// for key, against the printed object in the API server's form: see `common::generated`),
/// labels, annotations and owners; and every object the operator generated for these
/// manifests (owned by a printed object, or by the bindings that own them, or carrying our
/// label in `namespace`), cluster-scoped or in a namespace translate knew of, is printed.
/// Returns every difference.
async fn cli_vs_cluster(
    client: &Client,
    files: &[&Path],
    namespace: &str,
    namespaces: &str,
) -> Result<(), Vec<String>> {
    let db = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(db.path(), VIRTUAL_PATCHES).expect("writing the database");
    let example = files[0].display();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"));
    cmd.arg("translate");
    for file in files {
        cmd.arg("-f").arg(file);
    }
    let out = cmd
        .args(["--namespace", namespace, "--namespaces", namespaces])
        .arg("--virtual-patch-db")
        .arg(db.path())
        .args(["-o", "json"])
        .output()
        .expect("running nimbus translate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON list");
    let items = list["items"].as_array().expect("items");
    assert!(!items.is_empty(), "{example}: nothing translated");
    let server = common::oracle::Server::discover(client.clone()).await;
    let mut forms = ServerForms::default();
    let key = |o: &serde_json::Value| {
        let meta = &o["metadata"];
        format!("{} {}/{}", o["kind"], meta["namespace"], meta["name"]).replace('"', "")
    };
    let mut differences = Vec::new();
    // Uids of the printed objects and of their owners: whatever they own was generated for
    // these manifests.
    let mut owners = std::collections::BTreeSet::new();
    for item in items {
        let what = format!("{example}: {}", key(item));
        let namespace = item["metadata"]["namespace"].as_str().unwrap_or_default();
        let Ok(live) = server.get(item, namespace).await else {
            differences.push(format!(
                "{what}: printed by the CLI, missing in the cluster"
            ));
            continue;
        };
        owners.extend(live["metadata"]["uid"].as_str().map(str::to_owned));
        for owner in live["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            owners.extend(owner["uid"].as_str().map(str::to_owned));
        }
        match forms.get(&server, item).await {
            Ok(form) => differences.extend(
                common::generated::differences(&live, form, item)
                    .into_iter()
                    .map(|d| format!("{what}: {d}")),
            ),
            Err(e) => differences.push(format!("{what}: no server form: {e}")),
        }
    }
    let printed: std::collections::BTreeSet<String> = items.iter().map(key).collect();
    // The namespaces translate knew of: the ones it was given, and the k8tls environment's.
    // A cluster binding over every namespace also generates in the cluster's others, which the
    // CLI cannot know of.
    let mut known: std::collections::BTreeSet<&str> = namespaces.split(',').collect();
    known.extend(
        items
            .iter()
            .filter_map(|i| i["metadata"]["namespace"].as_str()),
    );
    known.insert("");
    for (resource, _) in generated_kinds() {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        for object in all.list(&Default::default()).await.expect("listing") {
            let mut object = serde_json::to_value(object).expect("json");
            object["kind"] = json!(resource.kind);
            let owned = object["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["uid"].as_str().is_some_and(|u| owners.contains(u)));
            let labelled_here = object["metadata"]["namespace"] == namespace
                && object["metadata"]["labels"][MANAGED_BY].is_string();
            let in_known = known.contains(object["metadata"]["namespace"].as_str().unwrap_or(""));
            if (owned || labelled_here) && in_known && !printed.contains(&key(&object)) {
                differences.push(format!(
                    "{example}: {} is in the cluster, not printed by the CLI",
                    key(&object)
                ));
            }
        }
    }
    match differences.is_empty() {
        true => Ok(()),
        false => Err(differences),
    }
}
