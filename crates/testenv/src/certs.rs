//! Certificates for the control plane and for webhook / extension servers under test.
//!
//! Everything is ECDSA P-256 (rcgen's default key type) and X.509 v3 with explicit extensions:
//! rustls, which the kube client uses, rejects v1 certificates and leaf certificates without SANs.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// Names every serving certificate carries, because local servers are always reached through
/// the loopback address or `localhost`.
const LOOPBACK_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// The names in-cluster clients use for the `kubernetes` Service.
const APISERVER_NAMES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// A CA plus a leaf serving certificate it signed, as PEM.
#[derive(Debug, Clone)]
pub struct ServingCert {
    /// The CA certificate: what goes into a webhook's or APIService's `caBundle` (base64-encoded).
    pub ca_pem: String,
    /// The leaf certificate for the server's `tls.crt`.
    pub cert_pem: String,
    /// The leaf's PKCS#8 private key for the server's `tls.key`.
    pub key_pem: String,
}

/// Issues a serving certificate for `127.0.0.1`, `localhost` and `extra_dns_names`, signed by a
/// fresh CA.
///
/// Meant for admission/conversion webhooks registered with `clientConfig.url:
/// https://127.0.0.1:<port>/...` and for aggregated API servers, whose certificate must also name
/// `<service>.<namespace>.svc` because the aggregator uses that as the TLS server name.
pub fn serving_cert(extra_dns_names: &[&str]) -> Result<ServingCert, Error> {
    let ca = Ca::new("nimbus-testenv-serving-ca")?;
    let (cert_pem, key_pem) = ca.issue_server(extra_dns_names)?;
    Ok(ServingCert {
        ca_pem: ca.pem(),
        cert_pem,
        key_pem,
    })
}

/// The DER bytes of the (first) certificate in `pem`, e.g. for a client's `root_cert`.
pub fn certificate_der(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// A certificate authority issuing serving and client certificates (PEM).
pub struct Ca {
    cert: Certificate,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let what = "CA certificate";
        let key = KeyPair::generate().map_err(|source| Error::Certificate { what, source })?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(|source| Error::Certificate { what, source })?;
        Ok(Self {
            cert,
            issuer: Issuer::new(params, key),
        })
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    pub(crate) fn der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }

    /// A serving certificate for the loopback names and `extra_dns_names`: `(cert, key)`.
    pub fn issue_server(&self, extra_dns_names: &[&str]) -> Result<(String, String), Error> {
        let what = "serving certificate";
        let sans = LOOPBACK_NAMES
            .iter()
            .chain(extra_dns_names)
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>();
        let mut params =
            CertificateParams::new(sans).map_err(|source| Error::Certificate { what, source })?;
        params.distinguished_name = name("localhost", &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params, what)
    }

    /// A client certificate: `(cert, key)`.
    pub fn issue_client(
        &self,
        common_name: &str,
        orgs: &[&str],
    ) -> Result<(String, String), Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, orgs);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, "client certificate")
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        what: &'static str,
    ) -> Result<(String, String), Error> {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(|source| Error::Certificate { what, source })?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|source| Error::Certificate { what, source })?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn name(common_name: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for org in orgs {
        dn.push(DnType::OrganizationName, *org);
    }
    dn
}

/// The control plane's key material, written to `<work dir>/pki`.
pub(crate) struct Pki {
    pub(crate) ca: Ca,
    pub(crate) ca_file: PathBuf,
    pub(crate) serving_cert_file: PathBuf,
    pub(crate) serving_key_file: PathBuf,
    pub(crate) admin_cert_pem: String,
    pub(crate) admin_key_pem: String,
    pub(crate) sa_public_file: PathBuf,
    pub(crate) sa_private_file: PathBuf,
    pub(crate) front_proxy_ca_file: PathBuf,
    pub(crate) front_proxy_cert_file: PathBuf,
    pub(crate) front_proxy_key_file: PathBuf,
}

/// The CN the apiserver's `--requestheader-allowed-names` accepts from the aggregator.
pub(crate) const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

impl Pki {
    pub(crate) fn generate(work_dir: &Path) -> Result<Self, Error> {
        let dir = work_dir.join("pki");
        fs::create_dir(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        let write = |file: &str, contents: &str| -> Result<PathBuf, Error> {
            let path = dir.join(file);
            fs::write(&path, contents).map_err(|e| Error::io("writing", &path, e))?;
            Ok(path)
        };

        // One CA signs both the serving certificates and the client certificates it trusts
        // (`--client-ca-file`); separate CAs would add files without testing anything more.
        let ca = Ca::new("nimbus-testenv-ca")?;
        let (serving_cert, serving_key) = ca.issue_server(&APISERVER_NAMES)?;
        let (admin_cert_pem, admin_key_pem) = ca.issue_client("admin", &["system:masters"])?;

        let sa_key = KeyPair::generate().map_err(|source| Error::Certificate {
            what: "service-account signing key",
            source,
        })?;

        // The aggregator's client certificate must come from a CA distinct from the client CA:
        // requests authenticated by it are trusted to carry any identity in X-Remote-* headers.
        let front_proxy_ca = Ca::new("nimbus-testenv-front-proxy-ca")?;
        let (front_proxy_cert, front_proxy_key) =
            front_proxy_ca.issue_client(FRONT_PROXY_CLIENT, &[])?;

        Ok(Self {
            ca_file: write("ca.crt", &ca.pem())?,
            serving_cert_file: write("serving.crt", &serving_cert)?,
            serving_key_file: write("serving.key", &serving_key)?,
            sa_public_file: write("sa.pub", &sa_key.public_key_pem())?,
            sa_private_file: write("sa.key", &sa_key.serialize_pem())?,
            front_proxy_ca_file: write("front-proxy-ca.crt", &front_proxy_ca.pem())?,
            front_proxy_cert_file: write("front-proxy-client.crt", &front_proxy_cert)?,
            front_proxy_key_file: write("front-proxy-client.key", &front_proxy_key)?,
            ca,
            admin_cert_pem,
            admin_key_pem,
        })
    }
}
