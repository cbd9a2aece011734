//! The command line's engine settings, shared by `nimbus run`, `nimbus dev` and the offline
//! commands.

use k8s_openapi::jiff::SignedDuration;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, Preference};
use nimbus_core::exceptions::{Approval, Rules};
use nimbus_core::namespaces::ProtectedNamespaces;

/// Which engines run and what they need.
#[derive(clap::Args)]
pub struct EngineArgs {
    /// Engines not to drive (comma-separated: {engines}), e.g. to leave one to an external
    /// adapter that reads NimbusPolicies.
    #[arg(long, value_delimiter = ',', env = "NIMBUS_DISABLE_ENGINES")]
    disable_engines: Vec<Engine>,
    /// Which of Kyverno's policy APIs to write in: `cel` (policies.kyverno.io/v1
    /// ValidatingPolicy, MutatingPolicy and their namespaced forms, NamespacedGeneratingPolicy
    /// for virtualPatch; Kyverno 1.17+), `legacy`
    /// (kyverno.io/v1 Policy and ClusterPolicy, as Nimbus; Kyverno 1.20 refuses new ones), or
    /// `auto`: the CEL kinds where the cluster serves them, else the legacy ones. A switch
    /// writes the new policies and deletes the old ones once Kyverno reports the new ones ready.
    #[arg(long, default_value_t, env = "NIMBUS_KYVERNO_KINDS")]
    kyverno_kinds: engines::KyvernoKinds,
    /// Which engine writes when several of one mechanism can (comma-separated, first
    /// preferred): Kyverno and admission (Kubernetes' own ValidatingAdmissionPolicy and
    /// MutatingAdmissionPolicy) both enforce at admission. For each kind of policy, the first
    /// one enabled and installed that acts on it writes; the other stands by.
    #[arg(
        long,
        env = "NIMBUS_ENGINE_PREFERENCE",
        default_value = "kyverno,admission"
    )]
    engine_preference: Preference,
    /// Namespace of the k8tls CronJobs (holding the k8tls ServiceAccount and ConfigMaps).
    #[arg(long, default_value = engines::DEFAULT_K8TLS_NAMESPACE)]
    k8tls_namespace: String,
    /// ConfigMap `<namespace>/<name>` holding the virtual-patch database (key `vp.json`).
    #[arg(long, value_parser = parse_object_key)]
    virtual_patch_db: Option<(String, String)>,
    /// Image of the k8tls scanner in assessTLS CronJobs.
    #[arg(long, default_value = engines::DEFAULT_K8TLS_IMAGE)]
    k8tls_image: String,
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Address ranges inside the cluster besides the nodes' pod ranges, which
    /// denyExternalNetworkAccess keeps reachable through the clusternetworkpolicy engine
    /// (comma-separated CIDRs: the Service range, the nodes' addresses).
    #[arg(long, value_delimiter = ',', value_parser = parse_cidr)]
    cluster_networks: Vec<String>,
    /// Namespaces cluster bindings never fan out to, whatever their selector says
    /// (comma-separated; default: kube-system, the operator's namespace from
    /// --leader-elect-namespace or POD_NAMESPACE, and --k8tls-namespace).
    #[arg(long, value_delimiter = ',')]
    protected_namespaces: Option<Vec<String>>,
}

/// What namespaceSandbox intents may grant (shared with the offline commands).
#[derive(clap::Args)]
pub struct SandboxArgs {
    /// The only ClusterRoles namespaceSandbox intents may grant (comma-separated); keep it
    /// equal to the ClusterRoles the operator may `bind`.
    #[arg(long, value_delimiter = ',', default_value = "edit,view")]
    sandbox_cluster_roles: Vec<String>,
}

impl Default for SandboxArgs {
    fn default() -> Self {
        Self {
            sandbox_cluster_roles: vec!["edit".into(), "view".into()],
        }
    }
}

impl SandboxArgs {
    pub fn roles(&self) -> std::collections::BTreeSet<String> {
        self.sandbox_cluster_roles
            .iter()
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty())
            .collect()
    }
}

/// How long a SecurityIntentException may last and whether it must be approved: `nimbus run`
/// honours only those that meet both, the offline commands judge the manifests' exceptions
/// alike.
#[derive(clap::Args)]
pub struct ExceptionArgs {
    /// The longest a SecurityIntentException may last from its creation; one set to expire
    /// later is not honoured.
    #[arg(long, default_value = "30d", value_parser = max_duration)]
    pub exception_max_duration: SignedDuration,
    /// Whether a SecurityIntentException must be approved to be honoured: `optional`, or
    /// `required` (one without the exceptions.security.nimbus.com/approved-by annotation is
    /// not honoured: `NotApproved`).
    #[arg(long, default_value_t)]
    pub exception_approval: Approval,
}

