//! The committed CRDs are exactly what the code generates.

#[test]
fn committed_crds_match_the_generated_ones() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/crd/nimbus.yaml");
    let committed = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let generated = nimbus_api::crds_yaml().expect("CRDs render");
    assert!(
        committed == generated,
        "config/crd/nimbus.yaml is stale: run `make crds`"
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
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
            .args(args)
            .output()
            .expect("running nimbus admission-policy");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let generated = String::from_utf8(out.stdout).expect("UTF-8");
        for path in paths {
            let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
            let committed =
                std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {path}: {e}"));
            assert!(committed == generated, "{path} is stale: run `make crds`");
        }
    }
}

/// The chart grants each engine exactly the rules its registration implies.
#[test]
fn committed_engine_rbac_matches_the_registration() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .arg("engine-rbac")
        .output()
        .expect("running nimbus engine-rbac");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = "charts/nimbus/files/engine-rbac.yaml";
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    let committed =
        std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert!(
        committed.as_bytes() == out.stdout.as_slice(),
        "{path} is stale: run `make crds`"
    );
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
    for ours in nimbus_api::crds() {
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
