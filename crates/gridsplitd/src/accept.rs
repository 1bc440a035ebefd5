//! The one accept loop of the gateway's three listeners (LAN, WAN, admin):
//! accept until the gateway stops, spawn a task per connection, and back off
//! briefly on accept errors (EMFILE and friends) instead of spinning.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::warn;

const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `listener` until `stopping`: each connection gets its own task
/// running `handle(stream, remote)`, which is also stopped by `stopping`.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    stopping: CancellationToken,
    what: &str,
    handle: F,
) where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!("{what} accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stopping.cancelled() => return,
        };
        let task = handle(stream, remote);
        let stopping = stopping.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = task => {}
                _ = stopping.cancelled() => {}
            }
        });
    }
}
