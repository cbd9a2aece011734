//! Whether an object we own is exactly what we generate, and which write makes it so. Pure:
//! decided from the cached object, its `managedFields` included, with no request.
//!
//! "Exactly" means: every field we generate has our value; no field we once generated and no
//! longer want is still there; no other manager added anything to the object's body. Fields
//! nobody owns are server defaults and are left alone, so a converged object needs no write.
//!
//! What we generate is recognised by a hash of it, which [`stamp`] puts in an
//! annotation: inside an atomic field (a NetworkPolicy's `podSelector`) the server records only
//! that we own the whole field, so a value we no longer generate would look like a default.
//!
//! What we create, we change by replacing the whole generated body (cheaper for the API server
//! than an apply). Where another manager changed, added or merely wrote anything in the body
//! (a predecessor's object we take over), the replace also claims the whole body as ours
//! alone ([`Write::TakeBack`]). Objects we
//! applied before (earlier versions did) are still applied: server-side apply fixes every
//! difference except what another manager changed or added, which is theirs and which apply
//! never removes; those need a replace too.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Annotation holding a hash of what we generated for an object, so that a change of it is seen
/// even where the server cannot tell our values from defaults (see the module doc).
pub const GENERATED_HASH: &str = "intent.security.nimbus.com/generated-hash";

/// Adds [`GENERATED_HASH`] to `want`.
pub fn stamp(want: &mut Value) {
    let digest = Sha256::digest(want.to_string());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    if let Some(meta) = want.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(GENERATED_HASH.to_owned(), Value::String(hash));
        }
    }
}

/// The write that brings an observed object to what we want.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// It already is what we want.
    Nothing,
    /// Create it: there is none. (A create costs the API server about a quarter less than a
    /// server-side apply that creates, and fails rather than taking over an object our cache
    /// has not shown us.)
    Create,
    /// Server-side apply (sets our values).
    Apply,
    /// Replace the body: removes what we no longer generate.
    Replace,
    /// Replace the body, with [`claim`] as the object's only managedFields: what others
    /// changed or added is removed, and what they only wrote with our values (a predecessor's
    /// object taken over) becomes ours alone. A plain replace would leave them owning every
    /// field it did not change.
    TakeBack,
}

/// Top-level fields that are not the generated body: other managers may write them freely.
const NOT_BODY: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];

/// What to write so that `observed` becomes `desired`, both serialized objects. `manager` is our
/// field manager; `observed` must carry its `metadata.managedFields`.
pub fn plan(desired: &Value, observed: Option<&Value>, manager: &str) -> Write {
    let Some(observed) = observed else {
        return Write::Create;
    };
    let entries = observed
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();

    // Another manager owning anything in the body changed or added something there (server
    // defaults are owned by nobody). Apply cannot take back what it does not own, and inside
    // an atomic field it cannot even tell: replace. Our own non-apply writes (creates and
    // replaces) matter only when they hold something we no longer generate. A create owns
    // everything the stored object has, server defaults included, so those can be told from
    // values we once generated only by the generated hash: while the object carries the hash of
    // what we generate, what our non-apply writes hold beyond it is defaults. (Each write of
    // ours leaves exactly that: a create or a replace writes the whole generated body, and an
    // apply, only on objects we applied before, adds to it only after this check found
    // nothing else in them.)
    let current = is_current(observed, desired);
    let body_fields = |e: &Value| {
        e.pointer("/fieldsV1")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(key, _)| !NOT_BODY.iter().any(|n| key.strip_prefix("f:") == Some(n)))
            .map(|(key, owned)| (key.clone(), owned.clone()))
            .collect::<serde_json::Map<_, _>>()
    };
    let foreign = entries
        .iter()
        .filter(|e| is_main_resource(e) && !is_managed_by(e, manager))
        .any(|e| holds_beyond(&Value::Object(body_fields(e)), observed, None));
    if foreign {
        return Write::TakeBack;
    }
    let needs_replace = !current
        && entries
            .iter()
            .filter(|e| is_managed_by(e, manager) && !is_applied_by(e, manager))
            .any(|e| holds_beyond(&Value::Object(body_fields(e)), observed, Some(desired)));
    if needs_replace {
        return Write::Replace;
    }

    let covered = body_covered(observed, desired) && meta_covered(observed, desired);
    let Some(applied) = applied_fields(observed, manager) else {
        return if !entries.iter().any(|e| is_managed_by(e, manager)) {
            // Nothing of it is ours yet.
            Write::Apply
        } else if covered {
            Write::Nothing
        } else {
            // We created it: replaces keep it written by us as a whole (and cost the API
            // server less than an apply).
            Write::Replace
        };
    };
    // Apply would remove what we no longer generate, but an object it empties becomes `null`,
    // which most schemas reject (an emptied `selector`): replace instead.
    if holds_beyond(applied, observed, Some(desired)) {
        return Write::Replace;
    }
    if !covered {
        return Write::Apply;
    }
    Write::Nothing
}

