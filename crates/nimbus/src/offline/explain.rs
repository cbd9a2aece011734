//! `nimbus intents` and `nimbus explain`: the catalog, printed.

use nimbus_core::catalog::{self, BindingKind, Engine};
use nimbus_core::compliance::{self, Framework};
use nimbus_core::engines;
use std::collections::BTreeSet;

/// `nimbus intents`: the catalog as a table.
pub fn intents() -> String {
    let mut rows = vec![[
        "ID".to_owned(),
        "ENGINES".to_owned(),
        "PARAMETERS".to_owned(),
    ]];
    for i in catalog::INTENTS {
        let engines: BTreeSet<&str> = i.engines().iter().map(|e| e.name()).collect();
        let params: Vec<String> = i
            .params
            .iter()
            .map(|p| match (p.default, p.required) {
                (Some(d), _) => format!("{}={d}", p.name),
                (None, true) => format!("{} (required)", p.name),
                (None, false) => p.name.to_owned(),
            })
            .collect();
        rows.push([
            i.id.to_owned(),
            engines.into_iter().collect::<Vec<_>>().join(","),
            if params.is_empty() {
                "-".into()
            } else {
                params.join(" ")
            },
        ]);
    }
    let width = |c: usize| rows.iter().map(|r| r[c].len()).max().unwrap_or(0);
    let (w0, w1) = (width(0), width(1));
    rows.iter()
        .map(|r| format!("{:w0$}  {:w1$}  {}\n", r[0], r[1], r[2]))
        .collect()
}

/// For each mechanism of which two engines enforce intent `i`, which of them writes.
fn alternatives(i: &catalog::IntentSpec) -> String {
    let mut out = String::new();
    for mechanism in engines::MECHANISMS {
        let alternatives: Vec<&str> = (mechanism.engines.iter())
            .filter(|e| i.engines().contains(e))
            .map(|e| e.name())
            .collect();
        if alternatives.len() < 2 {
            continue;
        }
        let per = match mechanism.per_binding {
            true => "kind of binding",
            false => "kind of policy",
        };
        out.push_str(&format!(
            "  {} both enforce by {}: for each {per} only the first of --engine-preference \
             (default {}) that is installed and acts on it writes\n",
            alternatives.join(" and "),
            mechanism.name,
            engines::Preference::default().among(&mechanism.engines[0]),
        ));
    }
    out
}

/// `nimbus explain <id>`.
pub fn explain(id: &str) -> anyhow::Result<String> {
    let Some(i) = catalog::intent(id) else {
        let known: Vec<_> = catalog::INTENTS.iter().map(|i| i.id).collect();
        anyhow::bail!("unknown intent ID `{id}` (known: {})", known.join(", "));
    };
    let mut out = format!("{}\n  {}\n\nEnforced by:\n", i.id, i.summary);
    for kind in [BindingKind::Namespaced, BindingKind::Cluster] {
        let engines: Vec<&str> = i.engines_for(kind).iter().map(|e| e.name()).collect();
        let through = match kind {
            BindingKind::Namespaced => "SecurityIntentBinding",
            BindingKind::Cluster => "ClusterSecurityIntentBinding",
        };
        let engines = if engines.is_empty() {
            "(not supported)".to_owned()
        } else {
            engines.join(", ")
        };
        out.push_str(&format!("  through a {through}: {engines}\n"));
    }
    out.push_str(&alternatives(i));
    if i.sensitive {
        out.push_str(&format!(
            "  only when the binding lists it in its {} annotation\n",
            nimbus_api::ALLOW_SENSITIVE_ANNOTATION
        ));
    }
    let declared: Vec<(Engine, &engines::Enforces)> = Engine::ALL
        .into_iter()
        .filter_map(|e| Some((e, e.spec().enforces.iter().find(|x| x.intent == i.id)?)))
        .collect();
    out.push_str("\nWhat each engine does:\n");
    for (engine, enforces) in &declared {
        out.push_str(&format!("  {engine}: {}\n", enforces.effect));
    }
    out.push_str("\nUnder `action: Audit` (or a binding in shadow mode), nothing is enforced:\n");
    for (engine, enforces) in &declared {
        let audit = match enforces.audit {
            engines::AuditForm::Reports => {
                "the same objects, every action Audit: reports, blocks nothing"
            }
            engines::AuditForm::AssessesOnly => "the same objects: it only assesses and reports",
            engines::AuditForm::None => {
                "writes nothing (NoAuditForm): it cannot report without enforcing"
            }
        };
        out.push_str(&format!("  {engine}: {audit}\n"));
    }
    out.push_str("\nControls (`nimbus frameworks` lists them all):\n");
    for m in compliance::mappings(i.id) {
        let c = m.control();
        let withdrawn = if c.withdrawn { ", withdrawn" } else { "" };
        out.push_str(&format!(
            "  {} {} {} ({}{withdrawn}): {}\n    source: {} <{}>\n",
            m.strength.as_str(),
            m.framework.title(),
            c.id,
            c.name,
            m.note,
            m.source.cite,
            m.source.url
        ));
    }
    if let Some(why) = compliance::unmapped(i.id) {
        out.push_str(&format!("  no current control: {why}\n"));
    }
    out.push_str("\nParameters:\n");
    if i.params.is_empty() {
        out.push_str("  none\n");
    }
    for p in i.params {
        let mut facts = vec![p.kind.to_string()];
        if let Some(d) = p.default {
            facts.push(format!("default {d}"));
        }
        if p.required {
            facts.push("required".into());
        }
        if p.multiple {
            facts.push("all values used".into());
        }
        out.push_str(&format!(
            "  {} ({}): {}\n",
            p.name,
            facts.join(", "),
            p.description
        ));
    }
    Ok(out)
}

/// `nimbus frameworks`: every framework, and each of its controls the catalog names with the
/// intents that address it.
pub fn frameworks() -> String {
    let mut out = String::new();
    for f in Framework::ALL {
        out.push_str(&format!("{} - {} {}\n", f.name(), f.title(), f.version()));
        for c in compliance::controls(f) {
            let by: Vec<String> = compliance::MAPPINGS
                .iter()
                .filter(|m| m.framework == f && m.control == c.id)
                .map(|m| match m.strength {
                    compliance::Strength::Addresses => m.intent.to_owned(),
                    compliance::Strength::PartiallyAddresses => format!("{} (partially)", m.intent),
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            out.push_str(&format!(
                "  {:10} {}\n  {:10}   by {}\n",
                c.id,
                c.name,
                "",
                by.join(", ")
            ));
        }
        out.push('\n');
    }
    out.push_str("Bundles (`nimbus bundle <name>`):\n");
    for b in compliance::bundles::BUNDLES {
        out.push_str(&format!("  {:15} {}\n", b.name, b.summary));
    }
    out
}
