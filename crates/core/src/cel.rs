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
//!
//! Input is bounded before the parser sees it: at most [`MAX_EXPRESSIONS`] expressions of at
//! most [`MAX_LENGTH`] bytes, brackets nested at most [`MAX_NESTING`] deep. The parser recurses
//! per nesting level and per operator, so unbounded input overflows the stack (about 285 nested
//! parentheses) or takes memory in proportion (900 MiB for a 0.7 MB `&&` chain); the subset
//! needs far less.

use crate::validation;
use cel_parser::Parser;
use cel_parser::ast::{CallExpr, Expr, IdedExpr, operators};
use cel_parser::reference::Val;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::Once;

/// The variable expressions refer to.
const LABELS: &str = "labels";

/// Most expressions compiled (the CRD's `maxItems`; objects stored before it are checked here).
pub const MAX_EXPRESSIONS: usize = nimbus_api::MAX_CEL_EXPRESSIONS;
/// Longest expression parsed, in bytes (the CRD's `maxLength`, which counts characters).
pub const MAX_LENGTH: usize = nimbus_api::MAX_CEL_LENGTH;
/// Deepest bracket nesting parsed: `!(labels["k"] in ["a"])` needs 2.
pub const MAX_NESTING: usize = 8;
/// Longest run of tokens chained without brackets or `&&` (`a.b.c`, `x == y == z`, `a + b`):
/// the parser nests each link, like a bracket. `labels["k"] in ["a", "b"]` needs a handful.
pub const MAX_CHAIN: usize = 32;
/// How much of an expression an error message quotes (messages end up in status).
const QUOTED: usize = 80;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CelError {
    #[error("cel has {count} expressions; at most {MAX_EXPRESSIONS} are accepted")]
    TooMany { count: usize },
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
    if exprs.len() > MAX_EXPRESSIONS {
        return Err(CelError::TooMany { count: exprs.len() });
    }
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
        let expr = quoted(expr);
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

/// The start of `expr`, cut at a character boundary, for error messages.
fn quoted(expr: &str) -> String {
    if expr.len() <= QUOTED {
        return expr.to_owned();
    }
    let mut end = QUOTED;
    while !expr.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &expr[..end])
}

/// Rejects what the parser must not see: over-long input, deep bracket nesting, long operator
/// chains. Brackets count inside string literals too: a scanner that misjudged where a
/// literal ends (raw strings, escapes, triple quotes) could otherwise hide nesting from the
/// count, and label keys and values cannot contain brackets anyway.
fn prescan(source: &str) -> Result<(), Rejection> {
    let failed = |message: String| Rejection {
        parse: true,
        message,
    };
    if source.len() > MAX_LENGTH {
        return Err(failed(format!(
            "is {} bytes long; at most {MAX_LENGTH} are accepted",
            source.len()
        )));
    }
    let mut depth = 0usize;
    // Tokens chained at the current level since the last `&&`, `,` or bracket.
    let mut chain = 0usize;
    let mut in_word = false;
    // The quote of the string literal being scanned: a literal is one term, however many
    // dashes and dots a label key in it has.
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in source.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                chain += 1;
                in_word = false;
            }
            None => {
                let word = c.is_alphanumeric() || c == '_';
                if word && !in_word {
                    chain += 1;
                }
                in_word = word;
            }
        }
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                chain = 0;
                if depth > MAX_NESTING {
                    return Err(failed(format!(
                        "nests brackets more than {MAX_NESTING} deep"
                    )));
                }
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                chain = 0;
            }
            ',' | '&' if quote.is_none() => chain = 0,
            _ => {}
        }
        if chain > MAX_CHAIN {
            return Err(failed(format!(
                "chains more than {MAX_CHAIN} terms without `&&`"
            )));
        }
    }
    Ok(())
}

fn parse(source: &str) -> Result<IdedExpr, Rejection> {
    let failed = |message: String| Rejection {
        parse: true,
        message,
    };
    prescan(source)?;
    contained(|| Parser::new().parse(source))
        .ok_or_else(|| failed("malformed expression".to_owned()))?
        .map_err(|e| failed(e.to_string()))
}

