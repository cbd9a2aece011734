//! The API server as the judge of what the CLI validates and translates: server-side dry runs
//! (`dryRun=All`: admission and validation run, nothing is stored) on a control plane set up as
//! in production (the Nimbus CRDs, the shipped admission policies, the engines' CRDs).
#![allow(dead_code)] // each user takes a different part

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use nimbus_testenv::{ControlPlane, apply_yaml};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// The shared control plane as production has it, and the kinds it serves.
pub struct Server {
    pub client: Client,
    discovery: Discovery,
}

/// Sets up [`super::cluster`] with the admission policies `config/admission` ships and every
/// engine CRD, and waits until the policies act (the API server compiles them in the
/// background).
pub async fn server() -> (&'static ControlPlane, Server) {
    let cp = super::cluster();
    let client = cp.client().expect("client");
    for file in ["intent-catalog.yaml", "sensitive-intents.yaml"] {
        let path = super::workspace_root().join("config/admission").join(file);
        let yaml = std::fs::read_to_string(&path).expect("the shipped admission policies");
        apply_yaml(&client, &yaml).await.expect("admission policy");
    }
    nimbus_testenv::upstream::install_engine_crds(&client)
        .await
        .expect("engine CRDs");
    let server = Server::discover(client).await;
    let unknown = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": "catalog-probe"},
        "spec": {"intent": {"id": "noSuchIntent", "action": "Block"}},
    });
    nimbus_testenv::eventually(
        "the intent catalog policy in effect",
        super::CONVERGE,
        async |_| {
            server
                .dry_run(&unknown, "default")
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    (cp, server)
}

impl Server {
    /// The kinds `client`'s server serves now (install CRDs first).
    pub async fn discover(client: Client) -> Self {
        let discovery = Discovery::new(client.clone())
            .run()
            .await
            .expect("discovery");
        Server { client, discovery }
    }

    /// The API of `object`'s kind (in `namespace` when the kind is namespaced), and whether it
    /// is.
    fn api(&self, object: &Value, namespace: &str) -> Result<(Api<DynamicObject>, bool), String> {
        let (group, version) = match object["apiVersion"].as_str().unwrap_or_default() {
            gv if gv.contains('/') => gv.split_once('/').unwrap_or_default(),
            v => ("", v),
        };
        let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap_or(""));
        let (resource, caps) = self
            .discovery
            .resolve_gvk(&gvk)
            .ok_or_else(|| format!("{gvk:?} is not served"))?;
        Ok(match caps.scope {
            Scope::Namespaced => (
                Api::namespaced_with(self.client.clone(), namespace, &resource),
                true,
            ),
            Scope::Cluster => (Api::all_with(self.client.clone(), &resource), false),
        })
    }

    /// The object of `object`'s kind and name (in `namespace` when namespaced), as stored.
    pub async fn get(&self, object: &Value, namespace: &str) -> Result<Value, String> {
        let (api, _) = self.api(object, namespace)?;
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let mut stored = serde_json::to_value(api.get(name).await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        stored["kind"] = object["kind"].clone();
        Ok(stored)
    }

    /// What the API server says to creating `object` (in `namespace` when its kind is
    /// namespaced, whatever namespace it names), without storing it: `Err` with the reasons
    /// when it refuses, and when it admits with a warning (the intent catalog's policy warns,
    /// as Nimbus accepted unknown intents: a warning is the server saying something is wrong),
    /// but for the deprecation notice of the object's kind.
    pub async fn dry_run(&self, object: &Value, namespace: &str) -> Result<(), String> {
        self.dry_run_object(object, namespace).await.map(drop)
    }

    /// [`Self::dry_run`], and the object as the server would store it.
    pub async fn dry_run_object(&self, object: &Value, namespace: &str) -> Result<Value, String> {
        let mut object = object.clone();
        let (api, namespaced) = self.api(&object, namespace)?;
        if namespaced {
            object["metadata"]["namespace"] = json!(namespace);
        }
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let request = kube::core::Request::new(api.resource_url())
            .create(&params, serde_json::to_vec(&object).expect("json"))
            .expect("request");
        let response = self
            .client
            .send(request.map(Into::into))
            .await
            .map_err(|e| format!("sending: {e}"))?;
        let status = response.status();
        // A notice that the kind's version is deprecated (Kyverno's v1 policies) is about the
        // kind, not about this object: the one warning that says nothing is wrong with it.
        let deprecated = format!(
            "{} {} is deprecated",
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default()
        );
        let warnings: Vec<String> = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|w| w.to_str().unwrap_or_default().to_owned())
            .filter(|w| !w.contains(&deprecated))
            .collect();
        let body = response
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        if !status.is_success() {
            let status: Value = serde_json::from_slice(&body).unwrap_or_default();
            return Err(format!("{}", status["message"]));
        }
        match warnings.is_empty() {
            true => serde_json::from_slice(&body).map_err(|e| format!("the server's answer: {e}")),
            false => Err(format!("admitted with warnings {warnings:?}")),
        }
    }
}

/// Gives `object` a uid in each ownerReference without one: `nimbus translate` knows no uids
/// (it runs without a cluster) and the API server requires them; it does not check that the
/// owner exists.
pub fn with_owner_uids(mut object: Value) -> Value {
    for owner in object["metadata"]["ownerReferences"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if owner["uid"].as_str().is_none_or(str::is_empty) {
            owner["uid"] = json!("00000000-0000-0000-0000-000000000001");
        }
    }
    object
}

/// Runs the `nimbus` binary with `args`: whether it succeeded, its standard output and its
/// standard error.
pub fn nimbus(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .output()
        .expect("running nimbus");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `nimbus validate` of `manifest`, written to `file`: `Err` with its messages when it
/// refuses.
pub fn validate(file: &Path, manifest: &str) -> Result<(), String> {
    std::fs::write(file, manifest).expect("writing the case");
    let path = file.to_str().expect("a UTF-8 path");
    match nimbus(&["validate", "-f", path]) {
        (true, _, _) => Ok(()),
        (false, _, stderr) => Err(stderr),
    }
}

/// What `nimbus translate` emits for the manifests in `file`, with cluster bindings fanned out
/// over `namespaces`.
pub fn translate(file: &Path, namespaces: &str) -> Result<Vec<Value>, String> {
    let path = file.to_str().expect("a UTF-8 path");
    let args = [
        "translate",
        "-f",
        path,
        "-o",
        "json",
        "--namespaces",
        namespaces,
    ];
    match nimbus(&args) {
        (true, stdout, _) => {
            let list: Value = serde_json::from_str(&stdout).map_err(|e| e.to_string())?;
            Ok(list["items"].as_array().cloned().unwrap_or_default())
        }
        (false, _, stderr) => Err(stderr),
    }
}

/// Kind and name of `object`, for messages.
pub fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}