/// The managedFields entry that claims all of `want` for `manager`: its body's top-level
/// fields as wholes, and our labels, annotations and owners. Sent with a [`Write::TakeBack`],
/// it replaces every other entry, so nothing is left unowned to look like a default, and no
/// one else holds what we generate.
pub fn claim(want: &Value, manager: &str) -> Value {
    let keys =
        |field: &str, key: &dyn Fn(&Value) -> Option<String>| -> serde_json::Map<String, Value> {
            want.pointer(&format!("/metadata/{field}"))
                .into_iter()
                .flat_map(|v| match v {
                    Value::Object(map) => map
                        .keys()
                        .map(|k| Some(format!("f:{k}")))
                        .collect::<Vec<_>>(),
                    Value::Array(items) => items.iter().map(key).collect(),
                    _ => Vec::new(),
                })
                .flatten()
                .map(|k| (k, json!({})))
                .collect()
        };
    let owner = |o: &Value| Some(format!("k:{}", json!({"uid": o.get("uid")?})));
    let mut meta = serde_json::Map::new();
    for (field, entries) in [
        ("labels", keys("labels", &|_| None)),
        ("annotations", keys("annotations", &|_| None)),
        ("ownerReferences", keys("ownerReferences", &owner)),
    ] {
        if !entries.is_empty() {
            meta.insert(format!("f:{field}"), Value::Object(entries));
        }
    }
    let mut fields = serde_json::Map::new();
    fields.insert("f:metadata".into(), Value::Object(meta));
    for key in want.as_object().into_iter().flat_map(|o| o.keys()) {
        if !NOT_BODY.contains(&key.as_str()) {
            fields.insert(format!("f:{key}"), json!({}));
        }
    }
    json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": want["apiVersion"],
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    })
}

/// The `fieldsV1` set `manager` last server-side applied to `observed`'s main resource.
fn applied_fields<'a>(observed: &'a Value, manager: &str) -> Option<&'a Value> {
    observed
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| is_applied_by(e, manager))?
        .pointer("/fieldsV1")
}

/// The `fieldsV1` sets of `manager`'s writes of any kind to `observed`'s main resource.
pub fn written_fields<'a>(observed: &'a Value, manager: &str) -> impl Iterator<Item = &'a Value> {
    observed
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(move |e| is_managed_by(e, manager))
        .filter_map(|e| e.pointer("/fieldsV1"))
}

/// Whether a `managedFields` entry is `manager`'s server-side apply of the main resource.
fn is_applied_by(entry: &Value, manager: &str) -> bool {
    is_managed_by(entry, manager) && entry.get("operation").and_then(Value::as_str) == Some("Apply")
}

/// Whether a `managedFields` entry is `manager`'s write of the main resource.
fn is_managed_by(entry: &Value, manager: &str) -> bool {
    entry.get("manager").and_then(Value::as_str) == Some(manager) && is_main_resource(entry)
}

