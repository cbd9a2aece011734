//! virtualPatch (Kyverno engine): protects workloads that run a vulnerable image until the
//! image can be fixed, with the virtual patches a CVE database lists for the intent's
//! `cveList`.
//!
//! # The database
//!
//! The operator reads it from a ConfigMap named by `--virtual-patch-db <namespace>/<name>`,
//! key `vp.json` (the format of Nimbus's `vp.json`). Without the flag, or while the ConfigMap
//! is missing or malformed, virtualPatch intents are not enforced and their policies say why.
//! Changes to the ConfigMap take effect at once.
//!
//! It is a JSON list of images; each lists CVEs, and each CVE a list of patches. A patch holds
//! one or more complete native policies under the keys `karmor` (a KubeArmorPolicy), `kyverno`
//! (a Kyverno policy) and `netpol` (a NetworkPolicy). Unknown keys are ignored.
//!
//! ```json
//! [
//!   {
//!     "image": "nginx:1.25",
//!     "cves": [
//!       {
//!         "cve": "CVE-2024-4439",
//!         "virtual_patch": [
//!           {
//!             "karmor": {
//!               "apiVersion": "security.kubearmor.com/v1",
//!               "kind": "KubeArmorPolicy",
//!               "metadata": {"name": "block-pkg-mgmt-tools-exec"},
//!               "spec": {
//!                 "process": {"matchPaths": [{"path": "/usr/bin/apt"}]},
//!                 "action": "Block"
//!               }
//!             }
//!           },
//!           {
//!             "netpol": {
//!               "apiVersion": "networking.k8s.io/v1",
//!               "kind": "NetworkPolicy",
//!               "metadata": {"name": "nginx-no-egress"},
//!               "spec": {"policyTypes": ["Egress"]}
//!             }
//!           }
//!         ]
//!       }
//!     ]
//!   }
//! ]
//! ```
//!
//! Every native policy needs `metadata.name` and a `spec` object; a Kyverno policy needs a
//! non-empty `spec.rules` list of rules that only validate (no generate, mutate,
//! verifyImages or context: those would act with Kyverno's permissions, not the database
//! author's). Selectors in the database are placeholders: they are replaced
//! by the workload selector of the binding.
//!
//! # What gets generated
//!
//! For each CVE of the intent, each image that lists it and each patch, a generator named
//! `<policy>-<cve, lowercase>-<karmor|kyverno|netpol>-<n>` is written in the policy's
//! namespace (`n` counts the patches of that kind for the CVE, from 1): a Kyverno `Policy` with
//! a generate rule in the legacy kinds, a `NamespacedGeneratingPolicy` in the CEL kinds (the
//! same triggers, the same objects; see `cel`). It watches the selected Pods and generates the
//! native policy (existing Pods count too: `generateExisting`), owned by the NimbusPolicy:
//!
//! - `karmor`: a KubeArmorPolicy `<name>-<pod>` per Pod running the image, selecting the
//!   binding's labels and the container that runs the image
//!   (`kubearmor.io/container.name`).
//! - `kyverno`: a namespaced Kyverno `Policy` `<name>` (even when the database has a
//!   `ClusterPolicy`); every rule matches the selected Pods, and its `preconditions.all`
//!   starts with "the Pod runs the image".
//! - `netpol`: a NetworkPolicy `<name>` once a Pod runs the image, whose `podSelector` is the
//!   binding's selector.
//!
//! CVEs the database does not know, and patches that cannot be used, are reported on the
//! policy; the other CVEs are still patched. A Kyverno patch is a legacy `Policy` in either API
//! (the database's rules are legacy rules): where the API server does not serve that kind
//! (Kyverno 1.21 on), it is not generated, and the policy says so (`EngineNotInstalled`).
//!
//! Fixed from Nimbus: parameters come from this rule (not the policy's first rule); patch
//! numbers run over the whole CVE, so a CVE listed under two images cannot collide on a name;
//! rule names are `<cve>-virtual-patch-<kind>`; a Kyverno patch keeps its own
//! `preconditions.all` (the image condition is prepended) and may have none; every Kyverno
//! rule is rewritten, not only the first; malformed entries are reported instead of crashing.

