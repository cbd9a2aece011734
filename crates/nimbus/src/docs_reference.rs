//! The book's reference pages (docs/src/reference/), generated from the code so they cannot
//! drift from it: `nimbus docs-reference <page>` prints one, `make docs-reference` writes them
//! all, and `tests/crds.rs` fails when a committed page differs from what this
//! renders.

use anyhow::Context as _;
use nimbus_core::catalog::{self, BindingKind};
use serde_json::Value;
use std::fmt::Write as _;

/// One generated page; its file is `docs/src/reference/<name>.md`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Page {
    /// Every command and flag, from the clap definitions.
    Cli,
    /// Every field of the CRDs, from their OpenAPI v3 schemas.
    Crds,
    /// The intent catalog: what each intent enforces, with which engines and parameters.
    Intents,
}

impl Page {
    /// The page; `cli`: the command line it documents (the CLI page's source).
    pub fn render(self, cli: clap::Command) -> anyhow::Result<String> {
        match self {
            Page::Cli => Ok(cli_page(cli)),
            Page::Crds => crds_page(),
            Page::Intents => intents_page(),
        }
    }
}

/// What every page says first: where it comes from, and that hand edits are lost.
fn generated_notice(source: &str) -> String {
    format!(
        "<!-- Generated from {source} by `make docs-reference`; do not edit: a test fails \
         when this page is stale. -->\n"
    )
}

/// clap wraps help at the terminal's width when it knows it; a fixed width keeps the page the
/// same wherever it is generated.
const HELP_WIDTH: usize = 100;

/// Each visible command's long help, as `nimbus <command> --help` prints it.
fn cli_page(cli: clap::Command) -> String {
    let mut cli = with_stable_help(cli);
    cli.build();
    let mut out = generated_notice("the `nimbus` binary's clap definitions");
    out.push_str(
        "# Command line\n\nEvery command of the `nimbus` binary and its flags, as `--help` prints \
         them. Commands for building the project itself are hidden and left out. The \
         [binary](../cli.md) chapter says what the operator's flags are for.\n\n\
         | command | what |\n|---|---|\n",
    );
    // In the order `--help` lists them (`command()` re-adds the ones it edits at the end).
    let mut in_help_order: Vec<&clap::Command> = cli.get_subcommands().collect();
    in_help_order.sort_by_key(|c| c.get_display_order());
    let visible: Vec<(String, String)> = in_help_order
        .into_iter()
        // clap's own `help` command says nothing `--help` does not.
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| {
            let about = c.get_about().map(ToString::to_string).unwrap_or_default();
            (c.get_name().to_owned(), about)
        })
        .collect();
    for (name, about) in &visible {
        let _ = writeln!(
            out,
            "| [`nimbus {name}`](#nimbus-{name}) | {} |",
            table_cell(about)
        );
    }
    let _ = write!(
        out,
        "\n## nimbus\n\n```text\n{}```\n",
        cli.render_long_help()
    );
    for (name, _) in visible {
        if let Some(command) = cli.find_subcommand_mut(&name) {
            write_help(&mut out, &format!("nimbus {name}"), command);
        }
    }
    out
}

/// `command`'s long help under a heading `path`, then each of its visible subcommands' (`nimbus
/// fleet status` under `nimbus fleet`).
fn write_help(out: &mut String, path: &str, command: &mut clap::Command) {
    let _ = write!(
        out,
        "\n## {path}\n\n```text\n{}```\n",
        command.render_long_help()
    );
    for sub in command.get_subcommands_mut() {
        if !sub.is_hide_set() && sub.get_name() != "help" {
            let path = format!("{path} {}", sub.get_name());
            write_help(out, &path, sub);
        }
    }
}

/// `command` and every subcommand with a fixed help width, and the names of environment
/// variables shown without the values the generating shell happens to have.
fn with_stable_help(command: clap::Command) -> clap::Command {
    command
        .term_width(HELP_WIDTH)
        .mut_args(|a| a.hide_env_values(true))
        .mut_subcommands(with_stable_help)
}

