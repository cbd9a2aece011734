//! Exact comparison of a generated object in the cluster with what `nimbus translate` prints
//! for it (the chaos auditor, and the CLI-vs-cluster check of `tests/engines.rs`).
//!
//! The API server adds defaults to what it stores (a CronJob's pod template, a Kyverno
//! rule's empty blocks). Rather than a list of defaults to ignore, the expectation is put in
//! the server's own form: a server-side dry-run create of the printed object under a
//! generated name ([`ServerForms`]), which may only add to the printed object (a printed key
//! the server drops is a difference). Then the bodies must be equal key for key: a key
//! missing and a key added are both differences.
#![allow(dead_code)] // each user takes a different part

use super::oracle::{Server, with_owner_uids};
use kube::api::ApiResource;
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy};
use nimbus_operator::write::drift::GENERATED_HASH;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Expected objects in the API server's form, cached by the printed object (the chaos auditor
/// compares the same objects again and again).
#[derive(Default)]
pub struct ServerForms(HashMap<String, Value>);

impl ServerForms {
    /// `want` as the API server would store it: its defaults applied, nothing stored.
    pub async fn get(&mut self, server: &Server, want: &Value) -> Result<&Value, String> {
        let key = want.to_string();
        if !self.0.contains_key(&key) {
            let mut probe = with_owner_uids(want.clone());
            let meta = &mut probe["metadata"];
            meta["generateName"] = json!("server-form-");
            meta.as_object_mut().map(|m| m.remove("name"));
            let namespace = want["metadata"]["namespace"].as_str().unwrap_or_default();
            let stored = server.dry_run_object(&probe, namespace).await?;
            self.0.insert(key.clone(), stored);
        }
        Ok(&self.0[&key])
    }
}

/// Each difference between `have`, a generated object read from the cluster, and what
/// `nimbus translate` printed for it (`printed`), in the API server's form (`form`): what the
/// server's form dropped of the printed body, then the body (every top-level field but
/// `metadata`, `status`, `apiVersion` and `kind`) key for key, the labels, the annotations
/// (but the operator's hash of what it generated, its bookkeeping), and the owner references
/// (with the uid the cluster gave the owner where the printed one has none; whether that
/// owner is alive is the caller's to check).
pub fn differences(have: &Value, form: &Value, printed: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let body = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            for field in ["metadata", "status", "apiVersion", "kind"] {
                map.remove(field);
            }
        }
        v
    };
    diff("", &body(have), &body(form), &mut out);
    // The server's form may only add to what was printed: a printed key it dropped (a field
    // the schema does not know) was never in force.
    dropped("", &body(form), &body(printed), &mut out);
    let meta = |v: &Value, field: &str| -> Value {
        match &v["metadata"][field] {
            Value::Object(m) if m.is_empty() => Value::Null,
            other => other.clone(),
        }
    };
    let mut annotations = meta(have, "annotations");
    if let Some(map) = annotations.as_object_mut() {
        map.remove(GENERATED_HASH);
        if map.is_empty() {
            annotations = Value::Null;
        }
    }
    diff(
        "metadata.annotations",
        &annotations,
        &meta(form, "annotations"),
        &mut out,
    );
    diff(
        "metadata.labels",
        &meta(have, "labels"),
        &meta(form, "labels"),
        &mut out,
    );
    let mut owners = printed["metadata"]["ownerReferences"].clone();
    for (i, owner) in owners.as_array_mut().into_iter().flatten().enumerate() {
        if owner["uid"].as_str().is_none_or(str::is_empty) {
            owner["uid"] = have["metadata"]["ownerReferences"][i]["uid"].clone();
        }
    }
    diff(
        "metadata.ownerReferences",
        &have["metadata"]["ownerReferences"],
        &owners,
        &mut out,
    );
    out
}

/// Appends each path of `printed` that `form` lacks or holds otherwise. An empty list or
/// object printed is the same as none: built-in kinds store it so.
fn dropped(path: &str, form: &Value, printed: &Value, out: &mut Vec<String>) {
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match (form, printed) {
        (Value::Object(f), Value::Object(p)) => {
            for (k, pv) in p {
                match f.get(k) {
                    None if empty(pv) => {}
                    None => out.push(format!("{path}.{k}: printed, dropped by the server")),
                    Some(fv) => dropped(&format!("{path}.{k}"), fv, pv, out),
                }
            }
        }
        (Value::Array(f), Value::Array(p)) if f.len() == p.len() => {
            for (i, (fv, pv)) in f.iter().zip(p).enumerate() {
                dropped(&format!("{path}[{i}]"), fv, pv, out);
            }
        }
        (_, Value::String(s)) if s.is_empty() && path.ends_with(".uid") => {}
        _ if form == printed || empty(printed) && empty(form) => {}
        _ => out.push(format!("{path}: printed {printed}, stored {form}")),
    }
}

/// Appends each path where `have` and `want` differ. A string `uid` left empty in `want`
/// matches any: offline there are no uids, and owner references embedded in bodies
/// (virtual-patch templates) carry an empty one.
fn diff(path: &str, have: &Value, want: &Value, out: &mut Vec<String>) {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => {
            for (k, hv) in h {
                let at = format!("{path}.{k}");
                match w.get(k) {
                    None => out.push(format!("{at}: extra {hv}")),
                    Some(_) if k == "uid" && w[k] == "" && hv.is_string() => {}
                    Some(wv) => diff(&at, hv, wv, out),
                }
            }
            for (k, wv) in w.iter().filter(|(k, _)| !h.contains_key(*k)) {
                out.push(format!("{path}.{k}: missing {wv}"));
            }
        }
        (Value::Array(h), Value::Array(w)) if h.len() == w.len() => {
            for (i, (hv, wv)) in h.iter().zip(w).enumerate() {
                diff(&format!("{path}[{i}]"), hv, wv, out);
            }
        }
        _ if have == want => {}
        _ => out.push(format!("{path}: {have} instead of {want}")),
    }
}

/// Every native kind the operator writes on the test control planes. They serve only Kyverno's
/// legacy kinds (a Kyverno before 1.17), so the operator writes those; the Kyverno efficacy tests
/// cover the CEL kinds.
pub fn native_kinds() -> Vec<&'static nimbus_core::engines::NativeKind> {
    let cel = nimbus_core::engines::KyvernoApi::Cel.writes();
    nimbus_core::engines::all_kinds()
        .into_iter()
        .filter(|k| !cel.contains(k))
        .collect()
}

/// Every kind the operator generates, with whether it is namespaced.
pub fn generated_kinds() -> Vec<(ApiResource, bool)> {
    let mut kinds = vec![
        (ApiResource::erase::<NimbusPolicy>(&()), true),
        (ApiResource::erase::<ClusterNimbusPolicy>(&()), false),
    ];
    kinds.extend(
        native_kinds()
            .into_iter()
            .map(|k| (k.api_resource(), k.namespaced)),
    );
    kinds
}