mod cel;
mod database;
mod generation;

pub use database::{Cve, DATABASE_KEY, Database, Image, Patch, VirtualPatches, from_config_map};

use super::api::KyvernoApi;
use super::legacy::{Extra, build};
use crate::engines::{
    Emitted, Environment, KYVERNO_POLICY, NativeKind, Output, PolicyInput, Problem, Rule,
};
use crate::intents::{id, param, param_values};
use generation::{CONTAINER_LABEL, Context, Generated, Target};
use kube::core::DynamicObject;
use nimbus_api::condition::{REASON_ENGINE_NOT_INSTALLED, REASON_ENGINE_NOT_READY};
use serde_json::{Map, Value, json};

const IMAGES_OF_POD: &str = "{{ request.object.spec.containers[].image }}";

/// The generator policies of a virtualPatch rule, with the problems that do not stop its other
/// patches as warnings (CVEs the database does not know, patches that cannot be used). Problems
/// that leave the rule without any policy are errors.
pub(super) fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    let Some(namespace) = policy.namespace.as_deref() else {
        return Ok(Emitted::default());
    };
    let db = match &env.virtual_patches {
        VirtualPatches::NotConfigured => {
            return Err(rule.problem(
                REASON_ENGINE_NOT_READY,
                "no virtual-patch database is configured (--virtual-patch-db)",
            ));
        }
        VirtualPatches::Invalid(why) => {
            return Err(rule.problem(REASON_ENGINE_NOT_READY, why.clone()));
        }
        VirtualPatches::Database(db) => db,
    };
    let ctx = Context {
        policy,
        rule,
        namespace,
        prefix: if rule.key == id::VIRTUAL_PATCH.to_lowercase() {
            String::new()
        } else {
            format!("{}-", rule.key)
        },
        selector: serde_json::to_value(&policy.selector).unwrap_or_else(|_| json!({})),
        owner: serde_json::to_value(&policy.owner).unwrap_or_default(),
        api: env.kyverno,
    };

    let mut cves: Vec<String> = Vec::new();
    for cve in param_values(rule.spec, param::CVE_LIST) {
        if !cves.iter().any(|c| c.eq_ignore_ascii_case(&cve)) {
            cves.push(cve);
        }
    }
    let mut plan = Emitted::default();
    let mut unknown = Vec::new();
    for cve in &cves {
        // Per kind of patch, across every image listing the CVE.
        let mut counts = [0usize; Target::ALL.len()];
        let mut known = false;
        for image in &db.images {
            let entries = image
                .cves
                .iter()
                .filter(|e| e.cve.eq_ignore_ascii_case(cve));
            for patch in entries.flat_map(|e| &e.virtual_patch) {
                for (i, target) in Target::ALL.into_iter().enumerate() {
                    let Some(native) = target.of(patch) else {
                        continue;
                    };
                    known = true;
                    counts[i] += 1;
                    // Not a reason to skip the other patches: a warning.
                    let patch = Located {
                        cve,
                        image: &image.image,
                        target,
                        n: counts[i],
                    };
                    match patch.generate(&ctx, env, native) {
                        Ok(generated) => plan.objects.push(generated),
                        Err((reason, what)) => plan.warnings.push(Problem {
                            blocking: false,
                            ..rule.problem(
                                reason,
                                format!(
                                    "virtual-patch database {}: {cve}, image {}: {what}",
                                    db.source, image.image
                                ),
                            )
                        }),
                    }
                }
            }
        }
        if !known {
            unknown.push(cve.as_str());
        }
    }
    if !unknown.is_empty() {
        plan.warnings.insert(
            0,
            Problem {
                blocking: false,
                ..rule.problem(
                    REASON_ENGINE_NOT_READY,
                    format!("no virtual patch known for {}", unknown.join(", ")),
                )
            },
        );
    }
    if plan.objects.is_empty() && !plan.warnings.is_empty() {
        // Nothing is enforced at all.
        let messages: Vec<&str> = plan.warnings.iter().map(|w| w.message.as_str()).collect();
        // The first problem's reason: with every patch of a kind the API server does not
        // serve, the intent waits for that kind (EngineNotInstalled), not for the database.
        let reason = plan.warnings[0].reason;
        return Err(rule.problem(reason, messages.join("; ")));
    }
    Ok(plan)
}

