//! The priorities of the clusternetworkpolicy engine's Admin-tier ClusterNetworkPolicies.
//! Where two Admin-tier policies select one pod, which is judged first is their `priority`'s to
//! say (implementations order policies of equal priority as they like), so each gets its own:
//! dnsManipulation's before denyExternalNetworkAccess's (the DNS a pod may send only to the
//! cluster DNS must be denied before the latter passes in-cluster traffic on), and within an
//! intent, older bindings first.

use crate::intents::id;
use crate::names::rule_keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nimbus_api::NimbusRule;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// The priorities each intent's policies take, in the order the intents are judged; the
/// rest (0 to 99, 900 to 1000) is left to the platform's own policies.
pub(super) const BANDS: [(&str, RangeInclusive<i32>); 2] = [
    (id::DNS_MANIPULATION, 100..=499),
    (id::DENY_EXTERNAL_NETWORK_ACCESS, 500..=899),
];

/// The priority of each ClusterNetworkPolicy the engine writes, by (cluster policy, rule key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdminPriorities(BTreeMap<(String, String), i32>);

impl AdminPriorities {
    pub(super) fn get(&self, policy: &str, key: &str) -> Option<i32> {
        self.0.get(&(policy.to_owned(), key.to_owned())).copied()
    }

    /// Whether a rule ranked in both `earlier` and these has another priority now.
    pub fn moved_from(&self, earlier: &AdminPriorities) -> bool {
        self.0
            .iter()
            .any(|(rule, p)| earlier.0.get(rule).is_some_and(|e| e != p))
    }
}

/// A cluster policy as [`priorities`] ranks it.
pub struct Ranked<'a> {
    pub name: &'a str,
    pub created: Option<&'a Time>,
    pub rules: &'a [NimbusRule],
}

/// Unique, deterministic priorities for every rule of `policies` the engine translates: in
/// each intent's band, by the policy's creation (then name), so that a new binding takes the
/// next free one and leaves the others' alone. A rule beyond its band's size gets none (and is
/// reported unenforced).
pub fn priorities<'a>(policies: impl IntoIterator<Item = Ranked<'a>>) -> AdminPriorities {
    let mut ranked: Vec<Ranked> = policies.into_iter().collect();
    ranked.sort_by(|a, b| (a.created.map(|t| t.0), a.name).cmp(&(b.created.map(|t| t.0), b.name)));
    let mut out = BTreeMap::new();
    for (intent, band) in BANDS {
        let rules = ranked.iter().flat_map(|p| {
            let keys = rule_keys(p.rules);
            (p.rules.iter().zip(keys))
                .filter(|(rule, _)| rule.id == intent)
                .map(|(_, key)| (p.name.to_owned(), key))
                .collect::<Vec<_>>()
        });
        out.extend(rules.zip(band));
    }
    AdminPriorities(out)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;
    use std::collections::BTreeSet;

    /// `Block` rules of the intents `ids`.
    pub(crate) fn rules(ids: &[&str]) -> Vec<NimbusRule> {
        ids.iter()
            .map(|id| {
                serde_json::from_value(json!({"id": id, "rule": {"action": "Block"}})).unwrap()
            })
            .collect()
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn each_rule_gets_a_priority_of_its_own_in_its_intents_band() {
        let dns = id::DNS_MANIPULATION;
        let external = id::DENY_EXTERNAL_NETWORK_ACCESS;
        let (both, two_dns, external_only) = (
            rules(&[dns, external]),
            rules(&[dns, dns]),
            rules(&[external, "escapeToHost"]),
        );
        let (t1, t2) = (at(1_000), at(2_000));
        let policies = || {
            [
                Ranked {
                    name: "b",
                    created: Some(&t1),
                    rules: &both,
                },
                // Created later, though its name sorts first: after the older ones.
                Ranked {
                    name: "a",
                    created: Some(&t2),
                    rules: &two_dns,
                },
                // Created in the same second as `b`: by name.
                Ranked {
                    name: "c",
                    created: Some(&t1),
                    rules: &external_only,
                },
            ]
        };
        let got = priorities(policies());
        let want = [
            ("b", "dnsmanipulation", 100),
            ("a", "dnsmanipulation", 101),
            ("a", "dnsmanipulation-2", 102),
            ("b", "denyexternalnetworkaccess", 500),
            ("c", "denyexternalnetworkaccess", 501),
        ];
        for (policy, key, priority) in want {
            assert_eq!(got.get(policy, key), Some(priority), "{policy} {key}");
        }
        assert_eq!(got.0.len(), want.len(), "{got:?}");
        // Deterministic: the order they are listed in does not matter.
        let mut reversed: Vec<Ranked> = policies().into_iter().collect();
        reversed.reverse();
        assert_eq!(priorities(reversed), got);
        // A new binding takes the next one and leaves the others' alone.
        let t3 = at(3_000);
        let newer = rules(&[dns]);
        let mut more: Vec<Ranked> = policies().into_iter().collect();
        more.push(Ranked {
            name: "0-newest",
            created: Some(&t3),
            rules: &newer,
        });
        let with_newer = priorities(more);
        assert_eq!(with_newer.get("0-newest", "dnsmanipulation"), Some(103));
        assert!(got.0.iter().all(|(k, v)| with_newer.0.get(k) == Some(v)));
        assert!(!with_newer.moved_from(&got), "a new binding moves no other");
        // The oldest binding gone: the younger ones move up, which re-translates them.
        let without_oldest = priorities(policies().into_iter().filter(|p| p.name != "b"));
        assert_eq!(without_oldest.get("a", "dnsmanipulation"), Some(100));
        assert!(without_oldest.moved_from(&got));
    }

    #[test]
    fn a_band_holds_400_bindings_of_an_intent() {
        let dns = rules(&[id::DNS_MANIPULATION]);
        let names: Vec<String> = (0..=400).map(|i| format!("p{i:03}")).collect();
        let got = priorities(names.iter().map(|name| Ranked {
            name,
            created: None,
            rules: &dns,
        }));
        let values: BTreeSet<i32> = got.0.values().copied().collect();
        assert_eq!(values.len(), 400, "unique");
        assert_eq!((values.first(), values.last()), (Some(&100), Some(&499)));
        assert_eq!(got.get("p400", "dnsmanipulation"), None);
    }
}
