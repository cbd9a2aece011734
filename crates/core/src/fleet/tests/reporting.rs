//! Where a verdict is reported and when: the delivering Policy, the Event's reason, what was
//! reported last, and the settling before a new verdict is reported.

use super::*;

#[test]
fn the_delivering_policy_is_the_controller_or_the_labels() {
    let owner = OwnerReference {
        api_version: POLICY_API_VERSION.to_owned(),
        kind: POLICY_KIND.to_owned(),
        name: "policies.web".to_owned(),
        uid: "u-1".to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let labels = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    };
    let ocm_labels = labels(&[
        (PARENT_POLICY_LABEL, "policies.web"),
        (CLUSTER_NAMESPACE_LABEL, "cluster1"),
    ]);
    let namespaced = ObjectMeta {
        namespace: Some("cluster1".to_owned()),
        owner_references: Some(vec![owner.clone()]),
        labels: ocm_labels.clone(),
        ..Default::default()
    };
    let cluster_scoped = ObjectMeta {
        labels: ocm_labels,
        ..Default::default()
    };
    let other_owner = ObjectMeta {
        namespace: Some("cluster1".to_owned()),
        owner_references: Some(vec![OwnerReference {
            kind: "Deployment".to_owned(),
            api_version: "apps/v1".to_owned(),
            ..owner
        }]),
        ..Default::default()
    };
    let half_labelled = ObjectMeta {
        labels: labels(&[(PARENT_POLICY_LABEL, "policies.web")]),
        ..Default::default()
    };
    let delivery_to = |ns: &str, uid: Option<&str>| Delivery {
        namespace: ns.to_owned(),
        name: "policies.web".to_owned(),
        uid: uid.map(str::to_owned),
    };
    assert_eq!(
        delivery(&namespaced),
        Some(delivery_to("cluster1", Some("u-1")))
    );
    assert_eq!(
        delivery(&cluster_scoped),
        Some(delivery_to("cluster1", None))
    );
    assert_eq!(delivery(&other_owner), None);
    assert_eq!(delivery(&half_labelled), None);
    assert_eq!(delivery(&ObjectMeta::default()), None);
}

#[test]
fn the_event_reason_names_the_template_as_the_status_sync_reads_it() {
    assert_eq!(
        event_reason(&reference("SecurityIntentBinding", Some("cluster1"), "web")),
        "policy: cluster1/web"
    );
    assert_eq!(event_reason(&web()), "policy: web");
}

#[test]
fn the_last_reported_message_is_the_templates_newest_history_entry() {
    let status = json!({
        "compliant": "NonCompliant",
        "details": [
            {"templateMeta": {"name": "dns"}, "history": [{"message": "Compliant; dns"}]},
            {"templateMeta": {"name": "web"}, "history": [
                {"message": "NonCompliant; newest ", "eventName": "p.2"},
                {"message": "Compliant; older", "eventName": "p.1"},
            ]},
            {"templateMeta": {"name": "api"}},
        ]
    });
    assert_eq!(
        last_reported(&status, "web").as_deref(),
        Some("NonCompliant; newest")
    );
    assert_eq!(last_reported(&status, "api"), None);
    assert_eq!(last_reported(&status, "gone"), None);
    assert_eq!(last_reported(&json!({}), "web"), None);
}

#[test]
fn a_verdict_is_reported_once_when_it_has_held_for_the_settling_time() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_millis(s);
    let settle = Duration::from_millis(2000);
    let mut reporting = Reporting::new(Some("Compliant; a".to_owned()));
    // (when, the verdict's message then, what is done): steps in order on one template.
    let steps: [(u64, Option<&str>, Step); 11] = [
        (0, Some("Compliant; a"), Step::Nothing),
        // A break: waits to hold...
        (100, Some("NonCompliant; b"), Step::At(at(2100))),
        // ...and a step on the way starts it over.
        (400, Some("NonCompliant; b c"), Step::At(at(2400))),
        (900, Some("NonCompliant; b"), Step::At(at(2900))),
        (2000, Some("NonCompliant; b"), Step::At(at(2900))),
        (
            2900,
            Some("NonCompliant; b"),
            Step::Report("NonCompliant; b".to_owned()),
        ),
        // Reported (see below): steady, nothing more.
        (3000, Some("NonCompliant; b"), Step::Nothing),
        (9000, Some("NonCompliant; b"), Step::Nothing),
        // Unknown for a moment, then back as it was: nothing.
        (9100, None, Step::Nothing),
        (9200, Some("NonCompliant; b"), Step::Nothing),
        // Flapping back to what was reported before it settles: nothing either.
        (9300, Some("Compliant; a"), Step::At(at(11300))),
    ];
    for (when, desired, expected) in steps {
        let step = reporting.step(desired, at(when), settle);
        assert_eq!(step, expected, "at {when} ms");
        if let Step::Report(message) = step {
            reporting.reported(message);
        }
    }
    assert_eq!(
        reporting.step(Some("NonCompliant; b"), at(9400), settle),
        Step::Nothing
    );
    // Nothing reported before: the first verdict is reported once it holds.
    let mut fresh = Reporting::new(None);
    assert_eq!(
        fresh.step(Some("Compliant; a"), t0, Duration::ZERO),
        Step::Report("Compliant; a".to_owned())
    );
}