/// Every CRD's fields: path, type, whether required, description.
fn crds_page() -> anyhow::Result<String> {
    let mut out = generated_notice("the CRDs' OpenAPI v3 schemas (`nimbus crds`)");
    out.push_str(
        "# CRD fields\n\nEvery field of the five kinds of `intent.security.nimbus.com`, from the \
         schemas the API server validates with (`config/crd/nimbus.yaml`; `kubectl explain` \
         shows the same descriptions). `[]` is an element of a list, `*` any key of a map. The \
         posture API's kinds are not CRDs: `kubectl explain workloadpostures` documents \
         them.\n",
    );
    for crd in nimbus_api::crds() {
        let crd = serde_json::to_value(&crd).context("serializing a CRD")?;
        let spec = &crd["spec"];
        let kind = spec["names"]["kind"]
            .as_str()
            .context("a CRD without a kind")?;
        let short_names: Vec<&str> = spec["names"]["shortNames"]
            .as_array()
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let _ = write!(
            out,
            "\n## {kind}\n\n`{}.{}`, {}",
            spec["names"]["plural"].as_str().unwrap_or_default(),
            spec["group"].as_str().unwrap_or_default(),
            spec["scope"].as_str().unwrap_or_default().to_lowercase(),
        );
        if !short_names.is_empty() {
            let _ = write!(out, "; short names `{}`", short_names.join("`, `"));
        }
        out.push_str(".\n");
        for version in spec["versions"].as_array().into_iter().flatten() {
            let name = version["name"].as_str().unwrap_or_default();
            let _ = write!(
                out,
                "\n### {kind} {name}\n\n| field | type | required | description |\n|---|---|---|---|\n"
            );
            let schema = &version["schema"]["openAPIV3Schema"];
            for (field, property) in properties(schema) {
                // Every kind has them, and Kubernetes documents them.
                if !matches!(field, "apiVersion" | "kind" | "metadata") {
                    walk_schema(&mut out, field, property, is_required(schema, field));
                }
            }
        }
    }
    Ok(out)
}

fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, property)| (name.as_str(), property))
}

fn is_required(schema: &Value, field: &str) -> bool {
    schema["required"]
        .as_array()
        .is_some_and(|required| required.iter().any(|r| r.as_str() == Some(field)))
}

/// One row for `schema` at `path`, then one for each field under it.
fn walk_schema(out: &mut String, path: &str, schema: &Value, required: bool) {
    let _ = writeln!(
        out,
        "| `{path}` | {} | {} | {} |",
        table_cell(&schema_type(schema)),
        if required { "yes" } else { "" },
        table_cell(schema["description"].as_str().unwrap_or_default()),
    );
    for (field, property) in properties(schema) {
        walk_schema(
            out,
            &format!("{path}.{field}"),
            property,
            is_required(schema, field),
        );
    }
    if let Some(items) = schema.get("items").filter(|i| has_fields(i)) {
        for (field, property) in properties(items) {
            walk_schema(
                out,
                &format!("{path}[].{field}"),
                property,
                is_required(items, field),
            );
        }
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| has_fields(v)) {
        walk_schema(out, &format!("{path}.*"), values, false);
    }
}

fn has_fields(schema: &Value) -> bool {
    schema["properties"]
        .as_object()
        .is_some_and(|p| !p.is_empty())
}

/// A schema's type in words: `string`, `list of object`, `map of string`, `one of: A, B`.
fn schema_type(schema: &Value) -> String {
    if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
        return "integer or string".into();
    }
    let mut words = match schema["type"].as_str() {
        Some("array") => format!("list of {}", schema_type(&schema["items"])),
        Some("object") => match schema.get("additionalProperties") {
            Some(values) if values.is_object() => format!("map of {}", schema_type(values)),
            _ => "object".into(),
        },
        Some(other) => other.to_owned(),
        // No type: anything (x-kubernetes-preserve-unknown-fields).
        None => "any".into(),
    };
    if let Some(format) = schema["format"].as_str() {
        let _ = write!(words, " ({format})");
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("`{s}`"),
                other => format!("`{other}`"),
            })
            .collect();
        let _ = write!(words, ", one of {}", values.join(", "));
    }
    if schema["nullable"] == Value::Bool(true) {
        words.push_str(", nullable");
    }
    words
}

