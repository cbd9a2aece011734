use super::*;
use serde_json::json;

const BINDING_OK: &str = "Compliant; ClusterSecurityIntentBinding shop-hardening is Ready; every \
                          workload it selects is protected";
const BINDING_BROKEN: &str = "NonCompliant; ClusterSecurityIntentBinding shop-hardening: \
                              EngineNotInstalled; not protected: Deployment shop/web (Unprotected)";
const INTENT_OK: &str = "Compliant; SecurityIntent fleet-dns (dnsManipulation) is Ready";

/// A root Policy as the propagator leaves it on the hub: two Nimbus templates, one of OCM's
/// ConfigurationPolicies, and a kind named like ours in another group; placed on `clusters`
/// (`status.status[]`, compliance as the propagator rolled it up).
fn root(namespace: &str, name: &str, clusters: &[(&str, &str)]) -> Value {
    let status: Vec<Value> = clusters
        .iter()
        .map(|(cluster, compliant)| match *compliant {
            "" => json!({"clustername": cluster, "clusternamespace": cluster}),
            _ => {
                json!({"clustername": cluster, "clusternamespace": cluster, "compliant": compliant})
            }
        })
        .collect();
    json!({
        "apiVersion": "policy.open-cluster-management.io/v1",
        "kind": "Policy",
        "metadata": {"name": name, "namespace": namespace, "uid": "0b6f1c3e-1111-4c2e-9d0a-5e3f8c7a2b10"},
        "spec": {
            "disabled": false,
            "policy-templates": [
                {"objectDefinition": {
                    "apiVersion": "intent.security.nimbus.com/v1alpha1",
                    "kind": "SecurityIntent",
                    "metadata": {"name": "fleet-dns"},
                    "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}
                }},
                {"objectDefinition": {
                    "apiVersion": "policy.open-cluster-management.io/v1",
                    "kind": "ConfigurationPolicy",
                    "metadata": {"name": "namespace-exists"},
                    "spec": {"remediationAction": "inform", "severity": "low", "object-templates": []}
                }},
                {"objectDefinition": {
                    "apiVersion": "example.com/v1",
                    "kind": "SecurityIntent",
                    "metadata": {"name": "not-ours"}
                }},
                {"objectDefinition": {
                    "apiVersion": "intent.security.nimbus.com/v1alpha1",
                    "kind": "ClusterSecurityIntentBinding",
                    "metadata": {"name": "shop-hardening"},
                    "spec": {"intents": [{"name": "fleet-dns"}], "selector": {"nsSelector": {"matchNames": ["shop"]}}}
                }}
            ]
        },
        "status": {
            "compliant": "NonCompliant",
            "placement": [{"placement": "all", "placementBinding": name}],
            "status": status
        }
    })
}

/// One template's `status.details[]` entry, as the framework addon writes it: `history`
/// newest first, each `(lastTimestamp, message)`.
fn detail(name: &str, history: &[(&str, &str)]) -> Value {
    let history: Vec<Value> = history
        .iter()
        .enumerate()
        .map(|(i, (at, message))| {
            json!({"eventName": format!("policies.nimbus-shop.18a1b2c3d4e5f6{i:02}"),
                   "lastTimestamp": at, "message": message})
        })
        .collect();
    let compliant = history
        .first()
        .and_then(|h| h["message"].as_str())
        .and_then(|m| m.split(';').next())
        .map(str::to_owned);
    let mut detail = json!({
        "history": history,
        "templateMeta": {"creationTimestamp": null, "name": name}
    });
    if let Some(compliant) = compliant {
        detail["compliant"] = json!(compliant);
    }
    detail
}

/// The replicated Policy of `policies/nimbus-shop` in cluster `cluster`'s namespace on the hub.
fn replicated(root: &str, cluster: &str, details: Vec<Value>) -> Value {
    json!({
        "apiVersion": "policy.open-cluster-management.io/v1",
        "kind": "Policy",
        "metadata": {
            "name": root,
            "namespace": cluster,
            "labels": {
                "policy.open-cluster-management.io/cluster-name": cluster,
                "policy.open-cluster-management.io/cluster-namespace": cluster,
                "policy.open-cluster-management.io/root-policy": root
            }
        },
        "spec": {"disabled": false, "policy-templates": []},
        "status": {"compliant": "NonCompliant", "details": details}
    })
}

