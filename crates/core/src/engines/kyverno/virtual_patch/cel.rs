//! virtualPatch's generators in Kyverno's CEL kinds: a `NamespacedGeneratingPolicy` per
//! patch, whose `generator.Apply` creates the patch's object, written as a CEL literal.

use super::generation::{CONTAINER_LABEL, Context, Generated, Target};
use crate::engines::kyverno::cel_policy::cel_policy;
use crate::engines::{KYVERNO_NAMESPACED_GENERATING_POLICY, NativeKind};
use kube::core::DynamicObject;
use serde_json::{Map, Value, json};

/// The `NamespacedGeneratingPolicy` generating what the legacy generator does: triggered by
/// the selected Pods of its namespace (those that exist when it is written too), and for all
/// but a Kyverno patch (whose own rules check the image) only by those running the image.
/// The generated object is a CEL literal: the patch's JSON, but for the KubeArmorPolicy's name
/// and container label, read from the Pod.
pub(super) fn generator(
    ctx: &Context,
    generated: Generated,
) -> (&'static NativeKind, DynamicObject) {
    let Generated {
        target,
        image,
        name,
        mut data,
        suffix,
        ..
    } = generated;
    let image = cel_string(image);
    let kind = target.kind();
    let mut object = Map::new();
    object.insert("apiVersion".into(), kind.api_version().into());
    object.insert("kind".into(), kind.kind.into());
    if let Some(metadata) = data.get_mut("metadata").and_then(Value::as_object_mut) {
        // Kyverno drops the owner references of an object generated into another namespace
        // than its own: it is generated into the policy's.
        metadata.insert("namespace".into(), ctx.namespace.into());
    }
    object.extend(data);
    let pod_name = format!("{} + \"-\" + object.metadata.name", cel_string(&name));
    let container = format!("object.spec.containers.filter(c, c.image == {image})[0].name");
    let computed = |path: &[&str]| match (target, path) {
        (Target::KubeArmor, ["metadata", "name"]) => Some(pod_name.clone()),
        (Target::KubeArmor, ["spec", "selector", "matchLabels", CONTAINER_LABEL]) => {
            Some(container.clone())
        }
        _ => None,
    };
    let literal = cel_map(&object, &mut Vec::new(), &computed);
    let mut spec = json!({
        "evaluation": {"generateExisting": {"enabled": true}},
        "matchConstraints": {
            "resourceRules": [{
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"],
            }],
            "objectSelector": ctx.selector,
        },
        "generate": [{"expression": format!("generator.Apply([{literal}])")}],
    });
    if !matches!(target, Target::Kyverno) {
        spec["matchConditions"] = json!([{
            "name": "runs-image",
            "expression": format!("object.spec.containers.exists(c, c.image == {image})"),
        }]);
    }
    let kinds = [
        &KYVERNO_NAMESPACED_GENERATING_POLICY,
        &KYVERNO_NAMESPACED_GENERATING_POLICY,
    ];
    cel_policy(ctx.policy, ctx.rule, &suffix, kinds, spec)
}

/// `value` as a CEL string literal (JSON's escapes are CEL's).
fn cel_string(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// `map` as a CEL map literal whose values are all `dyn` (Kubernetes' CEL refuses literals of
/// mixed types), but those `computed` gives an expression for by their path.
fn cel_map<'a>(
    map: &'a Map<String, Value>,
    path: &mut Vec<&'a str>,
    computed: &dyn Fn(&[&str]) -> Option<String>,
) -> String {
    let entries: Vec<String> = map
        .iter()
        .map(|(key, value)| {
            path.push(key);
            let entry = format!("{}: {}", cel_string(key), cel_value(value, path, computed));
            path.pop();
            entry
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn cel_value<'a>(
    value: &'a Value,
    path: &mut Vec<&'a str>,
    computed: &dyn Fn(&[&str]) -> Option<String>,
) -> String {
    if let Some(expression) = computed(path) {
        return format!("dyn({expression})");
    }
    let literal = match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        // An integer stays one (`5978`, `18446744073709551615u`), any other number is a
        // double (`0.5`, `1e300`).
        Value::Number(n) if n.is_i64() => n.to_string(),
        Value::Number(n) if n.is_u64() => format!("{n}u"),
        Value::Number(n) => format!("{:?}", n.as_f64().unwrap_or_default()),
        Value::String(s) => cel_string(s),
        Value::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|item| cel_value(item, path, computed))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => cel_map(map, path, computed),
    };
    format!("dyn({literal})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON becomes the CEL literal of the same value: every value `dyn` (Kubernetes' CEL
    /// refuses literals of mixed types), strings escaped, integers staying integers.
    #[test]
    fn json_becomes_a_cel_literal() {
        let none = |_: &[&str]| None;
        for (json, cel) in [
            (json!(null), "dyn(null)"),
            (json!(true), "dyn(true)"),
            (json!(5978), "dyn(5978)"),
            (json!(-1), "dyn(-1)"),
            (json!(u64::MAX), "dyn(18446744073709551615u)"),
            (json!(0.5), "dyn(0.5)"),
            (json!(1e300), "dyn(1e300)"),
            (json!("a \"b\" \\ c\n"), r#"dyn("a \"b\" \\ c\n")"#),
            (json!("é"), r#"dyn("é")"#),
            (json!([]), "dyn([])"),
            (json!([1, "x"]), r#"dyn([dyn(1), dyn("x")])"#),
            (json!({}), "dyn({})"),
            (
                json!({"a": {"b": [true]}, "c": "d"}),
                r#"dyn({"a": dyn({"b": dyn([dyn(true)])}), "c": dyn("d")})"#,
            ),
        ] {
            assert_eq!(cel_value(&json, &mut Vec::new(), &none), cel, "{json}");
        }
    }

    /// Values `computed` names by their path are its expressions, nothing else.
    #[test]
    fn computed_values_replace_the_literal_by_path() {
        let object = json!({"metadata": {"name": "x"}, "spec": {"name": "x"}});
        let Value::Object(map) = object else {
            unreachable!()
        };
        let computed = |path: &[&str]| (path == ["metadata", "name"]).then(|| "e".to_owned());
        assert_eq!(
            cel_map(&map, &mut Vec::new(), &computed),
            r#"{"metadata": dyn({"name": dyn(e)}), "spec": dyn({"name": dyn("x")})}"#
        );
    }
}
