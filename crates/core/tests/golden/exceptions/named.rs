//! Exceptions naming workloads (`spec.workloads`): the admission engine and Kyverno's CEL
//! kinds leave out the named workloads, the objects they make and their pods; Kyverno's legacy
//! kinds and NetworkPolicy, which cannot tell them from their siblings with the same labels,
//! keep enforcing and say so.

use super::{kinds_of, legacy_exception, network_exception, translated};
use crate::builders::*;
use nimbus_api::{ExceptedWorkload, WorkloadKind};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    EngineSet, Environment, KyvernoApi, PolicyInput, Translation, translate,
};
use nimbus_core::exceptions::Excepted;
use serde_json::json;

fn naming(e: Excepted, workloads: &[(WorkloadKind, &str)]) -> Excepted {
    Excepted {
        workloads: workloads
            .iter()
            .map(|(kind, name)| ExceptedWorkload {
                kind: *kind,
                name: (*name).to_owned(),
            })
            .collect(),
        ..e
    }
}

/// The CEL of `legacy_exception` naming Deployment `agent` and CronJob `nightly`.
const NAMED_CEL: &str = "(object.metadata.?namespace.orValue('') == \"shop\" && \
    object.metadata.?labels.orValue({})[?\"tier\"] == optional.of(\"legacy\") && \
    ((object.kind == 'Deployment' && object.metadata.?name.orValue('') == \"agent\") || \
    (object.kind == 'ReplicaSet' && object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'Deployment' && o.name == \"agent\")) || \
    (object.kind == 'Pod' && object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'ReplicaSet' && o.name.matches(\"^agent-[a-z0-9]+$\")))) || \
    ((object.kind == 'CronJob' && object.metadata.?name.orValue('') == \"nightly\") || \
    (object.kind == 'Job' && object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'CronJob' && o.name == \"nightly\")) || \
    (object.kind == 'Pod' && object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'Job' && o.name.matches(\"^nightly-[0-9]+$\")))))";

fn named() -> Excepted {
    naming(
        legacy_exception(),
        &[
            (WorkloadKind::Deployment, "agent"),
            (WorkloadKind::CronJob, "nightly"),
        ],
    )
}

fn warnings(t: &Translation) -> Vec<(&'static str, bool, String)> {
    t.problems
        .iter()
        .map(|p| (p.reason, p.blocking, p.message.clone()))
        .collect()
}

#[test]
fn the_admission_engine_does_not_judge_the_named_workloads_nor_what_they_make() {
    let t = translated(KyvernoApi::Legacy, Engine::Admission, vec![named()]);
    let conditions = &kinds_of(&t, "ValidatingAdmissionPolicy")[0]["spec"]["matchConditions"];
    assert_eq!(
        conditions[1],
        json!({"name": "not-excepted", "expression": format!("!({NAMED_CEL})")})
    );
    assert_eq!(warnings(&t), vec![], "honoured");
}

#[test]
fn kyverno_cel_lets_out_the_named_workloads_nor_what_they_make() {
    let t = translated(KyvernoApi::Cel, Engine::Kyverno, vec![named()]);
    let got = kinds_of(&t, "PolicyException");
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(
        got[0]["spec"]["matchConditions"],
        json!([{"name": "excepted-workloads", "expression": NAMED_CEL}])
    );
    assert_eq!(warnings(&t), vec![], "honoured");
}

#[test]
fn kyverno_legacy_keeps_enforcing_on_named_workloads_and_says_so() {
    let by_labels = legacy_exception();
    let mut by_name = named();
    by_name.name = "named-agent".into();
    let t = translated(
        KyvernoApi::Legacy,
        Engine::Kyverno,
        vec![by_labels, by_name],
    );
    // The exception by labels alone is written; the one naming workloads is not.
    assert_eq!(
        names(&kinds_of(&t, "PolicyException")),
        vec!["web-csib-escapetohost-vendor-agent"]
    );
    assert_eq!(
        warnings(&t),
        vec![(
            "ExceptionNotHonoured",
            false,
            "kyverno selects workloads by labels only and cannot leave out only the workloads \
             an exception names: it still enforces intent `escapeToHost` on the workloads \
             SecurityIntentException named-agent let out"
                .to_owned()
        )]
    );
}

