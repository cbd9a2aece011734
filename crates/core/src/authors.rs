//! Who wrote the SecurityIntents a binding binds. A binding names its intents; whoever may
//! write SecurityIntents decides what they say (fills a dangling name, changes an action or a
//! parameter), so every change is reported on the binding: which intent, when, and by whom
//! (from the annotation the `nimbus-intent-author` admission policy stamps; "unknown" when it
//! is absent). Pure: the controllers emit what [`changes`] returns as Events.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use nimbus_api::{IntentWriter, LAST_WRITTEN_BY_ANNOTATION, SecurityIntent};

/// What `si` says of its last write.
pub fn intent_writer(si: &SecurityIntent) -> IntentWriter {
    let written_at = si
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().is_none_or(str::is_empty))
        .filter_map(|m| m.time.as_ref())
        .max_by_key(|t| t.0)
        .cloned();
    IntentWriter {
        name: si.name_any(),
        generation: si.metadata.generation.unwrap_or_default(),
        written_by: si
            .annotations()
            .get(LAST_WRITTEN_BY_ANNOTATION)
            .filter(|u| !u.is_empty())
            .cloned(),
        written_at: written_at.or_else(|| si.metadata.creation_timestamp.clone()),
    }
}

/// Who, for people: the user, or why it is not known.
pub fn who(w: &IntentWriter) -> String {
    match &w.written_by {
        Some(user) => user.clone(),
        None => format!(
            "an unknown user (no {LAST_WRITTEN_BY_ANNOTATION} annotation: the \
             {} admission policy is not installed or not served)",
            crate::admission::AUTHOR_POLICY_NAME
        ),
    }
}

/// When, for people: RFC 3339, or "an unknown time".
pub fn when(t: &Option<Time>) -> String {
    t.as_ref()
        .map_or_else(|| "an unknown time".to_owned(), |t| t.0.to_string())
}

/// One message per intent of `after` that is new beside `before` (a name now filled, or
/// newly named by the binding) or was written since (another generation or write time), in
/// `after`'s order.
pub fn changes(before: &[IntentWriter], after: &[IntentWriter]) -> Vec<String> {
    after
        .iter()
        .filter_map(|now| {
            let then = before.iter().find(|b| b.name == now.name);
            match then {
                None => Some(format!(
                    "SecurityIntent {} is now bound: written by {} at {}",
                    now.name,
                    who(now),
                    when(&now.written_at)
                )),
                Some(then)
                    if then.generation != now.generation || then.written_at != now.written_at =>
                {
                    Some(format!(
                        "SecurityIntent {} changed (generation {} to {}): written by {} at {}",
                        now.name,
                        then.generation,
                        now.generation,
                        who(now),
                        when(&now.written_at)
                    ))
                }
                Some(_) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn si(
        annotations: serde_json::Value,
        generation: i64,
        times: &[(&str, &str)],
    ) -> SecurityIntent {
        let managed: Vec<_> = times
            .iter()
            .map(|(time, sub)| {
                let mut m = json!({"manager": "m", "operation": "Update", "time": time});
                if !sub.is_empty() {
                    m["subresource"] = json!(sub);
                }
                m
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
            "metadata": {"name": "dns", "generation": generation, "annotations": annotations,
                         "managedFields": managed},
            "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}
        }))
        .expect("an intent")
    }

    #[test]
    fn the_writer_is_the_stamped_user_at_the_latest_write_outside_status() {
        let w = intent_writer(&si(
            json!({LAST_WRITTEN_BY_ANNOTATION: "mallory"}),
            2,
            &[
                ("2026-11-27T10:00:00Z", ""),
                ("2026-11-27T11:00:00Z", ""),
                ("2026-11-27T12:00:00Z", "status"),
            ],
        ));
        assert_eq!(w.written_by.as_deref(), Some("mallory"));
        assert_eq!(w.generation, 2);
        assert_eq!(
            w.written_at.map(|t| t.0.to_string()).as_deref(),
            Some("2026-11-27T11:00:00Z")
        );
        let unknown = intent_writer(&si(json!({}), 1, &[]));
        assert_eq!(unknown.written_by, None);
        assert!(who(&unknown).contains("nimbus-intent-author"));
    }

    #[test]
    fn each_new_or_rewritten_intent_is_one_change() {
        let w = |name: &str, generation: i64, by: Option<&str>| IntentWriter {
            name: name.into(),
            generation,
            written_by: by.map(str::to_owned),
            written_at: None,
        };
        let before = [w("a", 1, Some("admin")), w("b", 1, Some("admin"))];
        for (after, expected) in [
            (
                vec![w("a", 1, Some("admin")), w("b", 1, Some("admin"))],
                vec![],
            ),
            (
                vec![w("a", 1, Some("admin")), w("b", 2, Some("mallory"))],
                vec![
                    "SecurityIntent b changed (generation 1 to 2): written by mallory at an \
                     unknown time",
                ],
            ),
            (
                vec![
                    w("a", 1, Some("admin")),
                    w("b", 1, Some("admin")),
                    w("c", 1, Some("mallory")),
                ],
                vec!["SecurityIntent c is now bound: written by mallory at an unknown time"],
            ),
            // Gone: the binding's status says so (IntentNotFound).
            (vec![w("a", 1, Some("admin"))], vec![]),
        ] {
            assert_eq!(changes(&before, &after), expected, "{after:?}");
        }
    }
}