/// The intent catalog: a summary table, then what `nimbus explain` says of each intent.
fn intents_page() -> anyhow::Result<String> {
    let mut out = generated_notice("the intent catalog (`nimbus intents`, `nimbus explain`)");
    out.push_str(
        "# Intent catalog\n\nEvery intent ID the operator knows, what it enforces, which engines \
         enforce it from a namespaced binding (`SecurityIntentBinding`) and from a cluster \
         binding (`ClusterSecurityIntentBinding`), and its parameters. \
         [Intents and engines](../intents-and-engines.md) explains how engines are chosen; \
         sensitive intents need the binding's opt-in ([Sensitive \
         intents](../intents-and-engines.md#sensitive-intents)).\n\n\
         | intent | what it enforces | namespaced binding | cluster binding | parameters |\n\
         |---|---|---|---|---|\n",
    );
    let engines = |i: &catalog::IntentSpec, kind: BindingKind| {
        let names: Vec<&str> = i.engines_for(kind).iter().map(|e| e.name()).collect();
        if names.is_empty() {
            "—".to_owned()
        } else {
            names.join(", ")
        }
    };
    for i in catalog::INTENTS {
        let params: Vec<String> = i.params.iter().map(|p| format!("`{}`", p.name)).collect();
        let sensitive = if i.sensitive { " (sensitive)" } else { "" };
        let _ = writeln!(
            out,
            "| [`{}`](#{}){sensitive} | {} | {} | {} | {} |",
            i.id,
            i.id.to_lowercase(),
            table_cell(i.summary),
            engines(i, BindingKind::Namespaced),
            engines(i, BindingKind::Cluster),
            if params.is_empty() {
                "—".to_owned()
            } else {
                params.join(", ")
            },
        );
    }
    for i in catalog::INTENTS {
        let explained = crate::offline::explain(i.id)?;
        let _ = write!(
            out,
            "\n## {}\n\n`nimbus explain {}`:\n\n```text\n{explained}```\n",
            i.id, i.id
        );
    }
    Ok(out)
}

/// `text` as one Markdown table cell: on one line, its pipes escaped, and `<` outside code
/// spans escaped so that `<namespace>/<name>` is not taken for HTML.
fn table_cell(text: &str) -> String {
    let mut cell = String::with_capacity(text.len());
    let mut in_code = false;
    for ch in text.trim().chars() {
        match ch {
            '`' => {
                in_code = !in_code;
                cell.push(ch);
            }
            '|' => cell.push_str("\\|"),
            '\n' => cell.push(' '),
            '<' if !in_code => cell.push_str("&lt;"),
            '>' if !in_code => cell.push_str("&gt;"),
            _ => cell.push(ch),
        }
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_stay_one_cell_and_show_angle_brackets() {
        assert_eq!(
            table_cell("a | b\n<ns>/<name> `x|<y>`"),
            "a \\| b &lt;ns&gt;/&lt;name&gt; `x\\|<y>`"
        );
    }

    #[test]
    fn schema_types_read_as_words() {
        let schema = serde_json::json!({
            "type": "array",
            "items": {"type": "string", "enum": ["Block", "Audit"]}
        });
        assert_eq!(
            schema_type(&schema),
            "list of string, one of `Block`, `Audit`"
        );
        let map = serde_json::json!({"type": "object", "additionalProperties": {"type": "integer", "format": "int32"}});
        assert_eq!(schema_type(&map), "map of integer (int32)");
    }

    /// Every page renders, and the CLI page names every visible command.
    #[test]
    fn every_page_renders() {
        let cli = Page::Cli.render(crate::command()).expect("the CLI page");
        for command in super::super::command().get_subcommands() {
            let heading = format!("\n## nimbus {}\n", command.get_name());
            assert_eq!(cli.contains(&heading), !command.is_hide_set(), "{heading}");
        }
        assert!(!cli.contains("\n## nimbus help\n"));
        assert!(
            Page::Crds
                .render(crate::command())
                .expect("the CRD page")
                .contains("## SecurityIntent\n")
        );
        assert!(
            Page::Intents
                .render(crate::command())
                .expect("the intents page")
                .contains("## escapeToHost\n")
        );
    }
}
