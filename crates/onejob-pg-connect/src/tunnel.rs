//! TLS to a PostgreSQL server whose certificate rustls cannot read, under `sslmode=prefer`
//! or `require`, which check nothing of the certificate (as libpq).
//!
//! sqlx's rustls set-up, asked to check nothing, still has webpki parse the server's
//! certificate to check the handshake's signature with its key, and webpki reads only X.509
//! v3: a version 1 certificate (Citus's `CREATE EXTENSION citus` makes one, as does
//! `openssl req -x509` without extensions) fails with `UnsupportedCertVersion`, where libpq
//! (OpenSSL) connects encrypted. sqlx has no hook for its TLS, so for such a server onejob
//! makes the TLS itself: a [`Tunnel`] listens on a Unix socket in a private directory of its
//! own, sqlx connects to it in plain text ([`Tunnel::options`]: the socket path, and
//! `sslmode=disable` on that hop inside this process), and each connection is carried to the
//! server over TCP after PostgreSQL's `SSLRequest`, by a rustls client that checks nothing of
//! the certificate but does check the handshake's signature with the certificate's key, read
//! by a lenient parser ([`Unverified`]). A server that then declines TLS is spoken to in plain
//! text under `prefer` and refused under `require`, as libpq does; a refusal reaches sqlx as
//! a PostgreSQL error saying why.
//!
//! Only a server whose certificate sqlx's TLS refused to read goes through a tunnel
//! ([`connect`]); every other connection is sqlx's own. The tunnel's TCP socket belongs to
//! this process, so `tcp.rs` finds it and tunes it like any other.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, PeerMisbehaved, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime},
};
use sqlx::{
    Connection, PgConnection,
    postgres::{PgConnectOptions, PgSslMode},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpStream, UnixListener, UnixStream},
    task::JoinHandle,
};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::ConnectError;
use crate::tls::TlsSettings;

/// How long reaching the server (TCP, `SSLRequest`, the TLS handshake) may take.
const REACH_WITHIN: Duration = Duration::from_secs(10);

/// PostgreSQL's `SSLRequest`: length 8, then code 80877103 (1234 in the high 16 bits, 5679 in
/// the low).
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Connects with `options` within `within`. When sqlx's TLS refused the server's certificate
/// although `sslmode` (prefer or require) checks nothing of it, which happens only for a
/// certificate rustls cannot read, connects again through a new [`Tunnel`] and answers it
/// too: connections from then on use [`Tunnel::options`]. Other failures are explained by
/// `tls` ([`TlsSettings::explain`]).
pub async fn connect(
    options: &PgConnectOptions,
    tls: &TlsSettings,
    within: Duration,
) -> Result<(PgConnection, Option<Arc<Tunnel>>), ConnectError> {
    let direct = match tokio::time::timeout(within, PgConnection::connect_with(options)).await {
        Ok(direct) => direct,
        Err(_) => return Err(ConnectError::TimedOut),
    };
    match direct {
        Ok(connection) => Ok((connection, None)),
        Err(error) if tls.unreadable_certificate(&error) => {
            tracing::info!(
                host = options.get_host(),
                "the server's certificate is one rustls cannot read; onejob makes the TLS \
                 itself (sslmode prefer and require check nothing of it)"
            );
            let tunnel = Tunnel::open(options)?;
            let connection =
                tokio::time::timeout(within, PgConnection::connect_with(&tunnel.options(options)))
                    .await
                    .map_err(|_| ConnectError::TimedOut)??;
            Ok((connection, Some(tunnel)))
        }
        Err(error) => Err(tls.explain(error)),
    }
}

/// A Unix socket carrying plain-text PostgreSQL connections to one server over TLS (see the
/// module doc); closed, with its directory, when dropped.
#[derive(Debug)]
pub struct Tunnel {
    dir: PathBuf,
    accept: JoinHandle<()>,
}

