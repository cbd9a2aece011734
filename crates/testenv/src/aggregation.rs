//! Registering an aggregated API server running on this machine with the control plane.
//! There is no kube-proxy here, so kube-apiserver reaches the server through an ExternalName
//! Service `localhost` and the APIService's port; it verifies the server's certificate as
//! `<service>.<namespace>.svc` (see [`serving_cert`](crate::serving_cert)).

use crate::{ControlPlane, Error, apply_yaml, certificate_der};
use base64::Engine as _;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use std::time::{Duration, Instant};

/// An aggregated API served on `127.0.0.1:port`.
pub struct LocalApiService<'a> {
    pub group: &'a str,
    pub version: &'a str,
    /// Namespace and name of the Service the APIService references.
    pub namespace: &'a str,
    pub service: &'a str,
    pub port: u16,
}

impl LocalApiService<'_> {
    /// The DNS name kube-apiserver expects in the server's certificate.
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }

    fn name(&self) -> String {
        format!("{}.{}", self.version, self.group)
    }

    /// Waits until the server answers discovery as kube-apiserver's front proxy would call it,
    /// then creates the namespace, Service and APIService, and waits until kube-apiserver
    /// reports the APIService Available; `ca_pem` signed the server's certificate (the
    /// APIService's `caBundle`). Registering only a serving server matters: kube-apiserver
    /// fetches an APIService's OpenAPI documents when it appears and, after a failure, only a
    /// minute later.
    pub async fn register(
        &self,
        cp: &ControlPlane,
        ca_pem: &str,
        timeout: Duration,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let as_proxy = self.front_proxy_client(cp, ca_pem)?;
        let discovery = format!("/apis/{}/{}", self.group, self.version);
        loop {
            let request = http::Request::get(discovery.as_str())
                .body(Vec::new())
                .map_err(|e| Error::kube("building a request", kube::Error::HttpError(e)))?;
            let last = match as_proxy.request_text(request).await {
                Ok(_) => break,
                Err(error) => error.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("the server on port {} to answer ({last})", self.port),
                    timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let client = cp.client()?;
        apply_yaml(&client, &self.manifests(ca_pem)).await?;
        let api_services: Api<DynamicObject> = Api::all_with(
            client,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "apiregistration.k8s.io",
                "v1",
                "APIService",
            )),
        );
        loop {
            let service = api_services
                .get(&self.name())
                .await
                .map_err(|e| Error::kube(format!("reading APIService {}", self.name()), e))?;
            let conditions = &service.data["status"]["conditions"];
            let available = conditions.as_array().is_some_and(|all| {
                all.iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True")
            });
            if available {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("APIService {} to be Available ({conditions})", self.name()),
                    timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A client of the server itself presenting the front proxy's certificate.
    pub fn front_proxy_client(&self, cp: &ControlPlane, ca_pem: &str) -> Result<Client, Error> {
        let url = format!("https://127.0.0.1:{}", self.port)
            .parse()
            .expect("a loopback URL is valid");
        let mut config = kube::Config::new(url);
        let ca = certificate_der(ca_pem).ok_or_else(|| Error::Manifest {
            index: 0,
            reason: "the CA is not a PEM certificate".to_owned(),
        })?;
        config.root_cert = Some(vec![ca]);
        config.tls_server_name = Some(self.server_name());
        let (cert, key) = cp.front_proxy_client();
        config.auth_info.client_certificate = Some(cert.display().to_string());
        config.auth_info.client_key = Some(key.display().to_string());
        Client::try_from(config).map_err(|e| Error::kube("a client of the server", e))
    }

    fn manifests(&self, ca_pem: &str) -> String {
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        format!(
            r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {svc}, namespace: {ns}}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: https, port: {port}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: {name}}}
spec:
  group: {group}
  version: {version}
  groupPriorityMinimum: 1000
  versionPriority: 15
  caBundle: {ca_bundle}
  service: {{name: {svc}, namespace: {ns}, port: {port}}}
"#,
            ns = self.namespace,
            svc = self.service,
            port = self.port,
            name = self.name(),
            group = self.group,
            version = self.version,
        )
    }
}
