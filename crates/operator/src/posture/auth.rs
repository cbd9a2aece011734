//! Who is asking, and may they: the front-proxy (request-header) authentication every
//! aggregated API server does, and delegated authorization through SubjectAccessReviews.
//!
//! kube-apiserver authenticates the user, then proxies the request over TLS with its front-proxy
//! client certificate and the user in `X-Remote-*` headers. Those headers are trusted only on a
//! connection whose client certificate chains to the request-header CA and whose CN is one of
//! the allowed names, both published in `kube-system/extension-apiserver-authentication`.

use http::HeaderMap;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where kube-apiserver publishes how front-proxy requests are authenticated.
pub const AUTHENTICATION_CONFIG_MAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");

/// How to recognise the front proxy and read the user it vouches for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub client_ca: Vec<CertificateDer<'static>>,
    /// CNs the proxy's client certificate may have; empty: any the CA signed.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_header_prefixes: Vec<String>,
}

impl RequestHeader {
    /// Reads the ConfigMap's data; `Err` says what is missing or malformed.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Self, String> {
        let ca = data.get("requestheader-client-ca-file").ok_or_else(|| {
            "no requestheader-client-ca-file: kube-apiserver runs without \
             --requestheader-client-ca-file, so it cannot proxy to aggregated APIs"
                .to_owned()
        })?;
        let client_ca = CertificateDer::pem_slice_iter(ca.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("requestheader-client-ca-file: {e}"))?;
        if client_ca.is_empty() {
            return Err("requestheader-client-ca-file holds no certificate".to_owned());
        }
        let list = |key: &str| -> Result<Vec<String>, String> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(json) => serde_json::from_str(json).map_err(|e| format!("{key}: {e}")),
            }
        };
        Ok(Self {
            client_ca,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_header_prefixes: list("requestheader-extra-headers-prefix")?,
        })
    }

    /// Whether a verified client certificate with common name `cn` is the front proxy.
    pub fn allows(&self, cn: Option<&str>) -> bool {
        self.allowed_names.is_empty()
            || cn.is_some_and(|cn| self.allowed_names.iter().any(|n| n == cn))
    }

    /// The user the front proxy vouches for; `None` when no username header is set.
    pub fn user(&self, headers: &HeaderMap) -> Option<User> {
        let first = |names: &[String]| {
            names
                .iter()
                .find_map(|n| headers.get(n.as_str())?.to_str().ok())
                .map(str::to_owned)
        };
        let name = first(&self.username_headers).filter(|n| !n.is_empty())?;
        let all = |name: &str| {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let groups = self.group_headers.iter().flat_map(|h| all(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            for prefix in &self.extra_header_prefixes {
                let prefix = prefix.to_ascii_lowercase();
                if let (Some(key), Ok(value)) = (header.strip_prefix(&prefix), value.to_str()) {
                    extra
                        .entry(
                            // Keys arrive percent-encoded (and lower-cased) in header names.
                            percent_encoding::percent_decode_str(key)
                                .decode_utf8_lossy()
                                .into_owned(),
                        )
                        .or_default()
                        .push(value.to_owned());
                }
            }
        }
        Some(User {
            name,
            uid: first(&self.uid_headers),
            groups,
            extra,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a request does, as RBAC sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// How long an answer is reused (kube-apiserver's delegated authorizer defaults).
const ALLOWED_TTL: Duration = Duration::from_secs(10);
const DENIED_TTL: Duration = Duration::from_secs(10);
const CACHE_LIMIT: usize = 10_000;

/// Answers given, each with when it was given, reused for their TTL.
#[derive(Default)]
struct Answers(HashMap<(User, Attributes), (bool, Instant)>);

impl Answers {
    /// The answer for `key` still fresh at `now`.
    fn fresh(&self, key: &(User, Attributes), now: Instant) -> Option<bool> {
        let (allowed, at) = self.0.get(key).copied()?;
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        (now.saturating_duration_since(at) < ttl).then_some(allowed)
    }

    /// Remembers `allowed` for `key` as given at `at`; a full cache starts over.
    fn remember(&mut self, key: (User, Attributes), allowed: bool, at: Instant) {
        if self.0.len() >= CACHE_LIMIT {
            self.0.clear();
        }
        self.0.insert(key, (allowed, at));
    }
}

/// Asks kube-apiserver whether a user may do something, remembering the answer briefly.
pub struct Authorizer {
    client: Client,
    cache: Mutex<Answers>,
}

impl Authorizer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::default(),
        }
    }

    pub async fn allowed(&self, user: &User, attributes: &Attributes) -> Result<bool, kube::Error> {
        let key = (user.clone(), attributes.clone());
        if let Some(allowed) = self.lock().fresh(&key, Instant::now()) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(nimbus_api::posture::GROUP.to_owned()),
                    version: Some(nimbus_api::posture::VERSION.to_owned()),
                    resource: Some(attributes.resource.to_owned()),
                    verb: Some(attributes.verb.to_owned()),
                    namespace: attributes.namespace.clone(),
                    name: attributes.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let allowed = answer
            .status
            .is_some_and(|s| s.allowed && s.denied != Some(true));
        self.lock().remember(key, allowed, Instant::now());
        Ok(allowed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RequestHeader {
        RequestHeader {
            client_ca: vec![],
            allowed_names: vec!["front-proxy-client".to_owned()],
            username_headers: vec!["X-Remote-User".to_owned()],
            uid_headers: vec![],
            group_headers: vec!["X-Remote-Group".to_owned()],
            extra_header_prefixes: vec!["X-Remote-Extra-".to_owned()],
        }
    }

    #[test]
    fn reads_the_user_the_proxy_vouches_for() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().expect("value"));
        headers.append("x-remote-group", "dev".parse().expect("value"));
        headers.append(
            "x-remote-group",
            "system:authenticated".parse().expect("value"),
        );
        headers.insert("x-remote-extra-scopes%2fa", "x".parse().expect("value"));
        let user = config().user(&headers).expect("a user");
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        assert_eq!(user.extra["scopes/a"], ["x"]);
        assert_eq!(config().user(&HeaderMap::new()), None);
    }

    /// The book's (docs/src/posture-api.md) "SubjectAccessReview answers cached 10 s": an answer, allowed or denied,
    /// is reused for 10 s after it was given and not a moment longer; a full cache starts over.
    #[test]
    fn answers_are_reused_for_10_seconds() {
        let user = |name: &str| User {
            name: name.to_owned(),
            uid: None,
            groups: vec![],
            extra: BTreeMap::new(),
        };
        let list = |namespace: &str| Attributes {
            verb: "list",
            resource: "workloadpostures",
            namespace: Some(namespace.to_owned()),
            name: None,
        };
        let (alice, bob) = ((user("alice"), list("a")), (user("bob"), list("a")));
        let given = Instant::now();
        let mut answers = Answers::default();
        answers.remember(alice.clone(), true, given);
        answers.remember(bob.clone(), false, given);
        let at = |secs: f64| given + Duration::from_secs_f64(secs);
        for (key, answer) in [(&alice, true), (&bob, false)] {
            assert_eq!(answers.fresh(key, given), Some(answer));
            assert_eq!(answers.fresh(key, at(9.999)), Some(answer));
            assert_eq!(answers.fresh(key, at(10.0)), None);
        }
        // Per user and per request.
        assert_eq!(answers.fresh(&(user("alice"), list("b")), given), None);
        assert_eq!(answers.fresh(&(user("carol"), list("a")), given), None);
        // A newer answer replaces the older.
        answers.remember(alice.clone(), false, at(10.0));
        assert_eq!(answers.fresh(&alice, at(19.0)), Some(false));
        // Bounded: once full it starts over, forgetting the older answers.
        for i in 0..CACHE_LIMIT {
            answers.remember((user(&format!("u{i}")), list("a")), true, given);
            assert!(answers.0.len() <= CACHE_LIMIT);
        }
        assert_eq!(answers.fresh(&alice, at(11.0)), None);
    }

    #[test]
    fn only_allowed_names_are_the_proxy() {
        assert!(config().allows(Some("front-proxy-client")));
        assert!(!config().allows(Some("mallory")));
        assert!(!config().allows(None));
        let any = RequestHeader {
            allowed_names: vec![],
            ..config()
        };
        assert!(any.allows(Some("whoever")));
    }

    #[test]
    fn rejects_a_config_map_without_the_ca() {
        let err = RequestHeader::from_config_map(&BTreeMap::new()).expect_err("no CA");
        assert!(err.contains("requestheader-client-ca-file"), "{err}");
    }
}