/// Whether `observed` carries the generated hash of `desired` ([`GENERATED_HASH`]).
fn is_current(observed: &Value, desired: &Value) -> bool {
    fn hash(object: &Value) -> Option<&Value> {
        object.pointer("/metadata/annotations")?.get(GENERATED_HASH)
    }
    hash(desired).is_some_and(|want| hash(observed) == Some(want))
}

/// Drops from `managedFields` what [`plan`] never reads, for caches to keep less: entries of
/// subresources, when each write was made, and the body fields of `manager`'s creates and
/// replaces when it never applied the object. Those are never needed: while the object carries
/// the hash of what we generate they are exempt, and once it does not, the hash annotation
/// differs from what we want and the object is replaced whatever they hold. (Their metadata
/// fields stay: a replace removes the labels and annotations we wrote and no longer want.)
pub fn keep_what_plan_reads(entries: &mut Vec<Value>, manager: Option<&str>) {
    entries.retain(is_main_resource);
    let applied = manager.is_some_and(|m| entries.iter().any(|e| is_applied_by(e, m)));
    for entry in entries.iter_mut() {
        let ours_only_written = !applied && manager.is_some_and(|m| is_managed_by(entry, m));
        let Some(entry) = entry.as_object_mut() else {
            continue;
        };
        entry.remove("time");
        if ours_only_written && let Some(fields) = entry.get_mut("fieldsV1") {
            let metadata = fields.get_mut("f:metadata").map(Value::take);
            *fields = json!({});
            if let Some(metadata) = metadata {
                fields["f:metadata"] = metadata;
            }
        }
    }
}

/// Whether a `managedFields` entry is about the object itself, not a subresource (the status).
pub(crate) fn is_main_resource(entry: &Value) -> bool {
    entry
        .get("subresource")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

/// Whether the field set `owned` (a `fieldsV1` tree) names a field that `observed` has and
/// `desired` does not (with `desired` `None`: any field `observed` has). Fields the object no
/// longer has do not count: a replace removes a field without taking it out of our applied
/// field set, and replacing again would change nothing, forever.
pub fn holds_beyond(owned: &Value, observed: &Value, desired: Option<&Value>) -> bool {
    owned.as_object().is_some_and(|fields| {
        fields.iter().any(|(key, sub)| {
            if key == "." {
                return false;
            }
            let Some(have) = child(key, observed) else {
                // A path element this code does not know: assume the worst.
                return true;
            };
            let Some(have) = have.filter(|v| !v.is_null()) else {
                return false;
            };
            let want = match desired.map(|d| child(key, d)) {
                None => None,
                Some(None) => return true,
                Some(Some(want)) => want.filter(|v| !v.is_null()),
            };
            match want {
                Some(want) => holds_beyond(sub, have, Some(want)),
                // Present and unwanted: it counts if it is owned itself or by parts it has.
                None => owns_itself(sub) || holds_beyond(sub, have, None),
            }
        })
    })
}

/// Whether a `fieldsV1` subtree owns the field it is under (not only parts of it).
fn owns_itself(sub: &Value) -> bool {
    sub.as_object()
        .is_none_or(|fields| fields.is_empty() || fields.contains_key("."))
}

/// The element the `fieldsV1` entry `key` names in `value`: `Some(None)` when absent, `None`
/// when the key is of a kind this code does not know.
fn child<'a>(key: &str, value: &'a Value) -> Option<Option<&'a Value>> {
    Some(match key.split_at_checked(2)? {
        ("f:", name) => value.get(name),
        ("k:", item) => serde_json::from_str::<Value>(item).ok().and_then(|item| {
            value
                .as_array()
                .and_then(|list| list.iter().find(|e| matches_key(e, &item)))
        }),
        ("v:", item) => serde_json::from_str::<Value>(item).ok().and_then(|item| {
            value
                .as_array()
                .and_then(|l| l.iter().find(|e| **e == item))
        }),
        ("i:", index) => index
            .parse::<usize>()
            .ok()
            .and_then(|i| value.as_array().and_then(|l| l.get(i))),
        _ => return None,
    })
}

