use super::*;
use crate::catalog;
use std::collections::{BTreeMap, BTreeSet};

/// The framework lists as published, vendored under upstream/ (see upstream/README.md).
const CIS: &str = include_str!("../../../../upstream/kubescape/cis-v1.12.0.json");
const NSA: &str = include_str!("../../../../upstream/kubescape/nsaframework.json");
const ATTACK: &str = include_str!("../../../../upstream/mitre-attack/containers-techniques.tsv");
const ATTACK_MITIGATIONS: &str =
    include_str!("../../../../upstream/mitre-attack/containers-mitigations.tsv");
const FIGHT: &str = include_str!("../../../../upstream/mitre-fight/techniques.tsv");
const FIGHT_WITHDRAWN: &str =
    include_str!("../../../../upstream/mitre-fight/withdrawn-since-v1.0.1.tsv");

/// The vendored files sources quote.
fn vendored(file: &str) -> &'static str {
    match file {
        "nimbus/examples/clusterscoped/assesstls-default.yaml" => include_str!(
            "../../../../upstream/nimbus/examples/clusterscoped/assesstls-default.yaml"
        ),
        "nimbus/examples/namespaced/exploit-pfa-si-sib.yaml" => {
            include_str!("../../../../upstream/nimbus/examples/namespaced/exploit-pfa-si-sib.yaml")
        }
        "mitre-fight/techniques.tsv" => FIGHT,
        other => panic!("no vendored file {other} in this test"),
    }
}

/// ID -> name, from a TSV with a header line.
fn tsv(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let mut cols = l.split('\t');
            Some((cols.next()?, cols.next()?))
        })
        .collect()
}

/// Kubescape framework: control ID -> name.
fn kubescape(text: &str) -> BTreeMap<String, String> {
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    doc["activeControls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["controlID"].as_str().unwrap().to_owned(),
                c["patch"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// CIS section -> title, from the names Kubescape gives them (`CIS-5.2.2 Minimize ...`).
fn cis() -> BTreeMap<String, String> {
    kubescape(CIS)
        .into_values()
        .filter_map(|name| {
            let (section, title) = name.strip_prefix("CIS-")?.split_once(' ')?;
            Some((section.to_owned(), title.to_owned()))
        })
        .collect()
}

/// Every control the catalog names, as the published list names it.
fn published(framework: Framework) -> BTreeMap<String, String> {
    match framework {
        Framework::Attack => tsv(ATTACK)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        Framework::Cis => cis(),
        Framework::Nsa => kubescape(NSA),
        Framework::Fight => tsv(FIGHT)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    }
}

#[test]
fn the_vendored_lists_are_the_frameworks() {
    // Guards against parsing nothing: the sizes the framework releases publish.
    assert_eq!(
        cis().len(),
        131,
        "CIS v1.12.0 controls in Kubescape's framework"
    );
    assert_eq!(
        kubescape(NSA).len(),
        26,
        "NSA/CISA controls in Kubescape's framework"
    );
    assert_eq!(tsv(ATTACK).len(), 48, "ATT&CK v18.1 Containers techniques");
    assert_eq!(tsv(FIGHT).len(), 183, "FiGHT v3.0.1 techniques");
}

#[test]
fn every_control_exists_in_its_published_list_under_that_name() {
    let withdrawn = tsv(FIGHT_WITHDRAWN);
    for c in CONTROLS {
        if c.withdrawn {
            assert_eq!(c.framework, Framework::Fight, "{c:?}");
            assert!(
                !published(c.framework).contains_key(c.id),
                "{c:?} is current"
            );
            assert_eq!(withdrawn.get(c.id), Some(&c.name), "{c:?}");
            continue;
        }
        assert_eq!(
            published(c.framework).get(c.id).map(String::as_str),
            Some(c.name),
            "{} {} is not in the vendored list under that name",
            c.framework,
            c.id
        );
    }
    let ids: BTreeSet<_> = CONTROLS.iter().map(|c| (c.framework, c.id)).collect();
    assert_eq!(ids.len(), CONTROLS.len(), "a control is listed twice");
}

#[test]
fn every_intent_maps_to_a_current_control_or_says_why_not() {
    for intent in catalog::INTENTS {
        let current = mappings(intent.id).any(|m| !m.control().withdrawn);
        match (current, unmapped(intent.id)) {
            (true, None) | (false, Some(_)) => {}
            (false, None) => panic!("{} maps to no control and says not why", intent.id),
            (true, Some(why)) => panic!("{} maps, yet says it does not: {why}", intent.id),
        }
    }
    for (intent, why) in UNMAPPED {
        assert!(catalog::intent(intent).is_some(), "{intent}");
        assert!(!why.is_empty());
    }
}

#[test]
fn every_claim_names_a_known_intent_and_control_and_is_unique() {
    let mut seen = BTreeSet::new();
    for m in MAPPINGS {
        assert!(catalog::intent(m.intent).is_some(), "{m:?}");
        assert!(control(m.framework, m.control).is_some(), "{m:?}");
        assert!(
            seen.insert((m.intent, m.framework, m.control, m.source.url)),
            "{m:?} twice"
        );
    }
    for c in CONTROLS {
        assert!(
            MAPPINGS
                .iter()
                .any(|m| m.framework == c.framework && m.control == c.id),
            "{} {} is listed but no intent claims it",
            c.framework,
            c.id
        );
    }
}

#[test]
fn every_source_says_what_it_is_cited_for() {
    let relations: BTreeSet<(&str, &str)> = ATTACK_MITIGATIONS
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut cols = l.split('\t');
            Some((cols.next()?, cols.next()?))
        })
        .collect();
    for m in MAPPINGS {
        assert!(m.source.url.starts_with("https://"), "{m:?}");
        match &m.source.evidence {
            Evidence::Vendored { file, text } => {
                assert!(
                    vendored(file).contains(text),
                    "{file} does not say {text:?}"
                )
            }
            Evidence::AttackMitigation { mitigation } => {
                assert_eq!(m.framework, Framework::Attack, "{m:?}");
                assert!(
                    relations.contains(&(m.control, mitigation)),
                    "ATT&CK does not relate {mitigation} to {}",
                    m.control
                );
            }
            Evidence::ControlText => assert!(
                matches!(m.framework, Framework::Cis | Framework::Nsa),
                "{m:?}: only Kubescape's lists carry control text"
            ),
            Evidence::Published => {}
        }
    }
}

#[test]
fn controls_sort_naturally_and_omit_withdrawn_ones() {
    let cis: Vec<_> = controls(Framework::Cis).iter().map(|c| c.id).collect();
    let nine = cis.iter().position(|c| *c == "5.2.9").unwrap();
    let twelve = cis.iter().position(|c| *c == "5.2.12").unwrap();
    assert!(nine < twelve, "{cis:?}");
    assert!(controls(Framework::Fight).iter().all(|c| c.id != "FGT5006"));
    for f in Framework::ALL {
        assert_eq!(f.name().parse::<Framework>(), Ok(f));
    }
    assert!(
        "pci"
            .parse::<Framework>()
            .unwrap_err()
            .contains("cis-kubernetes")
    );
}
