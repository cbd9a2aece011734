//! The offline CLI: `translate`, `validate`, `intents`, `explain`. The same pure core the
//! operator runs, fed from manifest files instead of a cluster.

mod bundle;
mod exceptions;
mod explain;
mod manifests;

pub use bundle::{BundleArgs, bundle, bundle_check};
use exceptions::{ClockArgs, Exceptions};
pub use explain::{explain, frameworks, intents};
#[cfg(feature = "dev")]
pub use manifests::manifest_files;
#[cfg(test)]
use manifests::parse;
use manifests::{Inputs, Loaded, Manifest, load};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use nimbus_api::SecurityIntent;
use nimbus_core::catalog::{self, BindingKind, Engine};
use nimbus_core::engines::DEFAULT_K8TLS_NAMESPACE;
use nimbus_core::engines::{
    self, EngineSet, Environment, KyvernoKinds, PolicyInput, Ranked, VirtualPatches, virtual_patch,
};
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::policy::{self, Claim};
use nimbus_core::status::{self, NativeOutcome, NativeResult};
use nimbus_core::{compile_binding, compile_cluster_binding, plan, validation};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TranslateArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Namespaces cluster bindings fan out over (a cluster would supply its own).
    #[arg(long, value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Namespace of bindings that do not name one.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Engines to translate with (default: all).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<Engine>,
    /// A virtual-patch database (the JSON the operator reads from its ConfigMap).
    #[arg(long)]
    virtual_patch_db: Option<PathBuf>,
    /// Which of Kyverno's policy APIs to write in: `legacy` (Policy and ClusterPolicy, as
    /// Nimbus) or `cel` (ValidatingPolicy, MutatingPolicy and their namespaced forms,
    /// NamespacedGeneratingPolicy for virtualPatch; `auto`
    /// is `cel` here, where every kind counts as served).
    #[arg(long, default_value = "legacy")]
    kyverno_kinds: KyvernoKinds,
    /// Namespaces cluster bindings never fan out to (the operator's default also protects its
    /// own namespace).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kube-system,nimbus-k8tls-env"
    )]
    protected_namespaces: Vec<String>,
    #[command(flatten)]
    sandbox: crate::SandboxArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

#[derive(clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    sandbox: crate::SandboxArgs,
    #[command(flatten)]
    clock: ClockArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// Every problem the schema, the catalog and the cross-references reveal, one per line.
/// `sandbox_roles`: the ClusterRoles namespaceSandbox may grant.
fn problems(loaded: &Loaded, sandbox_roles: &BTreeSet<String>) -> Vec<String> {
    let mut out = fatal_problems(loaded);
    out.extend(semantic_problems(loaded, sandbox_roles));
    out
}

/// What keeps the manifests from reaching a cluster at all: unreadable input, objects the
/// apiserver would reject.
fn fatal_problems(loaded: &Loaded) -> Vec<String> {
    let mut out = loaded.errors.clone();
    if loaded.manifests.is_empty() && out.is_empty() {
        out.push("no manifests found in the given files".into());
    }
    for (origin, manifest) in &loaded.manifests {
        let what = manifest.describe();
        for p in manifest.admission_problems() {
            out.push(format!("{origin}: {what}: {p}"));
        }
    }
    out
}

