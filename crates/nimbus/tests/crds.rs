//! The committed generated files (CRDs, admission policies, engine RBAC, the book's reference
//! pages) are exactly what the code generates.

#[test]
fn committed_crds_match_the_generated_ones() {
    let generated = nimbus_api::crds_yaml().expect("CRDs render");
    assert!(
        repo_file("config/crd/nimbus.yaml") == generated,
        "config/crd/nimbus.yaml is stale: run `make crds`"
    );
}

/// Open Cluster Management's framework addon syncs a policy template only when its kind's CRD
/// carries the policy-type label: what users write (intents and bindings) does, what the
/// operator generates (policies) and exceptions (granted on the cluster) do not.
#[test]
fn intents_and_bindings_are_ocm_policy_templates() {
    use nimbus_core::fleet::{POLICY_TYPE_LABEL, POLICY_TYPE_TEMPLATE};
    let templates: Vec<String> = nimbus_api::crds()
        .into_iter()
        .filter(|crd| {
            let labels = crd.metadata.labels.as_ref();
            labels
                .and_then(|l| l.get(POLICY_TYPE_LABEL))
                .map(String::as_str)
                == Some(POLICY_TYPE_TEMPLATE)
        })
        .map(|crd| crd.spec.names.kind)
        .collect();
    assert_eq!(
        templates,
        [
            "SecurityIntent",
            "SecurityIntentBinding",
            "ClusterSecurityIntentBinding"
        ]
    );
}

/// The committed admission policies (and the chart's copies) are what the catalog generates.
#[test]
fn committed_admission_policies_match_the_catalog() {
    for (args, paths) in [
        (
            ["admission-policy"].as_slice(),
            [
                "config/admission/intent-catalog.yaml",
                "charts/nimbus/files/admission.yaml",
            ],
        ),
        (
            ["admission-policy", "--sensitive-intents"].as_slice(),
            [
                "config/admission/sensitive-intents.yaml",
                "charts/nimbus/files/sensitive-intents.yaml",
            ],
        ),
        (
            ["admission-policy", "--intent-author"].as_slice(),
            [
                "config/admission/intent-author.yaml",
                "charts/nimbus/files/intent-author.yaml",
            ],
        ),
        (
            ["admission-policy", "--exception-requester"].as_slice(),
            [
                "config/admission/exception-requester.yaml",
                "charts/nimbus/files/exception-requester.yaml",
            ],
        ),
        (
            ["admission-policy", "--exception-approval"].as_slice(),
            [
                "config/admission/exception-approval.yaml",
                "charts/nimbus/files/exception-approval.yaml",
            ],
        ),
    ] {
        let generated = nimbus_stdout(args);
        for path in paths {
            assert!(
                repo_file(path) == generated,
                "{path} is stale: run `make crds`"
            );
        }
    }
}

/// The chart grants each engine exactly the rules its registration implies.
#[test]
fn committed_engine_rbac_matches_the_registration() {
    let path = "charts/nimbus/files/engine-rbac.yaml";
    assert!(
        repo_file(path) == nimbus_stdout(&["engine-rbac"]),
        "{path} is stale: run `make crds`"
    );
}

/// The book's reference pages (docs/src/reference/) are what `make docs-reference` writes.
#[test]
fn committed_reference_pages_match_the_generated_ones() {
    let stale: Vec<String> = ["cli", "crds", "intents"]
        .into_iter()
        .map(|page| (format!("docs/src/reference/{page}.md"), page))
        .filter(|(path, page)| repo_file(path) != nimbus_stdout(&["docs-reference", page]))
        .map(|(path, _)| path)
        .collect();
    assert!(
        stale.is_empty(),
        "stale: {}: run `make docs-reference`",
        stale.join(", ")
    );
}

/// What `nimbus <args>` prints, which must succeed.
fn nimbus_stdout(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running nimbus {}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "nimbus {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn crds_print_every_kind_with_its_short_name_and_scope() {
    let crds = nimbus_api::crds();
    let summary: Vec<_> = crds
        .iter()
        .map(|c| {
            (
                c.spec.names.kind.as_str(),
                c.spec.names.short_names.clone().unwrap_or_default(),
                c.spec.scope.as_str(),
            )
        })
        .collect();
    let expect = |k, s: &str, scope| (k, vec![s.to_owned()], scope);
    assert_eq!(
        summary,
        vec![
            expect("SecurityIntent", "si", "Cluster"),
            expect("SecurityIntentBinding", "sib", "Namespaced"),
            expect("ClusterSecurityIntentBinding", "csib", "Cluster"),
            expect("NimbusPolicy", "np", "Namespaced"),
            expect("ClusterNimbusPolicy", "cwnp", "Cluster"),
            expect("SecurityIntentException", "siex", "Namespaced"),
            expect("ClusterSecurityIntentException", "csiex", "Cluster"),
        ]
    );
}

