//! `nimbus translate` and `nimbus validate` honour SecurityIntentExceptions as the operator does
//! at the instant `--now` names: the engines' exception objects while one is in force, the
//! unexcepted form once it has expired, and each exception's `Active` condition in `validate`.

use std::process::{Command, Output};

/// Runs `nimbus args` in a directory holding `manifests` as `in.yaml`.
fn nimbus(args: &[&str], manifests: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("in.yaml"), manifests).expect("writing input");
    Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .current_dir(dir.path())
        .output()
        .expect("running nimbus")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const EXPIRES_AT: &str = "2026-12-01T00:00:00Z";
const BEFORE_EXPIRY: &str = "2026-11-20T00:00:00Z";
const AFTER_EXPIRY: &str = "2026-12-02T00:00:00Z";

const INTENT: &str = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: SecurityIntent
metadata: {name: escape}
spec: {intent: {id: escapeToHost, action: Block}}
"#;

const BINDING: &str = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: SecurityIntentBinding
metadata: {name: no-escape, namespace: shop}
spec:
  intents: [{name: escape}]
  selector: {workloadSelector: {matchLabels: {app: web}}}
"#;

/// The admission engine enforces escapeToHost from cluster bindings only.
const CLUSTER_BINDING: &str = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: ClusterSecurityIntentBinding
metadata: {name: no-escape}
spec:
  intents: [{name: escape}]
  selector: {nsSelector: {matchNames: ["*"]}, workloadSelector: {matchLabels: {app: web}}}
"#;

/// An exception in `shop` from `binding_kind` `no-escape`'s intent `escape`, created 20 days
/// before it expires (within the default 30 days).
fn exception(binding_kind: &str) -> String {
    format!(
        r#"
apiVersion: exceptions.security.nimbus.com/v1alpha1
kind: SecurityIntentException
metadata: {{name: vendor-agent, namespace: shop, creationTimestamp: "2026-11-11T00:00:00Z"}}
spec:
  binding: {{kind: {binding_kind}, name: no-escape}}
  intents: [escape]
  selector: {{matchLabels: {{tier: legacy}}}}
  reason: the vendor's agent needs a privileged container until its 2.4 release
  expiresAt: "{EXPIRES_AT}"
"#
    )
}

fn manifests(binding: &str, binding_kind: &str) -> String {
    format!("{INTENT}---{binding}---{}", exception(binding_kind))
}

/// `translate`'s objects, and its warnings.
fn translated(args: &[&str], manifests: &str) -> (Vec<serde_json::Value>, String) {
    let mut all = vec!["translate", "-f", "in.yaml", "-o", "json"];
    all.extend(args);
    let out = nimbus(&all, manifests);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let items = list["items"].as_array().expect("items").clone();
    (items, stderr(&out))
}

fn of_kind<'a>(items: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    items.iter().filter(|o| o["kind"] == kind).collect()
}

#[test]
fn translate_writes_a_kyverno_policy_exception_until_expiry() {
    let input = manifests(BINDING, "SecurityIntentBinding");
    let kyverno = ["--engines", "kyverno", "--now"];

    let (before, _) = translated(&[&kyverno[..], &[BEFORE_EXPIRY]].concat(), &input);
    let exceptions = of_kind(&before, "PolicyException");
    assert_eq!(exceptions.len(), 1, "{before:#?}");
    let exception = exceptions[0];
    assert_eq!(exception["metadata"]["namespace"], "shop", "{exception:#}");
    assert_eq!(
        exception["metadata"]["name"], "no-escape-escapetohost-vendor-agent",
        "{exception:#}"
    );
    assert!(
        exception.to_string().contains("\"tier\":\"legacy\""),
        "it lets out the exception's workloads: {exception:#}"
    );

    // At expiry and after, the policy is translated as if there were no exception.
    let (unexcepted, _) = translated(&["--engines", "kyverno"], &format!("{INTENT}---{BINDING}"));
    for now in [EXPIRES_AT, AFTER_EXPIRY] {
        let (after, _) = translated(&[&kyverno[..], &[now]].concat(), &input);
        assert!(of_kind(&after, "PolicyException").is_empty(), "{now}");
        assert_eq!(after, unexcepted, "{now}");
    }
}

