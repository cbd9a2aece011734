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

/// `translate` refuses what the API server would refuse, as `validate` does.
#[test]
fn translate_refuses_an_action_the_crd_refuses() {
    let intent = INTENT.replace("Block", "Deny");
    let out = nimbus(
        &["translate", "-f", "in.yaml"],
        &[("in.yaml", &format!("{intent}---{BINDING}"))],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("action `Deny` must be Block or Audit"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing is translated");
}

/// Deep nesting is refused in time linear in the input, before the parser sees it.
#[test]
fn deeply_nested_input_is_refused_quickly() {
    let n = 100_000;
    for (what, text) in [
        ("flow lists", format!("{}{}", "[".repeat(n), "]".repeat(n))),
        (
            "JSON objects",
            format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n)),
        ),
        ("block sequences", format!("{}x\n", "- ".repeat(n))),
    ] {
        let started = std::time::Instant::now();
        let out = nimbus(&["validate", "-f", "in.yaml"], &[("in.yaml", &text)]);
        let took = started.elapsed();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains("in.yaml: nested more than 100 levels deep at line 1"),
            "{what}: {err}"
        );
        assert!(took < std::time::Duration::from_secs(5), "{what}: {took:?}");
    }
    // Brackets in quoted strings and comments do not count; neither does an apostrophe.
    let deep_but_quoted = format!("{INTENT}  # {}\n", "[".repeat(200)).replace(
        "action: Block}}",
        &format!("action: Block, description: \"{}\"}}}}", "[".repeat(200)),
    );
    let out = nimbus(
        &["validate", "-f", "in.yaml"],
        &[("in.yaml", &format!("{deep_but_quoted}---{BINDING}"))],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A directory read through links is read once per file, and a link loop ends.
#[test]
fn links_to_the_same_files_are_read_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("dir");
    std::fs::write(manifests.join("intent.yaml"), INTENT).expect("intent");
    std::fs::write(manifests.join("binding.yaml"), BINDING).expect("binding");
    std::os::unix::fs::symlink(&manifests, manifests.join("loop")).expect("a link loop");
    std::os::unix::fs::symlink(manifests.join("intent.yaml"), manifests.join("same.yaml"))
        .expect("a link to a file");
    let out = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(["validate", "-f", "manifests", "-f", "manifests/intent.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("running nimbus");
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(stdout.contains("2 manifests valid"), "{stdout}{err}");
}

/// `validate` says what `Ready` the operator would write, from the same core functions.
#[test]
fn validate_prints_the_ready_condition_the_operator_would_write() {
    let out = nimbus(
        &["validate", "-f", "in.yaml"],
        &[("in.yaml", &format!("{INTENT}---{BINDING}"))],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout.contains("SecurityIntentBinding b: Ready=True (Ready)"),
        "{stdout}"
    );
    let missing = BINDING.replace("[{name: dns}]", "[{name: dns}, {name: gone}]");
    let out = nimbus(
        &["validate", "-f", "in.yaml"],
        &[("in.yaml", &format!("{INTENT}---{missing}"))],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "SecurityIntentBinding b: Ready=False (IntentNotFound: SecurityIntents not found: gone)"
        ),
        "{stdout}{}",
        stderr(&out)
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

/// `validate` on several documents: exit status 1 and every expected message, each with its
/// file and document number.
fn rejected_all(text: &str, expected: &[(usize, &str)]) {
    let out = nimbus(&["validate", "-f", "in.yaml"], &[("in.yaml", text)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for (document, needle) in expected {
        assert!(
            err.lines().any(
                |l| l.starts_with(&format!("in.yaml (document {document}): "))
                    && l.contains(needle)
            ),
            "expected `{needle}` on document {document} in:\n{err}"
        );
    }
}

#[test]
fn selectors_and_names_the_api_server_rejects() {
    let binding = |name: &str, selector: &str, cel: &str| {
        format!(
            "---\napiVersion: intent.security.nimbus.com/v1alpha1\nkind: SecurityIntentBinding\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  intents: [{{name: dns}}]\n  selector: {{workloadSelector: {selector}}}\n{cel}"
        )
    };
    let text = [
        INTENT.to_owned(),
        // 2: a label key with a space, a value starting with '-'.
        binding("b2", r#"{matchLabels: {"my app": "-web"}}"#, ""),
        // 3: In without values, Exists with values, an unknown operator, an upper-case prefix.
        binding(
            "b3",
            r#"{matchExpressions: [{key: app, operator: In}, {key: tier, operator: Exists, values: [x]}, {key: env, operator: Equals, values: [a]}, {key: Example.com/x, operator: DoesNotExist}]}"#,
            "",
        ),
        // 4: a control character coming out of spec.cel.
        binding(
            "b4",
            "{}",
            "  cel: ['labels[\"app\\u0001\"] == \"web\"']\n",
        ),
        // 5: an invalid name; 6: an invalid intent name.
        binding("Shop_Binding", "{}", ""),
        "---\napiVersion: intent.security.nimbus.com/v1alpha1\nkind: SecurityIntent\nmetadata: {name: DNS.}\nspec: {intent: {id: dnsManipulation, action: Block}}\n".to_owned(),
        // 7: a cluster binding with an over-long label value.
        format!(
            "---\napiVersion: intent.security.nimbus.com/v1alpha1\nkind: ClusterSecurityIntentBinding\nmetadata: {{name: c}}\nspec:\n  intents: [{{name: dns}}]\n  selector: {{nsSelector: {{matchNames: ['*']}}, workloadSelector: {{matchLabels: {{app: {}}}}}}}\n",
            "x".repeat(64)
        ),
    ]
    .concat();
    rejected_all(
        &text,
        &[
            (
                2,
                r#"SecurityIntentBinding b2: invalid label selector: spec.selector.workloadSelector.matchLabels: Invalid value: "my app": name part must consist of alphanumeric characters"#,
            ),
            (
                2,
                r#"spec.selector.workloadSelector.matchLabels: Invalid value: "-web": a valid label must be an empty string"#,
            ),
            (
                3,
                "spec.selector.workloadSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
            ),
            (
                3,
                "spec.selector.workloadSelector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            (
                3,
                r#"spec.selector.workloadSelector.matchExpressions[2].operator: Invalid value: "Equals": not a valid selector operator"#,
            ),
            (
                3,
                r#"spec.selector.workloadSelector.matchExpressions[3].key: Invalid value: "Example.com/x": prefix part a lowercase RFC 1123 subdomain"#,
            ),
            (
                4,
                r#"compiles to an invalid label selector: key: Invalid value: "app\x01": name part must consist"#,
            ),
            (
                5,
                r#"SecurityIntentBinding Shop_Binding: metadata.name: Invalid value: "Shop_Binding": a lowercase RFC 1123 subdomain must consist of"#,
            ),
            (6, r#"metadata.name: Invalid value: "DNS.""#),
            (
                7,
                "ClusterSecurityIntentBinding c: invalid label selector: spec.selector.workloadSelector.matchLabels: Invalid value: \"xxx",
            ),
            (7, "must be no more than 63 characters"),
        ],
    );
    // The boundaries pass: a 63-character key name part and value, a prefixed key.
    let ok = format!(
        "{INTENT}{}",
        binding(
            "b.1",
            &format!(
                "{{matchLabels: {{example.com/{}: {}}}, matchExpressions: [{{key: tier, operator: NotIn, values: ['']}}]}}",
                "k".repeat(63),
                "v".repeat(63)
            ),
            "  cel: ['labels[\"app\"] in [\"a\", \"b\"]']\n"
        )
    );
    let out = nimbus(&["validate", "-f", "in.yaml"], &[("in.yaml", &ok)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn translate_rejects_invalid_namespace_names() {
    let long = "n".repeat(64);
    for (args, needle) in [
        (
            ["--namespaces", "team-a,Team-B"],
            r#"error: --namespaces: Invalid value: "Team-B": a lowercase RFC 1123 label must consist of"#,
        ),
        (
            ["--namespaces", "a.b"],
            r#"error: --namespaces: Invalid value: "a.b": must not contain dots"#,
        ),
        (
            ["--namespaces", "ok,,x"],
            r#"error: --namespaces: Invalid value: "": a lowercase RFC 1123 label"#,
        ),
        (
            ["--namespaces", &long],
            "must be no more than 63 characters",
        ),
        (
            ["--namespace", "under_score"],
            r#"error: --namespace: Invalid value: "under_score""#,
        ),
    ] {
        let mut all = vec!["translate", "-f", "in.yaml"];
        all.extend_from_slice(&args);
        let out = nimbus(&all, &[("in.yaml", &format!("{INTENT}---{BINDING}"))]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            err.contains(needle),
            "{args:?}: expected `{needle}` in: {err}"
        );
    }
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
    // What enforcing does, plainly, and what Audit does per engine.
    let out = nimbus(&["explain", "dnsManipulation"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("netpol: a NetworkPolicy cuts EVERY egress of the selected pods except DNS"),
        "{text}"
    );
    assert!(
        text.contains("netpol: writes nothing (NoAuditForm)")
            && text.contains("kubearmor: the same objects, every action Audit"),
        "{text}"
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

/// Files are taken as arguments (as Kyverno's CLI takes them) as well as with `-f` (as
/// kubectl does), with the same result; with neither, the usage error says what is missing.
#[test]
fn files_as_arguments_or_with_dash_f() {
    let files = [("intent.yaml", INTENT), ("binding.yaml", BINDING)];
    for command in ["validate", "translate"] {
        let flagged = nimbus(
            &[command, "-f", "intent.yaml", "-f", "binding.yaml"],
            &files,
        );
        assert_eq!(
            flagged.status.code(),
            Some(0),
            "{command}: {}",
            stderr(&flagged)
        );
        assert!(!flagged.stdout.is_empty(), "{command} printed nothing");
        for args in [
            vec![command, "intent.yaml", "binding.yaml"],
            vec![command, "-f", "intent.yaml", "binding.yaml"],
        ] {
            let out = nimbus(&args, &files);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&flagged.stdout),
                "{args:?}"
            );
        }
        let out = nimbus(&[command], &[]);
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        assert!(stderr(&out).contains("<FILE>"), "{}", stderr(&out));
    }
}

/// Runs `nimbus <args>` with `input` on standard input.
fn nimbus_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running nimbus");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("writing stdin");
    child.wait_with_output().expect("nimbus output")
}

/// `nimbus bundle X | nimbus validate -` passes for every bundle, namespaced and cluster-wide,
/// and translates to native policies of the engines that enforce the bundle's intents.
#[test]
fn bundles_round_trip_through_validate_and_translate() {
    let frameworks = nimbus(&["frameworks"], &[]);
    assert_eq!(frameworks.status.code(), Some(0), "{}", stderr(&frameworks));
    let listing = String::from_utf8_lossy(&frameworks.stdout).into_owned();
    let bundles: Vec<&str> = listing
        .split("Bundles (`nimbus bundle <name>`):\n")
        .nth(1)
        .expect("bundles listed")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        bundles,
        ["mitre-attack", "cis-kubernetes", "nsa-cisa", "oran-5g"]
    );
    for bundle in bundles {
        for scope in [
            &["-n", "ran", "-l", "app=du"][..],
            &["--cluster", "ran,core", "-l", "app=du"][..],
        ] {
            let out = nimbus(&[&["bundle", bundle][..], scope].concat(), &[]);
            assert_eq!(out.status.code(), Some(0), "{bundle}: {}", stderr(&out));
            let yaml = out.stdout;
            let text = String::from_utf8_lossy(&yaml);
            assert!(
                text.contains(&format!("intent.security.nimbus.com/bundle: {bundle}")),
                "{text}"
            );
            let valid = nimbus_stdin(&["validate", "-"], &yaml);
            assert_eq!(
                valid.status.code(),
                Some(0),
                "{bundle} {scope:?}: {}\n{text}",
                String::from_utf8_lossy(&valid.stdout)
            );
            let translated = nimbus_stdin(&["translate", "-f", "-", "-o", "json"], &yaml);
            assert_eq!(translated.status.code(), Some(0), "{}", stderr(&translated));
            let list: serde_json::Value =
                serde_json::from_slice(&translated.stdout).expect("JSON output");
            assert!(
                list["items"]
                    .as_array()
                    .expect("items")
                    .iter()
                    .any(|o| o["kind"] != "NimbusPolicy" && o["kind"] != "ClusterNimbusPolicy"),
                "{bundle}: no native policy"
            );
        }
    }
    // A broken bundle is refused, so the round trip above can fail.
    let broken = nimbus(&["bundle", "cis-kubernetes", "-n", "Not_A_Namespace"], &[]);
    let valid = nimbus_stdin(&["validate", "-"], &broken.stdout);
    assert_eq!(valid.status.code(), Some(1));
    let unknown = nimbus(&["bundle", "pci", "-n", "a"], &[]);
    assert!(
        stderr(&unknown).contains("unknown bundle `pci`"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn frameworks_and_explain_show_the_controls_and_their_sources() {
    let out = nimbus(&["frameworks"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "mitre-attack - MITRE ATT&CK for Containers v18.1",
        "cis-kubernetes - CIS Kubernetes Benchmark v1.12.0",
        "nsa-cisa - NSA/CISA Kubernetes Hardening Guide",
        "mitre-fight - MITRE FiGHT (5G) v3.0.1",
        "  T1611      Escape to Host",
    ] {
        assert!(text.contains(line), "{line:?} missing:\n{text}");
    }
    let out = nimbus(&["explain", "assessTLS"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("partially addresses MITRE FiGHT (5G) FGT5011")
            && text.contains("Reference: MITRE ATT&CK Technique: FGT5011"),
        "{text}"
    );
    let out = nimbus(&["explain", "cocoWorkload"], &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no current control: confidential"));
}

/// Offline, the clusternetworkpolicy engine gives every cluster binding's policy a priority of
/// its own, as the operator does: two of one intent never share one (which would leave their
/// order to the implementation).
#[test]
fn translated_cluster_network_policies_get_priorities_of_their_own() {
    let binding = |name: &str, app: &str| {
        format!(
            "apiVersion: intent.security.nimbus.com/v1alpha1\nkind: ClusterSecurityIntentBinding\n\
             metadata: {{name: {name}}}\nspec:\n  intents: [{{name: dns}}]\n  selector: \
             {{nsSelector: {{matchNames: [\"*\"]}}, workloadSelector: {{matchLabels: {{app: {app}}}}}}}\n"
        )
    };
    let input = format!(
        "{INTENT}---\n{}---\n{}",
        binding("b-one", "web"),
        binding("a-two", "api")
    );
    let out = nimbus(
        &[
            "translate",
            "-f",
            "in.yaml",
            "--engines",
            "clusternetworkpolicy",
            "-o",
            "json",
        ],
        &[("in.yaml", &input)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON List");
    let objects = list["items"].as_array().expect("items");
    let priorities: std::collections::BTreeMap<&str, i64> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterNetworkPolicy")
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap(),
                o["spec"]["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        priorities,
        [
            ("a-two-dnsmanipulation", 100),
            ("b-one-dnsmanipulation", 101)
        ]
        .into()
    );
}

/// `nimbus bundle X --cluster … --ocm NS/NAME` prints one OCM Policy whose templates are
/// exactly the bundle's objects, with `--canary` the binding's mode taken from the cluster's
/// label (the hub template the fleet test delivers with OCM's own controllers); without a
/// ClusterSecurityIntentBinding to carry (`--namespace`), it is refused.
#[test]
fn a_bundle_as_an_ocm_policy_carries_exactly_its_objects() {
    let yaml = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = nimbus(args, &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_yaml_ng::Deserializer::from_slice(&out.stdout)
            .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
            .collect()
    };
    let plain = yaml(&["bundle", "nsa-cisa", "--cluster", "shop"]);
    for canary in [false, true] {
        let mut args = vec![
            "bundle",
            "nsa-cisa",
            "--cluster",
            "shop",
            "--ocm",
            "policies/nsa",
        ];
        if canary {
            args.push("--canary");
        }
        let policies = yaml(&args);
        assert_eq!(policies.len(), 1, "{policies:#?}");
        let policy = &policies[0];
        assert_eq!(policy["kind"], "Policy");
        assert_eq!(policy["apiVersion"], "policy.open-cluster-management.io/v1");
        assert_eq!(policy["metadata"]["namespace"], "policies");
        assert_eq!(policy["metadata"]["name"], "nsa");
        assert!(
            policy["spec"].get("remediationAction").is_none(),
            "{policy:#?}"
        );
        let mut templates: Vec<serde_json::Value> = (policy["spec"]["policy-templates"]
            .as_array()
            .expect("policy-templates")
            .iter())
        .map(|t| t["objectDefinition"].clone())
        .collect();
        for template in &mut templates {
            let labels = &mut template["metadata"]["labels"];
            let mode = labels
                .as_object_mut()
                .and_then(|l| l.remove(nimbus_api::MODE_LABEL));
            let binding = template["kind"] == "ClusterSecurityIntentBinding";
            assert_eq!(
                mode.as_ref().and_then(|m| m.as_str()),
                (canary && binding).then_some(nimbus_core::fleet::MODE_FROM_CLUSTER),
                "{template:#?}"
            );
        }
        assert_eq!(templates, plain);
    }
    let refused = nimbus(
        &["bundle", "nsa-cisa", "-n", "shop", "--ocm", "policies/nsa"],
        &[],
    );
    assert_ne!(refused.status.code(), Some(0));
}
