//! What a request asks for: the path as kube-apiserver's request-info resolver reads it, and
//! the list/watch query parameters. Pure, so every malformed input is a unit test away.

use kube::core::{Expression, Selector, SelectorExt};
use nimbus_api::posture::{GROUP, NamespacePosture, PostureKind, VERSION, WorkloadPosture};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Workloads,
    Namespaces,
}

impl Resource {
    pub fn plural(self) -> &'static str {
        match self {
            Resource::Workloads => WorkloadPosture::PLURAL,
            Resource::Namespaces => NamespacePosture::PLURAL,
        }
    }

    fn namespaced(self) -> bool {
        matches!(self, Resource::Workloads)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Groups,
    Group,
    Resources,
    OpenApiV2,
    OpenApiV3Index,
    OpenApiV3,
    Health,
    /// A resource (collection when `name` is `None`).
    Object {
        resource: Resource,
        namespace: Option<String>,
        name: Option<String>,
    },
    NotFound,
}

pub fn target(path: &str) -> Target {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["healthz" | "livez" | "readyz"] => Target::Health,
        ["openapi", "v2"] => Target::OpenApiV2,
        ["openapi", "v3"] => Target::OpenApiV3Index,
        ["openapi", "v3", "apis", g, v] if *g == GROUP && *v == VERSION => Target::OpenApiV3,
        ["apis"] => Target::Groups,
        ["apis", g] if *g == GROUP => Target::Group,
        ["apis", g, v] if *g == GROUP && *v == VERSION => Target::Resources,
        ["apis", g, v, rest @ ..] if *g == GROUP && *v == VERSION => object(rest),
        _ => Target::NotFound,
    }
}

