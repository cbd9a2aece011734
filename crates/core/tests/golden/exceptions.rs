//! SecurityIntentExceptions in force: what each engine that honours them writes (Kyverno's
//! PolicyExceptions in both of its APIs, a match condition on the admission engine's policy,
//! NetworkPolicies that leave the excepted pods out), and the warning of an engine that does
//! not.

use crate::builders::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use nimbus_api::PodSecurityControl;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    EngineSet, Environment, KyvernoApi, PolicyInput, Preference, Translation, translate,
};
use nimbus_core::exceptions::{Excepted, ExceptionKind};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

mod named;

pub(crate) fn legacy_exception() -> Excepted {
    Excepted {
        kind: Default::default(),
        name: "vendor-agent".into(),
        namespace: NS.into(),
        selector: LabelSelector {
            match_labels: Some(BTreeMap::from([("tier".into(), "legacy".into())])),
            ..LabelSelector::default()
        },
        workloads: Vec::new(),
        intents: BTreeSet::from(["escapeToHost".into()]),
        reason: "until the vendor's 2.4 release".into(),
        expires_at: Timestamp::from_second(1_800_000_000).unwrap(),
        signatures: Default::default(),
        controls: None,
    }
}

/// escapeToHost (baseline) and dnsManipulation bound by the cluster binding to `app: web` in
/// `shop`, translated with the exception in force, preferring `preferred`.
pub(crate) fn translated(
    api: KyvernoApi,
    preferred: Engine,
    exceptions: Vec<Excepted>,
) -> Translation {
    let cwnp = cwnp(
        json!({"matchNames": [NS]}),
        selector(),
        vec![
            block("escapeToHost", "no host"),
            rule("dnsManipulation", "Block", None, json!({})),
        ],
    );
    let mut input = PolicyInput::cluster(&cwnp, UID);
    input.exceptions = exceptions;
    let env = Environment {
        kyverno: api,
        ..Environment::default()
    };
    let engines = EngineSet {
        preference: Preference::new(&[preferred]).unwrap(),
        ..EngineSet::all()
    };
    translate(&input, &env, &engines)
}

pub(crate) fn kinds_of(t: &Translation, kind: &str) -> Vec<Value> {
    of(t, Engine::Kyverno)
        .into_iter()
        .chain(of(t, Engine::Admission))
        .filter(|o| o["kind"] == kind)
        .collect()
}

#[test]
fn kyverno_lets_the_excepted_workloads_out_of_its_legacy_cluster_policy() {
    let t = translated(
        KyvernoApi::Legacy,
        Engine::Kyverno,
        vec![legacy_exception()],
    );
    let want = json!({
        "apiVersion": "kyverno.io/v2",
        "kind": "PolicyException",
        "metadata": {
            "name": "web-csib-escapetohost-vendor-agent",
            "namespace": NS,
            "annotations": {
                MANAGED_BY: "nimbus-kyverno",
                "exceptions.security.nimbus.com/exception": "SecurityIntentException vendor-agent",
            },
            "labels": {MANAGED_BY: "nimbus-kyverno"},
            "ownerReferences": [cwnp_owner()],
        },
        "spec": {
            "background": true,
            "exceptions": [{
                "policyName": "web-csib-escapetohost",
                "ruleNames": ["pod-security-standard"],
            }],
            "match": {"any": [{"resources": {
                "kinds": ["v1/Pod", "apps/v1/Deployment", "apps/v1/ReplicaSet",
                          "apps/v1/StatefulSet", "apps/v1/DaemonSet",
                          "v1/ReplicationController", "batch/v1/Job", "batch/v1/CronJob"],
                "namespaces": [NS],
                "selector": {"matchLabels": {"tier": "legacy"}},
            }}]},
        },
    });
    assert_objects(&kinds_of(&t, "PolicyException"), &[want]);
}

