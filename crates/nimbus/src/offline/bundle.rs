//! `nimbus bundle`: a compliance bundle's SecurityIntents and binding, to apply or to compare
//! with the live ones.

use super::{Format, render};

/// `nimbus bundle`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["namespace", "cluster"])))]
pub struct BundleArgs {
    /// The bundle (`nimbus frameworks` lists them).
    name: String,
    /// Bind it in this namespace (a SecurityIntentBinding).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Bind it in these namespaces (comma-separated, `*` for all) through a
    /// ClusterSecurityIntentBinding.
    #[arg(long, value_delimiter = ',')]
    cluster: Option<Vec<String>>,
    /// Only workloads with these labels (`k=v`, repeatable); all when absent.
    #[arg(long, short = 'l', value_parser = parse_label)]
    selector: Vec<(String, String)>,
    /// Print nothing to apply: compare the bundle's SecurityIntents with the live ones (the
    /// current kubeconfig) and exit non-zero when one is missing or acts otherwise (its ID,
    /// action or a parameter's value differs, or it has a parameter the intent does not take).
    #[arg(long)]
    pub check: bool,
    /// Print instead an Open Cluster Management Policy `NAMESPACE/NAME` for a hub, carrying
    /// the bundle's SecurityIntents and ClusterSecurityIntentBinding as policy templates (with
    /// --cluster: OCM creates a namespaced template in the cluster namespace only). Bind it to
    /// a Placement to choose the clusters.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_policy, requires = "cluster", conflicts_with_all = ["namespace", "check"])]
    ocm: Option<(String, String)>,
    /// With --ocm: each cluster's binding takes its mode from the label
    /// `intent.security.nimbus.com/mode` of the cluster's ManagedCluster on the hub (`shadow`
    /// on the canaries), an OCM hub template.
    #[arg(long, requires = "ocm")]
    canary: bool,
}

fn parse_policy(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("`{s}` is not NAMESPACE/NAME")),
    }
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not key=value"))?;
    Ok((k.to_owned(), v.to_owned()))
}

/// `nimbus bundle`: the bundle's manifests as YAML; intents the binding kind cannot enforce
/// are named in a comment.
pub fn bundle(args: &BundleArgs) -> anyhow::Result<String> {
    let (b, rendered) = rendered_bundle(args)?;
    let mut out = format!("# Bundle {}: {}\n", b.name, b.summary);
    for (id, why) in &rendered.skipped {
        out.push_str(&format!("# {id} left out: {why}\n"));
    }
    if let Some((namespace, name)) = &args.ocm {
        let policy = nimbus_core::fleet::policy(namespace, name, &rendered.objects, args.canary);
        return Ok(out + &render(&[policy], Format::Yaml)?);
    }
    Ok(out + &render(&rendered.objects, Format::Yaml)?)
}

/// `nimbus bundle --check`: each of the bundle's SecurityIntents against the live one of its
/// name, one line each; `false` when one is missing or differs
/// ([`nimbus_core::compliance::bundles::differences`]).
pub async fn bundle_check(args: &BundleArgs) -> anyhow::Result<bool> {
    use anyhow::Context as _;
    use nimbus_api::SecurityIntent;
    let (b, rendered) = rendered_bundle(args)?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster (kubeconfig or in-cluster config)")?;
    let api: kube::Api<SecurityIntent> = kube::Api::all(client);
    let mut same = true;
    for object in &rendered.objects {
        if object["kind"] != "SecurityIntent" {
            continue;
        }
        let expected: SecurityIntent =
            serde_json::from_value(object.clone()).context("the bundle's own SecurityIntent")?;
        let name = expected.metadata.name.clone().unwrap_or_default();
        let live = api
            .get_opt(&name)
            .await
            .with_context(|| format!("reading SecurityIntent {name}"))?;
        let Some(live) = live else {
            println!("SecurityIntent {name}: missing");
            same = false;
            continue;
        };
        let differences = nimbus_core::compliance::bundles::differences(&expected, &live);
        if differences.is_empty() {
            println!("SecurityIntent {name}: as in bundle {}", b.name);
        } else {
            same = false;
            println!(
                "SecurityIntent {name}: differs from bundle {}: {}",
                b.name,
                differences.join("; ")
            );
        }
    }
    Ok(same)
}

/// The bundle `args` name, rendered for their scope.
fn rendered_bundle(
    args: &BundleArgs,
) -> anyhow::Result<(
    &'static nimbus_core::compliance::bundles::Bundle,
    nimbus_core::compliance::bundles::Rendered,
)> {
    use nimbus_core::compliance::bundles;
    let Some(b) = bundles::bundle(&args.name) else {
        let known: Vec<_> = bundles::BUNDLES.iter().map(|b| b.name).collect();
        anyhow::bail!(
            "unknown bundle `{}` (known: {})",
            args.name,
            known.join(", ")
        );
    };
    let scope = match (&args.namespace, &args.cluster) {
        (Some(ns), _) => bundles::Scope::Namespace(ns.clone()),
        (None, Some(names)) => bundles::Scope::Cluster(names.clone()),
        (None, None) => anyhow::bail!("give --namespace or --cluster"),
    };
    let selector = args.selector.iter().cloned().collect();
    Ok((b, bundles::render(b, &scope, &selector)))
}
