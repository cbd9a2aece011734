//! The `meta.k8s.io/v1` Table form `kubectl get` asks for, so it prints useful columns.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nimbus_api::posture::{NamespacePosture, PostureKind, WorkloadPosture};
use serde::Serialize;
use serde_json::{Value, json};

/// One column a posture kind prints: its definition, and the cell of it for an object. A
/// column is one entry: its header and its cell cannot fall out of step.
pub struct Column<T> {
    pub name: &'static str,
    /// Its OpenAPI type, as `columnDefinitions` give it.
    pub kind: &'static str,
    pub description: &'static str,
    pub cell: fn(&T) -> Value,
}

const fn column<T>(
    name: &'static str,
    kind: &'static str,
    description: &'static str,
    cell: fn(&T) -> Value,
) -> Column<T> {
    Column {
        name,
        kind,
        description,
        cell,
    }
}

/// How a posture kind prints.
pub trait Printed: PostureKind + Sized + 'static {
    /// A `Name` column comes first and an `Age` column last.
    const COLUMNS: &'static [Column<Self>];
}

impl Printed for WorkloadPosture {
    const COLUMNS: &'static [Column<Self>] = &[
        column("Workload", "string", "The workload, as Kind/name.", |w| {
            json!(format!("{}/{}", w.workload.kind, w.workload.name))
        }),
        column("Pods", "integer", "How many of its pods exist.", |w| {
            json!(w.workload.pods)
        }),
        column(
            "Verdict",
            "string",
            "Protected, Partial, Unprotected or Audited.",
            |w| json!(w.verdict.as_str()),
        ),
        column(
            "Intents",
            "string",
            "The IDs of the bound intents that select it.",
            |w| json!(listed(w.intents.iter().map(|i| i.id.as_str()))),
        ),
        column(
            "Reasons",
            "string",
            "Why it is not (fully) protected.",
            |w| json!(listed(w.reasons.iter().map(|r| r.reason.as_str()))),
        ),
    ];
}

impl Printed for NamespacePosture {
    const COLUMNS: &'static [Column<Self>] = &[
        column(
            "Verdict",
            "string",
            "Protected when every workload is, NoWorkloads when there is none.",
            |n| json!(n.verdict.as_str()),
        ),
        column("Workloads", "integer", "Workloads in the namespace.", |n| {
            json!(n.workloads.total)
        }),
        column("Protected", "integer", "Workloads fully protected.", |n| {
            json!(n.workloads.protected)
        }),
        column("Partial", "integer", "Workloads partly protected.", |n| {
            json!(n.workloads.partial)
        }),
        column("Unprotected", "integer", "Workloads not protected.", |n| {
            json!(n.workloads.unprotected)
        }),
        column(
            "Audited",
            "integer",
            "Workloads bound in audit or shadow mode only.",
            |n| json!(n.workloads.audited),
        ),
        column(
            "Excepted",
            "integer",
            "Workloads let out of every intent selecting them, until exceptions expire.",
            |n| json!(n.workloads.excepted),
        ),
        column(
            "Intents",
            "string",
            "The IDs of the intents bound in the namespace.",
            |n| json!(listed(n.intents.iter().map(String::as_str))),
        ),
        column(
            "ATT&CK",
            "string",
            "MITRE ATT&CK for Containers: percent of (control, workload) pairs covered, and proven.",
            |n| score(n, "mitre-attack"),
        ),
        column(
            "CIS",
            "string",
            "CIS Kubernetes Benchmark v1.12: percent covered, and proven.",
            |n| score(n, "cis-kubernetes"),
        ),
        column(
            "NSA",
            "string",
            "NSA/CISA Kubernetes Hardening Guide: percent covered, and proven.",
            |n| score(n, "nsa-cisa"),
        ),
        column(
            "FiGHT",
            "string",
            "MITRE FiGHT: percent covered, and proven.",
            |n| score(n, "mitre-fight"),
        ),
    ];
}

/// A namespace's score in the compliance framework `name`: covered, and proven.
fn score(namespace: &NamespacePosture, name: &str) -> Value {
    json!(
        match namespace.compliance.iter().find(|f| f.framework == name) {
            Some(f) => format!("{}% ({}% proven)", f.score, f.proven_score),
            None => "-".to_owned(),
        }
    )
}

/// `items` comma-separated, a run of the same one once; `<none>` when there is none.
fn listed<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut items: Vec<&str> = items.collect();
    items.dedup();
    or_none(&items)
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
        .chain(T::COLUMNS.iter().map(|c| {
            json!({"name": c.name, "type": c.kind, "format": "", "description": c.description, "priority": 0})
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
            cells.extend(T::COLUMNS.iter().map(|c| (c.cell)(object)));
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
