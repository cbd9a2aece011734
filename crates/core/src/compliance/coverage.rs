//! Coverage: per framework and control, on how many workloads an intent addressing the control
//! is enforced with proof, enforced without proof, only audited, or absent. "Proof" is an
//! efficacy test (crates/nimbus/tests/efficacy) that measures the engine's enforcement of the
//! intent with the engine's own code; [`PROOFS`] lists them, and a test keeps that list and the
//! efficacy tests in agreement.

use super::{Framework, MAPPINGS, controls};
use crate::engines::Engine;
use nimbus_api::posture::{
    ControlCoverage, EngineState, FrameworkCoverage, IntentCoverage, Verdict, WorkloadPosture,
};

/// One efficacy test that proves an engine enforces an intent.
#[derive(Debug)]
pub struct Proof {
    pub intent: &'static str,
    pub engine: Engine,
    /// The efficacy test function.
    pub test: &'static str,
    /// Its matrix, as the `<!-- efficacy:ID -->` block of docs/src/proofs.md shows it.
    pub matrix: &'static str,
}

const fn proof(
    intent: &'static str,
    engine: Engine,
    test: &'static str,
    matrix: &'static str,
) -> Proof {
    Proof {
        intent,
        engine,
        test,
        matrix,
    }
}

/// The ClusterNetworkPolicy engine's test: a binary of its own (`tests/clusternetworkpolicy.rs`),
/// which restarts the operator with another engine preference.
const CLUSTER_NETWORK_POLICY_TEST: &str =
    "only_the_admin_tier_keeps_a_cluster_intent_a_tenant_reopens_and_switching_leaves_no_gap";

/// Every enforcement the efficacy tests prove (Kyverno's legacy and CEL kinds alike: the engine
/// is `kyverno` either way). KubeArmor and k8tls have none: no KubeArmor or k8tls runtime runs
/// in the tests, so what they enforce is covered but unproven.
pub static PROOFS: &[Proof] = &[
    proof(
        "dnsManipulation",
        Engine::NetworkPolicy,
        "dns_manipulation_allows_only_cluster_dns",
        "netpol-dnsManipulation",
    ),
    proof(
        "denyExternalNetworkAccess",
        Engine::NetworkPolicy,
        "deny_external_network_access_keeps_pods_off_external_networks",
        "netpol-denyExternalNetworkAccess",
    ),
    proof(
        "dnsManipulation",
        Engine::ClusterNetworkPolicy,
        CLUSTER_NETWORK_POLICY_TEST,
        "clusternetworkpolicy-dnsManipulation",
    ),
    proof(
        "denyExternalNetworkAccess",
        Engine::ClusterNetworkPolicy,
        CLUSTER_NETWORK_POLICY_TEST,
        "clusternetworkpolicy-denyExternalNetworkAccess",
    ),
    proof(
        "escapeToHost",
        Engine::Kyverno,
        "escape_to_host_baseline_denies_privileged_pods_where_bound",
        "kyverno-escapeToHost-baseline",
    ),
    proof(
        "escapeToHost",
        Engine::Kyverno,
        "escape_to_host_restricted_denies_root_pods_where_bound",
        "kyverno-escapeToHost-restricted",
    ),
    proof(
        "escapeToHost",
        Engine::Kyverno,
        "escape_to_host_baseline_in_cel_kinds_denies_privileged_pods_where_bound",
        "kyverno-cel-escapeToHost-baseline",
    ),
    proof(
        "escapeToHost",
        Engine::Kyverno,
        "escape_to_host_restricted_in_cel_kinds_denies_root_pods_where_bound",
        "kyverno-cel-escapeToHost-restricted",
    ),
    proof(
        "cocoWorkload",
        Engine::Kyverno,
        "coco_workload_in_cel_kinds_sets_the_runtime_class_of_selected_deployments",
        "kyverno-cel-cocoWorkload",
    ),
    proof(
        "escapeToHost",
        Engine::Admission,
        "admission_escape_to_host_baseline_denies_privileged_pods_where_bound",
        "admission-escapeToHost-baseline",
    ),
    proof(
        "escapeToHost",
        Engine::Admission,
        "admission_escape_to_host_restricted_denies_root_pods_where_bound",
        "admission-escapeToHost-restricted",
    ),
    proof(
        "cocoWorkload",
        Engine::Admission,
        "admission_coco_workload_sets_the_runtime_class_of_new_deployments",
        "admission-cocoWorkload",
    ),
    proof(
        "unAuthorizedSaTokenAccess",
        Engine::Admission,
        "admission_sa_token_access_unmounts_the_token_of_new_pods",
        "admission-unAuthorizedSaTokenAccess",
    ),
    proof(
        "cocoWorkload",
        Engine::Kyverno,
        "coco_workload_sets_the_runtime_class_of_selected_deployments",
        "kyverno-cocoWorkload",
    ),
    proof(
        "virtualPatch",
        Engine::Kyverno,
        "virtual_patch_generates_the_patches_where_a_selected_pod_runs_the_image",
        "kyverno-virtualPatch",
    ),
    proof(
        "virtualPatch",
        Engine::Kyverno,
        "virtual_patch_in_cel_kinds_generates_the_patches_where_a_selected_pod_runs_the_image",
        "kyverno-cel-virtualPatch",
    ),
    proof(
        "namespaceSandbox",
        Engine::Rbac,
        "namespace_sandbox_grants_its_role_in_selected_namespaces_only",
        "rbac-namespaceSandbox",
    ),
];

