//! TLS to PostgreSQL: checking `sslrootcert` before connecting, and turning a failed
//! handshake into a message that says what to change.
//!
//! sqlx itself reads `sslmode` (`disable | prefer | require | verify-ca | verify-full`) and
//! `sslrootcert` from the URL (or `PGSSLMODE` / `PGSSLROOTCERT`) and speaks TLS with rustls
//! and ring, the one TLS stack onejob uses. As in libpq, `prefer` (the default) and
//! `require` encrypt without checking the certificate (a server whose certificate rustls
//! cannot even read, an X.509 v1 one, is reached through `tunnel.rs`), `verify-ca` checks that
//! a trusted CA signed it, and `verify-full` also checks that it names the host connected to
//! (a certificate rustls cannot read is refused then, saying what to change). The trusted
//! CAs are the certificates in `sslrootcert` plus the Mozilla root set built into onejob
//! (so a server with a publicly trusted certificate needs no `sslrootcert`); unlike libpq,
//! the system's certificate store is not read.

use std::path::PathBuf;

use rustls::CertificateError;
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::ConnectError;

/// The TLS settings of one database URL, as far as error messages need them.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    mode: PgSslMode,
    root_cert: Option<PathBuf>,
    host: String,
}

impl TlsSettings {
    /// Reads the settings of `url` (already parsed into `options`).
    pub fn of(url: &str, options: &PgConnectOptions) -> Self {
        let from_url = url::Url::parse(url).ok().and_then(|parsed| {
            parsed
                .query_pairs()
                .find(|(key, _)| matches!(&**key, "sslrootcert" | "ssl-root-cert" | "ssl-ca"))
                .map(|(_, value)| value.into_owned())
        });
        let root_cert = from_url
            .or_else(|| std::env::var("PGSSLROOTCERT").ok())
            // Inline PEM (sqlx accepts it) is not a file to check or to name.
            .filter(|value| !value.trim_start().starts_with("-----BEGIN"))
            .map(PathBuf::from);
        Self {
            mode: options.get_ssl_mode(),
            root_cert,
            host: options.get_host().to_owned(),
        }
    }

