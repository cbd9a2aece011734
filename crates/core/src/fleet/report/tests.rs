use super::*;
use serde_json::json;

fn row(cluster: &str, policy: &str, kind: &str, name: &str, compliance: Standing) -> Row {
    Row {
        policy_namespace: "policies".into(),
        policy: policy.into(),
        cluster: cluster.into(),
        kind: kind.into(),
        name: name.into(),
        compliance,
        message: format!("{kind} {name} on {cluster}"),
        workloads: kind.ends_with("Binding").then(|| Workloads {
            protected: 2,
            unprotected: u32::from(compliance == Standing::NonCompliant),
            ..Workloads::default()
        }),
        engines: kind.ends_with("Binding").then(|| vec!["netpol".into()]),
        since: (compliance != Standing::Pending).then(|| "2026-11-29T10:00:00Z".into()),
    }
}

fn entry(row: Row) -> Entry {
    Entry {
        row,
        history: Vec::new(),
    }
}

/// Each cluster's section of `html`, by its `data-cluster`.
fn sections(html: &str) -> BTreeMap<String, String> {
    html.split("<section class=\"cluster\" data-cluster=\"")
        .skip(1)
        .map(|s| {
            let (cluster, rest) = s.split_once('"').expect("a quoted cluster");
            (cluster.to_owned(), rest.to_owned())
        })
        .collect()
}

/// `(policy, template, compliance)` of each template row of a section.
fn rows_of(section: &str) -> Vec<(String, String, String)> {
    let attr = |tag: &str, name: &str| {
        let start = tag.find(&format!(" {name}=\"")).expect(name) + name.len() + 3;
        tag[start..start + tag[start..].find('"').expect("quote")].to_owned()
    };
    section
        .split("<tr class=\"template\"")
        .skip(1)
        .map(|tr| {
            (
                attr(tr, "data-policy"),
                attr(tr, "data-template"),
                attr(tr, "data-compliance"),
            )
        })
        .collect()
}

fn counts_of(section: &str) -> String {
    let start = section.find("<p class=\"counts\" ").expect("counts") + 18;
    section[start..start + section[start..].find('>').expect(">")].to_owned()
}