/// Names, scope, printer columns and required status fields match the original Nimbus CRDs.
#[test]
fn crds_are_compatible_with_the_original_nimbus_crds() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceColumnDefinition, CustomResourceDefinition,
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../upstream/nimbus/crds");
    // Nimbus's kinds; the exceptions are ours.
    let nimbus = nimbus_api::crds()
        .into_iter()
        .filter(|c| c.spec.group == nimbus_api::GROUP);
    for ours in nimbus {
        let name = ours.metadata.name.clone().expect("named");
        let path = format!("{dir}/{name}.yaml").replacen(
            &name,
            &format!("intent.security.nimbus.com_{}", ours.spec.names.plural),
            1,
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("the original CRD {path} is vendored in the repository: {e}")
        });
        let original: CustomResourceDefinition =
            serde_yaml_ng::from_str(&text).expect("original CRD parses");
        assert_eq!(ours.spec.group, original.spec.group);
        let mut names = ours.spec.names.clone();
        // The apiserver defaults listKind to `<kind>List`, which is what the original spells out.
        names
            .list_kind
            .get_or_insert_with(|| format!("{}List", names.kind));
        assert_eq!(names, original.spec.names, "{name}: names");
        assert_eq!(ours.spec.scope, original.spec.scope, "{name}: scope");
        let (v, o) = (&ours.spec.versions[0], &original.spec.versions[0]);
        assert_eq!(
            (&v.name, v.served, v.storage),
            (&o.name, o.served, o.storage)
        );
        // Every column of the original (ours may show by default what the original kept for
        // `-o wide`), and of ours only the additions of a strict superset: every kind's
        // `Ready` condition, and a binding's mode.
        let columns = |c: &Option<Vec<CustomResourceColumnDefinition>>| {
            let mut c: Vec<_> = c
                .iter()
                .flatten()
                .map(|c| (c.name.clone(), c.json_path.clone(), c.type_.clone()))
                .collect();
            c.sort();
            c
        };
        let mode = (
            "Mode".to_owned(),
            ".status.mode".to_owned(),
            "string".to_owned(),
        );
        let ready = (
            "Ready".to_owned(),
            r#".status.conditions[?(@.type=="Ready")].status"#.to_owned(),
            "string".to_owned(),
        );
        let mut ours = columns(&v.additional_printer_columns);
        assert!(ours.contains(&ready), "{name}: the Ready column");
        ours.retain(|c| *c != ready);
        if name.contains("securityintentbindings") {
            assert!(ours.contains(&mode), "{name}: the Mode column");
            ours.retain(|c| *c != mode);
        }
        assert_eq!(
            ours,
            columns(&o.additional_printer_columns),
            "{name}: printer columns"
        );
        assert_eq!(v.subresources, o.subresources, "{name}: subresources");
        let required = |crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            let schema = serde_json::to_value(&crd.schema).expect("json");
            let mut r: Vec<String> = serde_json::from_value(schema["openAPIV3Schema"]["properties"]["status"]["required"].clone()).unwrap_or_default();
            r.sort();
            r
        };
        assert_eq!(required(v), required(o), "{name}: required status fields");
    }
}