    /// Refuses a `sslrootcert` that cannot be read or holds no certificate, naming it (sqlx
    /// would report only "No such file or directory", or nothing under `require`).
    pub fn check_root_cert(&self) -> Result<(), ConnectError> {
        let Some(path) = &self.root_cert else {
            return Ok(());
        };
        let text = std::fs::read(path).map_err(|e| {
            ConnectError::Tls(format!(
                "cannot read sslrootcert={}: {e}; point it at the PEM file of the CA that \
                 signed the server's certificate",
                path.display()
            ))
        })?;
        if !String::from_utf8_lossy(&text).contains("-----BEGIN CERTIFICATE-----") {
            return Err(ConnectError::Tls(format!(
                "sslrootcert={} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            )));
        }
        Ok(())
    }

    /// Whether `error` is sqlx's TLS refusing the server's certificate although this
    /// `sslmode` (prefer or require) checks nothing of it: rustls could not read the
    /// certificate (webpki reads X.509 v3 only). [`crate::tunnel`] reaches such a server.
    pub fn unreadable_certificate(&self, error: &sqlx::Error) -> bool {
        matches!(self.mode, PgSslMode::Prefer | PgSslMode::Require)
            && matches!(
                find_rustls_error(error),
                Some(rustls::Error::InvalidCertificate(_))
            )
    }

    /// The error to report for a failed connection: a TLS failure becomes a
    /// [`ConnectError::Tls`] that says what to check; anything else stays as it was.
    pub fn explain(&self, error: sqlx::Error) -> ConnectError {
        if let Some(tls) = find_rustls_error(&error) {
            return ConnectError::Tls(self.describe(tls));
        }
        if let sqlx::Error::Tls(inner) = &error {
            let text = inner.to_string();
            if text.contains("does not support TLS") {
                return ConnectError::Tls(format!(
                    "the server at {} does not accept TLS connections, and sslmode={} requires \
                     TLS (enable ssl on the server, or use sslmode=prefer or disable)",
                    self.host,
                    mode_name(self.mode)
                ));
            }
            return ConnectError::Tls(format!("{text}{}", self.root_cert_hint()));
        }
        ConnectError::from(error)
    }

    fn describe(&self, error: &rustls::Error) -> String {
        match error {
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => format!(
                "the server's certificate is not valid for the host {:?} (sslmode=verify-full \
                 checks the name; connect by a name the certificate lists, or use \
                 sslmode=verify-ca to check only the CA): {error}",
                self.host
            ),
            rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
                | CertificateError::BadSignature
                | CertificateError::UnhandledCriticalExtension,
            ) => format!("certificate not trusted ({error}){}", self.root_cert_hint()),
            rustls::Error::InvalidCertificate(certificate) if unreadable(certificate) => format!(
                "the server's certificate is one rustls cannot read ({error}; X.509 version 1, \
                 as Citus and `openssl req -x509` without extensions make), so \
                 sslmode={} cannot check it: give the server an X.509 v3 certificate (one \
                 signed by your CA, or a self-signed one with an extension, such as `openssl \
                 req -x509 -addext subjectAltName=DNS:<host> …`), or use sslmode=require, \
                 which encrypts without checking the certificate",
                mode_name(self.mode)
            ),
            rustls::Error::InvalidCertificate(_) => {
                format!("the server's certificate was refused: {error}")
            }
            _ => format!("the TLS handshake failed: {error}"),
        }
    }

    fn root_cert_hint(&self) -> String {
        match &self.root_cert {
            Some(path) => format!(
                "; check sslrootcert={}: it must hold the CA that signed the server's certificate",
                path.display()
            ),
            None => "; set sslrootcert=/path/to/ca.pem in the database URL to the CA that signed \
                     the server's certificate"
                .to_owned(),
        }
    }
}

/// Whether rustls refused a certificate because it could not read it: webpki reads only
/// X.509 v3 (`UnsupportedCertVersion` for v1), and calls any other malformed one bad DER.
fn unreadable(error: &CertificateError) -> bool {
    match error {
        CertificateError::BadEncoding => true,
        CertificateError::Other(other) => matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::UnsupportedCertVersion | webpki::Error::BadDer)
        ),
        _ => false,
    }
}

/// The libpq spelling of a mode.
fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// The rustls error somewhere in `error`'s causes (sqlx reports a failed handshake as an
/// I/O error that wraps it).
fn find_rustls_error(error: &sqlx::Error) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        cause = current.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> TlsSettings {
        TlsSettings::of(url, &url.parse().unwrap())
    }

    #[test]
    fn a_missing_root_certificate_is_named_before_connecting() {
        let tls =
            settings("postgres://u@db.example/x?sslmode=verify-full&sslrootcert=/nope/ca.pem");
        let message = tls.check_root_cert().unwrap_err().to_string();
        assert!(message.starts_with("TLS to PostgreSQL failed"), "{message}");
        assert!(message.contains("sslrootcert=/nope/ca.pem"), "{message}");
    }

    #[test]
    fn an_unknown_issuer_names_sslrootcert() {
        let tls = settings("postgres://u@db.example/x?sslmode=verify-ca&sslrootcert=/etc/ca.pem");
        let error = sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        ));
        let message = tls.explain(error).to_string();
        assert!(message.contains("certificate not trusted"), "{message}");
        assert!(message.contains("sslrootcert=/etc/ca.pem"), "{message}");
    }

    #[test]
    fn other_errors_are_left_alone() {
        let tls = settings("postgres://u@db.example/x");
        let lost = tls.explain(sqlx::Error::Io(
            std::io::ErrorKind::ConnectionRefused.into(),
        ));
        assert!(matches!(lost, ConnectError::Database(_)));
    }
}