/// A patch of the database: patch `n` of kind `target` for `cve`, under `image`.
struct Located<'a> {
    cve: &'a str,
    image: &'a str,
    target: Target,
    n: usize,
}

impl Located<'_> {
    /// Its generator, or why there is none (the reason and what to say).
    fn generate(
        &self,
        ctx: &Context,
        env: &Environment,
        native: &Value,
    ) -> Result<(&'static NativeKind, DynamicObject), (&'static str, String)> {
        let key = self.target.key();
        if let Some(why) = unserved(self.target, env) {
            return Err((
                REASON_ENGINE_NOT_INSTALLED,
                format!("{key} patch not generated: {why}"),
            ));
        }
        generator(ctx, self.cve, self.image, self.target, self.n, native).map_err(|why| {
            (
                REASON_ENGINE_NOT_READY,
                format!("unusable {key} patch: {why}"),
            )
        })
    }
}

/// Why a patch of `target` cannot be generated in this cluster, if it cannot: a Kyverno patch
/// is a legacy `Policy` (the database holds legacy rules, which have no CEL translation), and a
/// cluster whose Kyverno writes only the CEL kinds (1.21 on) may no longer serve that kind.
fn unserved(target: Target, env: &Environment) -> Option<String> {
    match target {
        Target::Kyverno if !env.kyverno_legacy_served => Some(format!(
            "it is a Kyverno {} ({}), which the API server does not serve",
            KYVERNO_POLICY.kind,
            KYVERNO_POLICY.api_version()
        )),
        _ => None,
    }
}

/// Makes the Kyverno policy's own rules (validate only) apply to the Pods running the image:
/// each matches Pods of the selector, with `runs_image` as its first precondition.
fn scope_kyverno_rules(
    spec: &mut Map<String, Value>,
    ctx: &Context,
    runs_image: &Value,
) -> Result<(), String> {
    let rules = spec
        .get_mut("rules")
        .and_then(Value::as_array_mut)
        .filter(|r| !r.is_empty())
        .ok_or("spec.rules must be a non-empty list")?;
    for (i, kyverno_rule) in rules.iter_mut().enumerate() {
        let kyverno_rule = kyverno_rule
            .as_object_mut()
            .ok_or_else(|| format!("spec.rules[{i}] must be an object"))?;
        only_validates(kyverno_rule).map_err(|what| format!("spec.rules[{i}] {what}"))?;
        kyverno_rule.insert(
            "match".into(),
            json!({"any": [{"resources": {"kinds": ["Pod"], "selector": ctx.selector}}]}),
        );
        prepend_precondition(kyverno_rule, runs_image.clone())
            .map_err(|what| format!("spec.rules[{i}].{what}"))?;
    }
    Ok(())
}

/// The Kyverno policy that generates `native` (patch `n` of its kind for `cve`) for the Pods
/// running `image`, in the API of the context; the error says what is wrong with `native`.
fn generator(
    ctx: &Context,
    cve: &str,
    image: &str,
    target: Target,
    n: usize,
    native: &Value,
) -> Result<(&'static NativeKind, DynamicObject), String> {
    let policy = ctx.policy;
    let cve_key = cve.to_lowercase();
    let runs_image = json!({"key": image, "operator": "AnyIn", "value": IMAGES_OF_POD});

    let mut data = native.as_object().cloned().ok_or("not a JSON object")?;
    data.remove("apiVersion");
    data.remove("kind");
    let metadata_obj = data
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or("metadata must be an object")?;
    let name = metadata_obj
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("metadata.name is missing")?
        .to_owned();
    metadata_obj.insert("ownerReferences".into(), json!([ctx.owner]));
    let spec = data
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or("spec must be an object")?;
    match target {
        Target::KubeArmor => {
            let mut labels: Map<String, Value> = policy
                .selector
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            // The legacy generator's variable; the CEL one replaces it (see `cel::generator`).
            labels.insert(CONTAINER_LABEL.into(), "{{ containerName }}".into());
            spec.insert("selector".into(), json!({ "matchLabels": labels }));
        }
        Target::Kyverno => scope_kyverno_rules(spec, ctx, &runs_image)?,
        Target::NetworkPolicy => {
            spec.insert("podSelector".into(), ctx.selector.clone());
        }
    }
    let generated = Generated {
        target,
        image,
        name,
        data,
        suffix: format!("{}{cve_key}-{}-{n}", ctx.prefix, target.key()),
        rule_name: format!("{cve_key}-virtual-patch-{}", target.key()),
    };
    Ok(match ctx.api {
        KyvernoApi::Legacy => legacy_generator(ctx, generated, runs_image),
        KyvernoApi::Cel => cel::generator(ctx, generated),
    })
}

