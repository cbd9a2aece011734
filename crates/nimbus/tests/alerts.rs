//! The chart's alerts and dashboard, judged by their consumers' own code: promtool checks the
//! PrometheusRule's groups as the chart renders them and runs their unit tests
//! (charts/nimbus/files/alerts_test.yaml) on them; every metric the alerts and the dashboard
//! query is one a running operator exports on `/metrics`.

mod common;

use common::replica::Replica;
use common::{CONVERGE, RELEASE, apply, create_intent, helm_template, object_kind, rendered};
use kube::Api;
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
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8 path").to_owned();
    let checked = common::run_tool("promtool", &["check", "rules", &path(&rules)]);
    assert!(checked.contains("SUCCESS: 5 rules found"), "{checked}");
    let tested = common::run_tool("promtool", &["test", "rules", &path(&tests)]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Each expression and template query of the dashboard, and each alert's expression.
fn queries(groups: &Value, dashboard: &Value) -> Vec<String> {
    let mut out: Vec<String> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["expr"].as_str().map(str::to_owned))
        .collect();
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
    exprs(dashboard, &mut out);
    out
}

/// The metric names a PromQL expression reads: identifiers that are not functions,
/// aggregations or keywords, outside label matchers (`{…}`), ranges (`[…]`), strings and the
/// label lists of `by`, `without`, `on`, `ignoring` and `group_left`/`group_right`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &["and", "or", "unless", "offset", "bool", "inf", "nan"];
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
            } else if !called && !KEYWORDS.contains(&word.to_lowercase().as_str()) {
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

/// Runs an operator process on the test control plane, makes a binding change so every
/// metric has moved (time to protect among them), and checks that every metric the alerts and
/// the dashboard query is among the series it exports.
#[tokio::test]
async fn alerts_and_dashboard_query_only_exported_metrics() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("alerts").await.expect("namespace");
    let dir = tempfile::tempdir().expect("log dir");
    let operator = Replica::start("alerts", cp.kubeconfig_path(), dir.path(), &[]);
    eventually("the operator to be ready", CONVERGE, async |seen| {
        let ready = operator.ready().await;
        *seen = format!("{ready:?}; its log:\n{}", operator.process.output());
        ready.ok()
    })
    .await;

    // A binding created, then changed: each is protected once its NetworkPolicy is written.
    let dns = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    for app in ["web", "api"] {
        let before = operator
            .metric("nimbus_time_to_protect_seconds_count", "")
            .await;
        apply(
            &bindings,
            "b",
            &common::binding("b", &[&dns], json!({ "app": app })),
        )
        .await;
        eventually(
            &format!("the change to {app} timed"),
            CONVERGE,
            async |_| {
                let after = operator
                    .metric("nimbus_time_to_protect_seconds_count", "")
                    .await;
                (after > before).then_some(())
            },
        )
        .await;
    }

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