/// What the operator would report in status while enforcing the rest: unknown intents, bad
/// parameters (defaults apply), invalid selectors, dangling references.
fn semantic_problems(loaded: &Loaded, sandbox_roles: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let intents = intents_by_name(loaded);
    for (origin, manifest) in &loaded.manifests {
        let what = manifest.describe();
        let (refs, kind) = match manifest {
            Manifest::Intent(si) => {
                let intent = &si.spec.intent;
                if catalog::intent(&intent.id).is_none() {
                    let known: Vec<_> = catalog::INTENTS.iter().map(|i| i.id).collect();
                    out.push(format!(
                        "{origin}: {what}: unknown intent ID `{}` (known: {})",
                        intent.id,
                        known.join(", ")
                    ));
                }
                let rule = nimbus_core::compile::rule(intent);
                for p in catalog::check_params(&rule) {
                    out.push(format!("{origin}: {what}: {p}"));
                }
                if intent.id == "namespaceSandbox" {
                    for v in engines::sandbox_violations(&rule, sandbox_roles, None) {
                        out.push(format!("{origin}: {what}: {v}"));
                    }
                }
                continue;
            }
            // Where an exception stands is judged at a time: see `Exceptions::standings`.
            Manifest::Exception(_) | Manifest::ClusterException(_) => continue,
            Manifest::Binding(b) => {
                if let Err(e) = compile_binding(&b.spec, |_| None::<SecurityIntent>) {
                    out.push(format!("{origin}: {what}: {e}"));
                }
                (&b.spec.intents, BindingKind::Namespaced)
            }
            Manifest::ClusterBinding(b) => {
                // The same checks as the operator's: namespace selector, workload and node
                // selectors.
                if let Err(e) = compile_cluster_binding(&b.spec, |_| None::<SecurityIntent>) {
                    out.push(format!("{origin}: {what}: {e}"));
                }
                (&b.spec.intents, BindingKind::Cluster)
            }
        };
        for r in refs {
            let Some(si) = intents.get(&r.name) else {
                out.push(format!(
                    "{origin}: {what}: references SecurityIntent `{}`, which is not among the manifests",
                    r.name
                ));
                continue;
            };
            let id = &si.spec.intent.id;
            if catalog::intent(id).is_some_and(|i| i.engines_for(kind).is_empty()) {
                out.push(format!(
                    "{origin}: {what}: intent `{id}` cannot be enforced through this kind of binding"
                ));
            }
        }
    }
    out
}

/// The SecurityIntents among the manifests, by name.
/// Namespaces of these names, as a cluster would list them.
fn namespaces<'a>(names: impl IntoIterator<Item = &'a String>) -> Vec<Namespace> {
    names
        .into_iter()
        .map(|name| Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        })
        .collect()
}

fn intents_by_name(loaded: &Loaded) -> BTreeMap<String, &SecurityIntent> {
    loaded
        .manifests
        .iter()
        .filter_map(|(_, m)| match m {
            Manifest::Intent(si) => Some((si.name_any(), si)),
            _ => None,
        })
        .collect()
}

/// Bindings that reference sensitive intents without listing them in their allow-sensitive
/// annotation: valid, but those intents will not be enforced.
fn opt_in_problems(loaded: &Loaded) -> Vec<String> {
    let intents = intents_by_name(loaded);
    let mut out = Vec::new();
    for (origin, manifest) in &loaded.manifests {
        let (what, refs, annotations) = match manifest {
            Manifest::Intent(_) | Manifest::Exception(_) | Manifest::ClusterException(_) => {
                continue;
            }
            Manifest::Binding(b) => (
                format!("SecurityIntentBinding {}", b.name_any()),
                &b.spec.intents,
                b.annotations(),
            ),
            Manifest::ClusterBinding(b) => (
                format!("ClusterSecurityIntentBinding {}", b.name_any()),
                &b.spec.intents,
                b.annotations(),
            ),
        };
        let allowed = catalog::allowed_sensitive(annotations);
        for si in refs.iter().filter_map(|r| intents.get(&r.name)) {
            let rule = nimbus_core::compile::rule(&si.spec.intent);
            if let Some(p) = engines::sensitive_problem(&rule, &allowed) {
                out.push(format!("{origin}: {what}: {}", p.message));
            }
        }
    }
    out
}

/// `nimbus validate`: exit status 0 only when every manifest is valid.
pub fn validate(args: &ValidateArgs) -> anyhow::Result<bool> {
    let loaded = load(&args.inputs);
    let mut problems = problems(&loaded, &args.sandbox.roles());
    problems.extend(opt_in_problems(&loaded));
    // Bindings without a namespace are judged in `default` (see `readiness`); so are exceptions.
    let (standings, not_honoured) = Exceptions::new(&loaded, "default", &args.clock).standings();
    problems.extend(not_honoured);
    for p in &problems {
        eprintln!("{p}");
    }
    if problems.is_empty() {
        println!("{} manifests valid", loaded.manifests.len());
    }
    for line in readiness(&loaded).into_iter().chain(standings) {
        println!("{line}");
    }
    Ok(problems.is_empty())
}