/// Efficacy matrices that prove something other than enforcement, so no [`Proof`] names them.
pub static NOT_ENFORCEMENT: &[(&str, &str)] = &[
    (
        "kyverno-escapeToHost-audit",
        "audit and shadow mode admit and report: nothing is enforced",
    ),
    (
        "kyverno-cel-escapeToHost-audit",
        "audit and shadow mode admit and report: nothing is enforced",
    ),
    (
        "admission-escapeToHost-audit",
        "audit admits and warns: nothing is enforced",
    ),
    (
        "pss-differences",
        "the deliberate differences of escapeToHost's engines from PodSecurity admission, which \
         the differential allows: a table of exceptions, not of enforcement",
    ),
];

/// The proofs that `engine` enforces `intent`.
pub fn proofs(intent: &str, engine: Engine) -> impl Iterator<Item = &'static Proof> + '_ {
    PROOFS
        .iter()
        .filter(move |p| p.intent == intent && p.engine == engine)
}

/// How one control stands on one workload, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Proven,
    Unproven,
    Audited,
    NotCovered,
}

/// How one bound intent stands on its workload: proven when an engine with a proof enforces
/// it, unproven when only engines without one do, audited when an engine audits it or its
/// verdict is `Audited`, not covered when an exception lets the workload out. Each engine acts on its own share of the intent; one in force is
/// enough for the control to be covered, because the controls an intent maps to are the ones
/// its engines' effects address together.
fn intent_status(intent: &IntentCoverage) -> (Status, Vec<&'static str>) {
    // An exception lets the workload out: its engines enforce the intent elsewhere, not here.
    if intent.verdict == Verdict::Excepted {
        return (Status::NotCovered, Vec::new());
    }
    let mut proven = Vec::new();
    let mut enforced = false;
    let mut audited = intent.verdict == Verdict::Audited;
    for e in &intent.engines {
        match e.state {
            EngineState::Enforcing | EngineState::External => {
                enforced = true;
                if let Ok(engine) = e.engine.parse::<Engine>() {
                    proven.extend(proofs(&intent.id, engine).map(|p| p.matrix));
                }
            }
            EngineState::Auditing => audited = true,
            EngineState::NotInstalled
            | EngineState::Pending
            | EngineState::Failed
            | EngineState::NotLive => {}
        }
    }
    let status = match (proven.is_empty(), enforced, audited) {
        (false, ..) => Status::Proven,
        (true, true, _) => Status::Unproven,
        (true, false, true) => Status::Audited,
        (true, false, false) => Status::NotCovered,
    };
    (status, proven)
}

/// How `control` of `framework` stands on `workload`, and the proofs behind it.
pub fn status(
    workload: &WorkloadPosture,
    framework: Framework,
    control: &str,
) -> (Status, Vec<&'static str>) {
    let mut best = (Status::NotCovered, Vec::new());
    for intent in &workload.intents {
        let addresses = MAPPINGS
            .iter()
            .any(|m| m.framework == framework && m.control == control && m.intent == intent.id);
        if !addresses {
            continue;
        }
        let (status, proofs) = intent_status(intent);
        if status < best.0 {
            best.0 = status;
        }
        if status == Status::Proven {
            best.1.extend(proofs);
        }
    }
    best.1.sort_unstable();
    best.1.dedup();
    best
}

