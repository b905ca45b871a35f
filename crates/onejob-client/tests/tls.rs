//! The client's TLS, in a test binary of its own so that nothing else in the process
//! installs a rustls crypto provider: building a client installs none (the application's
//! choice stays its own), and the client still speaks TLS, with `ring` given to reqwest
//! directly: against a loopback listener it sends a TLS ClientHello offering HTTP/2 and
//! HTTP/1.1.

use std::time::Duration;

use onejob_client::{Client, Error, RetryPolicy};
use rustls::crypto::CryptoProvider;
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn a_client_speaks_tls_without_installing_a_process_wide_provider() {
    assert!(
        CryptoProvider::get_default().is_none(),
        "nothing installed a provider before the client is built"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = Client::builder(&format!("https://{addr}"), "oj_tls")
        .retry_policy(RetryPolicy::none())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(
        CryptoProvider::get_default().is_none(),
        "building the client installed a process-wide rustls provider"
    );

    // The listener reads what the client opens with, then hangs up.
    let hello = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut hello = vec![0; 4096];
        let read = socket.read(&mut hello).await.unwrap();
        hello.truncate(read);
        hello
    });
    let error = client.job(uuid::Uuid::nil()).await.unwrap_err();
    assert!(matches!(error, Error::Transport { .. }), "{error:?}");
    let hello = hello.await.unwrap();
    assert_eq!(
        hello.first(),
        Some(&0x16),
        "a TLS handshake record: {hello:?}"
    );
    let offers = |protocol: &[u8]| hello.windows(protocol.len()).any(|w| w == protocol);
    assert!(
        offers(b"h2") && offers(b"http/1.1"),
        "ALPN offers h2 and http/1.1"
    );
    assert!(CryptoProvider::get_default().is_none());
}