impl ExceptionArgs {
    /// What the operator asks of every exception.
    pub fn rules(&self) -> Rules {
        Rules {
            max_duration: self.exception_max_duration,
            approval: self.exception_approval,
        }
    }
}

impl Default for ExceptionArgs {
    fn default() -> Self {
        Self {
            exception_max_duration: nimbus_core::exceptions::DEFAULT_MAX_DURATION,
            exception_approval: Approval::Optional,
        }
    }
}

/// Why `--exception-max-duration` was refused.
#[derive(Debug, thiserror::Error)]
pub enum MaxDurationError {
    #[error(transparent)]
    Unreadable(#[from] humantime::DurationError),
    #[error("longer than any time can be: {0}")]
    OutOfRange(#[from] k8s_openapi::jiff::Error),
}

/// A duration as `humantime` reads one (`30d`, `12h`), as the operator's other durations are
/// read.
fn max_duration(value: &str) -> Result<SignedDuration, MaxDurationError> {
    Ok(SignedDuration::try_from(humantime::parse_duration(value)?)?)
}

impl EngineArgs {
    /// `operator_namespace`: where the operator runs, when known.
    pub fn apply(&self, config: &mut nimbus_operator::Config, operator_namespace: Option<&str>) {
        config.engines = Engine::ALL
            .into_iter()
            .filter(|e| !self.disable_engines.contains(e))
            .collect();
        config.kyverno_kinds = self.kyverno_kinds;
        config.engine_preference = self.engine_preference.clone();
        config.k8tls_namespace = self.k8tls_namespace.clone();
        config.virtual_patch_db = self.virtual_patch_db.clone();
        config.k8tls_image = self.k8tls_image.clone();
        config.sandbox_cluster_roles = self.sandbox.roles();
        config.cluster_networks = self.cluster_networks.iter().cloned().collect();
        config.protected_namespaces = Some(match &self.protected_namespaces {
            Some(names) => ProtectedNamespaces::new(names),
            None => ProtectedNamespaces::defaults(operator_namespace, &self.k8tls_namespace),
        });
    }
}

/// A CIDR as the API server validates one (`10.96.0.0/12`, `fd00::/108`).
fn parse_cidr(value: &str) -> Result<String, String> {
    let cidr = value.split_once('/').and_then(|(address, prefix)| {
        let bits = match address.parse::<std::net::IpAddr>().ok()? {
            std::net::IpAddr::V4(_) => 32,
            std::net::IpAddr::V6(_) => 128,
        };
        prefix.parse::<u8>().ok().filter(|p| *p <= bits)
    });
    match cidr {
        Some(_) => Ok(value.to_owned()),
        None => Err(format!("`{value}` is not a CIDR (address/prefix length)")),
    }
}

fn parse_object_key(value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("`{value}` is not <namespace>/<name>")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Exceptions {
        #[command(flatten)]
        args: ExceptionArgs,
    }

    #[test]
    fn the_exception_max_duration_defaults_to_the_operator_default_and_reads_humantime() {
        let parse = |args: &[&str]| {
            Exceptions::try_parse_from(std::iter::once("nimbus").chain(args.iter().copied()))
                .map(|e| e.args.exception_max_duration)
        };
        assert_eq!(
            parse(&[]).ok(),
            Some(nimbus_core::exceptions::DEFAULT_MAX_DURATION)
        );
        assert_eq!(
            parse(&["--exception-max-duration", "12h"]).ok(),
            Some(SignedDuration::from_hours(12))
        );
        assert!(parse(&["--exception-max-duration", "soon"]).is_err());
    }

    #[test]
    fn exception_approval_is_optional_unless_required() {
        let parse = |args: &[&str]| {
            Exceptions::try_parse_from(std::iter::once("nimbus").chain(args.iter().copied()))
                .map(|e| e.args.rules().approval)
        };
        assert_eq!(parse(&[]).ok(), Some(Approval::Optional));
        assert_eq!(
            parse(&["--exception-approval", "required"]).ok(),
            Some(Approval::Required)
        );
        assert!(parse(&["--exception-approval", "sometimes"]).is_err());
    }
}