#[test]
fn each_cluster_shows_its_own_rows_and_counts() {
    use Standing::*;
    let entries: Vec<Entry> = [
        row(
            "west",
            "nimbus-shop",
            "SecurityIntent",
            "fleet-dns",
            Compliant,
        ),
        row(
            "west",
            "nimbus-shop",
            "ClusterSecurityIntentBinding",
            "shop",
            NonCompliant,
        ),
        row(
            "east",
            "nimbus-shop",
            "SecurityIntent",
            "fleet-dns",
            Compliant,
        ),
        row(
            "east",
            "nimbus-shop",
            "ClusterSecurityIntentBinding",
            "shop",
            Compliant,
        ),
        row(
            "east",
            "nimbus-web",
            "SecurityIntentBinding",
            "web",
            Pending,
        ),
    ]
    .into_iter()
    .map(entry)
    .collect();
    let html = html(&Input {
        scope: "every namespace of the hub",
        generated: "2026-11-29T11:00:00Z",
        entries: &entries,
        managed_clusters: &["east".into(), "west".into()],
    });
    let sections = sections(&html);
    let t = |p: &str, t: &str, c: &str| (format!("policies/{p}"), t.to_owned(), c.to_owned());
    let expected = [
        (
            "east",
            vec![
                t("nimbus-shop", "SecurityIntent/fleet-dns", "Compliant"),
                t(
                    "nimbus-shop",
                    "ClusterSecurityIntentBinding/shop",
                    "Compliant",
                ),
                t("nimbus-web", "SecurityIntentBinding/web", "Pending"),
            ],
            r#"data-compliant="2" data-noncompliant="0" data-pending="1""#,
        ),
        (
            "west",
            vec![
                t("nimbus-shop", "SecurityIntent/fleet-dns", "Compliant"),
                t(
                    "nimbus-shop",
                    "ClusterSecurityIntentBinding/shop",
                    "NonCompliant",
                ),
            ],
            r#"data-compliant="1" data-noncompliant="1" data-pending="0""#,
        ),
    ];
    assert_eq!(sections.len(), expected.len(), "{html}");
    for (cluster, rows, counts) in expected {
        let section = &sections[cluster];
        assert_eq!(rows_of(section), rows, "{cluster}");
        assert_eq!(counts_of(section), counts, "{cluster}");
        assert!(section.contains(&format!("on {cluster}</td>")), "{section}");
    }
    assert!(
        html.contains(
            r#"<p class="totals" data-clusters="2" data-compliant="3" data-noncompliant="1" data-pending="1">"#
        ),
        "{html}"
    );
    // The chart: one bar per cluster, each standing's width its share.
    assert!(html.contains(r#"<g class="cluster-bar" data-cluster="west">"#));
    assert!(html.contains(r#"<rect class="noncompliant" x="310.0" y="25" width="210.0""#));
    assert!(!html.contains("id=\"not-placed\""), "{html}");
    // A binding's workloads and engines, as its newest report counted them; `-` for intents.
    assert!(
        html.contains(
            "<td class=\"workloads\" data-protected=\"2\" data-audited=\"0\" \
             data-excepted=\"0\" data-unprotected=\"1\">2 protected, 0 audited, 0 excepted, \
             1 not protected</td><td class=\"engines\">netpol</td>"
        ),
        "{html}"
    );
    assert!(
        html.contains("<td class=\"workloads\">-</td><td class=\"engines\">-</td>"),
        "{html}"
    );
}

#[test]
fn what_the_cluster_says_is_escaped_and_nothing_is_fetched() {
    let mut hostile = row(
        "east\"><script>alert(1)</script>",
        "nimbus-shop",
        "SecurityIntent",
        "fleet-dns",
        Standing::NonCompliant,
    );
    hostile.message = "UnsupportedIntent: <img src=\"http://198.51.100.1/x\"> & more".into();
    hostile.engines = Some(vec!["<i>netpol</i>".into()]);
    let entries = [Entry {
        history: vec![Transition {
            compliance: Some(Standing::NonCompliant),
            message: hostile.message.clone(),
            at: Some("2026-11-29T10:00:00Z".into()),
        }],
        row: hostile,
    }];
    let html = html(&Input {
        scope: "Policy <b>policies/nimbus-shop</b>",
        generated: "2026-11-29T11:00:00Z",
        entries: &entries,
        managed_clusters: &["<i>north</i>".into()],
    });
    // No markup but ours, and nothing that would load: no element or attribute from the
    // cluster's words (`src=` stays as text, its quote escaped).
    for markup in [
        "<script", "<img", "<b>", "<i>", "<link", "@import", "url(", "src=\"",
    ] {
        assert!(!html.contains(markup), "{markup} in {html}");
    }
    for escaped in [
        "east&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;",
        "UnsupportedIntent: &lt;img src=&quot;http://198.51.100.1/x&quot;&gt; &amp; more",
        "Policy &lt;b&gt;policies/nimbus-shop&lt;/b&gt;",
        "&lt;i&gt;north&lt;/i&gt;",
        "<td class=\"engines\">&lt;i&gt;netpol&lt;/i&gt;</td>",
    ] {
        assert!(html.contains(escaped), "{escaped} not in {html}");
    }
    // The message twice: the row, and its history.
    assert_eq!(html.matches("&lt;img").count(), 2, "{html}");
}

#[test]
fn a_managed_cluster_without_a_nimbus_template_is_listed_apart() {
    let entries = [entry(row(
        "east",
        "nimbus-shop",
        "SecurityIntent",
        "fleet-dns",
        Standing::Compliant,
    ))];
    let html = html(&Input {
        scope: "every namespace of the hub",
        generated: "2026-11-29T11:00:00Z",
        entries: &entries,
        managed_clusters: &["west".into(), "east".into(), "local-cluster".into()],
    });
    let listed: Vec<&str> = html
        .split("<li class=\"not-placed\" data-cluster=\"")
        .skip(1)
        .filter_map(|li| li.split('"').next())
        .collect();
    assert_eq!(listed, ["local-cluster", "west"]);
    assert_eq!(sections(&html).len(), 1);

    let empty = super::html(&Input {
        scope: "every namespace of the hub",
        generated: "2026-11-29T11:00:00Z",
        entries: &[],
        managed_clusters: &[],
    });
    assert!(empty.contains("<p id=\"empty\">"), "{empty}");
    assert!(empty.contains(r#"data-clusters="0""#), "{empty}");
}

#[test]
fn entries_carry_the_replicated_policys_history_newest_first() {
    let root = json!({
        "metadata": {"name": "nimbus-shop", "namespace": "policies"},
        "spec": {"policy-templates": [{"objectDefinition": {
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": "shop-hardening"}
        }}]},
        "status": {"status": [
            {"clustername": "east", "clusternamespace": "east", "compliant": "Compliant"},
            {"clustername": "north", "clusternamespace": "north"}
        ]}
    });
    let copy = json!({
        "metadata": {
            "name": "policies.nimbus-shop",
            "namespace": "east",
            "labels": {
                "policy.open-cluster-management.io/root-policy": "policies.nimbus-shop",
                "policy.open-cluster-management.io/cluster-name": "east"
            }
        },
        "status": {"details": [{
            "compliant": "Compliant",
            "templateMeta": {"name": "shop-hardening"},
            "history": [
                {"lastTimestamp": "2026-11-29T10:09:00Z", "message": "Compliant; repaired"},
                {"lastTimestamp": "2026-11-29T10:05:00Z",
                 "message": "NonCompliant; shop-hardening: EngineNotInstalled"},
                {"lastTimestamp": "2026-11-29T10:01:00Z",
                 "message": "template-error; the kind is not served"},
                {"message": 7}
            ]
        }]}
    });
    let entries = entries(std::slice::from_ref(&root), std::slice::from_ref(&copy));
    let transition = |compliance, message: &str, at: &str| Transition {
        compliance,
        message: message.to_owned(),
        at: Some(at.to_owned()),
    };
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.row.cluster.as_str(), e.history.clone()))
            .collect::<Vec<_>>(),
        [
            (
                "east",
                vec![
                    transition(
                        Some(Standing::Compliant),
                        "repaired",
                        "2026-11-29T10:09:00Z"
                    ),
                    transition(
                        Some(Standing::NonCompliant),
                        "shop-hardening: EngineNotInstalled",
                        "2026-11-29T10:05:00Z"
                    ),
                    transition(
                        None,
                        "template-error; the kind is not served",
                        "2026-11-29T10:01:00Z"
                    ),
                ]
            ),
            ("north", vec![]),
        ]
    );
    // The rows are the roll-up's, as `fleet status` prints them.
    let rows: Vec<Row> = entries.into_iter().map(|e| e.row).collect();
    assert_eq!(rows, rollup::rollup(&[root], &[copy]));
}
