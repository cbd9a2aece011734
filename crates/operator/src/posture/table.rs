//! The `meta.k8s.io/v1` Table form `kubectl get` asks for, so it prints useful columns.

use k8s_openapi::jiff::Timestamp;
use nimbus_api::posture::{NamespacePosture, PostureKind, WorkloadPosture};
use serde_json::value::RawValue;
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

/// A posture's Table row as far as it depends on the posture alone, serialized once per change
/// of the posture (the store keeps it beside the posture's JSON): a Table of 10,000 rows is
/// then a concatenation, not 10,000 serializations of cells and metadata. Only the Age cell is
/// written per request: it changes with the time, not with the posture.
#[derive(Debug)]
pub struct Row {
    /// The cells before Age, as JSON values separated by commas (empty for no cell).
    cells: String,
    /// The posture's metadata, which the row embeds with `includeObject=Metadata`: kubectl's
    /// default, and ours.
    metadata: Box<RawValue>,
    /// When the posture's subject was created, for Age.
    created: Option<Timestamp>,
}

impl Row {
    pub fn of<T: Printed>(object: &T) -> serde_json::Result<Self> {
        let meta = object.metadata();
        let cells: Vec<String> = std::iter::once(json!(meta.name.as_deref().unwrap_or_default()))
            .chain(T::COLUMNS.iter().map(|c| (c.cell)(object)))
            .map(|cell| cell.to_string())
            .collect();
        Ok(Self {
            cells: cells.join(","),
            metadata: serde_json::value::to_raw_value(meta)?,
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
        })
    }

    /// The row of a posture that could not be serialized (our types always serialize): an Age
    /// of `<unknown>` alone, and no metadata.
    pub fn unserializable() -> Self {
        Self {
            cells: String::new(),
            metadata: RawValue::NULL.to_owned(),
            created: None,
        }
    }