#[test]
fn translate_adds_the_admission_match_condition_until_expiry() {
    let input = manifests(CLUSTER_BINDING, "ClusterSecurityIntentBinding");
    let admission = ["--engines", "admission", "--namespaces", "shop,web"];
    let not_excepted = |items: &[serde_json::Value]| -> Vec<String> {
        of_kind(items, "ValidatingAdmissionPolicy")
            .iter()
            .flat_map(|p| p["spec"]["matchConditions"].as_array().cloned())
            .flatten()
            .filter(|c| c["name"] == "not-excepted")
            .map(|c| c["expression"].as_str().unwrap_or_default().to_owned())
            .collect()
    };

    let (before, _) = translated(
        &[&admission[..], &["--now", BEFORE_EXPIRY]].concat(),
        &input,
    );
    let conditions = not_excepted(&before);
    assert_eq!(conditions.len(), 1, "{before:#?}");
    assert!(
        conditions[0].contains("\"shop\"") && conditions[0].contains("\"legacy\""),
        "{}",
        conditions[0]
    );

    let (after, _) = translated(&[&admission[..], &["--now", AFTER_EXPIRY]].concat(), &input);
    assert_eq!(not_excepted(&after), Vec::<String>::new(), "{after:#?}");
    let (unexcepted, _) = translated(&admission, &format!("{INTENT}---{CLUSTER_BINDING}"));
    assert_eq!(after, unexcepted);
}

/// A binding and an exception without a namespace are both in `--namespace`.
#[test]
fn an_exception_without_a_namespace_is_in_that_of_translate() {
    let input = manifests(BINDING, "SecurityIntentBinding").replace(", namespace: shop", "");
    let (items, _) = translated(
        &[
            "--engines",
            "kyverno",
            "--namespace",
            "team-a",
            "--now",
            BEFORE_EXPIRY,
        ],
        &input,
    );
    let exceptions = of_kind(&items, "PolicyException");
    assert_eq!(exceptions.len(), 1, "{items:#?}");
    assert_eq!(exceptions[0]["metadata"]["namespace"], "team-a");
}

/// KubeArmor leaves out pods by their `key=value` labels only: an exception selecting by
/// `Exists` it does not honour, and the warning the operator writes in the policy's status,
/// `translate` prints while the exception is in force. One of labels it honours, silently.
#[test]
fn translate_warns_of_engines_that_do_not_honour_an_exception_in_force() {
    let labels = manifests(BINDING, "SecurityIntentBinding");
    let exists = labels.replace(
        "selector: {matchLabels: {tier: legacy}}",
        "selector: {matchExpressions: [{key: tier, operator: Exists}]}",
    );
    assert_ne!(exists, labels);
    let (_, warnings) = translated(&["--now", BEFORE_EXPIRY], &exists);
    assert!(
        warnings.contains("kubearmor does not honour exceptions to intent `escapeToHost`"),
        "{warnings}"
    );
    for (input, now) in [(&exists, AFTER_EXPIRY), (&labels, BEFORE_EXPIRY)] {
        let (_, warnings) = translated(&["--now", now], input);
        assert!(
            !warnings.contains("does not honour exceptions"),
            "{now}: {warnings}"
        );
    }
}

/// `validate` prints each exception's `Active` condition at `--now`; one engines would not
/// honour is a problem (exit status 1), one in force is not.
#[test]
fn validate_reports_where_each_exception_stands() {
    let input = manifests(BINDING, "SecurityIntentBinding");
    let cases: &[(&str, String, &[&str], Option<&str>)] = &[
        ("in force", input.clone(), &["--now", BEFORE_EXPIRY], None),
        (
            "expired",
            input.clone(),
            &["--now", AFTER_EXPIRY],
            Some("Expired"),
        ),
        (
            "longer than allowed",
            input.clone(),
            &["--now", BEFORE_EXPIRY, "--exception-max-duration", "7d"],
            Some("TooLong"),
        ),
        (
            "no creationTimestamp: created at --now, 61 days before it expires",
            input.replace(", creationTimestamp: \"2026-11-11T00:00:00Z\"", ""),
            &["--now", "2026-10-01T00:00:00Z"],
            Some("TooLong"),
        ),
        (
            "no creationTimestamp: created at --now, 11 days before it expires",
            input.replace(", creationTimestamp: \"2026-11-11T00:00:00Z\"", ""),
            &["--now", BEFORE_EXPIRY],
            None,
        ),
        (
            "no such binding",
            format!("{INTENT}---{}", exception("SecurityIntentBinding")),
            &["--now", BEFORE_EXPIRY],
            Some("BindingNotFound"),
        ),
        (
            "intent not bound",
            input.replace("intents: [escape]", "intents: [other]"),
            &["--now", BEFORE_EXPIRY],
            Some("IntentNotBound"),
        ),
    ];
    for (case, manifests, args, problem) in cases {
        let out = nimbus(&[&["validate", "-f", "in.yaml"], *args].concat(), manifests);
        let (stdout, stderr) = (stdout(&out), stderr(&out));
        match problem {
            None => {
                assert_eq!(out.status.code(), Some(0), "{case}: {stderr}");
                assert!(
                    stdout.contains(&format!(
                        "SecurityIntentException shop/vendor-agent: Active=True (Active: honoured until {EXPIRES_AT})"
                    )),
                    "{case}: {stdout}"
                );
            }
            Some(reason) => {
                assert_eq!(out.status.code(), Some(1), "{case}: {stdout}{stderr}");
                assert!(
                    stdout.contains(&format!(
                        "SecurityIntentException shop/vendor-agent: Active=False ({reason}: "
                    )),
                    "{case}: {stdout}"
                );
                let found = format!(
                    "): SecurityIntentException shop/vendor-agent: not honoured at {}: {reason}: ",
                    args[1]
                );
                assert!(
                    stderr.contains("in.yaml (document ") && stderr.contains(&found),
                    "{case}: {stderr}"
                );
            }
        }
    }
}