/// Whether list element `e` is the one an associative-list key designates. A key field the
/// element leaves out (the server defaults it, e.g. a port's protocol) does not disqualify it.
fn matches_key(e: &Value, key: &Value) -> bool {
    key.as_object().is_some_and(|key| {
        key.iter()
            .all(|(k, v)| e.get(k).is_none_or(|have| have == v))
    })
}

/// Whether every body field of `desired` is in `observed` with the same value.
fn body_covered(observed: &Value, desired: &Value) -> bool {
    desired.as_object().is_some_and(|want| {
        want.iter()
            .filter(|(k, _)| !NOT_BODY.contains(&k.as_str()))
            .all(|(k, v)| covers(observed.get(k).unwrap_or(&Value::Null), v))
    })
}

/// Whether `observed` carries our labels, annotations and owner references.
fn meta_covered(observed: &Value, desired: &Value) -> bool {
    ["labels", "annotations"].iter().all(|field| {
        covers(
            observed
                .pointer(&format!("/metadata/{field}"))
                .unwrap_or(&Value::Null),
            desired
                .pointer(&format!("/metadata/{field}"))
                .unwrap_or(&Value::Null),
        )
    }) && desired
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_none_or(|want| {
            let have = observed
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array);
            want.iter().all(|o| {
                have.is_some_and(|have| {
                    have.iter().any(|h| {
                        h.get("uid") == o.get("uid") && h.get("controller") == o.get("controller")
                    })
                })
            })
        })
}

