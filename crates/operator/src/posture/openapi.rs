//! Discovery and OpenAPI (v2 and v3) documents of the posture API: what kube-apiserver merges
//! into the cluster's, so `kubectl get` finds the resources and `kubectl explain` the fields.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};
use nimbus_api::posture::{GROUP, NamespacePosture, PostureKind, VERSION, WorkloadPosture};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The category `kubectl get nimbus-posture` lists.
const CATEGORY: &str = "nimbus-posture";

fn resource<T: PostureKind>() -> APIResource {
    APIResource {
        name: T::PLURAL.to_owned(),
        singular_name: T::KIND.to_lowercase(),
        namespaced: T::NAMESPACED,
        kind: T::KIND.to_owned(),
        verbs: vec!["get".to_owned(), "list".to_owned(), "watch".to_owned()],
        short_names: Some(vec![T::SHORT_NAME.to_owned()]),
        categories: Some(vec![CATEGORY.to_owned()]),
        ..Default::default()
    }
}

pub fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

pub fn resource_list() -> APIResourceList {
    APIResourceList {
        group_version: group_version(),
        resources: vec![
            resource::<WorkloadPosture>(),
            resource::<NamespacePosture>(),
        ],
    }
}

pub fn group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: group_version(),
        version: VERSION.to_owned(),
    };
    APIGroup {
        name: GROUP.to_owned(),
        preferred_version: Some(version.clone()),
        versions: vec![version],
        server_address_by_client_cidrs: None,
    }
}

pub fn group_list() -> APIGroupList {
    APIGroupList {
        groups: vec![group()],
    }
}

/// The OpenAPI documents, built once.
pub struct Documents {
    pub v2: Vec<u8>,
    pub v3: Vec<u8>,
    /// `/openapi/v3`: where the group-version's document is, with its hash.
    pub v3_index: Vec<u8>,
    pub v2_etag: String,
    pub v3_etag: String,
}

/// Reverse-DNS definition name, as kube-apiserver names CRD schemas.
fn definition(kind: &str) -> String {
    let reversed: Vec<&str> = GROUP.split('.').rev().collect();
    format!("{}.{VERSION}.{kind}", reversed.join("."))
}

fn gvk(kind: &str) -> Value {
    json!([{"group": GROUP, "version": VERSION, "kind": kind}])
}

fn schema<T: PostureKind>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .into_generator();
    let mut schema =
        serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or_default();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
        object.insert("x-kubernetes-group-version-kind".to_owned(), gvk(T::KIND));
    }
    schema
}

fn list_schema<T: PostureKind>(reference: &str) -> Value {
    let kind = format!("{}List", T::KIND);
    json!({
        "description": format!("A list of {}.", T::PLURAL),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "posture.security.nimbus.com/v1alpha1"},
            "kind": {"type": "string", "description": kind},
            "metadata": {"type": "object", "description": "Standard list metadata: resourceVersion and continue."},
            "items": {"type": "array", "items": {"$ref": reference}},
        },
        "x-kubernetes-group-version-kind": gvk(&kind),
    })
}

/// `(path, operation id, schema name, list?)` of every read the API serves.
fn operations() -> Vec<(String, String, String, bool)> {
    let base = format!("/apis/{GROUP}/{VERSION}");
    let w = WorkloadPosture::PLURAL;
    let n = NamespacePosture::PLURAL;
    let wk = WorkloadPosture::KIND;
    let nk = NamespacePosture::KIND;
    vec![
        (
            format!("{base}/{w}"),
            format!("list{wk}ForAllNamespaces"),
            format!("{wk}List"),
            true,
        ),
        (
            format!("{base}/namespaces/{{namespace}}/{w}"),
            format!("listNamespaced{wk}"),
            format!("{wk}List"),
            true,
        ),
        (
            format!("{base}/namespaces/{{namespace}}/{w}/{{name}}"),
            format!("readNamespaced{wk}"),
            wk.to_owned(),
            false,
        ),
        (
            format!("{base}/{n}"),
            format!("list{nk}"),
            format!("{nk}List"),
            true,
        ),
        (
            format!("{base}/{n}/{{name}}"),
            format!("read{nk}"),
            nk.to_owned(),
            false,
        ),
    ]
}

fn path_parameters(path: &str, v3: bool) -> Vec<Value> {
    ["namespace", "name"]
        .into_iter()
        .filter(|p| path.contains(&format!("{{{p}}}")))
        .map(|p| {
            if v3 {
                json!({"name": p, "in": "path", "required": true, "schema": {"type": "string"}})
            } else {
                json!({"name": p, "in": "path", "required": true, "type": "string"})
            }
        })
        .collect()
}