    /// Appends the row as of `now`, carrying what `include` asks for (`object`: the posture's
    /// JSON).
    fn write(&self, out: &mut Vec<u8>, object: &RawValue, include: Include, now: Timestamp) {
        out.extend_from_slice(br#"{"cells":["#);
        out.extend_from_slice(self.cells.as_bytes());
        if !self.cells.is_empty() {
            out.push(b',');
        }
        // An age is digits and a unit, or `<unknown>`: nothing in it to escape.
        out.push(b'"');
        out.extend_from_slice(age(self.created, now).as_bytes());
        out.extend_from_slice(br#""],"object":"#);
        match include {
            Include::None => out.extend_from_slice(b"null"),
            Include::Metadata => {
                out.extend_from_slice(
                    br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#,
                );
                out.extend_from_slice(self.metadata.get().as_bytes());
                out.push(b'}');
            }
            Include::Object => out.extend_from_slice(object.get().as_bytes()),
        }
        out.push(b'}');
    }
}

/// A Table of `rows`, each a posture's [`Row`] and its JSON (which `includeObject=Object`
/// embeds), with Ages as of `now`; `headers: false` leaves out the column definitions (a watch
/// sends them with its first event only). Assembled from the bytes serialized as each posture
/// changed: serializing every row's cells and metadata again on every request made a Table of
/// 10,000 rows cost three times the JSON list.
pub fn table<'a, T: Printed>(
    rows: impl IntoIterator<Item = (&'a Row, &'a RawValue)>,
    list_meta: &Value,
    include: Include,
    headers: bool,
    now: Timestamp,
) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(br#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":"#);
    serde_json::to_writer(&mut out, list_meta)?;
    out.extend_from_slice(br#","columnDefinitions":"#);
    serde_json::to_writer(&mut out, &column_definitions::<T>(headers))?;
    out.extend_from_slice(br#","rows":["#);
    for (i, (row, object)) in rows.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        row.write(&mut out, object, include, now);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// The Name column, `T`'s, and Age; none without `headers`.
fn column_definitions<T: Printed>(headers: bool) -> Vec<Value> {
    if !headers {
        return Vec::new();
    }
    std::iter::once(json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name of the posture object.", "priority": 0}))
    .chain(T::COLUMNS.iter().map(|c| {
        json!({"name": c.name, "type": c.kind, "format": "", "description": c.description, "priority": 0})
    }))
    .chain(std::iter::once(json!({"name": "Age", "type": "date", "format": "",
        "description": "When the oldest pod (or the namespace) was created.", "priority": 0})))
    .collect()
}

/// The Age column as kube-apiserver prints it for CRDs: the time from `created` to `now`,
/// rounded.
fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    let Some(created) = created else {
        return "<unknown>".to_owned();
    };
    match now.duration_since(created).as_secs().max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// The Table as it was serialized before rows were cached: every row's cells and metadata
/// serialized from the posture on every request. What the assembled Table must equal.
#[cfg(test)]
pub(super) mod uncached {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::Serialize;

    pub fn table<'a, T: Printed + Serialize + 'a>(
        objects: impl IntoIterator<Item = &'a T>,
        list_meta: Value,
        include: Include,
        headers: bool,
        now: Timestamp,
    ) -> String {
        let rows = objects
            .into_iter()
            .map(|object| {
                let meta = object.metadata();
                let mut cells = vec![json!(meta.name.clone().unwrap_or_default())];
                cells.extend(T::COLUMNS.iter().map(|c| (c.cell)(object)));
                cells.push(json!(age(
                    meta.creation_timestamp.as_ref().map(|t| t.0),
                    now
                )));
                let object = match include {
                    Include::None => Embedded::None,
                    Include::Metadata => Embedded::Metadata {
                        kind: "PartialObjectMetadata",
                        api_version: "meta.k8s.io/v1",
                        metadata: meta,
                    },
                    Include::Object => Embedded::Object(object),
                };
                UncachedRow { cells, object }
            })
            .collect();
        serde_json::to_string(&Table {
            kind: "Table",
            api_version: "meta.k8s.io/v1",
            metadata: list_meta,
            column_definitions: column_definitions::<T>(headers),
            rows,
        })
        .expect("a Table serializes")
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Table<'a, T> {
        kind: &'static str,
        api_version: &'static str,
        metadata: Value,
        column_definitions: Vec<Value>,
        rows: Vec<UncachedRow<'a, T>>,
    }

    #[derive(Serialize)]
    struct UncachedRow<'a, T> {
        cells: Vec<Value>,
        object: Embedded<'a, T>,
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    fn now() -> Timestamp {
        "2026-11-29T12:00:00Z".parse().expect("a timestamp")
    }

    /// Created `ago` seconds before [`now`], or never said.
    fn metadata(name: &str, namespace: Option<&str>, ago: Option<i64>) -> Value {
        json!({
            "name": name,
            "namespace": namespace,
            "resourceVersion": "17",
            // What a label may hold that JSON must escape.
            "labels": {"app": name, "note": "a \"quoted\"\tvalue, ünïcode"},
            "creationTimestamp": ago.map(|s| (now() - k8s_openapi::jiff::SignedDuration::from_secs(s)).to_string()),
        })
    }

    fn workload(name: &str, verdict: &str, ago: Option<i64>) -> WorkloadPosture {
        serde_json::from_value(json!({
            "apiVersion": "posture.security.nimbus.com/v1alpha1",
            "kind": "WorkloadPosture",
            "metadata": metadata(&format!("deployment-{name}"), Some("shop"), ago),
            "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "pods": 3},
            "verdict": verdict,
            "reasons": [{"reason": "EngineNotInstalled", "message": "no KubeArmor"},
                        {"reason": "EngineNotInstalled", "message": "again"}],
        }))
        .expect("a WorkloadPosture")
    }

    fn namespace(name: &str, verdict: &str, ago: Option<i64>) -> NamespacePosture {
        serde_json::from_value(json!({
            "apiVersion": "posture.security.nimbus.com/v1alpha1",
            "kind": "NamespacePosture",
            "metadata": metadata(name, None, ago),
            "verdict": verdict,
            "intents": ["dns-manipulation", "escape-to-host"],
            "workloads": {"total": 4, "protected": 1, "partial": 1, "unprotected": 1,
                          "audited": 1, "excepted": 0},
            "compliance": [{"framework": "cis-kubernetes", "title": "CIS", "workloads": 4,
                            "score": 50, "provenScore": 25, "controls": []}],
        }))
        .expect("a NamespacePosture")
    }

    /// The Table assembled from each posture's row as [`Row::of`] caches it, and the Table
    /// serialized whole, in every form a request can ask for.
    fn assembled_and_whole<T: Printed + Serialize>(postures: &[T]) -> Vec<(String, String)> {
        let cached: Vec<(Row, Box<RawValue>)> = postures
            .iter()
            .map(|p| {
                let json = serde_json::value::to_raw_value(p).expect("JSON");
                (Row::of(p).expect("a row"), json)
            })
            .collect();
        let metas = [
            json!({"resourceVersion": "42"}),
            json!({"resourceVersion": "42", "continue": "shop/deployment-b"}),
        ];
        let mut pairs = Vec::new();
        for include in [Include::None, Include::Metadata, Include::Object] {
            for headers in [true, false] {
                for meta in &metas {
                    let assembled = table::<T>(
                        cached.iter().map(|(row, json)| (row, &**json)),
                        meta,
                        include,
                        headers,
                        now(),
                    )
                    .expect("a Table");
                    let whole = uncached::table(postures, meta.clone(), include, headers, now());
                    pairs.push((String::from_utf8(assembled).expect("UTF-8"), whole));
                }
            }
        }
        pairs
    }

    #[test]
    fn a_table_assembled_from_cached_rows_is_the_table_serialized_whole() {
        let workloads = [
            workload("a", "Protected", Some(30)),
            workload("b", "Partial", Some(90 * 60)),
            workload("c", "Unprotected", Some(3 * 86_400)),
            workload("d", "Audited", None),
        ];
        let namespaces = [
            namespace("shop", "Partial", Some(5 * 3_600)),
            namespace("empty", "NoWorkloads", None),
        ];
        let pairs = [
            assembled_and_whole(&workloads),
            assembled_and_whole(&namespaces),
            assembled_and_whole::<WorkloadPosture>(&[]),
        ]
        .concat();
        for (assembled, whole) in pairs {
            assert_eq!(assembled, whole);
            serde_json::from_str::<Value>(&assembled).expect("valid JSON");
        }
        // The cells as kubectl prints them, Age as of `now`.
        let table: Value = serde_json::from_str(
            &String::from_utf8(
                table::<WorkloadPosture>(
                    [(&Row::of(&workloads[1]).expect("a row"), RawValue::NULL)],
                    &json!({}),
                    Include::None,
                    false,
                    now(),
                )
                .expect("a Table"),
            )
            .expect("UTF-8"),
        )
        .expect("JSON");
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "deployment-b",
                "Deployment/b",
                3,
                "Partial",
                "<none>",
                "EngineNotInstalled",
                "90m"
            ])
        );
    }
}