/// The `Ready` condition the operator would write on each binding, as far as the manifests
/// tell it: decided by the same core functions, with every engine installed, no virtual-patch
/// database, and nothing else in the cluster (a cluster binding over `*` or `excludeNames` is
/// judged over the namespace `default`, and over the namespaces it names).
fn readiness(loaded: &Loaded) -> Vec<String> {
    let intents = intents_by_name(loaded);
    let lookup = |name: &str| intents.get(name).copied().cloned();
    let (env, engines) = (Environment::default(), EngineSet::all());
    let protected = ProtectedNamespaces::defaults(None, DEFAULT_K8TLS_NAMESPACE);
    // A generated policy as it would report itself once translated and applied.
    let translated = |input: &PolicyInput| {
        let plan = policy::plan(input, &env, engines.clone(), Claim::Bound, &[]);
        let natives: Vec<NativeResult> = plan
            .translation
            .objects
            .iter()
            .map(|g| NativeResult {
                entry: g.entry(),
                listed: g.kind.listed,
                outcome: NativeOutcome::Written,
            })
            .collect();
        status::policy_status(&plan, None, &natives)
    };
    let line = |what: String, ready: &[nimbus_api::Condition]| match ready.first() {
        Some(c) if c.message.is_empty() => format!("{what}: Ready={} ({})", c.status, c.reason),
        Some(c) => format!("{what}: Ready={} ({}: {})", c.status, c.reason, c.message),
        None => format!("{what}: no Ready condition"),
    };
    let mut out = Vec::new();
    for (_, manifest) in &loaded.manifests {
        match manifest {
            Manifest::Intent(_) | Manifest::Exception(_) | Manifest::ClusterException(_) => {}
            Manifest::Binding(b) => {
                let mut b = b.clone();
                b.metadata.namespace.get_or_insert_with(|| "default".into());
                let plan = plan::binding(&b, lookup, None);
                let mut policy = plan.as_ref().ok().and_then(|p| p.policy.clone());
                if let Some(np) = &mut policy {
                    np.status = Some(translated(&PolicyInput::namespaced(np, "")));
                }
                let outcome = status::Outcome::untouched(policy.as_ref());
                let status = status::binding_status(&b, &plan, outcome);
                out.push(line(manifest.describe(), &status.conditions));
            }
            Manifest::ClusterBinding(b) => {
                let names = b
                    .spec
                    .selector
                    .as_ref()
                    .and_then(|s| s.ns_selector.as_ref())
                    .map(|s| s.match_names.clone().unwrap_or_default())
                    .unwrap_or_default();
                let mut names: BTreeSet<String> = names.into_iter().filter(|n| n != "*").collect();
                names.insert("default".into());
                let plan = plan::cluster_binding(b, lookup, &namespaces(&names), &protected);
                let (mut cluster, mut policies) = (None, Vec::new());
                if let Ok(plan) = &plan {
                    cluster = plan.cluster_policy.clone().map(|mut p| {
                        p.status = Some(translated(&PolicyInput::cluster(&p, "")));
                        p
                    });
                    policies = plan
                        .namespaces
                        .iter()
                        .map(|(_, p)| {
                            p.clone().map(|mut p| {
                                p.status = Some(translated(&PolicyInput::namespaced(&p, "")));
                                p
                            })
                        })
                        .collect();
                }
                let outcomes: Vec<_> = policies
                    .iter()
                    .map(|p| status::Outcome::untouched(p.as_ref()))
                    .collect();
                let status = status::cluster_binding_status(
                    b,
                    &plan,
                    status::Outcome::untouched(cluster.as_ref()),
                    &outcomes,
                    &protected,
                );
                out.push(line(manifest.describe(), &status.conditions));
            }
        }
    }
    out
}

/// Namespace names among the arguments that no cluster could have (DNS-1123 labels).
fn argument_problems(args: &TranslateArgs) -> Vec<String> {
    let mut out = validation::namespace_name(&args.namespace, "--namespace");
    for ns in &args.namespaces {
        out.extend(validation::namespace_name(ns, "--namespaces"));
    }
    out
}

