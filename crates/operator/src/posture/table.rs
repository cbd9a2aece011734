//! The `meta.k8s.io/v1` Table form `kubectl get` asks for, so it prints useful columns.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nimbus_api::posture::{NamespacePosture, PostureKind, WorkloadPosture};
use serde::Serialize;
use serde_json::{Value, json};

/// How a posture kind prints.
pub trait Printed: PostureKind {
    /// `(name, type, description)`; a `Name` column comes first and an `Age` column last.
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)];
    fn cells(&self) -> Vec<Value>;
}

impl Printed for WorkloadPosture {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        ("Workload", "string", "The workload, as Kind/name."),
        ("Pods", "integer", "How many of its pods exist."),
        (
            "Verdict",
            "string",
            "Protected, Partial, Unprotected or Audited.",
        ),
        (
            "Intents",
            "string",
            "The IDs of the bound intents that select it.",
        ),
        ("Reasons", "string", "Why it is not (fully) protected."),
    ];

    fn cells(&self) -> Vec<Value> {
        let mut intents: Vec<&str> = self.intents.iter().map(|i| i.id.as_str()).collect();
        intents.dedup();
        let mut reasons: Vec<&str> = self.reasons.iter().map(|r| r.reason.as_str()).collect();
        reasons.dedup();
        vec![
            json!(format!("{}/{}", self.workload.kind, self.workload.name)),
            json!(self.workload.pods),
            json!(self.verdict.as_str()),
            json!(or_none(&intents)),
            json!(or_none(&reasons)),
        ]
    }
}

impl Printed for NamespacePosture {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        (
            "Verdict",
            "string",
            "Protected when every workload is, NoWorkloads when there is none.",
        ),
        ("Workloads", "integer", "Workloads in the namespace."),
        ("Protected", "integer", "Workloads fully protected."),
        ("Partial", "integer", "Workloads partly protected."),
        ("Unprotected", "integer", "Workloads not protected."),
        (
            "Audited",
            "integer",
            "Workloads bound in audit or shadow mode only.",
        ),
        (
            "Intents",
            "string",
            "The IDs of the intents bound in the namespace.",
        ),
        (
            "ATT&CK",
            "string",
            "MITRE ATT&CK for Containers: percent of (control, workload) pairs covered, and proven.",
        ),
        (
            "CIS",
            "string",
            "CIS Kubernetes Benchmark v1.12: percent covered, and proven.",
        ),
        (
            "NSA",
            "string",
            "NSA/CISA Kubernetes Hardening Guide: percent covered, and proven.",
        ),
        (
            "FiGHT",
            "string",
            "MITRE FiGHT: percent covered, and proven.",
        ),
    ];

    fn cells(&self) -> Vec<Value> {
        let intents: Vec<&str> = self.intents.iter().map(String::as_str).collect();
        let score = |name: &str| match self.compliance.iter().find(|f| f.framework == name) {
            Some(f) => format!("{}% ({}% proven)", f.score, f.proven_score),
            None => "-".to_owned(),
        };
        vec![
            json!(self.verdict.as_str()),
            json!(self.workloads.total),
            json!(self.workloads.protected),
            json!(self.workloads.partial),
            json!(self.workloads.unprotected),
            json!(self.workloads.audited),
            json!(or_none(&intents)),
            json!(score("mitre-attack")),
            json!(score("cis-kubernetes")),
            json!(score("nsa-cisa")),
            json!(score("mitre-fight")),
        ]
    }
}

fn or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "<none>".to_owned()
    } else {
        items.join(",")
    }
}

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// A Table of `objects`; `headers: false` leaves out the column definitions (a watch sends
/// them with its first event only). Serialized straight from the objects: thousands of rows
/// built as `serde_json::Value`s first would cost ten times as much.
pub fn table<'a, T: Printed + Serialize + 'a>(
    objects: impl IntoIterator<Item = &'a T>,
    list_meta: Value,
    include: Include,
    headers: bool,
) -> Table<'a, T> {
    let column_definitions: Vec<Value> = if headers {
        std::iter::once(json!({"name": "Name", "type": "string", "format": "name",
            "description": "Name of the posture object.", "priority": 0}))
        .chain(T::COLUMNS.iter().map(|(name, kind, description)| {
            json!({"name": name, "type": kind, "format": "", "description": description, "priority": 0})
        }))
        .chain(std::iter::once(json!({"name": "Age", "type": "date", "format": "",
            "description": "When the oldest pod (or the namespace) was created.", "priority": 0})))
        .collect()
    } else {
        Vec::new()
    };
    let rows = objects
        .into_iter()
        .map(|object| {
            let meta = object.metadata();
            let mut cells = vec![json!(meta.name.clone().unwrap_or_default())];
            cells.extend(object.cells());
            cells.push(age(meta));
            let object = match include {
                Include::None => Embedded::None,
                Include::Metadata => Embedded::Metadata {
                    kind: "PartialObjectMetadata",
                    api_version: "meta.k8s.io/v1",
                    metadata: meta,
                },
                Include::Object => Embedded::Object(object),
            };
            Row { cells, object }
        })
        .collect();
    Table {
        kind: "Table",
        api_version: "meta.k8s.io/v1",
        metadata: list_meta,
        column_definitions,
        rows,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Table<'a, T> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Value,
    column_definitions: Vec<Value>,
    rows: Vec<Row<'a, T>>,
}

#[derive(Serialize)]
struct Row<'a, T> {
    cells: Vec<Value>,
    object: Embedded<'a, T>,
}

/// What a row carries besides its cells.
#[derive(Serialize)]
#[serde(untagged)]
enum Embedded<'a, T> {
    None,
    #[serde(rename_all = "camelCase")]
    Metadata {
        kind: &'static str,
        api_version: &'static str,
        metadata: &'a ObjectMeta,
    },
    Object(&'a T),
}

/// The Age column as kube-apiserver prints it for CRDs: the time since creation, rounded.
fn age(meta: &ObjectMeta) -> Value {
    let Some(created) = &meta.creation_timestamp else {
        return json!("<unknown>");
    };
    let seconds = jiff::Timestamp::now()
        .duration_since(created.0)
        .as_secs()
        .max(0);
    json!(match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    })
}