#[test]
fn network_policies_keep_enforcing_on_named_workloads_and_say_so() {
    let np = sib_np(
        selector(),
        vec![rule("dnsManipulation", "Block", None, json!({}))],
    );
    let run = |exceptions| {
        let mut input = PolicyInput::namespaced(&np, UID);
        input.exceptions = exceptions;
        translate(&input, &Environment::default(), &EngineSet::all())
    };
    let named = naming(
        network_exception(&[("tier", "legacy")]),
        &[(WorkloadKind::StatefulSet, "agent")],
    );
    let t = run(vec![named]);
    // The pods stay selected: the same NetworkPolicy as with no exception.
    assert_eq!(
        of(&t, Engine::NetworkPolicy),
        of(&run(vec![]), Engine::NetworkPolicy)
    );
    let netpol: Vec<(&str, bool)> = t
        .problems
        .iter()
        .filter(|p| p.message.starts_with("netpol "))
        .map(|p| (p.reason, p.blocking))
        .collect();
    assert_eq!(
        netpol,
        vec![("ExceptionNotHonoured", false)],
        "{:#?}",
        t.problems
    );
}

/// KubeArmor (escapeToHost, a cluster binding's policy in `shop`) and the ClusterNetworkPolicy
/// engine (dnsManipulation, a cluster binding's cluster policy) select pods by labels: an
/// exception naming workloads leaves their objects as with no exception, and each says it
/// still enforces.
#[test]
fn kubearmor_and_cluster_network_policies_keep_enforcing_on_named_workloads_and_say_so() {
    use nimbus_core::engines::Preference;
    let named = |intent: &str| {
        let mut e = naming(
            network_exception(&[("tier", "legacy")]),
            &[(WorkloadKind::Deployment, "agent")],
        );
        e.intents = [intent.to_owned()].into();
        e
    };
    let says = |t: &Translation, engine: &str| {
        t.problems.iter().any(|p| {
            p.reason == "ExceptionNotHonoured"
                && !p.blocking
                && p.message.starts_with(&format!(
                    "{engine} selects workloads by labels only and cannot leave out only the \
                     workloads an exception names"
                ))
        })
    };

    let np = csib_np(selector(), vec![block("escapeToHost", "no host")]);
    let kubearmor = |exceptions| {
        let mut input = PolicyInput::namespaced(&np, UID);
        input.exceptions = exceptions;
        translate(&input, &Environment::default(), &EngineSet::all())
    };
    let t = kubearmor(vec![named("escapeToHost")]);
    assert_eq!(
        of(&t, Engine::KubeArmor),
        of(&kubearmor(vec![]), Engine::KubeArmor)
    );
    assert!(says(&t, "kubearmor"), "{:#?}", t.problems);

    let cwnp = cwnp(
        all_namespaces(),
        selector(),
        vec![rule("dnsManipulation", "Block", None, json!({}))],
    );
    let cluster_network = |exceptions| {
        let mut input = PolicyInput::cluster(&cwnp, UID);
        input.exceptions = exceptions;
        let engines = EngineSet {
            preference: Preference::new(&[Engine::ClusterNetworkPolicy]).unwrap(),
            ..EngineSet::all()
        };
        translate(&input, &Environment::default(), &engines)
    };
    let t = cluster_network(vec![named("dnsManipulation")]);
    assert_eq!(
        of(&t, Engine::ClusterNetworkPolicy),
        of(&cluster_network(vec![]), Engine::ClusterNetworkPolicy)
    );
    assert!(says(&t, "clusternetworkpolicy"), "{:#?}", t.problems);
}