/// `kubectl get si` answers "which intent, enforced how" without `-o wide`.
#[test]
fn security_intents_list_their_id_and_action() {
    let crd = nimbus_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "SecurityIntent")
        .expect("SecurityIntent CRD");
    let columns: Vec<(String, Option<i32>)> = crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.priority))
        .collect();
    for wanted in ["ID", "Action"] {
        assert!(
            columns
                .iter()
                .any(|(name, priority)| name == wanted && priority.unwrap_or(0) == 0),
            "{wanted} is not a default column: {columns:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Lists of engines kept outside the code, checked against the engines' registration
// (`nimbus_core::engines!`): each failure names the engine to add.
// ---------------------------------------------------------------------------------------------

fn registered_engines() -> Vec<&'static str> {
    nimbus_core::catalog::Engine::ALL
        .iter()
        .map(|e| e.name())
        .collect()
}

fn repo_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The names in `listed` that are not registered engines, and the registered engines it
/// lacks, as one message per name (empty when they are the same).
fn engine_list_differences(listed: &[String], extra_allowed: &[&str], what: &str) -> Vec<String> {
    let registered = registered_engines();
    let missing = registered
        .iter()
        .filter(|e| !listed.iter().any(|l| l == *e))
        .map(|e| format!("{what} does not list engine `{e}`"));
    let unknown = listed
        .iter()
        .filter(|l| !registered.contains(&l.as_str()) && !extra_allowed.contains(&l.as_str()))
        .map(|l| format!("{what} lists `{l}`, which is not a registered engine"));
    missing.chain(unknown).collect()
}

#[test]
fn engine_list_differences_name_each_engine() {
    let registered: Vec<String> = registered_engines().iter().map(|e| e.to_string()).collect();
    assert!(engine_list_differences(&registered, &[], "list").is_empty());
    let without_k8tls: Vec<String> = registered
        .iter()
        .filter(|e| *e != "k8tls")
        .cloned()
        .collect();
    assert_eq!(
        engine_list_differences(&without_k8tls, &[], "list"),
        ["list does not list engine `k8tls`"]
    );
    let mut with_extra = registered.clone();
    with_extra.extend(["preference".to_owned(), "falco".to_owned()]);
    assert_eq!(
        engine_list_differences(&with_extra, &["preference"], "list"),
        ["list lists `falco`, which is not a registered engine"]
    );
}

/// The chart's values, their schema and its README have one entry per registered engine.
#[test]
fn the_chart_lists_every_registered_engine() {
    let mut problems = Vec::new();
    let values: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&repo_file("charts/nimbus/values.yaml")).expect("values parse");
    let in_values: Vec<String> = values["engines"]
        .as_mapping()
        .expect("values.yaml has engines")
        .keys()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    problems.extend(engine_list_differences(
        &in_values,
        &["preference"],
        "charts/nimbus/values.yaml `engines`",
    ));
    let schema: serde_json::Value =
        serde_json::from_str(&repo_file("charts/nimbus/values.schema.json")).expect("schema");
    let engines = &schema["properties"]["engines"];
    let required: Vec<String> = engines["required"]
        .as_array()
        .expect("engines.required")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    problems.extend(engine_list_differences(
        &required,
        &["preference"],
        "charts/nimbus/values.schema.json `engines.required`",
    ));
    let properties: Vec<String> = engines["properties"]
        .as_object()
        .expect("engines.properties")
        .keys()
        .cloned()
        .collect();
    problems.extend(engine_list_differences(
        &properties,
        &["preference"],
        "charts/nimbus/values.schema.json `engines.properties`",
    ));
    let readme = repo_file("charts/nimbus/README.md");
    let in_readme = readme
        .lines()
        .find_map(|line| {
            let rest = line.split_once("`engines.<")?.1;
            Some(
                rest.split_once('>')?
                    .0
                    .split("\\|")
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            )
        })
        .expect("charts/nimbus/README.md documents `engines.<name|...>.enabled`");
    problems.extend(engine_list_differences(
        &in_readme,
        &[],
        "charts/nimbus/README.md `engines.<...>.enabled`",
    ));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every CRD a registered engine writes to is vendored for the tests and `nimbus dev`
/// (`nimbus_testenv::upstream::ENGINE_CRDS`), but Kyverno's CEL kinds: the tests install
/// Kyverno's legacy CRDs, and those of a Kyverno that serves the CEL kinds with it.
#[test]
fn every_engine_crd_is_vendored() {
    use nimbus_core::engines::KyvernoApi;
    let vendored: Vec<String> = nimbus_testenv::upstream::ENGINE_CRDS
        .iter()
        .map(|crd| crd.name())
        .collect();
    let mut missing = Vec::new();
    for engine in nimbus_core::catalog::Engine::ALL {
        for kind in engine.spec().kinds {
            let Some(crd) = kind.crd else { continue };
            if KyvernoApi::Cel.writes().contains(kind) || vendored.iter().any(|v| v == crd) {
                continue;
            }
            missing.push(format!(
                "engine `{engine}` writes {crd}, which nimbus_testenv::upstream::ENGINE_CRDS \
                 does not install: vendor it under upstream/ and list it there"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