/// Whether `have` holds everything `want` says: objects may carry extra keys (server defaults;
/// extra keys someone owns are caught by [`plan`]), lists must have the same length with each
/// element covered, scalars must be equal. A `null` we want is the same as a field left out,
/// and so is an empty list or object: built-in kinds drop those (`values: []` of an `Exists`
/// requirement), and wanting them back would rewrite the object forever.
pub fn covers(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (_, Value::Null) => true,
        (Value::Null, Value::Array(want)) if want.is_empty() => true,
        (Value::Null, Value::Object(want)) if want.is_empty() => true,
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(k, v)| covers(have.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(have), Value::Array(want)) => {
            have.len() == want.len() && have.iter().zip(want).all(|(h, w)| covers(h, w))
        }
        _ => have == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const US: &str = "nimbus-netpol";

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    /// A NetworkPolicy as the server stores it after our apply of `selector`, plus defaults.
    fn stored(labels: Value, managed: Vec<Value>) -> Value {
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app.kubernetes.io/managed-by": "nimbus-netpol"},
                         "ownerReferences": [{"uid": "u1", "controller": true, "name": "o", "kind": "NimbusPolicy", "apiVersion": "x/v1"}],
                         "managedFields": managed},
            "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}
        })
    }

    fn with_hash(mut object: Value, hash: &str) -> Value {
        object["metadata"]["annotations"] = json!({ GENERATED_HASH: hash });
        object
    }

    fn desired(labels: Value) -> Value {
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app.kubernetes.io/managed-by": "nimbus-netpol"},
                         "ownerReferences": [{"uid": "u1", "controller": true, "name": "o", "kind": "NimbusPolicy", "apiVersion": "x/v1"}]},
            "spec": {"podSelector": {"matchLabels": labels}, "egress": [{"ports": [{"port": 53}]}]}
        })
    }

    fn our_fields(labels: &[&str]) -> Value {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|l| (format!("f:{l}"), json!({})))
            .collect();
        json!({
            "f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}},
                           "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}},
            "f:spec": {"f:podSelector": {"f:matchLabels": labels}, "f:egress": {}}
        })
    }

    #[test]
    fn a_converged_object_with_server_defaults_needs_nothing() {
        let observed = stored(
            json!({"app": "web"}),
            vec![entry(US, "Apply", our_fields(&["app"]))],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Nothing
        );
    }

    /// After our replace removed `tier`, our applied field set still names it (only an apply
    /// updates it): that is no reason to replace again, which would change nothing forever.
    #[test]
    fn fields_we_once_applied_and_the_object_no_longer_has_need_nothing() {
        let observed = stored(
            json!({"app": "web"}),
            vec![
                entry(US, "Apply", our_fields(&["app", "tier"])),
                entry(US, "Update", our_fields(&["app"])),
            ],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Nothing
        );
        let with_tier = stored(
            json!({"app": "web", "tier": "fe"}),
            vec![entry(US, "Apply", our_fields(&["app", "tier"]))],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&with_tier), US),
            Write::Replace
        );
    }

    #[test]
    fn absence_needs_create_and_missing_ownership_apply() {
        assert_eq!(plan(&desired(json!({})), None, US), Write::Create);
        let observed = stored(json!({"app": "web"}), vec![]);
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Apply
        );
    }

    #[test]
    fn a_field_we_no_longer_generate_needs_replace() {
        let observed = stored(
            json!({"app": "web", "tier": "fe"}),
            vec![entry(US, "Apply", our_fields(&["app", "tier"]))],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Replace
        );
        assert_eq!(
            plan(&desired(json!({})), Some(&observed), US),
            Write::Replace
        );
    }

    #[test]
    fn a_foreign_key_inside_our_fields_is_taken_back_but_foreign_metadata_is_left() {
        let foreign = entry(
            "kubectl-edit",
            "Update",
            json!({"f:spec": {"f:podSelector": {"f:matchLabels": {"f:evil": {}}}}}),
        );
        let observed = stored(
            json!({"app": "web", "evil": "x"}),
            vec![entry(US, "Apply", our_fields(&["app"])), foreign],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::TakeBack
        );

        let labelled = entry(
            "kubectl-label",
            "Update",
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        );
        let status = json!({"manager": "x", "operation": "Update", "subresource": "status",
                             "fieldsV1": {"f:spec": {"f:other": {}}}});
        let observed = stored(
            json!({"app": "web"}),
            vec![entry(US, "Apply", our_fields(&["app"])), labelled, status],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Nothing
        );
    }

    /// A predecessor's object, every field written by it with our values: shared ownership
    /// would leave it owning them, so it is taken back.
    #[test]
    fn a_predecessors_object_with_our_values_is_taken_back() {
        let predecessor = entry("nimbus-original", "Update", our_fields(&["app"]));
        let observed = stored(json!({"app": "web"}), vec![predecessor]);
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::TakeBack
        );
    }

    /// What a take-back claims leaves nothing to write, and nothing foreign.
    #[test]
    fn a_taken_back_object_needs_nothing() {
        let want = with_hash(desired(json!({"app": "web"})), "h1");
        let entry = claim(&want, US);
        assert_eq!(
            entry["fieldsV1"],
            json!({
                "f:metadata": {
                    "f:labels": {"f:app.kubernetes.io/managed-by": {}},
                    "f:annotations": {format!("f:{GENERATED_HASH}"): {}},
                    "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}
                },
                "f:spec": {}
            })
        );
        let mut taken = stored(json!({"app": "web"}), vec![entry]);
        taken["metadata"]["annotations"] = want["metadata"]["annotations"].clone();
        assert_eq!(plan(&want, Some(&taken), US), Write::Nothing);
        let more = with_hash(desired(json!({"app": "web", "tier": "fe"})), "h2");
        assert_eq!(plan(&more, Some(&taken), US), Write::Replace);
    }

    #[test]
    fn a_foreign_change_of_our_value_is_taken_back() {
        let foreign = entry(
            "kubectl-edit",
            "Update",
            json!({"f:spec": {"f:podSelector": {"f:matchLabels": {"f:app": {}}}}}),
        );
        let observed = stored(
            json!({"app": "evil"}),
            vec![entry(US, "Apply", our_fields(&[])), foreign],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::TakeBack
        );
    }

    #[test]
    fn our_own_replace_counts_only_when_it_holds_what_we_no_longer_generate() {
        let replaced = entry(
            US,
            "Update",
            json!({"f:spec": {"f:podSelector": {"f:matchLabels": {"f:app": {}}}}}),
        );
        let observed = stored(
            json!({"app": "web"}),
            vec![entry(US, "Apply", our_fields(&[])), replaced],
        );
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Nothing
        );
        assert_eq!(
            plan(&desired(json!({})), Some(&observed), US),
            Write::Replace
        );
    }

    /// Our create owns everything the server stored, its defaults (`policyTypes`, a port's
    /// `protocol`) too: while the object carries the hash of what we generate, that is no
    /// reason to write; once we generate something else, it cannot be told from what we
    /// generated before, and only a replace makes the object exactly what we want.
    #[test]
    fn what_our_create_owns_beyond_what_we_generate_is_defaults_while_the_hash_is_current() {
        let created = entry(
            US,
            "Update",
            json!({
                "f:metadata": {"f:annotations": {"f:hash": {}}, "f:labels": {"f:app.kubernetes.io/managed-by": {}},
                               "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}},
                "f:spec": {"f:podSelector": {}, "f:policyTypes": {},
                           "f:egress": {}}
            }),
        );
        let observed = with_hash(stored(json!({"app": "web"}), vec![created.clone()]), "h1");
        let want = |hash| with_hash(desired(json!({"app": "web"})), hash);
        assert_eq!(plan(&want("h1"), Some(&observed), US), Write::Nothing);
        assert_eq!(plan(&want("h2"), Some(&observed), US), Write::Replace);

        // What we created, we replace: only creates and replaces of ours, never an apply, then
        // hold what it has.
        let exact = with_hash(
            stored(
                json!({"app": "web"}),
                vec![entry(US, "Update", our_fields(&["app"]))],
            ),
            "h1",
        );
        let more = with_hash(desired(json!({"app": "web", "tier": "fe"})), "h2");
        assert_eq!(plan(&more, Some(&exact), US), Write::Replace);

        // Decided alike on what a cache keeps of it.
        for (hash, write) in [("h1", Write::Nothing), ("h2", Write::Replace)] {
            let mut kept = observed.clone();
            let entries = kept["metadata"]["managedFields"].as_array_mut().unwrap();
            keep_what_plan_reads(entries, Some(US));
            assert_eq!(entries[0]["fieldsV1"].get("f:spec"), None);
            assert_eq!(plan(&want(hash), Some(&kept), US), write);
        }

        // Someone else's change is found all the same.
        let foreign = entry(
            "kubectl-edit",
            "Update",
            json!({"f:spec": {"f:podSelector": {}}}),
        );
        let edited = with_hash(stored(json!({"app": "evil"}), vec![created, foreign]), "h1");
        assert_eq!(plan(&want("h1"), Some(&edited), US), Write::TakeBack);
    }

    /// Once we applied an object, our other writes' fields tell what we no longer generate.
    #[test]
    fn caches_keep_every_field_set_of_objects_we_applied() {
        let mut entries = vec![
            entry(US, "Apply", our_fields(&["app"])),
            entry(US, "Update", our_fields(&["tier"])),
            entry("kubectl-edit", "Update", our_fields(&["evil"])),
            json!({"manager": "x", "operation": "Update", "subresource": "status", "fieldsV1": {}}),
        ];
        entries[1]["time"] = json!("2026-11-25T00:00:00Z");
        let mut kept = entries.clone();
        keep_what_plan_reads(&mut kept, Some(US));
        entries.truncate(3);
        entries[1].as_object_mut().unwrap().remove("time");
        assert_eq!(kept, entries);
    }

    #[test]
    fn a_changed_annotation_needs_apply_even_inside_an_atomic_field() {
        // An atomic podSelector: the server records `f:podSelector` only.
        let atomic = json!({
            "f:metadata": {"f:annotations": {"f:hash": {}}, "f:labels": {"f:app.kubernetes.io/managed-by": {}},
                           "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}},
            "f:spec": {"f:podSelector": {}, "f:egress": {}}
        });
        let mut observed = stored(
            json!({"app": "web", "tier": "fe"}),
            vec![entry(US, "Apply", atomic)],
        );
        observed["metadata"]["annotations"] = json!({"hash": "old"});
        let mut want = desired(json!({"app": "web"}));
        want["metadata"]["annotations"] = json!({"hash": "new"});
        assert_eq!(plan(&want, Some(&observed), US), Write::Apply);
        want["metadata"]["annotations"] = json!({"hash": "old"});
        want["spec"]["podSelector"]["matchLabels"] = json!({"app": "web", "tier": "fe"});
        assert_eq!(plan(&want, Some(&observed), US), Write::Nothing);
    }

    #[test]
    fn associative_and_set_list_elements_are_matched_by_key() {
        let value =
            json!({"containers": [{"name": "a", "ports": [{"containerPort": 80}]}], "set": ["x"]});
        let owned = json!({"f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:ports": {
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {}}}}, "f:set": {"v:\"x\"": {}}});
        let wants = |owned: &Value, desired: &Value| holds_beyond(owned, &value, Some(desired));
        assert!(!wants(&owned, &value));
        // The object has container a and set element x; we no longer want them.
        let fewer = json!({"containers": [], "set": []});
        assert!(wants(&owned, &fewer));
        // Owned elements the object does not have need no replace.
        let gone = json!({"f:containers": {"k:{\"name\":\"b\"}": {}}});
        assert!(!wants(&gone, &value));
        assert!(!wants(&json!({"f:set": {"v:\"y\"": {}}}), &value));
        assert!(!wants(&json!({"f:containers": {"i:3": {}}}), &value));
        assert!(wants(&json!({"x:unknown": {}}), &value));
        // Without a desired value: whether the object has anything of it.
        assert!(holds_beyond(&owned, &value, None));
        assert!(!holds_beyond(&gone, &value, None));
    }

    #[test]
    fn covers_allows_extra_keys_but_not_changed_or_missing_values() {
        let want = json!({"spec": {"a": [{"x": 1}], "empty": {}}});
        let defaulted = json!({"spec": {"a": [{"x": 1, "d": true}], "empty": {}, "b": 2}});
        assert!(covers(&defaulted, &want));
        assert!(!covers(
            &json!({"spec": {"a": [{"x": 2}], "empty": {}}}),
            &want
        ));
        assert!(!covers(
            &json!({"spec": {"a": [{"x": 1}, {"x": 1}], "empty": {}}}),
            &want
        ));
        assert!(!covers(&json!({"spec": {"empty": {}}}), &want));
        // Left out is the same as null or empty: the server drops those.
        assert!(covers(&json!({"spec": {"a": [{"x": 1}]}}), &want));
        assert!(covers(&json!({}), &json!({"k": null})));
    }

    #[test]
    fn missing_labels_or_owner_need_apply() {
        let mut observed = stored(
            json!({"app": "web"}),
            vec![entry(US, "Apply", our_fields(&["app"]))],
        );
        observed["metadata"]["ownerReferences"] = json!([]);
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Apply
        );
        let mut observed = stored(
            json!({"app": "web"}),
            vec![entry(US, "Apply", our_fields(&["app"]))],
        );
        observed["metadata"]["labels"] = json!({});
        assert_eq!(
            plan(&desired(json!({"app": "web"})), Some(&observed), US),
            Write::Apply
        );
    }

    #[test]
    fn empty_lists_the_server_drops_are_no_difference() {
        let mut want = desired(json!({"app": "web"}));
        want["spec"]["podSelector"]["matchExpressions"] =
            json!([{"key": "tier", "operator": "Exists", "values": []}]);
        let mut have = stored(json!({"app": "web"}), vec![]);
        have["spec"]["podSelector"]["matchExpressions"] =
            json!([{"key": "tier", "operator": "Exists"}]);
        assert!(body_covered(&have, &want));
        want["spec"]["podSelector"]["matchExpressions"][0]["values"] = json!(["x"]);
        assert!(!body_covered(&have, &want));
    }
}