/// `nimbus translate`: the NimbusPolicies and native policies the operator would create.
pub fn translate(args: &TranslateArgs) -> anyhow::Result<bool> {
    let arguments = argument_problems(args);
    if !arguments.is_empty() {
        for p in &arguments {
            eprintln!("error: {p}");
        }
        return Ok(false);
    }
    let loaded = load(&args.inputs);
    let fatal = fatal_problems(&loaded);
    if !fatal.is_empty() {
        for p in &fatal {
            eprintln!("{p}");
        }
        return Ok(false);
    }
    // The rest the operator would report while enforcing what it can: so does translate.
    for p in semantic_problems(&loaded, &args.sandbox.roles()) {
        eprintln!("warning: {p}");
    }
    let env = Environment {
        virtual_patches: match &args.virtual_patch_db {
            None => VirtualPatches::NotConfigured,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("{}: cannot read file", path.display()))?;
                let data = BTreeMap::from([(virtual_patch::DATABASE_KEY.to_owned(), text)]);
                virtual_patch::from_config_map(&path.display().to_string(), Some(&data))
            }
        },
        sandbox_cluster_roles: args.sandbox.roles(),
        protected_namespaces: ProtectedNamespaces::new(&args.protected_namespaces),
        kyverno: args.kyverno_kinds.in_force(|_| true).unwrap_or_default(),
        ..Environment::default()
    };
    let (objects, warnings) = translate_all(&loaded, args, &env, &engine_set(args))?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", render(&objects, args.output)?);
    Ok(true)
}

/// The engines `--engines` chooses (all by default), all of them installed.
fn engine_set(args: &TranslateArgs) -> EngineSet {
    EngineSet {
        enabled: if args.engines.is_empty() {
            Engine::ALL.into()
        } else {
            args.engines.iter().copied().collect()
        },
        installed: Engine::ALL.into(),
        ..EngineSet::default()
    }
}

fn translate_all(
    loaded: &Loaded,
    args: &TranslateArgs,
    env: &Environment,
    engines: &EngineSet,
) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let intents = intents_by_name(loaded);
    let lookup = |name: &str| intents.get(name).copied().cloned();
    let protected = ProtectedNamespaces::new(&args.protected_namespaces);
    let namespaces = namespaces(&args.namespaces);
    // Every cluster policy printed ranks among all of them, as the operator ranks those of
    // the cluster (by name here: nothing is created yet).
    let mut cluster_policies = Vec::new();
    for (_, manifest) in &loaded.manifests {
        if let Manifest::ClusterBinding(b) = manifest {
            let plan = plan::cluster_binding(b, lookup, &namespaces, &protected)?;
            cluster_policies.extend(plan.cluster_policy);
        }
    }
    let env = &Environment {
        admin_priorities: Some(engines::priorities(cluster_policies.iter().map(|p| {
            Ranked {
                name: p.metadata.name.as_deref().unwrap_or_default(),
                created: None,
                rules: &p.spec.rules,
            }
        }))),
        ..env.clone()
    };
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    // Protected namespaces a cluster binding names (`emit` holds `warnings` meanwhile).
    let mut skipped = Vec::new();
    let excepted = Exceptions::new(loaded, &args.namespace, &args.clock);
    let mut emit =
        |policy: Value, input: &PolicyInput, out: &mut Vec<Value>| -> anyhow::Result<()> {
            // The exceptions in force at `--now`, as the operator fills them in before it
            // translates.
            let mut input = input.clone();
            input.exceptions = excepted.in_force(&input);
            // Every policy the CLI prints is its binding's, as the operator would write it.
            let translation =
                policy::plan(&input, env, engines.clone(), Claim::Bound, &[]).translation;
            out.push(policy);
            for g in translation.objects {
                out.push(serde_json::to_value(&g.object)?);
            }
            for p in translation.problems {
                warnings.push(format!("{}: {}", input.name, p.message));
            }
            Ok(())
        };
    for (_, manifest) in &loaded.manifests {
        match manifest {
            Manifest::Intent(_) | Manifest::Exception(_) | Manifest::ClusterException(_) => {}
            Manifest::Binding(b) => {
                let mut b = b.clone();
                b.metadata
                    .namespace
                    .get_or_insert_with(|| args.namespace.clone());
                if let Some(np) = plan::binding(&b, lookup, None)?.policy {
                    let input = PolicyInput::namespaced(&np, "");
                    emit(serde_json::to_value(&np)?, &input, &mut out)?;
                }
            }
            Manifest::ClusterBinding(b) => {
                let plan = plan::cluster_binding(b, lookup, &namespaces, &protected)?;
                if let Some(cwnp) = &plan.cluster_policy {
                    let input = PolicyInput::cluster(cwnp, "");
                    emit(serde_json::to_value(cwnp)?, &input, &mut out)?;
                }
                for ns in &plan.protected {
                    skipped.push(format!(
                        "{}: namespace {ns} is protected; the binding gets nothing there",
                        b.name_any()
                    ));
                }
                for np in plan.namespace_policies() {
                    let input = PolicyInput::namespaced(np, "");
                    emit(serde_json::to_value(np)?, &input, &mut out)?;
                }
            }
        }
    }
    warnings.extend(skipped);
    Ok((out, warnings))
}