type Summary = (String, &'static str, String, Option<String>);

/// `(root cluster kind/name, compliance, message, since)` of each row.
fn summary(rows: &[Row]) -> Vec<Summary> {
    rows.iter()
        .map(|r| {
            (
                format!(
                    "{}/{} {} {}/{}",
                    r.policy_namespace, r.policy, r.cluster, r.kind, r.name
                ),
                r.compliance.as_str(),
                r.message.clone(),
                r.since.clone(),
            )
        })
        .collect()
}

fn row(what: &str, compliance: &'static str, message: &str, since: Option<&str>) -> Summary {
    (
        what.to_owned(),
        compliance,
        message.to_owned(),
        since.map(str::to_owned),
    )
}

#[test]
fn each_nimbus_template_on_each_placed_cluster_is_a_row() {
    let roots = [root(
        "policies",
        "nimbus-shop",
        &[
            ("east", "Compliant"),
            ("north", ""),
            ("west", "NonCompliant"),
        ],
    )];
    let copies = [
        replicated(
            "policies.nimbus-shop",
            "east",
            vec![
                detail("fleet-dns", &[("2026-11-29T10:00:02Z", INTENT_OK)]),
                detail(
                    "namespace-exists",
                    &[(
                        "2026-11-29T10:00:01Z",
                        "Compliant; notification - namespaces [shop] found",
                    )],
                ),
                detail("shop-hardening", &[("2026-11-29T10:00:03Z", BINDING_OK)]),
            ],
        ),
        replicated(
            "policies.nimbus-shop",
            "west",
            vec![
                detail("fleet-dns", &[("2026-11-29T10:00:02Z", INTENT_OK)]),
                detail(
                    "shop-hardening",
                    &[
                        ("2026-11-29T10:05:00Z", BINDING_BROKEN),
                        ("2026-11-29T10:00:03Z", BINDING_OK),
                    ],
                ),
            ],
        ),
    ];
    let rows = rollup(&roots, &copies);
    assert_eq!(
        summary(&rows),
        [
            row(
                "policies/nimbus-shop east SecurityIntent/fleet-dns",
                "Compliant",
                "SecurityIntent fleet-dns (dnsManipulation) is Ready",
                Some("2026-11-29T10:00:02Z"),
            ),
            row(
                "policies/nimbus-shop east ClusterSecurityIntentBinding/shop-hardening",
                "Compliant",
                "ClusterSecurityIntentBinding shop-hardening is Ready; every workload it selects \
                 is protected",
                Some("2026-11-29T10:00:03Z"),
            ),
            // Placed, not replicated yet.
            row(
                "policies/nimbus-shop north SecurityIntent/fleet-dns",
                "Pending",
                NOT_REPLICATED,
                None,
            ),
            row(
                "policies/nimbus-shop north ClusterSecurityIntentBinding/shop-hardening",
                "Pending",
                NOT_REPLICATED,
                None,
            ),
            row(
                "policies/nimbus-shop west SecurityIntent/fleet-dns",
                "Compliant",
                "SecurityIntent fleet-dns (dnsManipulation) is Ready",
                Some("2026-11-29T10:00:02Z"),
            ),
            // The newest report, not the first.
            row(
                "policies/nimbus-shop west ClusterSecurityIntentBinding/shop-hardening",
                "NonCompliant",
                "ClusterSecurityIntentBinding shop-hardening: EngineNotInstalled; not protected: \
                 Deployment shop/web (Unprotected)",
                Some("2026-11-29T10:05:00Z"),
            ),
        ]
    );
}

#[test]
fn a_template_without_a_report_yet_is_pending() {
    let roots = [root(
        "policies",
        "nimbus-shop",
        &[("a", "Pending"), ("b", ""), ("c", "")],
    )];
    let no_history = json!({"templateMeta": {"creationTimestamp": null, "name": "shop-hardening"}});
    let mut no_status = replicated("policies.nimbus-shop", "c", vec![]);
    no_status.as_object_mut().map(|p| p.remove("status"));
    let copies = [
        // The addon wrote the details, the binding's Event is not read yet.
        replicated(
            "policies.nimbus-shop",
            "a",
            vec![
                detail("fleet-dns", &[("2026-11-29T10:00:02Z", INTENT_OK)]),
                no_history,
            ],
        ),
        // Details of the template's neighbours only.
        replicated("policies.nimbus-shop", "b", vec![detail("other", &[])]),
        // Replicated, never synced.
        no_status,
    ];
    let rows = rollup(&roots, &copies);
    let got: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.cluster.as_str(),
                r.name.as_str(),
                r.compliance.as_str(),
                r.message.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "a",
                "fleet-dns",
                "Compliant",
                "SecurityIntent fleet-dns (dnsManipulation) is Ready"
            ),
            ("a", "shop-hardening", "Pending", NOT_REPORTED),
            ("b", "fleet-dns", "Pending", NOT_REPORTED),
            ("b", "shop-hardening", "Pending", NOT_REPORTED),
            ("c", "fleet-dns", "Pending", NOT_REPORTED),
            ("c", "shop-hardening", "Pending", NOT_REPORTED),
        ]
    );
    assert!(
        rows.iter()
            .filter(|r| r.compliance == Standing::Pending)
            .all(|r| r.since.is_none())
    );
}

