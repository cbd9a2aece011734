//! Files other projects publish that tests, benchmarks and `nimbus dev` install: the engines'
//! CRDs, vendored unmodified under `upstream/` (see its README for versions and blob ids) and
//! compiled in, so that a built binary needs no source tree.

use crate::{Error, apply_yaml};
use kube::Client;

/// One upstream CustomResourceDefinition manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineCrd {
    /// File name under `upstream/<engine>/`.
    pub file: &'static str,
    pub yaml: &'static str,
}

macro_rules! engine_crd {
    ($engine:literal, $file:literal) => {
        EngineCrd {
            file: $file,
            yaml: include_str!(concat!("../../../upstream/", $engine, "/", $file)),
        }
    };
}

pub const KUBEARMOR_POLICY: EngineCrd = engine_crd!("kubearmor", "kubearmor_KubeArmorPolicy.yaml");
pub const KUBEARMOR_CLUSTER_POLICY: EngineCrd =
    engine_crd!("kubearmor", "kubearmor_KubeArmorClusterPolicy.yaml");
pub const KUBEARMOR_HOST_POLICY: EngineCrd =
    engine_crd!("kubearmor", "kubearmor_KubeArmorHostPolicy.yaml");
pub const KYVERNO_POLICY: EngineCrd = engine_crd!("kyverno", "kyverno.io_policies.yaml");
pub const KYVERNO_CLUSTER_POLICY: EngineCrd =
    engine_crd!("kyverno", "kyverno.io_clusterpolicies.yaml");
/// What the Kyverno engine honours SecurityIntentExceptions with.
pub const KYVERNO_POLICY_EXCEPTION: EngineCrd =
    engine_crd!("kyverno", "kyverno.io_policyexceptions.yaml");
/// Kyverno's reports of its background scans, which the posture's preview reads (and writes
/// its own as, where OpenReports are not served).
pub const POLICY_REPORT: EngineCrd = engine_crd!("kyverno", "wgpolicyk8s.io_policyreports.yaml");
/// OpenReports' namespaced report, which the posture is written as.
pub const OPEN_REPORT: EngineCrd = engine_crd!("openreports", "openreports.io_reports.yaml");

/// network-policy-api's ClusterNetworkPolicy (v1alpha2 served, v1beta1 stored), which the
/// clusternetworkpolicy engine writes.
pub const CLUSTER_NETWORK_POLICY: EngineCrd = engine_crd!(
    "network-policy-api",
    "policy.networking.k8s.io_clusternetworkpolicies.yaml"
);

/// Every vendored engine CRD.
pub const ENGINE_CRDS: [EngineCrd; 9] = [
    KUBEARMOR_POLICY,
    KUBEARMOR_CLUSTER_POLICY,
    KUBEARMOR_HOST_POLICY,
    KYVERNO_POLICY,
    KYVERNO_CLUSTER_POLICY,
    KYVERNO_POLICY_EXCEPTION,
    POLICY_REPORT,
    OPEN_REPORT,
    CLUSTER_NETWORK_POLICY,
];

impl EngineCrd {
    /// The CRD's name (`<plural>.<group>`), as its manifest says (empty if it says none).
    pub fn name(&self) -> String {
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(self.yaml)
            .ok()
            .and_then(|crd| crd["metadata"]["name"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Creates or updates the CRD and waits until it is established.
    pub async fn install(&self, client: &Client) -> Result<(), Error> {
        apply_yaml(client, self.yaml).await.map(drop)
    }
}

/// Installs every engine CRD.
pub async fn install_engine_crds(client: &Client) -> Result<(), Error> {
    for crd in ENGINE_CRDS {
        crd.install(client).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendored_engine_crd_is_compiled_in() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../upstream");
        let mut on_disk: Vec<String> =
            ["kubearmor", "kyverno", "openreports", "network-policy-api"]
                .iter()
                .flat_map(|engine| std::fs::read_dir(root.join(engine)).expect("upstream dir"))
                .map(|entry| {
                    entry
                        .expect("entry")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = ENGINE_CRDS.iter().map(|c| c.file.to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
        for crd in ENGINE_CRDS {
            let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(crd.yaml).expect(crd.file);
            assert_eq!(
                doc["kind"].as_str(),
                Some("CustomResourceDefinition"),
                "{}",
                crd.file
            );
        }
    }
}