fn render(objects: &[Value], format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            serde_json::to_string_pretty(&list)? + "\n"
        }
        Format::Yaml => {
            let mut out = String::new();
            for o in objects {
                out.push_str("---\n");
                out.push_str(&serde_yaml_ng::to_string(o)?);
            }
            out
        }
    })
}

#[cfg(test)]
mod fuzz {
    //! A bounded, seeded fuzz of `validate` and `translate` (the functions the CLI runs) with
    //! random names, namespaces, labels, selectors and `spec.cel` expressions: nothing panics,
    //! and what `validate` accepts `translate` translates. Whether `validate` is right is the
    //! API server's to judge: `tests/server_oracle.rs`.

    use super::*;
    use crate::cases::{Rng, binding_case, dns_label, dns_name};

    const CASES: usize = 20_000;

    #[test]
    fn random_bindings_never_panic_and_translate_when_valid() {
        let mut rng = Rng::new(0x6e69_6d62_7573);
        let (mut accepted, mut objects) = (0, 0);
        for case in 0..CASES {
            let generated = binding_case(&mut rng, None);
            let text = generated.manifest();
            let mut loaded = Loaded {
                manifests: Vec::new(),
                errors: Vec::new(),
            };
            parse("fuzz.yaml", &text, &mut loaded);
            let problems = problems(&loaded, &crate::SandboxArgs::default().roles());
            let namespaces: Vec<String> = (0..rng.below(4))
                .map(|_| {
                    if rng.chance(90) {
                        dns_label(&mut rng)
                    } else {
                        dns_name(&mut rng)
                    }
                })
                .collect();
            let args = TranslateArgs {
                inputs: Inputs {
                    files: Vec::new(),
                    paths: Vec::new(),
                },
                namespaces,
                namespace: "default".into(),
                engines: Vec::new(),
                virtual_patch_db: None,
                kyverno_kinds: KyvernoKinds::Legacy,
                protected_namespaces: vec!["kube-system".into(), "nimbus-k8tls-env".into()],
                sandbox: crate::SandboxArgs::default(),
                clock: ClockArgs::default(),
                output: Format::Json,
            };
            let env = Environment::default();
            let result = translate_all(&loaded, &args, &env, &engine_set(&args));
            if !problems.is_empty() || !argument_problems(&args).is_empty() {
                continue;
            }
            accepted += 1;
            let (out, _warnings) = result.unwrap_or_else(|e| panic!("case {case}: {e:#}\n{text}"));
            objects += out.len();
        }
        println!(
            "fuzz: {CASES} cases, {accepted} accepted by validate and translated into {objects} objects"
        );
        // The generator must exercise both outcomes.
        assert!(
            accepted > CASES / 10 && accepted < CASES * 9 / 10,
            "{accepted}"
        );
    }
}