/// `--now` is an RFC 3339 time; what the exception CRD refuses, `validate` and `translate`
/// refuse too.
#[test]
fn bad_clocks_and_exceptions_the_crd_refuses_are_rejected() {
    let input = manifests(BINDING, "SecurityIntentBinding");
    let out = nimbus(&["validate", "-f", "in.yaml", "--now", "tomorrow"], &input);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--now"), "{}", stderr(&out));

    let refused = input.replace(
        "kind: SecurityIntentBinding, name",
        "kind: Deployment, name",
    );
    for command in ["validate", "translate"] {
        let out = nimbus(&[command, "-f", "in.yaml"], &refused);
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert!(
            stderr(&out).contains(
                "spec.binding.kind `Deployment` must be SecurityIntentBinding or ClusterSecurityIntentBinding"
            ),
            "{command}: {}",
            stderr(&out)
        );
    }
}

/// A ClusterSecurityIntentException in `shop` and `web` from the cluster binding `no-escape`.
const CLUSTER_EXCEPTION: &str = r#"
apiVersion: exceptions.security.nimbus.com/v1alpha1
kind: ClusterSecurityIntentException
metadata: {name: vendor-agents, creationTimestamp: "2026-11-11T00:00:00Z"}
spec:
  binding: {kind: ClusterSecurityIntentBinding, name: no-escape}
  intents: [escape]
  namespaces: [shop, web]
  selector: {matchLabels: {tier: legacy}}
  reason: the vendor's agents need a privileged container until their 2.4 release
  expiresAt: "2026-12-01T00:00:00Z"
"#;

