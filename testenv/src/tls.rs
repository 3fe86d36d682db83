//! Throwaway certificates for TLS nodes: a private CA, server certificates signed by it, and
//! client certificates for mutual TLS. Everything is made in memory at test time and written into
//! each node's temporary directory; no certificate is ever committed.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// A private certificate authority for [`Cluster::start_tls`](crate::Cluster::start_tls), and
/// whether its nodes require client certificates.
///
/// Each `Tls::new()` is a new CA with a new key, trusted by nobody else: a client given another
/// `Tls`'s [`ca_pem`](Tls::ca_pem) rejects these nodes, which is how a test makes a wrong CA.
/// Server certificates name `127.0.0.1` and `localhost`. Cloning shares the CA.
///
/// # Examples
///
/// ```
/// let tls = redmutex_testenv::Tls::new().require_client_certs(true);
/// assert!(tls.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
/// let identity = tls.client_identity();
/// assert!(identity.key_pem.contains("PRIVATE KEY"));
/// ```
#[derive(Clone)]
pub struct Tls {
    ca: Arc<Ca>,
    require_client_certs: bool,
}

struct Ca {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its private key, both PEM-encoded: what a client presents for mutual TLS.
#[derive(Clone)]
pub struct Identity {
    /// The certificate, signed by the CA.
    pub cert_pem: String,
    /// The certificate's private key.
    pub key_pem: String,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A private key, even a throwaway one, is not printed.
        f.debug_struct("Identity").finish_non_exhaustive()
    }
}

/// The files a TLS node is started with, in its own directory.
#[derive(Debug, Clone)]
pub(crate) struct ServerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub require_client_certs: bool,
}

impl Tls {
    /// A new private CA; nodes started with it do not ask clients for certificates.
    ///
    /// # Panics
    ///
    /// If the key or the certificate cannot be generated (the crypto backend failed).
    pub fn new() -> Tls {
        let ca = Ca::generate().unwrap_or_else(|e| panic!("testenv: generating a CA: {e}"));
        Tls {
            ca: Arc::new(ca),
            require_client_certs: false,
        }
    }

    /// Whether nodes started with this CA refuse clients that present no certificate signed by
    /// it (`--tls-auth-clients yes`).
    ///
    /// # Default
    ///
    /// `false`.
    #[must_use]
    pub fn require_client_certs(mut self, required: bool) -> Tls {
        self.require_client_certs = required;
        self
    }

    /// The CA's certificate, PEM-encoded: what a client must trust to accept the nodes.
    pub fn ca_pem(&self) -> &str {
        &self.ca.cert_pem
    }

    /// A new client certificate signed by the CA, with its key.
    ///
    /// # Panics
    ///
    /// If the key or the certificate cannot be generated.
    pub fn client_identity(&self) -> Identity {
        self.ca
            .sign(
                "redmutex test client",
                Vec::new(),
                ExtendedKeyUsagePurpose::ClientAuth,
            )
            .unwrap_or_else(|e| panic!("testenv: generating a client certificate: {e}"))
    }

    /// Writes a new server certificate, its key and the CA certificate into `dir`.
    pub(crate) fn write_server_files(&self, dir: &Path) -> Result<ServerFiles, Error> {
        let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        let server = self
            .ca
            .sign(
                "redmutex test node",
                names,
                ExtendedKeyUsagePurpose::ServerAuth,
            )
            .map_err(|e| Error::io("generating a server certificate", std::io::Error::other(e)))?;
        let files = ServerFiles {
            cert: dir.join("tls-server.crt"),
            key: dir.join("tls-server.key"),
            ca: dir.join("tls-ca.crt"),
            require_client_certs: self.require_client_certs,
        };
        for (path, text) in [
            (&files.cert, &server.cert_pem),
            (&files.key, &server.key_pem),
            (&files.ca, &self.ca.cert_pem),
        ] {
            fs::write(path, text)
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        }
        Ok(files)
    }
}

impl Default for Tls {
    fn default() -> Tls {
        Tls::new()
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("require_client_certs", &self.require_client_certs)
            .finish_non_exhaustive()
    }
}

impl Ca {
    fn generate() -> Result<Ca, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "redmutex throwaway test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Ca {
            cert_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate for `names` (subject alternative names), signed by this CA.
    fn sign(
        &self,
        common_name: &str,
        names: Vec<String>,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<Identity, rcgen::Error> {
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tls_is_its_own_ca() {
        assert_ne!(Tls::new().ca_pem(), Tls::new().ca_pem());
    }

    #[test]
    fn server_files_land_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let files = Tls::new().write_server_files(dir.path()).unwrap();
        for path in [&files.cert, &files.key, &files.ca] {
            assert!(fs::read_to_string(path).unwrap().starts_with("-----BEGIN"));
        }
        assert!(!files.require_client_certs);
    }
}
