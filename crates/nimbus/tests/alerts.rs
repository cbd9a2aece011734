//! The chart's alerts and dashboard, judged by their consumers' own code: promtool checks the
//! PrometheusRule's groups as the chart renders them and runs their unit tests
//! (charts/nimbus/files/alerts_test.yaml) on them; every metric the alerts and the dashboard
//! query is one a running operator exports on `/metrics`.

mod common;

use common::replica::Replica;
use common::{CONVERGE, RELEASE, apply, create_intent, helm_template, object_kind, rendered};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Api;
use kube::api::{Patch, PatchParams};
use nimbus_api::SecurityIntentBinding;
use nimbus_testenv::eventually;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The values switches that turn both on (they are off by default).
const SWITCHES: &[&str] = &[
    "metrics.prometheusRule.enabled=true",
    "metrics.grafanaDashboard.enabled=true",
];

/// The rendered PrometheusRule's `spec` (a Prometheus rule file's `groups`) and the rendered
/// dashboard's JSON.
fn rendered_rules_and_dashboard() -> (Value, Value) {
    let objects = helm_template(SWITCHES);
    let rule = rendered(&objects, "PrometheusRule", RELEASE);
    let config_map = rendered(&objects, "ConfigMap", &format!("{RELEASE}-dashboard"));
    let dashboard = config_map["data"]["nimbus.json"]
        .as_str()
        .expect("the dashboard ConfigMap holds nimbus.json");
    let dashboard = serde_json::from_str(dashboard).expect("the dashboard is JSON");
    (rule["spec"].clone(), dashboard)
}

/// Off by default; on, the chart still passes `helm lint --strict` (its values schema accepts
/// the switches).
#[test]
fn off_by_default_and_linted_when_on() {
    let mut lint = vec!["lint", "--strict", "charts/nimbus"];
    for value in SWITCHES {
        lint.extend(["--set", value]);
    }
    common::run_tool("helm", &lint);
    let objects = helm_template(&[]);
    let kinds: Vec<&str> = objects.iter().map(object_kind).collect();
    assert!(!kinds.contains(&"PrometheusRule"), "{kinds:?}");
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["name"] == format!("{RELEASE}-dashboard")),
        "the dashboard is rendered by default"
    );
}