impl Tunnel {
    /// Starts a tunnel to the server of `options` (host, port, `sslmode` prefer or require).
    pub fn open(options: &PgConnectOptions) -> Result<Arc<Self>, ConnectError> {
        let dir = std::env::temp_dir().join(format!(
            "onejob-tls-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        let failed = |error: std::io::Error| {
            ConnectError::Tls(format!(
                "cannot open a local socket to carry TLS to {}: {error}",
                options.get_host()
            ))
        };
        private_dir(&dir).map_err(failed)?;
        let listener = UnixListener::bind(dir.join(format!(".s.PGSQL.{}", options.get_port())))
            .map_err(|error| {
                let _ = std::fs::remove_dir_all(&dir);
                failed(error)
            })?;
        let server = Server {
            host: options.get_host().to_owned(),
            port: options.get_port(),
            required: !matches!(options.get_ssl_mode(), PgSslMode::Prefer),
            config: Arc::new(unverified_config()),
        };
        let accept = tokio::spawn(async move {
            let server = Arc::new(server);
            while let Ok((local, _)) = listener.accept().await {
                tokio::spawn(server.clone().carry(local));
            }
        });
        Ok(Arc::new(Self { dir, accept }))
    }

    /// `options` made to connect through this tunnel.
    pub fn options(&self, options: &PgConnectOptions) -> PgConnectOptions {
        options
            .clone()
            .socket(&self.dir)
            .ssl_mode(PgSslMode::Disable)
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates `dir`, readable by this user only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// The server a tunnel reaches.
struct Server {
    host: String,
    port: u16,
    /// `sslmode=require`: a server that declines TLS is refused (`prefer`: spoken to in plain
    /// text).
    required: bool,
    config: Arc<ClientConfig>,
}

impl Server {
    /// Carries one local connection to the server, or tells it why not.
    async fn carry(self: Arc<Self>, mut local: UnixStream) {
        match tokio::time::timeout(REACH_WITHIN, self.reach()).await {
            Ok(Ok(Remote::Tls(mut remote))) => {
                let _ = tokio::io::copy_bidirectional(&mut local, &mut *remote).await;
            }
            Ok(Ok(Remote::Plain(mut remote))) => {
                let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
            }
            Ok(Err(why)) => refuse(&mut local, &why).await,
            Err(_) => {
                let why = format!(
                    "{}:{} did not complete the TLS handshake within {REACH_WITHIN:?}",
                    self.host, self.port
                );
                refuse(&mut local, &why).await;
            }
        }
    }

    /// A connection to the server: TLS if it accepts it.
    async fn reach(&self) -> Result<Remote, String> {
        let mut tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", self.host, self.port))?;
        let _ = tcp.set_nodelay(true);
        let lost = |e: std::io::Error| format!("{}:{}: {e}", self.host, self.port);
        tcp.write_all(&SSL_REQUEST).await.map_err(lost)?;
        let mut answer = [0u8];
        tcp.read_exact(&mut answer).await.map_err(lost)?;
        match answer[0] {
            b'S' => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|e| format!("host {:?}: {e}", self.host))?;
                let tls = tokio_rustls::TlsConnector::from(self.config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {}:{} failed: {e}", self.host, self.port))?;
                Ok(Remote::Tls(Box::new(tls)))
            }
            b'N' if !self.required => Ok(Remote::Plain(tcp)),
            b'N' => Err(format!(
                "the server at {} does not accept TLS connections, and sslmode=require \
                 requires TLS",
                self.host
            )),
            other => Err(format!(
                "{}:{} answered the TLS request with {other:#04x}, not PostgreSQL's S or N",
                self.host, self.port
            )),
        }
    }
}

/// The server's side of a tunnelled connection.
enum Remote {
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Plain(TcpStream),
}

/// Answers the local connection's startup with a PostgreSQL error (SQLSTATE 08001, the
/// client could not connect) saying `why`, and closes it.
async fn refuse(local: &mut (impl AsyncRead + AsyncWrite + Unpin), why: &str) {
    // The startup message first, so that the answer is read after it, not lost with it.
    let mut length = [0u8; 4];
    if local.read_exact(&mut length).await.is_ok() {
        let rest = u32::from_be_bytes(length).saturating_sub(4).min(10_000) as usize;
        let mut startup = vec![0u8; rest];
        let _ = local.read_exact(&mut startup).await;
    }
    let mut fields = Vec::new();
    for (code, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', "08001"),
        (b'M', why),
    ] {
        fields.push(code);
        fields.extend_from_slice(value.replace('\0', " ").as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut message = vec![b'E'];
    message.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
    message.extend_from_slice(&fields);
    let _ = local.write_all(&message).await;
    let _ = local.shutdown().await;
}

/// A rustls client that checks nothing of the server's certificate (sslmode prefer and
/// require), with ring, the one crypto provider onejob uses.
fn unverified_config() -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unverified { provider }))
        .with_no_client_auth()
}

/// Accepts any certificate (nothing is checked under prefer and require, as in libpq), but
/// checks that the server signed the handshake with the key its certificate holds, read by
/// x509-parser, which reads X.509 v1 as well as v3.
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
}