/// Every framework's coverage on `workloads`; empty when there are none.
pub fn coverage(workloads: &[&WorkloadPosture]) -> Vec<FrameworkCoverage> {
    if workloads.is_empty() {
        return Vec::new();
    }
    Framework::ALL
        .into_iter()
        .map(|framework| {
            let controls: Vec<ControlCoverage> = controls(framework)
                .into_iter()
                .map(|c| {
                    let mut out = ControlCoverage {
                        id: c.id.into(),
                        name: c.name.into(),
                        proven: 0,
                        unproven: 0,
                        audited: 0,
                        not_covered: 0,
                        proofs: Vec::new(),
                    };
                    for w in workloads {
                        let (status, proofs) = status(w, framework, c.id);
                        match status {
                            Status::Proven => out.proven += 1,
                            Status::Unproven => out.unproven += 1,
                            Status::Audited => out.audited += 1,
                            Status::NotCovered => out.not_covered += 1,
                        }
                        out.proofs.extend(proofs.into_iter().map(Into::into));
                    }
                    out.proofs.sort_unstable();
                    out.proofs.dedup();
                    out
                })
                .collect();
            framework_coverage(framework, workloads.len() as u32, controls)
        })
        .collect()
}

/// Sums namespaces' coverage of the same framework into the cluster's.
pub fn roll_up<'a>(
    parts: impl IntoIterator<Item = &'a FrameworkCoverage>,
) -> Vec<FrameworkCoverage> {
    let mut out: Vec<FrameworkCoverage> = Vec::new();
    for part in parts {
        let Some(framework) = part.framework.parse::<Framework>().ok() else {
            continue;
        };
        let i = match out.iter().position(|f| f.framework == part.framework) {
            Some(i) => i,
            None => {
                out.push(framework_coverage(framework, 0, Vec::new()));
                out.len() - 1
            }
        };
        let total = &mut out[i];
        total.workloads += part.workloads;
        for c in &part.controls {
            match total.controls.iter_mut().find(|t| t.id == c.id) {
                Some(t) => {
                    t.proven += c.proven;
                    t.unproven += c.unproven;
                    t.audited += c.audited;
                    t.not_covered += c.not_covered;
                    t.proofs.extend(c.proofs.iter().cloned());
                    t.proofs.sort_unstable();
                    t.proofs.dedup();
                }
                None => total.controls.push(c.clone()),
            }
        }
    }
    for f in &mut out {
        let framework = f.framework.parse::<Framework>().expect("parsed above");
        *f = framework_coverage(framework, f.workloads, std::mem::take(&mut f.controls));
    }
    out.sort_by_key(|f| f.framework.parse::<Framework>().ok());
    out
}

