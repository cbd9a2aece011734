//! `spec.cel` on a SecurityIntentBinding: a documented subset of CEL that compiles *exactly*
//! into Kubernetes label-selector requirements, so every engine enforces the same pod set the
//! expression describes. Nimbus instead evaluated expressions against the pods that happened to
//! exist and guessed labels from the expression text; anything outside this subset is rejected
//! with a reason rather than guessed.
//!
//! Each expression is over `labels` (the pod's labels, `map<string, string>`):
//!
//! | CEL                                          | selector                       |
//! |----------------------------------------------|--------------------------------|
//! | `labels["k"] == "v"` (or `labels.k == "v"`)  | `matchLabels: {k: v}`          |
//! | `labels["k"] != "v"`                         | `k NotIn [v]`                  |
//! | `labels["k"] in ["a", "b"]`                  | `k In [a, b]`                  |
//! | `!(labels["k"] in ["a", "b"])`               | `k NotIn [a, b]`               |
//! | `has(labels.k)` or `"k" in labels`           | `k Exists`                     |
//! | `!has(labels.k)` or `!("k" in labels)`       | `k DoesNotExist`               |
//! | `e1 && e2`                                   | both                           |
//!
//! Several expressions in `spec.cel` are ANDed, and ANDed with `selector.workloadSelector`.
//! Note that `!=` and `NotIn` also match pods that lack the label, as Kubernetes selectors do.
//!
//! For compatibility with Nimbus's examples, an expression that is itself a quoted string
//! (`'labels["app"] != "nginx"'`, Nimbus's workaround for YAML's `!`) is unquoted first.

use crate::validation;
use cel_parser::Parser;
use cel_parser::ast::{CallExpr, Expr, IdedExpr, operators};
use cel_parser::reference::Val;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// The variable expressions refer to.
const LABELS: &str = "labels";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CelError {
    #[error("cel[{index}] `{expr}` does not parse: {message}")]
    Parse {
        index: usize,
        expr: String,
        message: String,
    },
    #[error("cel[{index}] `{expr}` is outside the supported subset: {message}")]
    Unsupported {
        index: usize,
        expr: String,
        message: String,
    },
    /// The expression compiles to a label key or value the API server rejects.
    #[error("cel[{index}] `{expr}` compiles to an invalid label selector: {}", .errors.join("; "))]
    InvalidLabel {
        index: usize,
        expr: String,
        errors: Vec<String>,
    },
}

/// One compiled term of a selector.
#[derive(Debug, Clone, PartialEq)]
enum Term {
    Equals(String, String),
    Requirement(LabelSelectorRequirement),
}

/// Compiles every expression and ANDs the result into `base` (the binding's workload selector).
pub fn compile_into(exprs: &[String], base: LabelSelector) -> Result<LabelSelector, CelError> {
    let mut labels = base.match_labels.unwrap_or_default();
    let mut requirements = base.match_expressions.unwrap_or_default();
    for (index, source) in exprs.iter().enumerate() {
        let terms = compile_one(source).map_err(|e| e.at(index, source))?;
        let errors: Vec<String> = terms.iter().flat_map(invalid_labels).collect();
        if !errors.is_empty() {
            return Err(CelError::InvalidLabel {
                index,
                expr: source.clone(),
                errors,
            });
        }
        for term in terms {
            match term {
                // Two different required values for one key must both hold (an empty set), so
                // keep the second as a requirement instead of overwriting the first.
                Term::Equals(k, v) => match labels.get(&k) {
                    Some(existing) if *existing != v => {
                        requirements.push(label_requirement(k, "In", vec![v]))
                    }
                    _ => {
                        labels.insert(k, v);
                    }
                },
                Term::Requirement(r) => {
                    if !requirements.contains(&r) {
                        requirements.push(r);
                    }
                }
            }
        }
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!requirements.is_empty()).then_some(requirements),
    })
}

/// What the API server would reject in a term's label key and values.
fn invalid_labels(term: &Term) -> Vec<String> {
    match term {
        Term::Equals(key, value) => {
            let mut errors = validation::label_name(key, "key");
            errors.extend(
                validation::is_valid_label_value(value)
                    .into_iter()
                    .map(|m| format!("value: Invalid value: {}: {m}", validation::quote(value))),
            );
            errors
        }
        Term::Requirement(r) => validation::label_selector_requirement(r, "requirement"),
    }
}