/// The legacy `Policy` with a generate rule.
fn legacy_generator(
    ctx: &Context,
    generated: Generated,
    runs_image: Value,
) -> (&'static NativeKind, DynamicObject) {
    let Generated {
        target,
        image,
        name,
        data,
        suffix,
        rule_name,
    } = generated;
    let mut generator_rule = Map::new();
    generator_rule.insert("name".into(), rule_name.into());
    let pod_name =
        json!({"name": "podName", "variable": {"jmesPath": "request.object.metadata.name"}});
    let generated_name = match target {
        Target::KubeArmor => {
            let container = format!(
                "request.object.spec.containers[?(@.image=='{}')].name | [0]",
                image.replace('\'', "\\'")
            );
            generator_rule.insert(
                "context".into(),
                json!([
                    {"name": "containerName", "variable": {"jmesPath": container}},
                    pod_name,
                ]),
            );
            format!("{name}-{{{{ podName }}}}")
        }
        Target::Kyverno => name,
        Target::NetworkPolicy => {
            generator_rule.insert("context".into(), json!([pod_name]));
            name
        }
    };

    generator_rule.insert(
        "match".into(),
        json!({
            "any": [{"resources": {"kinds": ["v1/Pod"], "selector": ctx.selector}}],
            "resources": {},
        }),
    );
    generator_rule.insert("exclude".into(), json!({"resources": {}}));
    if !matches!(target, Target::Kyverno) {
        generator_rule.insert("preconditions".into(), json!({ "all": [runs_image] }));
    }
    // No `validate: {}`: Kyverno would see a second operation (see the kyverno module).
    generator_rule.insert("mutate".into(), json!({}));
    let kind = target.kind();
    generator_rule.insert(
        "generate".into(),
        json!({
            "apiVersion": kind.api_version(),
            "kind": kind.kind,
            "namespace": ctx.namespace,
            "name": generated_name,
            "data": data,
            "clone": {},
            "cloneList": {},
        }),
    );

    build(
        ctx.policy,
        ctx.rule,
        &suffix,
        vec![Value::Object(generator_rule)],
        Extra::GenerateExisting,
    )
}

/// Puts `condition` first in the rule's `preconditions.all` (creating it when missing), keeping
/// the rule's own conditions; a legacy list of conditions (which means "all") is extended the
/// same way. The error names the misshapen field.
/// What a Kyverno rule from the database may hold: it validates, nothing else. A rule that
/// generates, mutates, verifies images or loads context would act with Kyverno's own
/// permissions (its background controller may create RoleBindings), which whoever writes the
/// database was never granted.
const KYVERNO_RULE_KEYS: [&str; 6] = [
    "name",
    "match",
    "exclude",
    "preconditions",
    "validate",
    "skipBackgroundRequests",
];

fn only_validates(rule: &Map<String, Value>) -> Result<(), String> {
    let other: Vec<&str> = rule
        .keys()
        .map(String::as_str)
        .filter(|k| !KYVERNO_RULE_KEYS.contains(k))
        .collect();
    if !other.is_empty() {
        return Err(format!(
            "may only validate; refused: {} (a patch rule may hold {})",
            other.join(", "),
            KYVERNO_RULE_KEYS.join(", ")
        ));
    }
    if !rule.get("validate").is_some_and(Value::is_object) {
        return Err("must validate (a `validate` object)".to_owned());
    }
    Ok(())
}