#[test]
fn which_policies_and_clusters_have_rows() {
    let placed = |cluster: &str| {
        replicated(
            "policies.nimbus-shop",
            cluster,
            vec![detail("fleet-dns", &[("2026-11-29T10:00:02Z", INTENT_OK)])],
        )
    };
    let mut disabled = root("policies", "disabled", &[]);
    disabled["spec"]["disabled"] = json!(true);
    let mut not_ours = root("policies", "config-only", &[("east", "Compliant")]);
    not_ours["spec"]["policy-templates"] = json!([not_ours["spec"]["policy-templates"][1].clone()]);
    // (case, roots, replicated, the rows' `<root> <cluster>`)
    type Case = (&'static str, Vec<Value>, Vec<Value>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "a cluster with a replicated Policy the root's status does not list yet has rows",
            vec![root("policies", "nimbus-shop", &[("east", "Compliant")])],
            vec![placed("east"), placed("south")],
            vec!["policies/nimbus-shop east", "policies/nimbus-shop south"],
        ),
        (
            "a replicated Policy among the roots is no root of its own",
            vec![
                root("policies", "nimbus-shop", &[("east", "")]),
                placed("east"),
            ],
            vec![placed("east")],
            vec!["policies/nimbus-shop east"],
        ),
        (
            "a disabled Policy is on no cluster; one without Nimbus templates has no rows",
            vec![disabled, not_ours],
            vec![],
            vec![],
        ),
        (
            "another root's copies are not this one's",
            vec![root("policies", "nimbus-shop", &[("east", "")])],
            vec![replicated("policies.other", "west", vec![])],
            vec!["policies/nimbus-shop east"],
        ),
        (
            "roots sorted by namespace and name, clusters by name",
            vec![
                root("team-b", "a", &[("west", ""), ("east", "")]),
                root("team-a", "z", &[("north", "")]),
            ],
            vec![],
            vec!["team-a/z north", "team-b/a east", "team-b/a west"],
        ),
        (
            "a root without a name or namespace is skipped, not a failure",
            vec![json!({"metadata": {"name": "x"}}), json!({}), json!(null)],
            vec![json!({"metadata": {"labels": {ROOT_POLICY_LABEL: 1}}})],
            vec![],
        ),
    ];
    for (case, roots, copies, expected) in cases {
        let mut got: Vec<String> = rollup(&roots, &copies)
            .iter()
            .map(|r| format!("{}/{} {}", r.policy_namespace, r.policy, r.cluster))
            .collect();
        got.dedup();
        assert_eq!(got, expected, "{case}");
    }
}

