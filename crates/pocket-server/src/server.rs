//! Binding, the accept loop and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::backend::InferenceBackend;
use crate::metrics::Metrics;
use crate::routes::{self, AppState};

/// Server settings that do not depend on the backend.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Required bearer key for `/v1/*`; `None` leaves them open.
    pub api_key: Option<String>,
    /// Largest accepted request body in bytes (413 above).
    pub max_body_bytes: usize,
    /// Longest a generation may run before it is cancelled.
    pub request_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            max_body_bytes: 4 << 20,
            request_timeout: Duration::from_secs(600),
        }
    }
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
}

/// Stops a running server and tells where it listens.
#[derive(Debug, Clone)]
pub struct ServerHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl ServerHandle {
    /// Asks the accept loop to stop; open connections finish on their own.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }
}

impl Server {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(
        addr: SocketAddr,
        backend: Arc<dyn InferenceBackend>,
        config: ServerConfig,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            state: Arc::new(AppState {
                backend,
                config,
                metrics: Arc::new(Metrics::default()),
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Runs the accept loop on the current runtime; returns a handle to stop it.
    pub fn spawn(self) -> std::io::Result<ServerHandle> {
        let addr = self.local_addr()?;
        let (stop, rx) = watch::channel(false);
        tokio::spawn(self.run(rx));
        Ok(ServerHandle { addr, stop })
    }

    /// Serves until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = stop.changed() => break,
            };
            let (stream, _) = match accepted {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors and similar: back off briefly, keep serving.
                    eprintln!("pocket-server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let state = self.state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| routes::handle(state.clone(), req));
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .keep_alive(true)
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = conn.await;
            });
        }
    }
}
