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
    let delivery_to = |ns: &str| Delivery {
        namespace: ns.to_owned(),
        name: "policies.web".to_owned(),
    };
    assert_eq!(delivery(&namespaced), Some(delivery_to("cluster1")));
    assert_eq!(delivery(&cluster_scoped), Some(delivery_to("cluster1")));
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
fn the_hubs_word_is_the_templates_newest_history_entry_and_its_events() {
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
        HubWord::of(&status, "web"),
        HubWord {
            newest: Some("NonCompliant; newest".to_owned()),
            events: BTreeSet::from(["p.1".to_owned(), "p.2".to_owned()]),
        }
    );
    assert_eq!(HubWord::of(&status, "api"), HubWord::default());
    assert_eq!(HubWord::of(&status, "gone"), HubWord::default());
    assert_eq!(HubWord::of(&json!({}), "web"), HubWord::default());
}

/// The Policy's history holding `events`, newest first, as `(name, message)`.
fn hub(events: &[(&str, &str)]) -> HubWord {
    HubWord {
        newest: events.first().map(|(_, message)| (*message).to_owned()),
        events: events.iter().map(|(name, _)| (*name).to_owned()).collect(),
    }
}

#[test]
fn a_verdict_is_reported_once_when_it_has_held_for_the_settling_time() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_millis(s);
    let settle = Duration::from_millis(2000);
    let mut reporting = Reporting::default();
    let before = hub(&[("p.1", "Compliant; a")]);
    let after = hub(&[("p.2", "NonCompliant; b"), ("p.1", "Compliant; a")]);
    // (when, the Policy's history then, the verdict's message then, what is done): steps in
    // order on one template.
    let steps: [(u64, &HubWord, Option<&str>, Step); 12] = [
        (0, &before, Some("Compliant; a"), Step::Nothing),
        // A break: waits to hold...
        (100, &before, Some("NonCompliant; b"), Step::At(at(2100))),
        // ...and a step on the way starts it over.
        (400, &before, Some("NonCompliant; b c"), Step::At(at(2400))),
        (900, &before, Some("NonCompliant; b"), Step::At(at(2900))),
        (2000, &before, Some("NonCompliant; b"), Step::At(at(2900))),
        (
            2900,
            &before,
            Some("NonCompliant; b"),
            Step::Report("NonCompliant; b".to_owned()),
        ),
        // Reported as p.2 (see below): until the history shows it, it is what the hub was
        // told, and it is looked at again should it never show.
        (
            3000,
            &before,
            Some("NonCompliant; b"),
            Step::At(at(2900) + CONFIRM),
        ),
        // Shown: steady, nothing more.
        (3500, &after, Some("NonCompliant; b"), Step::Nothing),
        (9000, &after, Some("NonCompliant; b"), Step::Nothing),
        // Unknown for a moment, then back as it was: nothing.
        (9100, &after, None, Step::Nothing),
        (9200, &after, Some("NonCompliant; b"), Step::Nothing),
        // Flapping back to what was reported before it settles: nothing either.
        (9300, &after, Some("Compliant; a"), Step::At(at(11300))),
    ];
    for (when, hub, desired, expected) in steps {
        let step = reporting.step(hub, desired, at(when), settle);
        assert_eq!(step, expected, "at {when} ms");
        if let Step::Report(message) = step {
            reporting.reported(message, "p.2".to_owned(), at(when));
        }
    }
    assert_eq!(
        reporting.step(&after, Some("NonCompliant; b"), at(9400), settle),
        Step::Nothing
    );
    // Nothing reported before (a new leader reads the history): the first verdict is
    // reported once it holds, and not at all when the history already says it.
    let mut fresh = Reporting::default();
    assert_eq!(
        fresh.step(
            &HubWord::default(),
            Some("Compliant; a"),
            t0,
            Duration::ZERO
        ),
        Step::Report("Compliant; a".to_owned())
    );
    assert_eq!(
        Reporting::default().step(&before, Some("Compliant; a"), t0, Duration::ZERO),
        Step::Nothing
    );
}