/// A cluster exception lets the workloads of the namespaces it names out, and only there: one
/// PolicyException in each of them until it expires, and `validate` says where it stands.
#[test]
fn a_cluster_exception_is_honoured_in_each_namespace_it_names_until_expiry() {
    let input = format!("{INTENT}---{CLUSTER_BINDING}---{CLUSTER_EXCEPTION}");
    let kyverno = ["--engines", "kyverno", "--namespaces", "shop,web,other"];
    let namespaces = |items: &[serde_json::Value]| -> Vec<String> {
        of_kind(items, "PolicyException")
            .iter()
            .map(|e| {
                e["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    let (before, _) = translated(&[&kyverno[..], &["--now", BEFORE_EXPIRY]].concat(), &input);
    assert_eq!(namespaces(&before), ["shop", "web"], "{before:#?}");
    let (after, _) = translated(&[&kyverno[..], &["--now", AFTER_EXPIRY]].concat(), &input);
    assert_eq!(namespaces(&after), Vec::<String>::new(), "{after:#?}");

    let out = nimbus(
        &["validate", "-f", "in.yaml", "--now", BEFORE_EXPIRY],
        &input,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "ClusterSecurityIntentException vendor-agents: Active=True (Active: honoured until {EXPIRES_AT})"
        )),
        "{}",
        stdout(&out)
    );
    let out = nimbus(
        &["validate", "-f", "in.yaml", "--now", AFTER_EXPIRY],
        &input,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("ClusterSecurityIntentException vendor-agents: not honoured at"),
        "{}",
        stderr(&out)
    );
}

/// An exception of some Pod Security controls: `translate` writes Kyverno's PolicyException
/// with their `podSecurity` exclusions (and no exclusion of the whole rule) until expiry, and
/// `validate` and `translate` refuse a list the CRD refuses.
#[test]
fn an_exception_of_some_controls_excludes_only_those_and_bad_lists_are_refused() {
    let scoped = |controls: &str| {
        manifests(BINDING, "SecurityIntentBinding").replace(
            "  reason: the vendor's",
            &format!("  podSecurityControls: {controls}\n  reason: the vendor's"),
        )
    };
    let input = scoped(r#"["Privileged Containers", "Host Ports"]"#);
    let (before, _) = translated(&["--engines", "kyverno", "--now", BEFORE_EXPIRY], &input);
    let exceptions = of_kind(&before, "PolicyException");
    assert_eq!(exceptions.len(), 1, "{before:#?}");
    assert_eq!(
        exceptions[0]["spec"]["podSecurity"],
        serde_json::json!([
            {"controlName": "Privileged Containers", "images": ["*"]},
            {"controlName": "Host Ports", "images": ["*"]},
        ]),
        "{:#}",
        exceptions[0]
    );
    let (after, _) = translated(&["--engines", "kyverno", "--now", AFTER_EXPIRY], &input);
    assert!(of_kind(&after, "PolicyException").is_empty());

    let out = nimbus(
        &["validate", "-f", "in.yaml", "--now", BEFORE_EXPIRY],
        &input,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("Active=True"), "{}", stdout(&out));

    for (controls, refusal) in [
        ("[]", "spec.podSecurityControls must not be empty"),
        (
            r#"["Host Ports", "Host Ports"]"#,
            "spec.podSecurityControls names a control twice",
        ),
        (r#"["Privileged"]"#, "Privileged"),
    ] {
        for command in ["validate", "translate"] {
            let out = nimbus(&[command, "-f", "in.yaml"], &scoped(controls));
            assert_eq!(out.status.code(), Some(1), "{command} {controls}");
            assert!(
                stderr(&out).contains(refusal),
                "{command} {controls}: {}",
                stderr(&out)
            );
        }
    }
}

/// An exception naming workloads (`spec.workloads`): the admission engine's and Kyverno's CEL
/// exceptions name them and what they make; Kyverno's legacy kinds, which cannot name a pod by
/// its workload, write no PolicyException for it and `translate` says they still enforce; a
/// kind the CRD does not list, or an empty name, is refused.
#[test]
fn an_exception_naming_workloads_is_honoured_only_by_engines_that_can_name_them() {
    let named = |kind: &str, name: &str, binding: &str, binding_kind: &str| {
        let e = exception(binding_kind).replace(
            "  reason:",
            &format!("  workloads: [{{kind: {kind}, name: \"{name}\"}}]\n  reason:"),
        );
        format!("{INTENT}---{binding}---{e}")
    };
    let input = named(
        "Deployment",
        "agent",
        CLUSTER_BINDING,
        "ClusterSecurityIntentBinding",
    );
    let admission = [
        "--engines",
        "admission",
        "--namespaces",
        "shop",
        "--now",
        BEFORE_EXPIRY,
    ];
    let (items, warnings) = translated(&admission, &input);
    let condition = of_kind(&items, "ValidatingAdmissionPolicy")[0]["spec"]["matchConditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["name"] == "not-excepted")
        .map(|c| c["expression"].as_str().unwrap_or_default().to_owned())
        .expect("a not-excepted condition");
    for part in [
        "object.kind == 'Deployment' && object.metadata.?name.orValue('') == \"agent\"",
        "o.kind == 'ReplicaSet' && o.name.matches(\"^agent-[a-z0-9]+$\")",
    ] {
        assert!(condition.contains(part), "{part} in {condition}");
    }
    assert!(!warnings.contains("does not honour"), "{warnings}");

    let cel = [
        "--engines",
        "kyverno",
        "--kyverno-kinds",
        "cel",
        "--now",
        BEFORE_EXPIRY,
    ];
    let (items, _) = translated(&cel, &input);
    let exceptions = of_kind(&items, "PolicyException");
    assert_eq!(exceptions.len(), 1, "{items:#?}");
    assert!(
        exceptions[0]
            .to_string()
            .contains("object.kind == 'Deployment'"),
        "{:#}",
        exceptions[0]
    );

    let legacy = ["--engines", "kyverno", "--now", BEFORE_EXPIRY];
    let (items, warnings) = translated(&legacy, &input);
    assert!(of_kind(&items, "PolicyException").is_empty(), "{items:#?}");
    assert!(
        warnings.contains(
            "kyverno selects workloads by labels only and cannot leave out only the workloads \
             an exception names"
        ),
        "{warnings}"
    );

    for (kind, name, refused) in [
        ("ReplicaSet", "agent", "ReplicaSet"),
        ("Pod", "", "spec.workloads[].name"),
    ] {
        let input = named(kind, name, CLUSTER_BINDING, "ClusterSecurityIntentBinding");
        let out = nimbus(
            &["validate", "-f", "in.yaml", "--now", BEFORE_EXPIRY],
            &input,
        );
        assert_ne!(
            out.status.code(),
            Some(0),
            "{kind} {name:?}: {}",
            stdout(&out)
        );
        assert!(
            stderr(&out).contains(refused),
            "{kind} {name:?}: {}",
            stderr(&out)
        );
    }
}
