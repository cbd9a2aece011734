use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::thread;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::{ControlPlane, Error, Options};

/// The label every [`TestNamespace`] carries, so leftovers are easy to recognise
/// (`kubectl get ns -l app.kubernetes.io/managed-by=nimbus-testenv`).
pub const TEST_NAMESPACE_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "nimbus-testenv");

/// The control plane shared by all tests of this test binary, started on first use with
/// [`Options::default`].
///
/// It is never dropped; its processes die with the test process (see the crate docs), and its
/// directories are removed by a later start. Give each test its own namespace with
/// [`ControlPlane::test_namespace`] so tests running in parallel stay apart.
///
/// Usable from sync and async tests alike: start-up runs on its own thread and runtime, since
/// blocking on a runtime from within another one is not allowed. Concurrent callers wait for
/// the first one.
///
/// # Panics
///
/// If the control plane cannot be started; every later call panics with the same message, so
/// each test fails with the actual reason.
pub fn shared() -> &'static ControlPlane {
    static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let started = SHARED.get_or_init(|| {
        thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| format!("building a Tokio runtime: {e}"))?
                        .block_on(ControlPlane::start(Options::default()))
                        .map_err(|e| e.to_string())
                })
                .join()
                .unwrap_or_else(|_| Err("start-up panicked".to_owned()))
        })
    });
    match started {
        Ok(control_plane) => control_plane,
        Err(e) => panic!("the shared nimbus-testenv control plane failed to start: {e}"),
    }
}

/// A namespace with a unique name, deleted (in the background) when dropped.
#[derive(Debug)]
pub struct TestNamespace {
    name: String,
    config: kube::Config,
}

impl TestNamespace {
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl ControlPlane {
    /// Creates a namespace named `<prefix>-<random suffix>`, labelled with
    /// [`TEST_NAMESPACE_LABEL`]. `prefix` is lowercased and made DNS-safe.
    pub async fn test_namespace(&self, prefix: &str) -> Result<TestNamespace, Error> {
        let mut sanitized = prefix
            .chars()
            .take(40)
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .trim_matches('-')
            .to_owned();
        if sanitized.is_empty() {
            sanitized.push_str("test");
        }
        let (key, value) = TEST_NAMESPACE_LABEL;
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{sanitized}-")),
                labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(self.client()?)
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|e| Error::kube(format!("creating a namespace named {sanitized}-*"), e))?;
        Ok(TestNamespace {
            name: created.name_any(),
            config: self.config().clone(),
        })
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        let config = self.config.clone();
        // The test's clients are useless here: they belong to the test's runtime, which is not
        // polled while a destructor runs (or is already shutting down). So a short-lived
        // thread with its own runtime and client sends the delete; nobody waits for it.
        let spawned = thread::Builder::new()
            .name("nimbus-testenv-ns-cleanup".to_owned())
            .spawn(move || {
                let deleted = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())
                    .and_then(|runtime| {
                        runtime.block_on(async {
                            let client = Client::try_from(config).map_err(|e| e.to_string())?;
                            Api::<Namespace>::all(client)
                                .delete(&name, &DeleteParams::background())
                                .await
                                .map(drop)
                                .map_err(|e| e.to_string())
                        })
                    });
                if let Err(error) = deleted {
                    tracing::debug!(namespace = name, %error, "could not delete test namespace");
                }
            });
        if let Err(error) = spawned {
            tracing::debug!(%error, "could not spawn the namespace cleanup thread");
        }
    }
}