/// An error before we know which expression it belongs to.
struct Rejection {
    parse: bool,
    message: String,
}

impl Rejection {
    fn unsupported(message: impl Into<String>) -> Self {
        Self {
            parse: false,
            message: message.into(),
        }
    }

    fn at(self, index: usize, expr: &str) -> CelError {
        let expr = expr.to_owned();
        if self.parse {
            CelError::Parse {
                index,
                expr,
                message: self.message,
            }
        } else {
            CelError::Unsupported {
                index,
                expr,
                message: self.message,
            }
        }
    }
}

fn parse(source: &str) -> Result<IdedExpr, Rejection> {
    let failed = |message: String| Rejection {
        parse: true,
        message,
    };
    // The antlr runtime under cel-parser panics on some malformed input instead of returning an
    // error. Parsing is pure, so containing the panic loses nothing.
    std::panic::catch_unwind(|| Parser::new().parse(source))
        .map_err(|_| failed("malformed expression".to_owned()))?
        .map_err(|e| failed(e.to_string()))
}

fn compile_one(source: &str) -> Result<Vec<Term>, Rejection> {
    let mut ast = parse(source)?;
    if let Expr::Literal(Val::String(inner)) = &ast.expr {
        ast = parse(inner)?;
    }
    let mut terms = Vec::new();
    conjuncts(&ast, &mut terms)?;
    Ok(terms)
}

fn conjuncts(e: &IdedExpr, out: &mut Vec<Term>) -> Result<(), Rejection> {
    match &e.expr {
        Expr::Call(call) if call.func_name == operators::LOGICAL_AND => {
            for arg in &call.args {
                conjuncts(arg, out)?;
            }
            Ok(())
        }
        _ => {
            out.push(term(e)?);
            Ok(())
        }
    }
}

fn term(e: &IdedExpr) -> Result<Term, Rejection> {
    match &e.expr {
        Expr::Call(call) => match call.func_name.as_str() {
            operators::EQUALS => {
                let (key, value) = key_and_value(call)?;
                Ok(Term::Equals(key, value))
            }
            operators::NOT_EQUALS => {
                let (key, value) = key_and_value(call)?;
                Ok(requirement(key, "NotIn", vec![value]))
            }
            operators::IN => membership(call),
            operators::LOGICAL_NOT => negation(call),
            operators::LOGICAL_OR => Err(Rejection::unsupported(
                "`||` cannot be expressed as one label selector; use `in [...]` for alternatives of one label, or separate bindings",
            )),
            other => Err(Rejection::unsupported(format!(
                "operator or function `{}` is not supported",
                other.trim_matches('_')
            ))),
        },
        Expr::Select(select) if select.test => {
            Ok(requirement(labels_field(e, true)?, "Exists", vec![]))
        }
        _ => Err(Rejection::unsupported(
            "expected a comparison of labels, `in`, `has()` or `&&`",
        )),
    }
}

fn negation(call: &CallExpr) -> Result<Term, Rejection> {
    let [inner] = call.args.as_slice() else {
        return Err(Rejection::unsupported("malformed negation"));
    };
    match term(inner)? {
        Term::Requirement(mut r) => {
            r.operator = match r.operator.as_str() {
                "In" => "NotIn",
                "NotIn" => "In",
                "Exists" => "DoesNotExist",
                _ => "Exists",
            }
            .to_owned();
            Ok(Term::Requirement(r))
        }
        Term::Equals(key, value) => Ok(requirement(key, "NotIn", vec![value])),
    }
}