thread_local! {
    /// Whether this thread is inside [`contained`].
    static CONTAINING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `parse`, turning a panic into `None` without a panic message on stderr.
///
/// cel-parser builds its AST even from a tree with syntax errors, and the antlr runtime then
/// panics (`unreachable!`) on nearly every malformed input, `" && "` included. Parsing is pure,
/// so containing the panic loses nothing, but the default hook would still print a panic line
/// and backtrace to the operator's log for every bad binding. A per-call hook swap would race
/// between threads, so one hook is installed for the process, once: it stays silent only for
/// threads inside this function and hands every other panic to the hook it replaced.
fn contained<T>(parse: impl FnOnce() -> T) -> Option<T> {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINING.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = CONTAINING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(parse));
    CONTAINING.with(|c| c.set(outer));
    result.ok()
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

    /// Runs `f` on a thread with the stack of a tokio worker (2 MiB), where the operator
    /// compiles bindings: a stack overflow there aborts the process.
    fn on_worker_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(f)
            .expect("thread")
            .join()
            .expect("no panic")
    }

    fn parse_error(source: String) -> String {
        let exprs = vec![source];
        match compile_into(&exprs, LabelSelector::default()) {
            Err(CelError::Parse { message, expr, .. }) => {
                assert!(expr.len() <= QUOTED + 3, "errors quote a bounded prefix");
                message
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn pathological_input_is_rejected_before_parsing() {
        on_worker_stack(|| {
            let parens = format!("{}labels.a == \"b\"{}", "(".repeat(300), ")".repeat(300));
            assert!(parse_error(parens).contains("more than 8 deep"));
            let lists = format!("labels.a in {}\"b\"{}", "[".repeat(300), "]".repeat(300));
            assert!(parse_error(lists).contains("more than 8 deep"));
            let huge = format!("labels.a == \"{}\"", "x".repeat(1 << 20));
            assert!(parse_error(huge).contains("at most 1024"));
            let and_chain = vec!["has(labels.a)"; 2000].join(" && ");
            assert!(parse_error(and_chain).contains("at most 1024"));
            // Chains the parser nests like brackets.
            for link in ["labels.a == ", "a.", "a + ", "a ? b : "] {
                let chain = format!("{}a", link.repeat(1000 / link.len()));
                let message = parse_error(chain);
                assert!(message.contains("without `&&`"), "{link}: {message}");
            }
            // Hidden inside Nimbus's quoted form as escapes: the inner expression is checked
            // too.
            let quoted = format!("'{}has(labels.a){}'", "\\x28".repeat(9), "\\x29".repeat(9));
            assert!(parse_error(quoted).contains("more than 8 deep"));
        });
    }

    #[test]
    fn the_longest_supported_expressions_still_compile() {
        let terms: Vec<String> = (0..40).map(|i| format!("has(labels.k{i})")).collect();
        let long = terms.join(" && ");
        assert!(long.len() <= MAX_LENGTH);
        let s = compile(&[&long]).unwrap();
        assert_eq!(s.match_expressions.map(|e| e.len()), Some(40));
        let list = format!(
            "labels.app in [{}]",
            (0..30)
                .map(|i| format!("\"v{i}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(compile(&[&list]).is_ok());
        assert!(compile(&[r#"!(!(labels["app"] in ["a", "b"]))"#]).is_ok());
    }

    #[test]
    fn too_many_expressions_are_rejected() {
        let many = vec!["has(labels.a)"; MAX_EXPRESSIONS + 1];
        assert_eq!(
            compile(&many),
            Err(CelError::TooMany {
                count: MAX_EXPRESSIONS + 1
            })
        );
        assert!(compile(&vec!["has(labels.a)"; MAX_EXPRESSIONS]).is_ok());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any input, from CEL's own alphabet and beyond, is compiled or rejected: never a
        /// panic, never a stack overflow.
        #[test]
        fn arbitrary_input_never_panics(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::string::string_regex(r#"[ a-z_.()\[\]{}"'!=<>&|+*/%?:,\\-]{0,40}"#).unwrap(),
                    proptest::prelude::Just("labels".to_owned()),
                    proptest::prelude::Just("has(".to_owned()),
                    proptest::prelude::Just(" && ".to_owned()),
                    proptest::prelude::Just(" in [".to_owned()),
                    proptest::prelude::Just("\"\"\"".to_owned()),
                    proptest::prelude::Just("r'".to_owned()),
                    proptest::prelude::any::<String>(),
                ],
                0..60,
            )
        ) {
            let source = parts.concat();
            let result = on_worker_stack(move || compile_into(&[source], LabelSelector::default()));
            if let Err(CelError::Parse { expr, .. } | CelError::Unsupported { expr, .. }) = &result {
                proptest::prop_assert!(expr.len() <= QUOTED + 3);
            }
        }
    }

    #[test]
    fn contained_panics_are_silent_only_where_contained() {
        assert_eq!(contained(|| -> u8 { panic!("inside") }), None);
        assert_eq!(contained(|| 1), Some(1));
        // Elsewhere panics still reach the previous hook (and unwind as before).
        assert!(std::panic::catch_unwind(|| panic!("outside")).is_err());
        assert!(!CONTAINING.with(Cell::get));
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

    #[test]
    fn a_literal_is_one_term_however_many_dashes_its_label_key_has() {
        let key = "a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-r-s-t-u-v-w-x-y-z-a-b-c-d-e-f-g-h.io/x-y";
        let expr = format!(r#"labels["{key}"] != "v-a-l-u-e""#);
        assert!(compile(&[&expr]).is_ok(), "{:?}", compile(&[&expr]));
    }
}