/// `promtool check rules` and `promtool test rules` on the rule file the chart renders, with
/// the unit tests committed beside the chart's copy.
#[test]
fn promtool_checks_and_tests_the_rendered_rules() {
    let (groups, _) = rendered_rules_and_dashboard();
    let dir = tempfile::tempdir().expect("temporary directory");
    let rules = dir.path().join("alerts.yaml");
    let yaml = serde_yaml_ng::to_string(&groups).expect("rules as YAML");
    std::fs::write(&rules, yaml).expect("writing the rules");
    // The tests name their rule file `alerts.yaml`, relative to themselves.
    let tests = dir.path().join("alerts_test.yaml");
    std::fs::copy(
        common::workspace_root().join("charts/nimbus/files/alerts_test.yaml"),
        &tests,
    )
    .expect("copying the rule tests");
    let checked = common::run_tool("promtool", &["check", "rules", utf8(&rules)]);
    assert!(checked.contains("SUCCESS: 8 rules found"), "{checked}");
    let tested = common::run_tool("promtool", &["test", "rules", utf8(&tests)]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

fn utf8(path: &std::path::Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Each alert's expression, and each expression and template query of the dashboard.
fn queries(groups: &Value, dashboard: &Value) -> Vec<String> {
    fn exprs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", Value::String(e)) => out.push(e.clone()),
                        // `label_values(metric, label)`: only the metric is one.
                        ("query", Value::String(q)) if q.starts_with("label_values(") => {
                            let metric = q["label_values(".len()..].split([',', ')']).next();
                            out.extend(metric.map(|m| m.trim().to_owned()));
                        }
                        _ => exprs(value, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    exprs(groups, &mut out);
    exprs(dashboard, &mut out);
    out
}

/// The metric names a PromQL expression reads: identifiers that are not functions,
/// aggregations or keywords, outside label matchers (`{…}`), ranges (`[…]`), strings and the
/// label lists of `by`, `without`, `on`, `ignoring` and `group_left`/`group_right`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &["and", "or", "unless", "offset", "bool", "inf", "nan"];
    // Their modifier may stand between them and their parenthesis: `sum by (le) (…)`.
    const AGGREGATIONS: &[&str] = &[
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Skips from an opening `open` to past its `close`, over strings.
    let skip = |mut i: usize, close: char| {
        while i < chars.len() && chars[i] != close {
            if chars[i] == '"' {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
            }
            i += 1;
        }
        i + 1
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip(i, '}');
        } else if c == '[' {
            i = skip(i, ']');
        } else if c == '"' {
            i = skip(i + 1, '"');
        } else if c.is_ascii_digit() || c == '.' {
            // A number or duration (`0.9`, `1h`, `1e3`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let called = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) && called {
                i = skip(next, ')');
            } else if !called
                && !KEYWORDS.contains(&word.to_lowercase().as_str())
                && !AGGREGATIONS.contains(&word.as_str())
            {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn the_name_scanner_reads_promql() {
    let names = metric_names(
        r#"histogram_quantile(0.9, sum by (namespace, le) (rate(a_bucket{x="}"}[5m])))
           - max without (pod) (b offset 1h) > bool 1e3 or on(namespace) group_left(le) absent(c)"#,
    );
    assert_eq!(
        names,
        BTreeSet::from(["a_bucket", "b", "c"].map(str::to_owned))
    );
}

/// Runs an operator process on the test control plane, with the posture computed, and makes
/// every metric the alerts and dashboard read move: a binding applied before its intent, whose
/// native object is then refused (a reconcile error), then allowed (its time to protect), then changed to another intent (a
/// native object pruned, timed again). Then every metric the alerts and the dashboard query
/// must be among the series it exports (a family with no sample is not exported at all).
#[tokio::test]
async fn alerts_and_dashboard_query_only_exported_metrics() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("alerts").await.expect("namespace");
    let dir = tempfile::tempdir().expect("log dir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let serving = nimbus_testenv::serving_cert(&[]).expect("serving certificate");
    std::fs::write(&cert, &serving.cert_pem).expect("tls.crt");
    std::fs::write(&key, &serving.key_pem).expect("tls.key");
    let posture_addr = format!("127.0.0.1:{}", nimbus_testenv::free_port().expect("a port"));
    let posture = [
        // The leader's probes set nimbus_enforcement_not_live (NimbusEnforcementNotLive).
        "--enforcement-probes=true",
        "--posture-addr",
        &posture_addr,
        "--posture-tls-cert-file",
        utf8(&cert),
        "--posture-tls-key-file",
        utf8(&key),
    ];
    let operator = Replica::start("alerts", cp.kubeconfig_path(), dir.path(), &posture);
    eventually("the operator to be ready", CONVERGE, async |seen| {
        let ready = operator.ready().await;
        *seen = format!("{ready:?}; its log:\n{}", operator.process.output());
        ready.ok()
    })
    .await;

    // A quota of no NetworkPolicy: the policy controller's write is refused until it is
    // deleted. No quota controller runs here, so its status (what admission enforces) is
    // written as that controller would.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), ns.name());
    let none = json!({"count/networkpolicies.networking.k8s.io": "0"});
    let quota = json!({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-netpol"},
        "spec": {"hard": none}
    });
    apply(&quotas, "no-netpol", &quota).await;
    let status = json!({"status": {"hard": none, "used": none}});
    quotas
        .patch_status("no-netpol", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the quota's status");
    // The binding is applied before its intent (as `kubectl apply -f` of a directory may do):
    // the change waits for the intent, and is timed from the binding's first sighting all the
    // same.
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    let web = json!({ "app": "web" });
    let dns = common::unique("si");
    apply(&bindings, "b", &common::binding("b", &[&dns], web.clone())).await;
    eventually(
        "the binding waiting for its intent",
        CONVERGE,
        async |seen| {
            let status = bindings.get("b").await.ok()?.status?;
            *seen = format!("{:?}", status.conditions);
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            (ready.reason == "IntentNotFound" && ready.observed_generation.is_some()).then_some(())
        },
    )
    .await;
    let intents: Api<nimbus_api::SecurityIntent> = Api::all(client.clone());
    apply(
        &intents,
        &dns,
        &common::intent(&dns, "dnsManipulation", "Block"),
    )
    .await;
    let moved = async |what: &str, metric: &str, above: f64| {
        // The refused write is retried with backoff (5 s, doubling with each failure in a row,
        // and a busy machine may fail it a few times before the quota goes).
        eventually(what, 3 * CONVERGE, async |seen| {
            let value = operator.metric(metric, "").await;
            *seen = format!(
                "{metric} = {value}; the operator's log:\n{}",
                operator.process.output()
            );
            (value > above).then_some(())
        })
        .await;
    };
    moved(
        "the refused write counted",
        "nimbus_reconcile_errors_total",
        0.0,
    )
    .await;
    common::delete(&quotas, "no-netpol").await;
    // Retried with backoff: timed from the binding's creation, refusals included.
    moved(
        "the binding timed once protected",
        "nimbus_time_to_protect_seconds_count",
        0.0,
    )
    .await;
    let external = create_intent(&client, "denyExternalNetworkAccess", "Block").await;
    apply(&bindings, "b", &common::binding("b", &[&external], web)).await;
    moved(
        "the change timed",
        "nimbus_time_to_protect_seconds_count",
        1.0,
    )
    .await;
    moved(
        "the old NetworkPolicy pruned",
        "nimbus_native_objects_pruned_total",
        0.0,
    )
    .await;
    // The posture computation counts the binding's policy (whatever its readiness).
    moved("the policy counted", "nimbus_policies", 0.0).await;
    // And times itself (docs/src/alerts.md's `nimbus_posture_compute_seconds`).
    moved(
        "the posture computation timed",
        "nimbus_posture_compute_seconds_count",
        0.0,
    )
    .await;

    // An exception's expiry: a series per exception, only while it exists.
    let expires_at = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_hours(1))
        .expect("expiry");
    let exceptions: Api<nimbus_api::SecurityIntentException> =
        Api::namespaced(client.clone(), ns.name());
    let exception = json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
        "kind": "SecurityIntentException",
        "metadata": {"name": "e"},
        "spec": {"binding": {"kind": "SecurityIntentBinding", "name": "b"},
                 "intents": [external], "reason": "a test", "expiresAt": expires_at.to_string()}
    });
    apply(&exceptions, "e", &exception).await;
    moved(
        "the exception's expiry exported",
        "nimbus_exception_expiry_timestamp_seconds",
        0.0,
    )
    .await;

    let exported = operator.exported_series().await;
    let (groups, dashboard) = rendered_rules_and_dashboard();
    let queries = queries(&groups, &dashboard);
    let queried: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    // Guards the scanner: what the alerts name must be among what it found.
    for alerted in ["nimbus_leader", "nimbus_time_to_protect_seconds_bucket"] {
        assert!(
            queried.contains(alerted),
            "{alerted} not found in {queried:?}"
        );
    }
    let unknown: Vec<(&String, Vec<&String>)> = queried
        .iter()
        .filter(|name| !exported.contains(*name))
        .map(|name| {
            let users = queries.iter().filter(|q| metric_names(q).contains(name));
            (name, users.collect())
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "queried but not exported by the operator (metric, queries): {unknown:#?}\nexported: {exported:#?}"
    );
}
