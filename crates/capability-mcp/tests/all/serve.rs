//! An [`McpServer`] over a fresh home, served over streamable HTTP on 127.0.0.1 by a runtime
//! of its own, stopped (and drained) when dropped.

use std::path::Path;
use std::sync::Arc;

use capability_host::{Host, HostConfig};
use capability_mcp::{GatewayServer, McpServer, ServeOptions};

/// A host over `home`, with the built-in capabilities.
pub fn host(home: &Path) -> Arc<Host> {
    Arc::new(
        Host::open(HostConfig {
            home: Some(home.to_path_buf()),
            ..HostConfig::default()
        })
        .unwrap(),
    )
}

/// A server being served at `url` (`http://<addr>/mcp`).
pub struct Served {
    pub url: String,
    pub addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Serves `server` over streamable HTTP on a free loopback port.
pub fn serve_http(server: McpServer) -> Served {
    spawn_http(move |listener, stopped| async move {
        let stopped = async {
            let _ = stopped.await;
        };
        server.serve_http(listener, stopped).await
    })
}

/// Serves the gateway over streamable HTTP on a free loopback port.
pub fn serve_gateway(gateway: GatewayServer) -> Served {
    spawn_http(move |listener, stopped| async move {
        let stopped = async {
            let _ = stopped.await;
        };
        gateway.serve_http(listener, stopped).await
    })
}

/// Runs `serve` on a runtime of its own with a listener on a free loopback port, until the
/// returned [`Served`] is dropped.
fn spawn_http<F, Fut>(serve: F) -> Served
where
    F: FnOnce(tokio::net::TcpListener, tokio::sync::oneshot::Receiver<()>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            serve(listener, stopped).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap().to_string();
    Served {
        url: format!("http://{addr}/mcp"),
        addr,
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// [`serve_http`] of a server over `host` with `options`.
pub fn serve(host: Arc<Host>, options: ServeOptions) -> Served {
    serve_http(McpServer::new(host, options))
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