#[test]
fn the_compliance_and_message_are_read_as_the_status_sync_reads_them() {
    // (the detail's `compliant`, the newest message) -> (compliance, message shown)
    let cases = [
        (
            Some("Compliant"),
            INTENT_OK,
            "Compliant",
            "SecurityIntent fleet-dns (dnsManipulation) is Ready",
        ),
        (
            Some("NonCompliant"),
            "NonCompliant; SecurityIntent x: UnsupportedIntent (stalled): no such ID",
            "NonCompliant",
            "SecurityIntent x: UnsupportedIntent (stalled): no such ID",
        ),
        // The detail's compliance wins; the message's is the fallback.
        (None, "NonCompliant; a", "NonCompliant", "a"),
        (None, "compliant;  a ", "Compliant", "a"),
        (
            Some("Pending"),
            "Pending; Dependencies were not satisfied: 1 is still pending",
            "Pending",
            "Dependencies were not satisfied: 1 is still pending",
        ),
        (
            None,
            "(combined from similar events): Compliant; a; b",
            "Compliant",
            "a; b",
        ),
        (
            Some("NonCompliant"),
            "NonCompliant; template-error; Failed to create policy template: ServiceUnavailable",
            "NonCompliant",
            "template-error; Failed to create policy template: ServiceUnavailable",
        ),
        // No compliance word: kept whole, NonCompliant as OCM reads it.
        (None, "something broke", "NonCompliant", "something broke"),
        (None, "Compliant", "Compliant", ""),
    ];
    for (compliant, message, compliance, shown) in cases {
        let mut detail = detail("fleet-dns", &[("2026-11-29T10:00:02Z", message)]);
        match compliant {
            Some(c) => detail["compliant"] = json!(c),
            None => {
                detail.as_object_mut().map(|d| d.remove("compliant"));
            }
        }
        let roots = [root("policies", "nimbus-shop", &[("east", "")])];
        let copies = [replicated("policies.nimbus-shop", "east", vec![detail])];
        let rows = rollup(&roots, &copies);
        let row = &rows[0];
        assert_eq!(
            (
                row.compliance.as_str(),
                row.message.as_str(),
                row.since.as_deref()
            ),
            (compliance, shown, Some("2026-11-29T10:00:02Z")),
            "{message}"
        );
    }
}

#[test]
fn a_row_serializes_with_camel_case_fields() {
    let row = Row {
        policy_namespace: "policies".into(),
        policy: "nimbus-shop".into(),
        cluster: "east".into(),
        kind: "SecurityIntent".into(),
        name: "fleet-dns".into(),
        compliance: Standing::NonCompliant,
        message: "m".into(),
        workloads: Some(Workloads {
            protected: 1,
            unprotected: 2,
            ..Workloads::default()
        }),
        engines: Some(vec!["netpol".into()]),
        since: None,
    };
    assert_eq!(
        serde_json::to_value(&row).unwrap(),
        json!({
            "policyNamespace": "policies", "policy": "nimbus-shop", "cluster": "east",
            "kind": "SecurityIntent", "name": "fleet-dns", "compliance": "NonCompliant",
            "message": "m", "since": null,
            "workloads": {"protected": 1, "audited": 0, "excepted": 0, "unprotected": 2},
            "engines": ["netpol"]
        })
    );
}

#[test]
fn a_bindings_counts_and_engines_are_read_from_its_newest_report() {
    let mut tally = Tally::default();
    tally.workloads.protected = 3;
    tally.workloads.audited = 1;
    tally.engine("netpol", nimbus_api::posture::EngineState::Enforcing);
    tally.engine("kubearmor", nimbus_api::posture::EngineState::Auditing);
    let newest = format!("{BINDING_OK}{}", tally.suffix());
    let history = [
        ("2026-11-29T10:05:00Z", newest.as_str()),
        ("2026-11-29T10:00:00Z", BINDING_BROKEN),
    ];
    let roots = [root("policies", "nimbus-shop", &[("east", "")])];
    let details = vec![
        detail("shop-hardening", &history),
        detail("fleet-dns", &[("2026-11-29T10:00:02Z", INTENT_OK)]),
    ];
    let copies = [replicated("policies.nimbus-shop", "east", details)];
    let rows = rollup(&roots, &copies);
    let shown: Vec<_> = (rows.iter())
        .map(|r| {
            (
                r.name.as_str(),
                r.message.as_str(),
                r.workloads,
                r.engines.clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "fleet-dns",
                "SecurityIntent fleet-dns (dnsManipulation) is Ready",
                None,
                None
            ),
            (
                "shop-hardening",
                "ClusterSecurityIntentBinding shop-hardening is Ready; every workload it \
                 selects is protected",
                Some(tally.workloads),
                Some(vec!["kubearmor (auditing)".to_owned(), "netpol".to_owned()])
            ),
        ]
    );
}