#[test]
fn a_cluster_exception_never_takes_the_name_of_a_namespace_exception_of_the_same_name() {
    let namespaced = legacy_exception();
    let cluster = Excepted {
        kind: ExceptionKind::Cluster,
        ..legacy_exception()
    };
    let t = translated(
        KyvernoApi::Legacy,
        Engine::Kyverno,
        vec![namespaced, cluster],
    );
    let got = kinds_of(&t, "PolicyException");
    let named: Vec<(&str, &str)> = got
        .iter()
        .map(|o| {
            let meta = &o["metadata"];
            let annotation = &meta["annotations"]["exceptions.security.nimbus.com/exception"];
            (
                meta["name"].as_str().unwrap_or_default(),
                annotation.as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            (
                "web-csib-escapetohost-vendor-agent",
                "SecurityIntentException vendor-agent"
            ),
            (
                "web-csib-escapetohost-vendor-agent-3a489e2c4f",
                "ClusterSecurityIntentException vendor-agent"
            ),
        ]
    );
    assert_eq!(got[0]["spec"], got[1]["spec"], "the same exception, twice");
}

#[test]
fn kyverno_lets_the_excepted_workloads_out_of_both_cel_policies_until_expiry() {
    let t = translated(KyvernoApi::Cel, Engine::Kyverno, vec![legacy_exception()]);
    let got = kinds_of(&t, "PolicyException");
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["apiVersion"], "policies.kyverno.io/v1");
    assert_eq!(
        got[0]["spec"],
        json!({
            "policyRefs": [
                {"kind": "ValidatingPolicy", "name": "web-csib-escapetohost"},
                {"kind": "ValidatingPolicy", "name": "web-csib-escapetohost-ephemeral"},
            ],
            "matchConditions": [{
                "name": "excepted-workloads",
                "expression": "(object.metadata.?namespace.orValue('') == \"shop\" && \
                    object.metadata.?labels.orValue({})[?\"tier\"] == optional.of(\"legacy\"))",
            }],
            "expiresAt": "2027-01-15T08:00:00Z",
        })
    );
}

#[test]
fn the_admission_engine_does_not_judge_the_excepted_workloads() {
    let conditions = |exceptions| {
        let t = translated(KyvernoApi::Legacy, Engine::Admission, exceptions);
        kinds_of(&t, "ValidatingAdmissionPolicy")[0]["spec"]["matchConditions"].clone()
    };
    assert_eq!(
        conditions(vec![]),
        json!([{"name": "pod-spec-written", "expression": conditions(vec![])[0]["expression"]}])
    );
    let excepted = conditions(vec![legacy_exception()]);
    assert_eq!(
        excepted[1],
        json!({
            "name": "not-excepted",
            "expression": "!((object.metadata.?namespace.orValue('') == \"shop\" && \
                object.metadata.?labels.orValue({})[?\"tier\"] == optional.of(\"legacy\")))",
        })
    );
}

#[test]
fn an_engine_that_does_not_honour_an_exception_says_it_still_enforces() {
    // cocoWorkload in a namespace: Kyverno's mutate rule does not leave workloads out.
    let np = sib_np(selector(), vec![block("cocoWorkload", "confidential")]);
    let run = |exceptions| {
        let mut input = PolicyInput::namespaced(&np, UID);
        input.exceptions = exceptions;
        translate(&input, &Environment::default(), &EngineSet::all())
    };
    let coco = Excepted {
        intents: BTreeSet::from(["cocoWorkload".into()]),
        ..legacy_exception()
    };
    let excepted = run(vec![coco]);
    let warnings: Vec<(&str, bool)> = excepted
        .problems
        .iter()
        .map(|p| (p.reason, p.blocking))
        .collect();
    assert_eq!(
        warnings,
        vec![("ExceptionNotHonoured", false)],
        "{:#?}",
        excepted.problems
    );
    let message = &excepted.problems[0].message;
    assert!(
        message.starts_with("kyverno does not honour exceptions to intent `cocoWorkload`")
            && message.contains("vendor-agent"),
        "{message}"
    );
    assert_eq!(
        of(&excepted, Engine::Kyverno),
        of(&run(vec![]), Engine::Kyverno)
    );
}