fn object(rest: &[&str]) -> Target {
    let resource = |plural: &str| {
        [Resource::Workloads, Resource::Namespaces]
            .into_iter()
            .find(|r| r.plural() == plural)
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (resource, name) = match rest {
        [plural] => (resource(plural), None),
        [plural, name] => (resource(plural), Some((*name).to_owned())),
        _ => (None, None),
    };
    match resource {
        // A cluster-scoped resource has no namespaced path; a namespaced one is read by name
        // only within its namespace.
        Some(r) if namespace.is_some() && !r.namespaced() => Target::NotFound,
        Some(r) if r.namespaced() && namespace.is_none() && name.is_some() => Target::NotFound,
        Some(resource) => Target::Object {
            resource,
            namespace,
            name,
        },
        None => Target::NotFound,
    }
}

/// The query of a list or watch.
#[derive(Debug, Default)]
pub struct ListQuery {
    pub labels: Selector,
    pub fields: Vec<FieldRequirement>,
    pub watch: bool,
    pub resource_version: Option<String>,
    pub allow_bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout_seconds: Option<u64>,
    pub limit: Option<usize>,
    pub continue_after: Option<String>,
    pub include_object: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: Field,
    pub value: String,
    pub equal: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Field {
    Name,
    Namespace,
}

impl ListQuery {
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut out = ListQuery::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let flag = || value == "true" || value == "1";
            match key.as_ref() {
                "labelSelector" => out.labels = parse_labels(&value)?,
                "fieldSelector" => out.fields = parse_fields(&value)?,
                "watch" => out.watch = flag(),
                "resourceVersion" => {
                    out.resource_version = Some(value.into_owned()).filter(|v| !v.is_empty())
                }
                "allowWatchBookmarks" => out.allow_bookmarks = flag(),
                "sendInitialEvents" => out.send_initial_events = flag(),
                "timeoutSeconds" => {
                    out.timeout_seconds = Some(
                        value
                            .parse()
                            .map_err(|_| format!("timeoutSeconds: not a number: {value}"))?,
                    )
                }
                "limit" => {
                    out.limit = Some(
                        value
                            .parse()
                            .map_err(|_| format!("limit: not a number: {value}"))?,
                    )
                    .filter(|l| *l > 0)
                }
                "continue" => {
                    out.continue_after = Some(value.into_owned()).filter(|v| !v.is_empty())
                }
                "includeObject" => out.include_object = Some(value.into_owned()),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Whether an object with this metadata is in the selection.
    pub fn selects(
        &self,
        namespace: Option<&str>,
        name: Option<&str>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let empty = BTreeMap::new();
        self.labels.matches(labels.unwrap_or(&empty))
            && self.fields.iter().all(|f| {
                let actual = match f.field {
                    Field::Name => name,
                    Field::Namespace => namespace,
                };
                (actual.unwrap_or_default() == f.value) == f.equal
            })
    }
}

/// Parses a label selector as kube-apiserver does: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
/// `k in (a,b)`, `k notin (a,b)`, joined by commas.
pub fn parse_labels(selector: &str) -> Result<Selector, String> {
    let mut expressions = Vec::new();
    for requirement in split_top_level(selector) {
        let r = requirement.trim();
        if r.is_empty() {
            continue;
        }
        let bad = || format!("unable to parse requirement: {r:?}");
        let set = |rest: &str| -> Result<BTreeSet<String>, String> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(bad)?;
            Ok(inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect())
        };
        let expression = if let Some(key) = r.strip_prefix('!') {
            Expression::DoesNotExist(key.trim().to_owned())
        } else if let Some((key, value)) = r.split_once("!=") {
            Expression::NotEqual(key.trim().to_owned(), value.trim().to_owned())
        } else if let Some((key, value)) = r.split_once("==").or_else(|| r.split_once('=')) {
            Expression::Equal(key.trim().to_owned(), value.trim().to_owned())
        } else if let Some((key, rest)) = r.split_once(" notin ") {
            Expression::NotIn(key.trim().to_owned(), set(rest)?)
        } else if let Some((key, rest)) = r.split_once(" in ") {
            Expression::In(key.trim().to_owned(), set(rest)?)
        } else if r.contains(|c: char| c.is_whitespace() || c == '(' || c == ')') {
            return Err(bad());
        } else {
            Expression::Exists(r.to_owned())
        };
        expressions.push(expression);
    }
    Ok(expressions.into_iter().collect())
}

/// Splits on the commas outside `( … )`.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Field selectors: only `metadata.name` and `metadata.namespace`, as for most kinds.
fn parse_fields(selector: &str) -> Result<Vec<FieldRequirement>, String> {
    selector
        .split(',')
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            let (field, value, equal) = if let Some((f, v)) = r.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
                (f, v, true)
            } else {
                return Err(format!("invalid field selector: {r:?}"));
            };
            let field = match field.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(format!(
                        "field label not supported: {other} (only metadata.name and \
                         metadata.namespace)"
                    ));
                }
            };
            Ok(FieldRequirement {
                field,
                value: value.trim().to_owned(),
                equal,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn resolves_paths_like_kube_apiserver() {
        let base = format!("/apis/{GROUP}/{VERSION}");
        assert_eq!(target("/apis"), Target::Groups);
        assert_eq!(target(&format!("/apis/{GROUP}")), Target::Group);
        assert_eq!(target(&base), Target::Resources);
        assert_eq!(
            target(&format!(
                "{base}/namespaces/shop/workloadpostures/deployment-web"
            )),
            Target::Object {
                resource: Resource::Workloads,
                namespace: Some("shop".into()),
                name: Some("deployment-web".into())
            }
        );
        assert_eq!(
            target(&format!("{base}/workloadpostures")),
            Target::Object {
                resource: Resource::Workloads,
                namespace: None,
                name: None
            }
        );
        assert_eq!(
            target(&format!("{base}/namespacepostures/shop")),
            Target::Object {
                resource: Resource::Namespaces,
                namespace: None,
                name: Some("shop".into())
            }
        );
        for missing in [
            format!("{base}/workloadpostures/x"),
            format!("{base}/namespaces/a/namespacepostures"),
            format!("{base}/pods"),
            "/apis/other.io/v1".to_owned(),
            "/api/v1/pods".to_owned(),
        ] {
            assert_eq!(target(&missing), Target::NotFound, "{missing}");
        }
    }

    #[test]
    fn parses_label_selectors() {
        let s =
            parse_labels("app=web,tier!=db,env in (prod, staging),!legacy,team").expect("valid");
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "dev"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("team", "x"),
            ("legacy", "1")
        ])));
        let notin = parse_labels("env notin (prod)").expect("valid");
        assert!(notin.matches(&labels(&[])));
        assert!(!notin.matches(&labels(&[("env", "prod")])));
        assert!(parse_labels("env in prod").is_err());
        assert!(parse_labels("a b").is_err());
    }

    #[test]
    fn parses_list_queries() {
        let q = ListQuery::parse(Some(
            "watch=1&resourceVersion=42&fieldSelector=metadata.name%3Dx&timeoutSeconds=5&limit=10",
        ))
        .expect("valid");
        assert!(q.watch);
        assert_eq!(q.resource_version.as_deref(), Some("42"));
        assert_eq!(q.timeout_seconds, Some(5));
        assert_eq!(q.limit, Some(10));
        assert!(q.selects(Some("a"), Some("x"), None));
        assert!(!q.selects(Some("a"), Some("y"), None));
        let err =
            ListQuery::parse(Some("fieldSelector=spec.nodeName%3Dn")).expect_err("unsupported");
        assert!(err.contains("not supported"), "{err}");
    }
}