/// `labels["k"] in [..]` or `"k" in labels`.
fn membership(call: &CallExpr) -> Result<Term, Rejection> {
    let [lhs, rhs] = call.args.as_slice() else {
        return Err(Rejection::unsupported("malformed `in`"));
    };
    if matches!(&rhs.expr, Expr::Ident(name) if name == LABELS) {
        return Ok(requirement(string_literal(lhs)?, "Exists", vec![]));
    }
    let key = labels_field(lhs, false)?;
    let Expr::List(list) = &rhs.expr else {
        return Err(Rejection::unsupported(
            "`in` needs a list literal of strings on the right",
        ));
    };
    let values = list
        .elements
        .iter()
        .map(string_literal)
        .collect::<Result<Vec<_>, _>>()?;
    if values.is_empty() {
        return Err(Rejection::unsupported("`in []` matches nothing"));
    }
    Ok(requirement(key, "In", values))
}

/// `labels["k"] == "v"` in either order.
fn key_and_value(call: &CallExpr) -> Result<(String, String), Rejection> {
    let [a, b] = call.args.as_slice() else {
        return Err(Rejection::unsupported("malformed comparison"));
    };
    match (labels_field(a, false), string_literal(b)) {
        (Ok(k), Ok(v)) => Ok((k, v)),
        _ => Ok((labels_field(b, false)?, string_literal(a)?)),
    }
}

/// The key of `labels["k"]` / `labels.k` (or of `has(labels.k)` when `test`).
fn labels_field(e: &IdedExpr, test: bool) -> Result<String, Rejection> {
    let is_labels = |operand: &IdedExpr| matches!(&operand.expr, Expr::Ident(n) if n == LABELS);
    match &e.expr {
        Expr::Select(s) if s.test == test && is_labels(&s.operand) => Ok(s.field.clone()),
        Expr::Call(c) if !test && c.func_name == operators::INDEX => match c.args.as_slice() {
            [operand, key] if is_labels(operand) => string_literal(key),
            _ => Err(Rejection::unsupported("only `labels[...]` can be indexed")),
        },
        _ => Err(Rejection::unsupported(
            "expected `labels[\"key\"]` compared with a string literal",
        )),
    }
}

fn string_literal(e: &IdedExpr) -> Result<String, Rejection> {
    match &e.expr {
        Expr::Literal(Val::String(s)) => Ok(s.clone()),
        _ => Err(Rejection::unsupported("expected a string literal")),
    }
}

fn requirement(key: String, operator: &str, values: Vec<String>) -> Term {
    Term::Requirement(label_requirement(key, operator, values))
}

