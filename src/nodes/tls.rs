//! TLS (the `tls` feature): the crypto provider of the redis crate's rustls.

/// Installs rustls's `ring` provider as the process default, unless the application installed one.
///
/// rustls picks a provider by itself only when exactly one is compiled in. An application whose
/// other dependencies enable a second one (`aws-lc-rs`, say) and that installs none would make
/// rustls panic at the first TLS handshake; with this, it gets `ring` instead, and an application
/// that installed a provider keeps its own.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves that one in place, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