fn list_parameters(v3: bool) -> Vec<Value> {
    let (string, boolean, integer) = if v3 {
        (
            json!({"schema": {"type": "string"}}),
            json!({"schema": {"type": "boolean"}}),
            json!({"schema": {"type": "integer"}}),
        )
    } else {
        (
            json!({"type": "string"}),
            json!({"type": "boolean"}),
            json!({"type": "integer"}),
        )
    };
    [
        ("labelSelector", &string),
        ("fieldSelector", &string),
        ("resourceVersion", &string),
        ("continue", &string),
        ("limit", &integer),
        ("watch", &boolean),
        ("allowWatchBookmarks", &boolean),
        ("timeoutSeconds", &integer),
    ]
    .into_iter()
    .map(|(name, typed)| {
        let mut p = json!({"name": name, "in": "query"});
        if let (Some(p), Some(t)) = (p.as_object_mut(), typed.as_object()) {
            p.extend(t.clone());
        }
        p
    })
    .collect()
}

/// OpenAPI v2 has no `nullable`.
fn without_nullable(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("nullable");
            map.values_mut().for_each(without_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(without_nullable),
        _ => {}
    }
}

fn hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// The OpenAPI document (v3, or else v2) of the posture API, given the schemas of its kinds.
fn document(schemas: &Map<String, Value>, v3: bool) -> Value {
    let w = definition(WorkloadPosture::KIND);
    let n = definition(NamespacePosture::KIND);
    let prefix = if v3 {
        "#/components/schemas/"
    } else {
        "#/definitions/"
    };
    let mut all = schemas.clone();
    all.insert(
        format!("{w}List"),
        list_schema::<WorkloadPosture>(&format!("{prefix}{w}")),
    );
    all.insert(
        format!("{n}List"),
        list_schema::<NamespacePosture>(&format!("{prefix}{n}")),
    );
    let mut paths = Map::new();
    for (path, operation, schema_kind, list) in operations() {
        let get = get_operation(&path, &operation, &schema_kind, list, prefix, v3);
        paths.insert(path, json!({"get": get}));
    }
    let info = json!({"title": "Nimbus posture API", "version": VERSION});
    if v3 {
        json!({"openapi": "3.0.0", "info": info, "paths": paths,
               "components": {"schemas": all}})
    } else {
        let mut doc = json!({"swagger": "2.0", "info": info, "paths": paths,
                             "definitions": all});
        without_nullable(&mut doc);
        doc
    }
}

/// The `get` of one path: `operation`, answering `schema_kind` (a list of it if `list`).
fn get_operation(
    path: &str,
    operation: &str,
    schema_kind: &str,
    list: bool,
    prefix: &str,
    v3: bool,
) -> Value {
    let reference = format!("{prefix}{}", definition(schema_kind));
    let mut parameters = path_parameters(path, v3);
    if list {
        parameters.extend(list_parameters(v3));
    }
    let ok = if v3 {
        json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": reference}}}})
    } else {
        json!({"description": "OK", "schema": {"$ref": reference}})
    };
    let mut get = json!({
        "operationId": operation,
        "tags": [format!("{}_{VERSION}", GROUP.replace('.', "_"))],
        "parameters": parameters,
        "responses": {"200": ok, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": if list { "list" } else { "get" },
        "x-kubernetes-group-version-kind": gvk(schema_kind.trim_end_matches("List"))[0],
    });
    if !v3 && let Some(get) = get.as_object_mut() {
        get.insert("produces".to_owned(), json!(["application/json"]));
    }
    get
}

impl Documents {
    pub fn build() -> Self {
        let mut schemas = Map::new();
        schemas.insert(
            definition(WorkloadPosture::KIND),
            schema::<WorkloadPosture>(),
        );
        schemas.insert(
            definition(NamespacePosture::KIND),
            schema::<NamespacePosture>(),
        );
        let doc = |v3: bool| document(&schemas, v3);
        let v2 = serde_json::to_vec(&doc(false)).unwrap_or_default();
        let v3 = serde_json::to_vec(&doc(true)).unwrap_or_default();
        let v3_etag = hash(&v3);
        let v3_index = serde_json::to_vec(&json!({"paths": {
            format!("apis/{GROUP}/{VERSION}"): {
                "serverRelativeURL": format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash={v3_etag}")
            }
        }}))
        .unwrap_or_default();
        Self {
            v2_etag: hash(&v2),
            v2,
            v3,
            v3_index,
            v3_etag,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_finds_every_kind_by_its_group_version_kind() {
        let docs = Documents::build();
        let v3: Value = serde_json::from_slice(&docs.v3).expect("v3 is JSON");
        let schemas = v3["components"]["schemas"].as_object().expect("schemas");
        for kind in ["WorkloadPosture", "NamespacePosture"] {
            let found = schemas
                .values()
                .find(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == kind);
            let schema = found.unwrap_or_else(|| panic!("{kind} has no schema"));
            for field in ["metadata", "verdict"] {
                assert!(
                    schema["properties"][field]["description"].is_string(),
                    "{kind}.{field} is not described"
                );
            }
        }
        let v2: Value = serde_json::from_slice(&docs.v2).expect("v2 is JSON");
        assert!(!String::from_utf8_lossy(&docs.v2).contains("\"nullable\""));
        assert_eq!(v2["definitions"].as_object().map(Map::len), Some(4));
    }
}