/// The public key of `certificate`, read by x509-parser (which reads X.509 v1 as well as
/// v3).
fn public_key(
    certificate: &CertificateDer<'_>,
) -> Result<SubjectPublicKeyInfoDer<'static>, rustls::Error> {
    let (_, parsed) = X509Certificate::from_der(certificate)
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
    Ok(SubjectPublicKeyInfoDer::from(
        parsed.public_key().raw.to_vec(),
    ))
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // TLS 1.2's schemes do not name one algorithm: any of the scheme's may have signed.
        let spki = public_key(certificate)?;
        let key = webpki::RawPublicKeyEntity::try_from(&spki)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let algorithms = self
            .provider
            .signature_verification_algorithms
            .mapping
            .iter()
            .find(|(scheme, _)| *scheme == dss.scheme)
            .map(|(_, algorithms)| *algorithms)
            .ok_or(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
        if algorithms.iter().any(|algorithm| {
            key.verify_signature(*algorithm, message, dss.signature())
                .is_ok()
        }) {
            Ok(HandshakeSignatureValid::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::BadSignature,
            ))
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &public_key(certificate)?,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, PgConnection, postgres::PgConnectOptions};

    use super::Tunnel;

    /// Whether the session on `connection` is encrypted, as the server sees it.
    async fn encrypted(connection: &mut PgConnection) -> bool {
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(connection)
            .await
            .unwrap()
    }

    /// Through a tunnel, the session is encrypted (here with the test server's v3
    /// certificate: the tunnel does not care which).
    #[tokio::test]
    async fn a_tunnel_carries_an_encrypted_session() {
        let url = std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let options: PgConnectOptions = format!("{url}?sslmode=require").parse().unwrap();
        let tunnel = Tunnel::open(&options).unwrap();
        let mut connection = PgConnection::connect_with(&tunnel.options(&options))
            .await
            .unwrap();
        assert!(encrypted(&mut connection).await);
        connection.close().await.unwrap();
    }

    /// A server without TLS is spoken to in plain text under `prefer`, and refused under
    /// `require` with a message that says why.
    #[tokio::test]
    async fn a_tunnel_to_a_server_without_tls_follows_the_sslmode() {
        let server = onejob_chaos::postgres::Cluster::start_new();
        let url = server.admin_url();
        let prefer: PgConnectOptions = format!("{url}?sslmode=prefer").parse().unwrap();
        let tunnel = Tunnel::open(&prefer).unwrap();
        let mut connection = PgConnection::connect_with(&tunnel.options(&prefer))
            .await
            .unwrap();
        assert!(!encrypted(&mut connection).await);
        connection.close().await.unwrap();

        let require: PgConnectOptions = format!("{url}?sslmode=require").parse().unwrap();
        let tunnel = Tunnel::open(&require).unwrap();
        let error = PgConnection::connect_with(&tunnel.options(&require))
            .await
            .expect_err("require without TLS");
        assert!(
            error
                .to_string()
                .contains("does not accept TLS connections"),
            "{error}"
        );
    }
}
