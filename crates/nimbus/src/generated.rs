//! The manifests generated from the code (`make crds` commits them).

use anyhow::Context as _;
use nimbus_core::catalog::Engine;
use std::collections::BTreeMap;

/// Every engine's RBAC rules by engine name, as the Helm chart reads them.
pub fn engine_rbac_yaml() -> anyhow::Result<String> {
    let permissions: BTreeMap<&str, _> = Engine::ALL
        .into_iter()
        .map(|e| (e.name(), e.spec().permissions()))
        .collect();
    let yaml = serde_yaml_ng::to_string(&permissions).context("rendering the engines' RBAC")?;
    Ok(format!(
        "# Generated from the engines' registration (nimbus_core::engines) by `make crds`; do \
         not edit.\n{yaml}"
    ))
}

/// Admission policies and their bindings, as multi-document YAML.
pub fn admission_policy_yaml(
    objects: impl IntoIterator<Item = serde_json::Value>,
) -> anyhow::Result<String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&object).context("rendering the admission policy")?);
    }
    Ok(out)
}