/// An exception to dnsManipulation for the pods labelled `labels`.
pub(crate) fn network_exception(labels: &[(&str, &str)]) -> Excepted {
    Excepted {
        kind: Default::default(),
        name: "vendor-agent".into(),
        selector: LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..LabelSelector::default()
        },
        intents: BTreeSet::from(["dnsManipulation".into()]),
        ..legacy_exception()
    }
}

#[test]
fn network_policies_leave_the_excepted_pods_out_one_label_at_a_time() {
    let np = sib_np(
        selector(),
        vec![rule("dnsManipulation", "Block", None, json!({}))],
    );
    let run = |exceptions| {
        let mut input = PolicyInput::namespaced(&np, UID);
        input.exceptions = exceptions;
        translate(&input, &Environment::default(), &EngineSet::all())
    };
    let plain = of(&run(vec![]), Engine::NetworkPolicy);
    let two_labels = run(vec![network_exception(&[
        ("team", "vendor"),
        ("tier", "legacy"),
    ])]);
    // (KubeArmor, which guards dnsManipulation's files, leaves the pods out too.)
    let netpol_problems = |t: &Translation| -> Vec<(&'static str, bool)> {
        t.problems
            .iter()
            .filter(|p| p.message.starts_with("netpol"))
            .map(|p| (p.reason, p.blocking))
            .collect()
    };
    assert_eq!(
        netpol_problems(&two_labels),
        vec![],
        "{:#?}",
        two_labels.problems
    );
    let split = of(&two_labels, Engine::NetworkPolicy);
    let plain_name = plain[0]["metadata"]["name"].as_str().expect("a name");
    assert_eq!(
        names(&split),
        vec![plain_name.to_owned(), format!("{plain_name}-x1")]
    );
    let left_out: Vec<&Value> = split
        .iter()
        .map(|p| &p["spec"]["podSelector"]["matchExpressions"])
        .collect();
    assert_eq!(
        left_out,
        vec![
            &json!([{"key": "team", "operator": "NotIn", "values": ["vendor"]}]),
            &json!([{"key": "tier", "operator": "NotIn", "values": ["legacy"]}]),
        ]
    );
    // The rules are the unexcepted policy's, over each selector.
    for p in &split {
        assert_eq!(p["spec"]["egress"], plain[0]["spec"]["egress"]);
    }

    // 5 × 5 selectors are more than one intent may be written as: none is written, and said.
    let wide: Vec<(&str, &str)> = ["a", "b", "c", "d", "e"].map(|k| (k, "1")).into();
    let mut second = network_exception(&wide);
    second.name = "other".into();
    let too_many = run(vec![network_exception(&wide), second]);
    assert!(of(&too_many, Engine::NetworkPolicy).is_empty());
    // (Not blocking: KubeArmor's part of the intent is still in force, on every pod.)
    assert_eq!(
        netpol_problems(&too_many),
        vec![("ExceptionNotHonoured", false)]
    );
}

/// [`legacy_exception`], out of only `controls` of escapeToHost.
fn controls_exception(controls: &[PodSecurityControl]) -> Excepted {
    Excepted {
        controls: Some(controls.iter().copied().collect()),
        ..legacy_exception()
    }
}