fn prepend_precondition(rule: &mut Map<String, Value>, condition: Value) -> Result<(), String> {
    let preconditions = rule.entry("preconditions").or_insert_with(|| json!({}));
    if preconditions.is_null() {
        *preconditions = json!({});
    }
    let all = match preconditions {
        Value::Array(list) => list,
        Value::Object(blocks) => {
            let all = blocks.entry("all").or_insert_with(|| json!([]));
            if all.is_null() {
                *all = json!([]);
            }
            all.as_array_mut()
                .ok_or("preconditions.all must be a list")?
        }
        _ => return Err("preconditions must be an object".into()),
    };
    all.insert(0, condition);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::id::VIRTUAL_PATCH as INTENT;
    use crate::engines::KYVERNO_NAMESPACED_GENERATING_POLICY;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use nimbus_api::{NimbusPolicy, NimbusPolicySpec, NimbusRule, Rule as ApiRule};
    use std::collections::BTreeMap;

    /// The virtual-patch database every test of the workspace uses.
    const VP: &str = include_str!("../../../tests/fixtures/virtual-patch-db.json");

    fn np(cves: &[&str], action: &str) -> NimbusPolicy {
        let mut np = NimbusPolicy::new(
            "vp-binding",
            NimbusPolicySpec {
                selector: LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                    match_expressions: None,
                },
                rules: vec![NimbusRule {
                    id: INTENT.into(),
                    type_: None,
                    description: Some("Patch CVEs".into()),
                    rule: ApiRule {
                        action: action.into(),
                        params: Some(
                            [(
                                "cveList".to_owned(),
                                cves.iter().map(|c| c.to_string()).collect(),
                            )]
                            .into(),
                        ),
                    },
                }],
            },
        );
        np.metadata.namespace = Some("shop".into());
        np.metadata.uid = Some("uid-np".into());
        np
    }

    fn env_with(json: &str) -> Environment {
        let data: BTreeMap<String, String> = [(DATABASE_KEY.to_owned(), json.to_owned())].into();
        Environment {
            virtual_patches: from_config_map("nimbus/vp-db", Some(&data)),
            ..Environment::default()
        }
    }

    type Objects = Vec<(&'static NativeKind, DynamicObject)>;

    fn run(np: &NimbusPolicy, env: &Environment) -> (Result<Objects, Problem>, Vec<Problem>) {
        let policy = PolicyInput::namespaced(np, "uid-1");
        let rule = Rule {
            spec: &np.spec.rules[0],
            key: "virtualpatch",
        };
        match translate(&policy, &rule, env) {
            Ok(emitted) => (Ok(emitted.objects), emitted.warnings),
            Err(e) => (Err(e), Vec::new()),
        }
    }

    fn objects(np: &NimbusPolicy, env: &Environment) -> Vec<Value> {
        let (out, warnings) = run(np, env);
        assert_eq!(warnings, vec![]);
        out.unwrap()
            .into_iter()
            .map(|(kind, o)| {
                assert_eq!(kind, &KYVERNO_POLICY);
                serde_json::to_value(o).unwrap()
            })
            .collect()
    }

    fn names(values: &[Value]) -> Vec<&str> {
        values
            .iter()
            .map(|v| v["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn audit_action_and_full_selector() {
        let mut np = np(&["CVE-2024-4439"], "Audit");
        np.spec.selector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
        }))
        .unwrap();
        let got = objects(&np, &env_with(VP));
        let selector = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
        });
        for o in &got {
            assert_eq!(o["spec"]["validationFailureAction"], "Audit");
            assert_eq!(
                o["spec"]["rules"][0]["match"]["any"][0]["resources"]["selector"],
                selector
            );
        }
        // The NetworkPolicy takes the whole selector; KubeArmor selects by labels only.
        assert_eq!(
            got[2]["spec"]["rules"][0]["generate"]["data"]["spec"]["podSelector"],
            selector
        );
        assert_eq!(
            got[0]["spec"]["rules"][0]["generate"]["data"]["spec"]["selector"],
            json!({"matchLabels": {"app": "web", "kubearmor.io/container.name": "{{ containerName }}"}})
        );
    }

    #[test]
    fn a_cve_under_two_images_gets_distinct_names() {
        let db = json!([
            {"image": "a:1", "cves": [{"cve": "CVE-2024-0001", "virtual_patch": [
                {"netpol": {"metadata": {"name": "n-a"}, "spec": {}}}
            ]}]},
            {"image": "b:1", "cves": [{"cve": "CVE-2024-0001", "virtual_patch": [
                {"netpol": {"metadata": {"name": "n-b"}, "spec": {}},
                 "karmor": {"metadata": {"name": "k-b"}, "spec": {}}}
            ]}]},
        ]);
        let np = np(&["CVE-2024-0001"], "Block");
        let got = objects(&np, &env_with(&db.to_string()));
        assert_eq!(
            names(&got),
            [
                "vp-binding-cve-2024-0001-netpol-1",
                "vp-binding-cve-2024-0001-karmor-1",
                "vp-binding-cve-2024-0001-netpol-2",
            ]
        );
        assert_eq!(
            got[2]["spec"]["rules"][0]["preconditions"]["all"][0]["key"],
            "b:1"
        );
    }

    #[test]
    fn unknown_cves_are_a_non_blocking_problem_and_the_others_are_patched() {
        let np = np(
            &["CVE-2099-0001", "CVE-2024-4439", "CVE-2099-0002"],
            "Block",
        );
        let (out, warnings) = run(&np, &env_with(VP));
        assert_eq!(
            names(
                &out.unwrap()
                    .into_iter()
                    .map(|(_, o)| serde_json::to_value(o).unwrap())
                    .collect::<Vec<_>>()
            ),
            [
                "vp-binding-cve-2024-4439-karmor-1",
                "vp-binding-cve-2024-4439-kyverno-1",
                "vp-binding-cve-2024-4439-netpol-1",
            ]
        );
        assert_eq!(
            warnings,
            vec![Problem {
                intent: INTENT.into(),
                reason: REASON_ENGINE_NOT_READY,
                message: "no virtual patch known for CVE-2099-0001, CVE-2099-0002".into(),
                blocking: false,
            }]
        );
    }

    #[test]
    fn only_unknown_cves_leave_the_intent_unenforced() {
        let np = np(&["CVE-2099-0001"], "Block");
        let (out, warnings) = run(&np, &env_with(VP));
        let problem = out.unwrap_err();
        assert!(problem.blocking);
        assert_eq!(problem.message, "no virtual patch known for CVE-2099-0001");
        assert_eq!(warnings, vec![]);
    }

    #[test]
    fn database_problems_block() {
        let np = np(&["CVE-2024-4439"], "Block");
        let problem = |env: &Environment| {
            let (out, warnings) = run(&np, env);
            assert_eq!(warnings, vec![]);
            let p = out.unwrap_err();
            assert!(p.blocking);
            assert_eq!(p.reason, REASON_ENGINE_NOT_READY);
            assert_eq!(p.intent, INTENT);
            p.message
        };
        assert_eq!(
            problem(&Environment::default()),
            "no virtual-patch database is configured (--virtual-patch-db)"
        );
        let missing = Environment {
            virtual_patches: from_config_map("nimbus/vp-db", None),
            ..Environment::default()
        };
        assert_eq!(problem(&missing), "ConfigMap nimbus/vp-db not found");
        let no_key = Environment {
            virtual_patches: from_config_map("nimbus/vp-db", Some(&BTreeMap::new())),
            ..Environment::default()
        };
        assert_eq!(
            problem(&no_key),
            "ConfigMap nimbus/vp-db has no key vp.json"
        );
        assert_eq!(
            problem(&env_with("[\n  {\"image\": \"x\",}\n]")),
            "ConfigMap nimbus/vp-db: vp.json is not a valid virtual-patch database: \
             trailing comma at line 2 column 17"
        );
        let wrong_shape = problem(&env_with(r#"{"image": "x"}"#));
        assert!(
            wrong_shape.contains("invalid type: map, expected a sequence at line 1 column 0"),
            "{wrong_shape}"
        );
    }

    #[test]
    fn parses_leniently() {
        let VirtualPatches::Database(db) = env_with(VP).virtual_patches else {
            panic!("not parsed");
        };
        assert_eq!(db.source, "nimbus/vp-db");
        assert_eq!(db.images.len(), 1);
        assert_eq!(db.images[0].cves[0].virtual_patch.len(), 3);
        assert_eq!(
            env_with(r#"[{"image": "x"}]"#).virtual_patches,
            VirtualPatches::Database(Database {
                images: vec![Image {
                    image: "x".into(),
                    cves: vec![]
                }],
                source: "nimbus/vp-db".into(),
            })
        );
    }

    #[test]
    fn kyverno_patch_without_preconditions() {
        let db = json!([{"image": "a:1", "cves": [{"cve": "CVE-2024-0001", "virtual_patch": [
            {"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": [
                {"name": "r1", "validate": {}},
                {"name": "r2", "validate": {}, "preconditions": [{"key": "k", "operator": "Equals", "value": "v"}]},
                {"name": "r3", "validate": {}, "preconditions": {"any": [{"key": "k", "operator": "Equals", "value": "v"}]}},
            ]}}}
        ]}]}]);
        let np = np(&["CVE-2024-0001"], "Block");
        let got = objects(&np, &env_with(&db.to_string()));
        let cond = json!({"key": "a:1", "operator": "AnyIn",
                          "value": "{{ request.object.spec.containers[].image }}"});
        let rules = &got[0]["spec"]["rules"][0]["generate"]["data"]["spec"]["rules"];
        assert_eq!(rules[0]["preconditions"], json!({"all": [cond]}));
        assert_eq!(
            rules[1]["preconditions"],
            json!([cond, {"key": "k", "operator": "Equals", "value": "v"}])
        );
        assert_eq!(
            rules[2]["preconditions"],
            json!({"all": [cond], "any": [{"key": "k", "operator": "Equals", "value": "v"}]})
        );
        for rule in rules.as_array().unwrap() {
            assert_eq!(
                rule["match"],
                json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "web"}}}}]})
            );
        }
    }

    #[test]
    fn malformed_patches_are_reported_and_skipped() {
        let db = json!([{"image": "a:1", "cves": [{"cve": "CVE-2024-0001", "virtual_patch": [
            {"kyverno": {"metadata": {"name": "p"}, "spec": {}}},
            {"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": [{"validate": {}, "preconditions": {"all": "x"}}]}}},
            {"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": [{"name": "nothing"}]}}},
            {"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": ["x"]}}},
            {"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": [{"name": "grant", "generate": {
                "kind": "RoleBinding", "name": "x", "data": {"roleRef": {"name": "cluster-admin"}}}}]}}},
            {"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": [{"name": "m", "validate": {},
                "mutate": {}, "context": [{"name": "c", "apiCall": {"urlPath": "/api/v1/secrets"}}]}]}}},
            {"karmor": {"spec": {}}},
            {"netpol": "x"},
            {"netpol": {"metadata": {"name": "ok"}, "spec": {}}},
        ]}]}]);
        let np = np(&["CVE-2024-0001"], "Block");
        let (out, warnings) = run(&np, &env_with(&db.to_string()));
        let out = out.unwrap();
        assert_eq!(out.len(), 1);
        // The numbering counts the skipped patches, so fixing one renames nothing.
        assert_eq!(
            serde_json::to_value(&out[0].1).unwrap()["metadata"]["name"],
            "vp-binding-cve-2024-0001-netpol-2"
        );
        let messages: Vec<_> = warnings
            .iter()
            .inspect(|w| assert!(!w.blocking))
            .map(|w| w.message.as_str())
            .collect();
        let prefix = "virtual-patch database nimbus/vp-db: CVE-2024-0001, image a:1: unusable";
        let allowed = "(a patch rule may hold name, match, exclude, preconditions, validate, skipBackgroundRequests)";
        assert_eq!(
            messages,
            [
                format!("{prefix} kyverno patch: spec.rules must be a non-empty list"),
                format!("{prefix} kyverno patch: spec.rules[0].preconditions.all must be a list"),
                format!(
                    "{prefix} kyverno patch: spec.rules[0] must validate (a `validate` object)"
                ),
                format!("{prefix} kyverno patch: spec.rules[0] must be an object"),
                format!(
                    "{prefix} kyverno patch: spec.rules[0] may only validate; refused: generate {allowed}"
                ),
                format!(
                    "{prefix} kyverno patch: spec.rules[0] may only validate; refused: context, mutate {allowed}"
                ),
                format!("{prefix} karmor patch: metadata must be an object"),
                format!("{prefix} netpol patch: not a JSON object"),
            ]
        );
    }

    #[test]
    fn cluster_policies_and_empty_cve_lists_generate_nothing() {
        let np = np(&[], "Block");
        let (out, warnings) = run(&np, &env_with(VP));
        assert_eq!(out.unwrap().len(), 0);
        assert_eq!(warnings, vec![]);

        let np = self::np(&["CVE-2024-4439"], "Block");
        let mut policy = PolicyInput::namespaced(&np, "uid-1");
        policy.namespace = None;
        let rule = Rule {
            spec: &np.spec.rules[0],
            key: "virtualpatch",
        };
        assert_eq!(
            translate(&policy, &rule, &Environment::default())
                .map(|e| e.objects)
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn a_second_virtual_patch_rule_gets_its_own_names_and_duplicates_count_once() {
        let np = np(&["CVE-2024-4439", "CVE-2024-4439"], "Block");
        let policy = PolicyInput::namespaced(&np, "uid-1");
        let rule = Rule {
            spec: &np.spec.rules[0],
            key: "virtualpatch-2",
        };
        let got: Vec<Value> = translate(&policy, &rule, &env_with(VP))
            .map(|e| e.objects)
            .unwrap()
            .into_iter()
            .map(|(_, o)| serde_json::to_value(o).unwrap())
            .collect();
        assert_eq!(
            names(&got),
            [
                "vp-binding-virtualpatch-2-cve-2024-4439-karmor-1",
                "vp-binding-virtualpatch-2-cve-2024-4439-kyverno-1",
                "vp-binding-virtualpatch-2-cve-2024-4439-netpol-1",
            ]
        );
    }

    /// In the CEL kinds, a Kyverno patch (a legacy `Policy`) needs that kind served; without
    /// it the other patches are generated, and the intent says what is missing.
    #[test]
    fn a_kyverno_patch_needs_the_legacy_policy_kind_served() {
        let cel = |json: &str, legacy_served: bool| Environment {
            kyverno: KyvernoApi::Cel,
            kyverno_legacy_served: legacy_served,
            ..env_with(json)
        };
        let not_served = "virtual-patch database nimbus/vp-db: CVE-2024-4439, image nginx:latest: \
                          kyverno patch not generated: it is a Kyverno Policy (kyverno.io/v1), \
                          which the API server does not serve";
        let np = np(&["CVE-2024-4439"], "Block");
        let (out, warnings) = run(&np, &cel(VP, false));
        let out = out.unwrap();
        assert!(
            out.iter()
                .all(|(kind, _)| *kind == &KYVERNO_NAMESPACED_GENERATING_POLICY)
        );
        let got: Vec<Value> = out
            .into_iter()
            .map(|(_, o)| serde_json::to_value(o).unwrap())
            .collect();
        assert_eq!(
            names(&got),
            [
                "vp-binding-cve-2024-4439-karmor-1",
                "vp-binding-cve-2024-4439-netpol-1"
            ]
        );
        assert_eq!(
            warnings,
            vec![Problem {
                intent: INTENT.into(),
                reason: REASON_ENGINE_NOT_INSTALLED,
                message: not_served.into(),
                blocking: false,
            }]
        );
        let (out, _) = run(&np, &cel(VP, true));
        assert_eq!(out.unwrap().len(), 3);

        // Nothing else to generate: the intent is not enforced, for want of the kind.
        let only_kyverno = json!([{"image": "nginx:latest", "cves": [{"cve": "CVE-2024-4439",
            "virtual_patch": [{"kyverno": {"metadata": {"name": "p"}, "spec": {"rules": [
                {"name": "r", "validate": {}}]}}}]}]}]);
        let (out, _) = run(&np, &cel(&only_kyverno.to_string(), false));
        assert_eq!(
            out.unwrap_err(),
            Problem {
                intent: INTENT.into(),
                reason: REASON_ENGINE_NOT_INSTALLED,
                message: not_served.into(),
                blocking: true,
            }
        );
    }
}
