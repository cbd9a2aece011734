//! The offline CLI: every class of bad input gets one clear message and exit status 1; valid
//! input translates.

use std::io::Write;
use std::process::{Command, Output};

fn nimbus(args: &[&str], files: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("writing input");
    }
    Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .current_dir(dir.path())
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("running nimbus")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const INTENT: &str = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: SecurityIntent
metadata: {name: dns}
spec: {intent: {id: dnsManipulation, action: Block}}
"#;

const BINDING: &str = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: SecurityIntentBinding
metadata: {name: b, namespace: shop}
spec:
  intents: [{name: dns}]
  selector: {workloadSelector: {matchLabels: {app: web}}}
"#;

/// Runs `validate` on one file and checks the failure names the file and the problem.
fn rejected(text: &str, expected: &str) {
    let out = nimbus(&["validate", "-f", "in.yaml"], &[("in.yaml", text)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("in.yaml (document"), "{err}");
    assert!(err.contains(expected), "expected `{expected}` in: {err}");
    assert!(
        !err.contains("backtrace") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn malformed_yaml() {
    rejected("kind: [unclosed", "malformed YAML/JSON");
}

#[test]
fn unknown_kinds() {
    rejected(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
        "unknown kind `Deployment` of `apps/v1`",
    );
    rejected(
        "apiVersion: intent.security.nimbus.com/v1alpha1\nkind: Nonsense\nmetadata: {name: x}\n",
        "unknown kind `Nonsense`",
    );
}

#[test]
fn unknown_intent_ids_and_bad_actions() {
    rejected(
        &INTENT.replace("dnsManipulation", "dnsManipulaton"),
        "unknown intent ID `dnsManipulaton`",
    );
    rejected(
        &INTENT.replace("Block", "Deny"),
        "action `Deny` must be Block or Audit",
    );
}

#[test]
fn bad_parameters() {
    let text = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: SecurityIntent
metadata: {name: tls}
spec: {intent: {id: assessTLS, action: Audit, params: {schedule: ["every day"]}}}
"#;
    rejected(text, "param schedule: `every day`: needs 5 fields");
}

#[test]
fn a_binding_referencing_a_missing_intent() {
    rejected(
        BINDING,
        "references SecurityIntent `dns`, which is not among the manifests",
    );
}

#[test]
fn schema_violations() {
    rejected(
        "apiVersion: intent.security.nimbus.com/v1alpha1\nkind: SecurityIntent\nmetadata: {name: x}\nspec: {intent: {action: Block}}\n",
        "missing field `id`",
    );
}

#[test]
fn unreadable_files() {
    let out = nimbus(&["translate", "-f", "missing.yaml"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("missing.yaml: cannot read file"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn valid_manifests_translate_to_policies_and_native_objects() {
    let out = nimbus(
        &["translate", "-f", "-", "-o", "json", "--engines", "netpol"],
        &[],
    );
    // stdin was empty: nothing to translate is an error too.
    assert_eq!(out.status.code(), Some(1));

    let mut child = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(["translate", "-f", "-", "-o", "json", "--engines", "netpol"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running nimbus");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{INTENT}---{BINDING}").as_bytes())
        .expect("writing stdin");
    let out = child.wait_with_output().expect("nimbus output");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let names: Vec<(String, String)> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_owned(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            ("NimbusPolicy".to_owned(), "b".to_owned()),
            ("NetworkPolicy".to_owned(), "b-dnsmanipulation".to_owned()),
        ]
    );
    // KubeArmor was not chosen: the partial enforcement is a warning, not an error.
    assert!(
        stderr(&out).contains(
            "warning: b: intent `dnsManipulation` is enforced only in part: kubearmor (disabled)"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn catalog_commands() {
    let out = nimbus(&["intents"], &[]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("escapeToHost") && l.contains("psaLevel=baseline")),
        "{table}"
    );
    let out = nimbus(&["explain", "namespaceSandbox"], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("group (group name, required, all values used)")
    );
    let out = nimbus(&["explain", "nope"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: unknown intent ID `nope`"),
        "{}",
        stderr(&out)
    );
}

const SANDBOX: &str = r#"
apiVersion: intent.security.nimbus.com/v1alpha1
kind: SecurityIntent
metadata: {name: sandbox}
spec: {intent: {id: namespaceSandbox, action: Block, params: {group: [team], clusterRole: [admin]}}}
---
apiVersion: intent.security.nimbus.com/v1alpha1
kind: ClusterSecurityIntentBinding
metadata:
  name: teams
  annotations: {intent.security.nimbus.com/allow-sensitive: namespaceSandbox}
spec:
  intents: [{name: sandbox}]
  selector: {nsSelector: {matchNames: [team-a, kube-system]}}
"#;

/// A sandbox may grant only the configured ClusterRoles, offline as in the cluster.
#[test]
fn sandbox_roles_follow_the_configured_allowlist() {
    rejected(
        SANDBOX,
        "ClusterRole `admin` may not be granted (allowed: edit, view",
    );
    let allowed = nimbus(
        &[
            "validate",
            "-f",
            "in.yaml",
            "--sandbox-cluster-roles",
            "admin",
        ],
        &[("in.yaml", SANDBOX)],
    );
    assert_eq!(allowed.status.code(), Some(0), "{}", stderr(&allowed));
    let out = nimbus(
        &[
            "translate",
            "-f",
            "in.yaml",
            "--namespaces",
            "team-a,kube-system",
            "--sandbox-cluster-roles",
            "admin",
            "-o",
            "json",
        ],
        &[("in.yaml", SANDBOX)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let namespaces: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|o| o["kind"] == "RoleBinding")
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(namespaces, ["team-a"], "kube-system is protected");
    assert!(
        stderr(&out).contains("namespace kube-system is protected"),
        "{}",
        stderr(&out)
    );
}

/// Without the binding's opt-in a sensitive intent is valid but not enforced: validate says so.
#[test]
fn sensitive_intents_without_opt_in_are_reported() {
    let text = SANDBOX
        .replace("clusterRole: [admin]", "clusterRole: [edit]")
        .replace(
            "allow-sensitive: namespaceSandbox",
            "allow-sensitive: assessTLS",
        );
    rejected(
        &text,
        "intent `namespaceSandbox` is sensitive and not enforced",
    );
}