#[test]
fn kyverno_legacy_lets_the_excepted_workloads_out_of_only_the_controls_named() {
    let exception = |controls: &[PodSecurityControl]| {
        let t = translated(
            KyvernoApi::Legacy,
            Engine::Kyverno,
            vec![controls_exception(controls)],
        );
        kinds_of(&t, "PolicyException")
    };
    // A container-level control needs `images` (Kyverno refuses it without), a pod-level one
    // refuses them, one of both levels takes an entry for each.
    let got = exception(&[
        PodSecurityControl::PrivilegedContainers,
        PodSecurityControl::HostNamespaces,
        PodSecurityControl::Seccomp,
    ]);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(
        got[0]["spec"]["podSecurity"],
        json!([
            {"controlName": "Host Namespaces"},
            {"controlName": "Privileged Containers", "images": ["*"]},
            {"controlName": "Seccomp"},
            {"controlName": "Seccomp", "images": ["*"]},
        ])
    );
    let whole = exception(&[PodSecurityControl::PrivilegedContainers]);
    let mut without = whole[0].clone();
    without["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("podSecurity");
    assert_eq!(
        without,
        kinds_of(
            &translated(
                KyvernoApi::Legacy,
                Engine::Kyverno,
                vec![legacy_exception()]
            ),
            "PolicyException"
        )[0],
        "the same PolicyException as the whole intent's, but for podSecurity"
    );
    // Baseline checks no restricted control: nothing to let the workloads out of.
    assert_eq!(
        exception(&[PodSecurityControl::VolumeTypes]),
        Vec::<Value>::new()
    );
}

#[test]
fn kyverno_cel_lets_the_excepted_workloads_out_of_only_the_validations_of_the_controls_named() {
    let t = translated(
        KyvernoApi::Cel,
        Engine::Kyverno,
        vec![controls_exception(&[
            PodSecurityControl::PrivilegedContainers,
        ])],
    );
    let exceptions = kinds_of(&t, "PolicyException");
    assert_eq!(exceptions.len(), 1, "{exceptions:#?}");
    assert_eq!(
        exceptions[0]["spec"]["allowedValues"],
        json!(["Privileged Containers"])
    );
    let unexcepted = translated(KyvernoApi::Cel, Engine::Kyverno, vec![]);
    let policies = kinds_of(&t, "ValidatingPolicy");
    let before = kinds_of(&unexcepted, "ValidatingPolicy");
    assert_eq!(policies.len(), 2);
    for (policy, before) in policies.iter().zip(&before) {
        let validations = policy["spec"]["validations"]
            .as_array()
            .expect("validations");
        let before = before["spec"]["validations"]
            .as_array()
            .expect("validations");
        for (i, (got, was)) in validations.iter().zip(before).enumerate() {
            let was_expression = was["expression"].as_str().expect("expression");
            if got["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Privileged"))
            {
                assert_eq!(
                    got["expression"],
                    format!(
                        "('Privileged Containers' in exceptions.allowedValues) || ({was_expression})"
                    ),
                    "validation {i}"
                );
            } else {
                assert_eq!(got, was, "validation {i}: untouched");
            }
        }
    }
}

#[test]
fn the_admission_engine_lets_the_excepted_workloads_out_of_only_the_validations_of_the_controls_named()
 {
    let run = |exceptions| {
        let t = translated(KyvernoApi::Legacy, Engine::Admission, exceptions);
        kinds_of(&t, "ValidatingAdmissionPolicy")[0]["spec"].clone()
    };
    let got = run(vec![controls_exception(&[
        PodSecurityControl::PrivilegedContainers,
    ])]);
    let before = run(vec![]);
    assert_eq!(
        got["matchConditions"], before["matchConditions"],
        "the excepted workloads are judged"
    );
    let excepted = "(object.metadata.?namespace.orValue('') == \"shop\" && \
        object.metadata.?labels.orValue({})[?\"tier\"] == optional.of(\"legacy\"))";
    let validations = got["validations"].as_array().expect("validations");
    let before = before["validations"].as_array().expect("validations");
    let mut changed = 0;
    for (got, was) in validations.iter().zip(before) {
        if got == was {
            continue;
        }
        changed += 1;
        assert!(
            got["message"]
                .as_str()
                .is_some_and(|m| m.contains("Privileged containers")),
            "{got}"
        );
        assert_eq!(
            got["expression"],
            format!(
                "({excepted}) || ({})",
                was["expression"].as_str().expect("expression")
            )
        );
    }
    assert_eq!(changed, 1);
}
