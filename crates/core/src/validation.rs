//! The API server's syntax rules for names, label keys and values, and label selectors, as in
//! `k8s.io/apimachinery/pkg/util/validation` and `pkg/apis/meta/v1/validation`, with the same
//! messages. Everything the operator writes into a selector or an object name is checked here
//! first, so a binding the cluster would reject at apply time is reported on the binding (and by
//! `nimbus validate`) instead.
//!
//! The `is_*` functions return the API server's messages for one value (empty when valid);
//! the others return field errors formatted as the API server formats them
//! (`<path>: Invalid value: "<value>": <message>`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Longest name part of a qualified name (label key).
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Longest label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 label (namespace names, among others).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain (most object names, label key prefixes).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// The label-selector operators.
pub const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        let _ = write!(out, "'{e}', ");
    }
    let _ = write!(out, "regex used for validation is '{fmt}')");
    out
}

const EMPTY_ERROR: &str = "must be non-empty";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (no length limit).
fn matches_dns1123_label(s: &str) -> bool {
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

/// Dot-separated DNS-1123 labels (no length limit).
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// A label key or other qualified name: an optional DNS-1123 subdomain prefix and `/`, then a
/// name of at most 63 characters (`IsQualifiedName`).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {EMPTY_ERROR}"));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {EMPTY_ERROR}"));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value: empty, or at most 63 characters of the qualified-name alphabet
/// (`IsValidLabelValue`).
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// A DNS-1123 label such as a namespace name (`IsDNS1123Label`).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain but not a label: the length was checked, so it has dots.
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// A DNS-1123 subdomain such as the name of a custom resource (`IsDNS1123Subdomain`).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `value` quoted as Go's `%q` does (the API server quotes invalid values this way).
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `<path>: Invalid value: "<value>": <message>` for each message. (The double space in
/// "`'a',  or 'b'`" of the messages is the API server's too.)
fn invalid(path: &str, value: &str, messages: Vec<String>) -> impl Iterator<Item = String> {
    let value = quote(value);
    messages
        .into_iter()
        .map(move |m| format!("{path}: Invalid value: {value}: {m}"))
}

/// A label key (`ValidateLabelName`).
pub fn label_name(key: &str, path: &str) -> Vec<String> {
    invalid(path, key, is_qualified_name(key)).collect()
}

/// A map of labels, as in `metadata.labels` or `matchLabels` (`ValidateLabels`).
pub fn labels(labels: &BTreeMap<String, String>, path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    for (k, v) in labels {
        errs.extend(label_name(k, path));
        errs.extend(invalid(path, v, is_valid_label_value(v)));
    }
    errs
}

/// Annotation keys (`ValidateAnnotations`: qualified names once lowercased).
pub fn annotations(annotations: &BTreeMap<String, String>, path: &str) -> Vec<String> {
    annotations
        .keys()
        .flat_map(|k| invalid(path, k, is_qualified_name(&k.to_lowercase())))
        .collect()
}

/// One `matchExpressions` entry (`ValidateLabelSelectorRequirement`): a known operator, values
/// for `In`/`NotIn` and none for `Exists`/`DoesNotExist`, a valid key and valid values.
pub fn label_selector_requirement(r: &LabelSelectorRequirement, path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => errs.push(format!(
            "{path}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(format!(
            "{path}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        )),
        op if !OPERATORS.contains(&op) => errs.extend(invalid(
            &format!("{path}.operator"),
            op,
            vec!["not a valid selector operator".to_owned()],
        )),
        _ => {}
    }
    errs.extend(label_name(&r.key, &format!("{path}.key")));
    for (i, v) in values.iter().enumerate() {
        errs.extend(invalid(
            &format!("{path}.values[{i}]"),
            v,
            is_valid_label_value(v),
        ));
    }
    errs
}

/// A label selector (`ValidateLabelSelector`).
pub fn label_selector(selector: &LabelSelector, path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if let Some(l) = &selector.match_labels {
        errs.extend(labels(l, &format!("{path}.matchLabels")));
    }
    for (i, r) in selector.match_expressions.iter().flatten().enumerate() {
        errs.extend(label_selector_requirement(
            r,
            &format!("{path}.matchExpressions[{i}]"),
        ));
    }
    errs
}

/// `metadata.name` of an object named by a DNS-1123 subdomain (custom resources included).
pub fn object_name(name: Option<&str>, path: &str) -> Vec<String> {
    match name {
        None | Some("") => vec![format!(
            "{path}: Required value: name or generateName is required"
        )],
        Some(name) => invalid(path, name, is_dns1123_subdomain(name)).collect(),
    }
}

/// A namespace name (a DNS-1123 label).
pub fn namespace_name(name: &str, path: &str) -> Vec<String> {
    invalid(path, name, is_dns1123_label(name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(errs: Vec<String>) -> bool {
        errs.is_empty()
    }

    #[test]
    fn qualified_names() {
        let valid = [
            "a",
            "A",
            "1",
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "1234",
            "simple/simple",
            "now-with-dashes/simple",
            "now-with-dashes/now-with-dashes",
            "now.with.dots/simple",
            "now-with.dashes-and.dots/simple",
            "1-num.2-num/3-num",
            "1234/5678",
            "1.2.3.4/5678",
            "Uppercase_Is_OK_123",
            "example.com/Uppercase_Is_OK_123",
            "requests.storage-foo",
            "a_b.c-d",
            "app.kubernetes.io/managed-by",
        ];
        let long_name = "a".repeat(63);
        let long_prefix = format!("{}/b", "a".repeat(253));
        for v in valid
            .iter()
            .copied()
            .chain([long_name.as_str(), long_prefix.as_str()])
        {
            assert!(ok(is_qualified_name(v)), "{v}: {:?}", is_qualified_name(v));
        }
        let too_long_name = "a".repeat(64);
        let too_long_prefix = format!("{}/b", "a".repeat(254));
        let invalid = [
            "",
            " ",
            "simple/",
            "/simple",
            "/a",
            "a/b/c",
            "nospecialchars%^=@",
            "cantendwithadash-",
            "-cantstartwithadash-",
            "-a",
            "a-",
            "_a",
            "a_",
            ".a",
            "a.",
            "only/one/slash",
            "Example.com/abc",
            "example_com/abc",
            "example.com/",
            "-example.com/abc",
            "example..com/abc",
            "a b",
            "app\u{1}",
            "tab\tkey",
            "line\nbreak",
            "caf\u{e9}",
            "\u{3b1}\u{3b2}",
            too_long_name.as_str(),
            too_long_prefix.as_str(),
        ];
        for v in invalid {
            assert!(!ok(is_qualified_name(v)), "{v:?} should be invalid");
        }
    }

    #[test]
    fn qualified_name_messages_match_the_api_server() {
        assert_eq!(is_qualified_name("/a"), ["prefix part must be non-empty"]);
        assert_eq!(
            is_qualified_name("a/"),
            [
                "name part must be non-empty",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64))[0],
            "name part must be no more than 63 characters"
        );
        assert!(is_qualified_name("A.com/b")[0].starts_with(
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
        ));
        assert!(is_qualified_name("a/b/c")[0].starts_with("a qualified name must consist of"));
        assert!(is_qualified_name("a/b/c")[0].ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
    }

    #[test]
    fn label_values() {
        let long = "a".repeat(63);
        for v in [
            "",
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "end-with-num-1",
            "1234",
            "A.b_C-d",
            long.as_str(),
        ] {
            assert!(ok(is_valid_label_value(v)), "{v}");
        }
        let too_long = "a".repeat(64);
        for v in [
            "nospecialchars%^=@",
            "Tama-nui-te-r\u{101}",
            "\u{2603}",
            "-a",
            "a-",
            "_a",
            "a_",
            ".a",
            "a.",
            "a/b",
            "a b",
            " ",
            "x\u{0}",
            "x\u{1b}[31m",
            too_long.as_str(),
        ] {
            assert!(!ok(is_valid_label_value(v)), "{v:?} should be invalid");
        }
        assert_eq!(
            is_valid_label_value(&too_long),
            ["must be no more than 63 characters"]
        );
        assert_eq!(
            is_valid_label_value("a b"),
            [
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
    }

    #[test]
    fn dns1123_labels() {
        let long = "a".repeat(63);
        for v in [
            "a",
            "ab",
            "abc",
            "a1",
            "a-1",
            "a--1--2--b",
            "0",
            "01",
            "0-1",
            long.as_str(),
        ] {
            assert!(ok(is_dns1123_label(v)), "{v}");
        }
        let too_long = "a".repeat(64);
        for v in [
            "",
            "A",
            "ABC",
            "aBc",
            "A1",
            "A-1",
            "1-A",
            "-",
            "a-",
            "-a",
            "1-",
            "-1",
            "_",
            "a_",
            "_a",
            "a_b",
            "1_",
            "_1",
            "1_2",
            ".",
            "a.",
            ".a",
            "a.b",
            "1.",
            ".1",
            "1.2",
            " ",
            "a ",
            " a",
            "a b",
            "1 ",
            " 1",
            "1 2",
            "caf\u{e9}",
            too_long.as_str(),
        ] {
            assert!(!ok(is_dns1123_label(v)), "{v:?} should be invalid");
        }
        assert_eq!(is_dns1123_label("a.b"), ["must not contain dots"]);
        assert_eq!(
            is_dns1123_label("Team-A"),
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(
            is_dns1123_label(&too_long),
            ["must be no more than 63 characters"]
        );
    }

    #[test]
    fn dns1123_subdomains() {
        let long = "a".repeat(253);
        let long_labels = format!("{}.{}", "a".repeat(100), "b".repeat(100));
        for v in [
            "a",
            "ab",
            "a-1",
            "a.a",
            "a.b.c.d.e",
            "aa.bb.cc",
            "a1.a2.a3",
            "0.0.0.0",
            "11.22.33.44",
            "1-2.3-4",
            long.as_str(),
            long_labels.as_str(),
        ] {
            assert!(ok(is_dns1123_subdomain(v)), "{v}");
        }
        let too_long = "a".repeat(254);
        for v in [
            "",
            "A",
            "aBc",
            "a..b",
            "a.-b",
            "a-.b",
            ".a",
            "a.",
            "-a",
            "a-",
            "a_b",
            "a/b",
            "a b",
            "x\u{1}",
            too_long.as_str(),
        ] {
            assert!(!ok(is_dns1123_subdomain(v)), "{v:?} should be invalid");
        }
        assert_eq!(
            is_dns1123_subdomain(&too_long),
            ["must be no more than 253 characters"]
        );
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn selector_requirements_follow_the_operator_rules() {
        for r in [
            req("a", "In", &["b"]),
            req("a", "NotIn", &["b", ""]),
            req("example.com/a", "Exists", &[]),
            req("a", "DoesNotExist", &[]),
        ] {
            assert!(ok(label_selector_requirement(&r, "m")), "{r:?}");
        }
        assert_eq!(
            label_selector_requirement(&req("a", "In", &[]), "m[0]"),
            ["m[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"]
        );
        assert_eq!(
            label_selector_requirement(&req("a", "NotIn", &[]), "m").len(),
            1
        );
        assert_eq!(
            label_selector_requirement(&req("a", "Exists", &["b"]), "m"),
            [
                "m.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            ]
        );
        assert_eq!(
            label_selector_requirement(&req("a", "DoesNotExist", &["b"]), "m").len(),
            1
        );
        for op in ["in", "notin", "Equals", "", "exists", "Gt"] {
            assert_eq!(
                label_selector_requirement(&req("a", op, &["1"]), "m"),
                [format!(
                    "m.operator: Invalid value: {}: not a valid selector operator",
                    quote(op)
                )]
            );
        }
        let errs = label_selector_requirement(&req("a b", "In", &["ok", "not ok", "-"]), "m");
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("m.key: Invalid value: \"a b\": name part must consist"));
        assert!(errs[1].starts_with("m.values[1]: Invalid value: \"not ok\": a valid label"));
        assert!(errs[2].starts_with("m.values[2]: Invalid value: \"-\""));
    }

    #[test]
    fn selectors_report_every_field_with_its_path() {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([
                ("app".into(), "web".into()),
                ("bad key".into(), "bad value".into()),
            ])),
            match_expressions: Some(vec![req("tier", "Exists", &[]), req("x", "In", &[])]),
        };
        let errs = label_selector(&selector, "spec.selector.workloadSelector");
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with(
                "spec.selector.workloadSelector.matchLabels: Invalid value: \"bad key\""
            )
        );
        assert!(errs[1].starts_with(
            "spec.selector.workloadSelector.matchLabels: Invalid value: \"bad value\""
        ));
        assert!(errs[2].starts_with("spec.selector.workloadSelector.matchExpressions[1].values"));
        assert!(ok(label_selector(&LabelSelector::default(), "s")));
    }

    #[test]
    fn names_and_quoting() {
        assert_eq!(
            object_name(None, "metadata.name"),
            ["metadata.name: Required value: name or generateName is required"]
        );
        assert_eq!(object_name(Some(""), "n").len(), 1);
        assert!(ok(object_name(Some("my.binding-1"), "n")));
        assert!(
            object_name(Some("My_Binding"), "metadata.name")[0].starts_with(
                "metadata.name: Invalid value: \"My_Binding\": a lowercase RFC 1123 subdomain"
            )
        );
        assert!(ok(namespace_name("team-a", "ns")));
        assert_eq!(
            namespace_name("team.a", "ns"),
            ["ns: Invalid value: \"team.a\": must not contain dots"]
        );
        assert_eq!(
            quote("a\u{1}\t\"\\é\u{85}"),
            "\"a\\x01\\t\\\"\\\\é\\u0085\""
        );
        assert!(ok(annotations(
            &BTreeMap::from([("Example.com/Note".into(), "anything at all".into())]),
            "a"
        )));
        assert_eq!(
            annotations(&BTreeMap::from([("a b".into(), String::new())]), "a").len(),
            1
        );
    }
}
