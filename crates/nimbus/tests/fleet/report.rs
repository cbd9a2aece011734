//! `nimbus fleet report` read back from a browser: headless Chromium renders the HTML file,
//! and its DOM shows, cluster by cluster, the rows and counts `nimbus fleet status -o json`
//! prints at the same moment and the histories the hub keeps, with nothing fetched but the
//! file.

use crate::common::browser::{self, attr, headless, unescape};
use crate::histories;
use crate::ocm::{CLUSTERS, Fleet, REPLICATED};
use nimbus_testenv::eventually;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// `nimbus fleet status -o json` against the hub.
pub fn fleet_status(fleet: &Fleet) -> Vec<Value> {
    let out = nimbus(fleet, &["fleet", "status", "-o", "json"]);
    serde_json::from_slice(&out).expect("nimbus fleet status -o json")
}

fn nimbus(fleet: &Fleet, args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .env("KUBECONFIG", fleet.hub.kubeconfig_path())
        .output()
        .expect("running nimbus");
    assert!(
        out.status.success(),
        "nimbus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A template's row: `(policy, template, compliance, workloads, engines, since, message)`,
/// the workloads as `protected/audited/excepted/unprotected`.
type Row = (String, String, String, String, String, String, String);
/// The counts of a row's workloads, in [`Row`]'s order.
const COUNTED: [&str; 4] = ["protected", "audited", "excepted", "unprotected"];
/// Per cluster: its counts (`data-compliant`, `data-noncompliant`, `data-pending`) and rows.
type Clusters = BTreeMap<String, ([usize; 3], Vec<Row>)>;
/// Per cluster, per template name: its history, newest first, as OCM words it
/// (`Compliant; …`).
type Histories = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// What `fleet status -o json` says, per cluster.
fn from_status(rows: &[Value]) -> Clusters {
    let mut clusters = Clusters::new();
    for r in rows {
        let text = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
        let (counts, rows) = clusters.entry(text("cluster")).or_default();
        let compliance = text("compliance");
        let at = ["Compliant", "NonCompliant", "Pending"]
            .iter()
            .position(|s| *s == compliance)
            .expect("a known compliance");
        counts[at] += 1;
        let workloads = match &r["workloads"] {
            Value::Null => "-".to_owned(),
            w => COUNTED.map(|c| w[c].to_string()).join("/"),
        };
        let engines = match r["engines"].as_array() {
            None => "-".to_owned(),
            Some(engines) => (engines.iter().filter_map(Value::as_str))
                .collect::<Vec<_>>()
                .join(", "),
        };
        rows.push((
            format!("{}/{}", text("policyNamespace"), text("policy")),
            format!("{}/{}", text("kind"), text("name")),
            compliance,
            workloads,
            engines,
            text("since"),
            text("message"),
        ));
    }
    clusters
}

/// The hub's histories of the replicated Policy on each cluster.
async fn from_hub(fleet: &Fleet) -> Option<Histories> {
    let mut all = Histories::new();
    for (cluster, _) in CLUSTERS {
        let policy = crate::ocm::hub_policies(fleet, cluster)
            .get_opt(REPLICATED)
            .await
            .ok()??;
        all.insert(cluster.to_owned(), histories(&policy));
    }
    Some(all)
}

/// The text of the first element after `marker` in `html`, unescaped.
fn text_after(html: &str, marker: &str) -> String {
    let at = html.find(marker).expect(marker) + marker.len();
    let start = at + html[at..].find('>').expect("tag end") + 1;
    let end = start + html[start..].find('<').expect("next tag");
    unescape(&html[start..end])
}

/// A row's workloads cell, as `protected/audited/excepted/unprotected` from its `data-`
/// attributes, `-` when it has none.
fn workloads(tr: &str) -> String {
    let cell = &tr[tr.find("class=\"workloads\"").expect("workloads")..];
    let cell = &cell[..cell.find('>').expect("tag end")];
    match attr(cell, "data-protected") {
        None => "-".to_owned(),
        Some(_) => COUNTED
            .map(|c| attr(cell, &format!("data-{c}")).expect(c).to_owned())
            .join("/"),
    }
}

/// What the browser shows, per cluster: counts, rows and histories (the template's name being
/// what follows the kind in `data-template`).
fn from_dom(dom: &str) -> (Clusters, Histories) {
    let (mut clusters, mut histories) = (Clusters::new(), Histories::new());
    for section in dom.split("<section class=\"cluster\"").skip(1) {
        let cluster = attr(section, "data-cluster").expect("data-cluster");
        let count = |a: &str| {
            let counts = &section[section.find("class=\"counts\"").expect("counts")..];
            attr(counts, a).and_then(|n| n.parse().ok()).expect(a)
        };
        let counts = ["data-compliant", "data-noncompliant", "data-pending"].map(count);
        let mut rows = Vec::new();
        let mut cluster_histories = BTreeMap::new();
        for tr in section.split("<tr class=").skip(1) {
            let template = unescape(attr(tr, "data-template").unwrap_or_default());
            if tr.starts_with("\"template\"") {
                rows.push((
                    unescape(attr(tr, "data-policy").expect("data-policy")),
                    template,
                    attr(tr, "data-compliance")
                        .expect("data-compliance")
                        .to_owned(),
                    workloads(tr),
                    text_after(tr, "class=\"engines\""),
                    text_after(tr, "class=\"since\""),
                    text_after(tr, "class=\"message\""),
                ));
            } else if tr.starts_with("\"history\"") {
                let name = template.split_once('/').map(|(_, n)| n.to_owned());
                let reports = (tr.split("<li class=\"transition\"").skip(1))
                    .map(|li| {
                        let compliance = attr(li, "data-compliance").expect("data-compliance");
                        format!("{compliance}; {}", text_after(li, "class=\"message\""))
                    })
                    .collect();
                cluster_histories.insert(name.expect("Kind/name"), reports);
            }
        }
        clusters.insert(unescape(cluster), (counts, rows));
        histories.insert(unescape(cluster), cluster_histories);
    }
    (clusters, histories)
}

/// Renders `nimbus fleet report` while `fleet status` and the hub's histories hold still
/// (read just before and just after, equal), and checks that the browser shows exactly them;
/// returns the rows `fleet status` printed.
pub async fn shows_what_fleet_status_says(fleet: &Fleet, within: Duration) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let page = dir.path().join("fleet-report.html");
    let path = page.to_str().expect("UTF-8 path");
    let (status, hub) = eventually(
        "fleet status and the hub's histories to hold still around the report",
        within,
        async |seen| {
            let (status, hub) = (fleet_status(fleet), from_hub(fleet).await?);
            nimbus(fleet, &["fleet", "report", "-o", path]);
            let (after, hub_after) = (fleet_status(fleet), from_hub(fleet).await?);
            *seen = format!("{status:#?} then {after:#?}");
            (status == after && hub == hub_after).then_some((status, hub))
        },
    )
    .await;
    let dom = headless(&page, "--dump-dom", &dir.path().join("net-log.json"));
    check(&dom, &status, &hub);
    browser::assert_fetched_nothing(&dir.path().join("net-log.json"), "fleet-report.html");
    status
}

/// The DOM against `fleet status`'s rows and the hub's histories (those of Nimbus templates:
/// the report shows no other).
fn check(dom: &str, status: &[Value], hub: &Histories) {
    let expected = from_status(status);
    let (shown, shown_histories) = from_dom(dom);
    assert_eq!(
        shown, expected,
        "the report's clusters against fleet status"
    );
    let mut templates = BTreeMap::<&str, Vec<&str>>::new();
    for r in status {
        let (cluster, name) = (r["cluster"].as_str(), r["name"].as_str());
        templates
            .entry(cluster.expect("cluster"))
            .or_default()
            .push(name.expect("name"));
    }
    for (cluster, names) in templates {
        let from_hub: BTreeMap<String, Vec<String>> = (hub.get(cluster).into_iter().flatten())
            .filter(|(name, _)| names.contains(&name.as_str()))
            .map(|(name, history)| (name.clone(), history.clone()))
            .collect();
        assert_eq!(
            shown_histories.get(cluster),
            Some(&from_hub),
            "{cluster}'s histories against the hub's"
        );
    }
    let totals = |a: &str| {
        let summary = &dom[dom.find("class=\"totals\"").expect("the summary")..];
        attr(summary, a)
            .and_then(|n| n.parse::<usize>().ok())
            .expect(a)
    };
    assert_eq!(totals("data-clusters"), expected.len());
    let sum = |i: usize| expected.values().map(|(c, _)| c[i]).sum::<usize>();
    let summed = [sum(0), sum(1), sum(2)];
    let totals = ["data-compliant", "data-noncompliant", "data-pending"].map(totals);
    assert_eq!(totals, summed, "the summary's totals");
    let seen: Vec<String> = (shown.iter())
        .map(|(cluster, (counts, _))| format!("{cluster} {counts:?}"))
        .collect();
    let reports: usize = shown_histories
        .values()
        .flat_map(|h| h.values())
        .map(Vec::len)
        .sum();
    println!(
        "fleet report in Chromium: [Compliant, NonCompliant, Pending] per cluster {seen:?}, \
         {reports} history reports, as fleet status and the hub say"
    );
    // Not vacuous: every cluster has rows, and histories to compare.
    assert!(shown.values().all(|(_, rows)| !rows.is_empty()), "{dom}");
    assert!(shown_histories.values().all(|h| !h.is_empty()), "{dom}");
}