fn framework_coverage(
    framework: Framework,
    workloads: u32,
    controls: Vec<ControlCoverage>,
) -> FrameworkCoverage {
    let cells: u64 = controls.len() as u64 * u64::from(workloads);
    let proven: u64 = controls.iter().map(|c| u64::from(c.proven)).sum();
    let covered: u64 = proven + controls.iter().map(|c| u64::from(c.unproven)).sum::<u64>();
    let percent = |n: u64| (n * 100).checked_div(cells).unwrap_or(0) as u32;
    FrameworkCoverage {
        framework: framework.name().to_owned(),
        title: format!("{} {}", framework.title(), framework.version()),
        workloads,
        score: percent(covered),
        proven_score: percent(proven),
        controls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_api::posture::{EngineCoverage, Reference, WorkloadRef};

    fn intent(id: &str, verdict: Verdict, engines: &[(&str, EngineState)]) -> IntentCoverage {
        IntentCoverage {
            intent: None,
            id: id.into(),
            bundle: None,
            action: "Block".into(),
            written_by: None,
            written_at: None,
            binding: None,
            policy: Reference {
                kind: "NimbusPolicy".into(),
                namespace: Some("ns".into()),
                name: "p".into(),
            },
            verdict,
            engines: engines
                .iter()
                .map(|(e, s)| EngineCoverage {
                    engine: (*e).into(),
                    state: *s,
                    objects: vec![],
                })
                .collect(),
            reasons: vec![],
            tenant_proof: None,
            liveness: None,
            exceptions: Vec::new(),
        }
    }

    fn workload(name: &str, intents: Vec<IntentCoverage>) -> WorkloadPosture {
        WorkloadPosture {
            api_version: "v".into(),
            kind: "WorkloadPosture".into(),
            metadata: Default::default(),
            workload: WorkloadRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: name.into(),
                pods: 1,
            },
            verdict: Verdict::Partial,
            intents,
            reasons: vec![],
            preview: None,
        }
    }

    use EngineState::*;

    #[test]
    fn a_control_stands_as_its_best_addressing_intent() {
        let cases: &[(&str, Vec<IntentCoverage>, &str, Framework, Status)] = &[
            (
                "kyverno enforcing escapeToHost: proven",
                vec![intent(
                    "escapeToHost",
                    Verdict::Partial,
                    &[("kyverno", Enforcing), ("kubearmor", NotInstalled)],
                )],
                "5.2.2",
                Framework::Cis,
                Status::Proven,
            ),
            (
                "kubearmor only: unproven",
                vec![intent(
                    "unAuthorizedSaTokenAccess",
                    Verdict::Protected,
                    &[("kubearmor", Enforcing)],
                )],
                "5.1.6",
                Framework::Cis,
                Status::Unproven,
            ),
            (
                "audit form: audited",
                vec![intent(
                    "escapeToHost",
                    Verdict::Audited,
                    &[("kyverno", Auditing)],
                )],
                "C-0057",
                Framework::Nsa,
                Status::Audited,
            ),
            (
                "pending engine: not covered",
                vec![intent(
                    "escapeToHost",
                    Verdict::Partial,
                    &[("kyverno", Pending)],
                )],
                "T1611",
                Framework::Attack,
                Status::NotCovered,
            ),
            (
                "an intent that does not address the control",
                vec![intent(
                    "dnsManipulation",
                    Verdict::Protected,
                    &[("netpol", Enforcing)],
                )],
                "T1611",
                Framework::Attack,
                Status::NotCovered,
            ),
            (
                "the best of two intents",
                vec![
                    intent(
                        "preventExecutionFromTempOrLogsFolders",
                        Verdict::Protected,
                        &[("kubearmor", Enforcing)],
                    ),
                    intent(
                        "denyExternalNetworkAccess",
                        Verdict::Protected,
                        &[("netpol", Enforcing)],
                    ),
                ],
                "T1190",
                Framework::Attack,
                Status::Proven,
            ),
        ];
        for (what, intents, control, framework, want) in cases {
            let w = workload("w", intents.clone());
            assert_eq!(status(&w, *framework, control).0, *want, "{what}");
        }
    }

    #[test]
    fn coverage_counts_workloads_scores_and_rolls_up() {
        let guarded = workload(
            "guarded",
            vec![intent(
                "escapeToHost",
                Verdict::Partial,
                &[("kyverno", Enforcing), ("kubearmor", NotInstalled)],
            )],
        );
        let bare = workload("bare", vec![]);
        let cov = coverage(&[&guarded, &bare]);
        assert_eq!(cov.len(), Framework::ALL.len());
        let cis = cov
            .iter()
            .find(|f| f.framework == "cis-kubernetes")
            .unwrap();
        let c522 = cis.controls.iter().find(|c| c.id == "5.2.2").unwrap();
        assert_eq!(
            (c522.proven, c522.unproven, c522.audited, c522.not_covered),
            (1, 0, 0, 1)
        );
        assert_eq!(
            c522.proofs,
            [
                "kyverno-cel-escapeToHost-baseline",
                "kyverno-cel-escapeToHost-restricted",
                "kyverno-escapeToHost-baseline",
                "kyverno-escapeToHost-restricted"
            ]
        );
        // 7 of CIS's 10 controls are escapeToHost's, on 1 of 2 workloads.
        assert_eq!(cis.controls.len(), 10);
        assert_eq!((cis.score, cis.proven_score), (35, 35));
        let total = roll_up(cov.iter().chain(cov.iter()));
        let cis = total
            .iter()
            .find(|f| f.framework == "cis-kubernetes")
            .unwrap();
        assert_eq!((cis.workloads, cis.score), (4, 35));
        assert_eq!(cis.controls[1].proven, 2);
        assert!(coverage(&[]).is_empty());
    }
}