#[test]
fn a_verdict_the_hub_lost_is_reported_again_at_most_every_repeat() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let settle = Duration::from_millis(2000);
    let mut reporting = Reporting::default();
    let mine = "Compliant; fleet-dns is Ready";
    assert_eq!(
        reporting.step(&HubWord::default(), Some(mine), at(0), Duration::ZERO),
        Step::Report(mine.to_owned())
    );
    reporting.reported(mine.to_owned(), "p.1".to_owned(), at(0));
    // The framework addon's error about the template, after ours (a restarted API server
    // did not serve the kind yet): the hub shows it, and would for good.
    let error = "NonCompliant; template-error; Failed to update policy template fleet-dns";
    let overwritten = hub(&[("p.2", error), ("p.1", mine)]);
    assert_eq!(
        reporting.step(&overwritten, Some(mine), at(40_000), settle),
        Step::At(at(42_000))
    );
    assert_eq!(
        reporting.step(&overwritten, Some(mine), at(42_000), settle),
        Step::Report(mine.to_owned())
    );
    reporting.reported(mine.to_owned(), "p.3".to_owned(), at(42_000));
    let corrected = hub(&[("p.3", mine), ("p.2", error), ("p.1", mine)]);
    assert_eq!(
        reporting.step(&corrected, Some(mine), at(43_000), settle),
        Step::Nothing
    );
    // Should the error persist, the verdict is said again no more often than every REPEAT.
    let again = hub(&[("p.4", error), ("p.3", mine), ("p.2", error), ("p.1", mine)]);
    let repeat = u64::try_from(REPEAT.as_millis()).expect("a few seconds");
    assert_eq!(
        reporting.step(&again, Some(mine), at(44_000), settle),
        Step::At(at(42_000 + repeat))
    );
    // An Event that never shows in the history is reported again once CONFIRM has passed.
    let mut lost = Reporting::default();
    lost.reported(mine.to_owned(), "p.9".to_owned(), at(0));
    let confirm = u64::try_from(CONFIRM.as_millis()).expect("a minute");
    assert_eq!(
        lost.step(&HubWord::default(), Some(mine), at(1000), settle),
        Step::At(at(confirm))
    );
    assert_eq!(
        lost.step(&HubWord::default(), Some(mine), at(confirm), settle),
        Step::At(at(confirm + 2000))
    );
}

#[test]
fn a_change_of_counts_alone_is_reported_at_most_every_recount() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let settle = Duration::from_millis(2000);
    let recount = u64::try_from(RECOUNT.as_millis()).expect("minutes");
    let message = |protected: u32, unprotected: u32| {
        let mut tally = Tally::default();
        tally.workloads.protected = protected;
        tally.workloads.unprotected = unprotected;
        let compliance = if unprotected == 0 {
            "Compliant; web is Ready"
        } else {
            "NonCompliant; web: not protected: Pod shop/api"
        };
        format!("{compliance}{}", tally.suffix())
    };
    let mut reporting = Reporting::default();
    let one = message(1, 0);
    reporting.reported(one.clone(), "p.1".to_owned(), at(0));
    let shown = hub(&[("p.1", &one)]);
    // A second protected workload: the verdict holds, the count waits for RECOUNT.
    let two = message(2, 0);
    assert_eq!(
        reporting.step(&shown, Some(&two), at(10_000), settle),
        Step::At(at(recount))
    );
    assert_eq!(
        reporting.step(&shown, Some(&two), at(recount), settle),
        Step::Report(two.clone())
    );
    reporting.reported(two.clone(), "p.2".to_owned(), at(recount));
    let shown = hub(&[("p.2", &two), ("p.1", &one)]);
    // A change of verdict does not wait: it is reported once it has settled.
    let broken = message(1, 1);
    assert_eq!(
        reporting.step(&shown, Some(&broken), at(recount + 1000), settle),
        Step::At(at(recount + 3000))
    );
    assert_eq!(
        reporting.step(&shown, Some(&broken), at(recount + 3000), settle),
        Step::Report(broken)
    );
    // Nothing reported by this leader yet: the counts the history holds are corrected once
    // they have settled.
    assert_eq!(
        Reporting::default().step(&shown, Some(&message(3, 0)), at(0), Duration::ZERO),
        Step::Report(message(3, 0))
    );
}