fn label_requirement(key: String, operator: &str, values: Vec<String>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key,
        operator: operator.to_owned(),
        values: (!values.is_empty()).then_some(values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn compile(exprs: &[&str]) -> Result<LabelSelector, CelError> {
        let exprs: Vec<String> = exprs.iter().map(|s| s.to_string()).collect();
        compile_into(&exprs, LabelSelector::default())
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn equality_becomes_match_labels_in_both_spellings_and_orders() {
        for e in [
            r#"labels["app"] == "nginx""#,
            r#"labels.app == "nginx""#,
            r#""nginx" == labels["app"]"#,
        ] {
            let s = compile(&[e]).unwrap();
            assert_eq!(
                s.match_labels,
                Some(BTreeMap::from([("app".into(), "nginx".into())])),
                "{e}"
            );
            assert_eq!(s.match_expressions, None);
        }
    }

    #[test]
    fn each_supported_form_maps_to_its_requirement() {
        let cases = [
            (
                r#"labels["app"] != "nginx""#,
                req("app", "NotIn", &["nginx"]),
            ),
            (
                r#"labels["app"] in ["a", "b"]"#,
                req("app", "In", &["a", "b"]),
            ),
            (
                r#"!(labels["app"] in ["a", "b"])"#,
                req("app", "NotIn", &["a", "b"]),
            ),
            ("has(labels.tier)", req("tier", "Exists", &[])),
            (r#""tier" in labels"#, req("tier", "Exists", &[])),
            ("!has(labels.tier)", req("tier", "DoesNotExist", &[])),
            (r#"!("tier" in labels)"#, req("tier", "DoesNotExist", &[])),
            (r#"!(labels.app == "x")"#, req("app", "NotIn", &["x"])),
        ];
        for (e, want) in cases {
            assert_eq!(
                compile(&[e]).unwrap().match_expressions,
                Some(vec![want]),
                "{e}"
            );
        }
    }

    #[test]
    fn conjunctions_and_multiple_expressions_are_anded_with_the_base_selector() {
        let base = LabelSelector {
            match_labels: Some(BTreeMap::from([("env".into(), "prod".into())])),
            match_expressions: None,
        };
        let exprs = vec![
            r#"labels.app == "web" && has(labels.tier)"#.to_string(),
            r#"labels.env == "dev""#.to_string(),
        ];
        let s = compile_into(&exprs, base).unwrap();
        assert_eq!(
            s.match_labels,
            Some(BTreeMap::from([
                ("app".into(), "web".into()),
                ("env".into(), "prod".into())
            ]))
        );
        // env == dev contradicts env == prod: both must hold, so it stays a requirement.
        assert_eq!(
            s.match_expressions,
            Some(vec![req("tier", "Exists", &[]), req("env", "In", &["dev"])])
        );
    }

    #[test]
    fn nimbus_quoted_negations_are_unquoted() {
        let s = compile(&[r#"'labels["app"] != "nginx"'"#]).unwrap();
        assert_eq!(
            s.match_expressions,
            Some(vec![req("app", "NotIn", &["nginx"])])
        );
    }

    #[test]
    fn unsupported_expressions_are_rejected_with_the_reason_and_position() {
        let cases = [
            (r#"labels.app == "a" || labels.app == "b""#, "`||`"),
            (r#"labels["app"].startsWith("ng")"#, "startsWith"),
            (r#"labels["app"].contains("ng")"#, "contains"),
            (r#"labels["app"] == 3"#, "string literal"),
            (r#"pod.name == "x""#, "labels"),
            (r#"labels["app"] in []"#, "matches nothing"),
            ("true", "expected a comparison"),
        ];
        for (e, needle) in cases {
            let err = compile(&["has(labels.ok)", e]).unwrap_err();
            let CelError::Unsupported { index, message, .. } = &err else {
                panic!("{e}: {err}");
            };
            assert_eq!(*index, 1);
            assert!(message.contains(needle), "{e}: {message}");
        }
    }

    #[test]
    fn keys_and_values_the_api_server_rejects_are_errors() {
        let long_value = format!(r#"labels["app"] == "{}""#, "x".repeat(64));
        let cases = [
            (
                r#"labels["bad key"] == "v""#,
                r#"key: Invalid value: "bad key""#,
            ),
            (
                r#"labels["app"] == "a\u0001""#,
                r#"value: Invalid value: "a\x01""#,
            ),
            (
                "labels[\"ctl\u{1}\"] == \"v\"",
                r#"key: Invalid value: "ctl\x01""#,
            ),
            (
                r#"labels["a/b/c"] != "v""#,
                r#"requirement.key: Invalid value: "a/b/c""#,
            ),
            (
                r#"labels["app"] in ["ok", "-no"]"#,
                r#"requirement.values[1]: Invalid value: "-no""#,
            ),
            (
                "has(labels.App_)",
                r#"requirement.key: Invalid value: "App_""#,
            ),
            (r#""/a" in labels"#, "prefix part must be non-empty"),
            (long_value.as_str(), "must be no more than 63 characters"),
        ];
        for (e, needle) in cases {
            let err = compile(&["has(labels.ok)", e]).unwrap_err();
            let CelError::InvalidLabel { index, errors, .. } = &err else {
                panic!("{e}: {err}");
            };
            assert_eq!(*index, 1);
            assert!(errors.iter().any(|m| m.contains(needle)), "{e}: {errors:?}");
            assert!(
                err.to_string()
                    .contains("compiles to an invalid label selector"),
                "{err}"
            );
        }
        // The boundaries are accepted: a 63-character name part and value, an empty value.
        let longest = format!(
            r#"labels["example.com/{}"] == "{}""#,
            "k".repeat(63),
            "v".repeat(63)
        );
        assert!(compile(&[&longest, r#"labels["app"] == """#]).is_ok());
    }

    #[test]
    fn syntax_errors_are_reported_as_parse_errors() {
        assert!(matches!(
            compile(&["labels[\"app\" =="]),
            Err(CelError::Parse { index: 0, .. })
        ));
    }
}
