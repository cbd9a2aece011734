//! `nimbus dev` as a new user runs it: the built binary, from a directory that is not the
//! repository, on its own control plane.

use std::process::Command;

#[test]
fn nimbus_dev_runs_from_anywhere_and_ends_with_a_readable_summary() {
    let (elsewhere, stdout, stderr) = dev_once(&[]);

    // Every example binding and its policies, in force.
    let table = |header: &str| -> Vec<&str> {
        stdout
            .split("\n\n")
            .find(|t| t.starts_with(header))
            .unwrap_or_else(|| panic!("no {header} table in:\n{stdout}"))
            .lines()
            .skip(1)
            .collect()
    };
    let bindings = table("BINDING");
    for binding in [
        "SecurityIntentBinding default/web-hardening",
        "SecurityIntentBinding default/backend-dns",
        "ClusterSecurityIntentBinding no-exfiltration",
        "ClusterSecurityIntentBinding team-sandboxes",
    ] {
        let row = bindings
            .iter()
            .find(|row| row.starts_with(binding))
            .unwrap_or_else(|| panic!("{binding} missing from:\n{stdout}"));
        assert!(
            row.split_whitespace().any(|cell| cell == "True"),
            "{binding} is not Ready: {row}"
        );
    }
    let policies = table("POLICY");
    assert!(policies.len() >= bindings.len(), "{stdout}");
    assert!(
        policies
            .iter()
            .all(|row| row.split_whitespace().any(|cell| cell == "True")),
        "a policy is not Ready:\n{stdout}"
    );
    let natives = table("NATIVE OBJECT");
    for kind in ["NetworkPolicy/", "KubeArmorPolicy/", "KyvernoPolicy/"] {
        assert!(
            natives.iter().any(|row| row.contains(kind)),
            "no {kind} in:\n{stdout}"
        );
    }

    // The posture API, aggregated into kube-apiserver, sees the example workloads.
    let postures = table("WORKLOAD POSTURE");
    for (workload, verdict) in [
        ("default/deployment-web", "Protected"),
        // backend-dns selects it by CEL (matchExpressions), which KubeArmor cannot express.
        ("default/deployment-api", "Partial"),
        ("default/pod-debug", "Unprotected"),
    ] {
        let row = postures
            .iter()
            .find(|row| row.starts_with(workload))
            .unwrap_or_else(|| panic!("{workload} missing from:\n{stdout}"));
        assert!(
            row.split_whitespace().any(|cell| cell == verdict),
            "{workload} is not {verdict}: {row}"
        );
    }

    // A healthy start says nothing alarming.
    let alarming: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .collect();
    assert!(alarming.is_empty(), "{alarming:#?}");
    // The kubeconfig it offers is removed when it stops.
    assert!(!elsewhere.path().join("nimbus-dev.kubeconfig").exists());
}

/// `nimbus dev --fleet` as a new user runs it: an Open Cluster Management hub and two managed
/// clusters, the fleet examples on the hub, and the roll-up printed once every cluster has
/// reported every template (the command waits for it: what the operators judged, synced to the
/// hub by OCM's controllers).
#[test]
fn nimbus_dev_fleet_runs_from_anywhere_and_ends_with_the_roll_up() {
    let started = std::time::Instant::now();
    let (elsewhere, stdout, stderr) = dev_once(&["--fleet"]);
    println!("nimbus dev --fleet --once took {:?}", started.elapsed());

    let alarming: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .collect();

    // The roll-up: each template of the example Policy, Compliant on both clusters; the
    // canary audits the binding (shadow mode), the other enforces it.
    let rollup: Vec<Vec<&str>> = stdout
        .split("\n\n")
        .find(|t| t.starts_with("POLICY "))
        .unwrap_or_else(|| panic!("no roll-up in:\n{stdout}\nwarnings: {alarming:#?}"))
        .lines()
        .skip(1)
        .map(|row| row.split_whitespace().collect())
        .collect();
    // Columns: POLICY CLUSTER TEMPLATE COMPLIANCE PROTECTED AUDITED EXCEPTED UNPROTECTED
    // ENGINES SINCE MESSAGE, one word each but the message.
    let counted = [
        ("cluster1", "audited", ["0", "1"]),
        ("cluster2", "protected", ["1", "0"]),
    ];
    for (cluster, binding_says, protected_audited) in counted {
        for template in [
            "SecurityIntent/fleet-dns",
            "SecurityIntent/fleet-tmp-exec",
            "ClusterSecurityIntentBinding/shop-hardening",
        ] {
            let row = rollup
                .iter()
                .find(|row| row.get(1) == Some(&cluster) && row.get(2) == Some(&template))
                .unwrap_or_else(|| panic!("no row of {template} on {cluster} in:\n{stdout}"));
            assert_eq!(row.get(3), Some(&"Compliant"), "{row:?}");
            if template.starts_with("ClusterSecurityIntentBinding/") {
                let message = row[10..].join(" ");
                assert!(message.contains(binding_says), "{cluster}: {message}");
                assert_eq!(row[4..6], protected_audited, "{cluster}: {row:?}");
            }
        }
    }
    assert_eq!(rollup.len(), 6, "{stdout}");
    assert!(alarming.is_empty(), "{alarming:#?}");
    // The kubeconfigs it offers (the hub's, each managed cluster's) are removed when it stops.
    let left: Vec<_> = std::fs::read_dir(elsewhere.path())
        .expect("the directory it ran in")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Runs `nimbus dev <args> --once` from a directory outside the repository, with info logs;
/// that directory (to look at what it left) and its standard output and error, once it has
/// ended successfully.
fn dev_once(args: &[&str]) -> (tempfile::TempDir, String, String) {
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .arg("dev")
        .args(args)
        .arg("--once")
        .current_dir(elsewhere.path())
        .env("NIMBUS_LOG", "info")
        .env_remove("RUST_LOG")
        .output()
        .expect("running nimbus dev");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "nimbus dev {args:?}:\n{stdout}\n{stderr}"
    );
    (elsewhere, stdout, stderr)
}
