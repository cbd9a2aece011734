//! `nimbus dev`: the whole product on a throwaway local control plane.

use anyhow::Context as _;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::Discovery;
use nimbus_testenv::{ControlPlane, Options, apply_yaml};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
pub struct DevArgs {
    /// Manifests to apply once the operator runs (a file or a directory of *.yaml).
    #[arg(long, default_value_os_t = crate::repo_root().join("examples"))]
    examples: PathBuf,
    /// Engine CRDs to install (KubeArmor, Kyverno), when the directory exists.
    #[arg(long, default_value_os_t = crate::repo_root().join("../shared/reference/engine-crds"))]
    engine_crds: PathBuf,
    /// Also copy the admin kubeconfig here, for `KUBECONFIG=<path> kubectl ...`.
    #[arg(long, default_value = "nimbus-dev.kubeconfig")]
    kubeconfig: PathBuf,
    /// Stop after printing what exists instead of running until Ctrl-C (for smoke tests).
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    engines: crate::EngineArgs,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    tracing::info!(
        "starting a local control plane (the first run builds it from Go modules: ~10-30 min)"
    );
    let control_plane = ControlPlane::start(Options::default())
        .await
        .context("starting the local control plane")?;
    let client = control_plane.client()?;
    std::fs::copy(control_plane.kubeconfig_path(), &args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;

    apply_yaml(&client, &nimbus_api::crds_yaml()?)
        .await
        .context("installing the Nimbus CRDs")?;
    for file in yaml_files(&args.engine_crds)? {
        apply_yaml(&client, &read(&file)?)
            .await
            .with_context(|| format!("installing engine CRDs from {}", file.display()))?;
    }

    // What the Helm chart installs beside the operator for the k8tls engine.
    let k8tls = crate::repo_root().join("charts/nimbus/files/k8tls/environment.yaml");
    apply_yaml(&client, &read(&k8tls)?)
        .await
        .with_context(|| format!("applying {}", k8tls.display()))?;

    let shutdown = crate::shutdown_on_signal();
    let mut config = nimbus_operator::Config {
        health_addr: Some(([127, 0, 0, 1], 8081).into()),
        ..Default::default()
    };
    args.engines.apply(&mut config, None);
    let operator = tokio::spawn(nimbus_operator::run(
        client.clone(),
        config,
        shutdown.clone(),
    ));

    for file in yaml_files(&args.examples)? {
        apply_yaml(&client, &read(&file)?)
            .await
            .with_context(|| format!("applying {}", file.display()))?;
        tracing::info!(file = %file.display(), "applied");
    }
    // Give the controllers a moment to converge before showing the result.
    tokio::time::sleep(Duration::from_secs(3)).await;
    print_objects(&client).await?;
    println!(
        "\nThe control plane is up. Try:\n  KUBECONFIG={} kubectl get si,sib,csib,np,cwnp -A\n",
        args.kubeconfig.display()
    );

    if args.once {
        shutdown.cancel();
    } else {
        println!("Press Ctrl-C to stop and clean up.");
    }
    operator.await.context("operator task")??;
    drop(control_plane);
    let _ = std::fs::remove_file(&args.kubeconfig);
    Ok(())
}

async fn print_objects(client: &kube::Client) -> anyhow::Result<()> {
    let discovery = Discovery::new(client.clone())
        .filter(&[nimbus_api::GROUP])
        .run()
        .await
        .context("discovering the Nimbus API")?;
    for group in discovery.groups() {
        for (resource, _) in group.recommended_resources() {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let objects = api.list(&Default::default()).await?;
            println!("{} ({}):", resource.plural, objects.items.len());
            for obj in objects {
                let status = obj.data.get("status").cloned().unwrap_or_default();
                let ns = obj.namespace().map(|n| format!("{n}/")).unwrap_or_default();
                println!(
                    "  {ns}{}  status={}",
                    obj.name_any(),
                    serde_json::to_string(&status)?
                );
            }
        }
    }
    Ok(())
}

/// The manifests at `path`; none when it does not exist (the engine CRDs are optional).
fn yaml_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !path.exists() {
        tracing::info!(path = %path.display(), "not found; skipped");
        return Ok(Vec::new());
    }
    crate::offline::manifest_files(path)
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
