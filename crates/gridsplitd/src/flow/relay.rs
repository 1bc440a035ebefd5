//! A flow's two pumps between its LAN socket and its WAN link: LAN → WAN within
//! the peer's credit, our queue and the shared send budget; WAN → LAN from the
//! queue the link's reader fills (flow/mod.rs says how the two share it).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::sync::TryAcquireError;
use tokio_util::sync::WaitForCancellationFuture;

use super::{Carrier, Flow, CHUNK_MAX, FAST_MAX, MAX_IOV};
use crate::schedule::{Chunk, Lease, Release};
use crate::sockio::{try_read_drain, write_all_segments};
use crate::wire::{data_prefix, Frame, ResetReason, DATA_PREFIX};

/// How one direction of a relay ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Clean end of stream (FIN sent, or FIN received and written through).
    Finished,
    /// The flow was reset (by us or the peer, or the link died).
    Reset,
}

/// Relays between the LAN socket and the WAN link until both directions have
/// finished or the flow is reset. `origin` is what is left to write of the GSo1
/// header (remote side only), before anything else.
pub async fn relay<L: Carrier>(
    flow: Arc<Flow>,
    link: Arc<L>,
    s: Arc<TcpStream>,
    origin: Option<Bytes>,
) {
    tracing::debug!(peer = %link.peer(), flow = flow.id, "relay started");
    link.metrics().flows_active.fetch_add(1, Ordering::Relaxed);
    // While the relay runs, closing the LAN socket resets it (SO_LINGER 0), so
    // that if this process dies the node sees a reset, never a clean EOF that
    // would pass for the far end's close (docs/design/wan-sessions.md).
    let _ = socket2::SockRef::from(&*s).set_linger(Some(std::time::Duration::ZERO));
    // Two tasks rather than one join!: a joined future polls both directions
    // whenever either is woken, and polling the idle one (its Notify waits) costs
    // every relayed message of the other a few lock round trips.
    // The GSo1 header goes first, before anything can reset the flow, as the
    // node may only learn its peer from it.
    let started = start_down(&flow, &link, &s, origin).await;
    let down = tokio::spawn({
        let (flow, link, s) = (flow.clone(), link.clone(), s.clone());
        async move {
            match started {
                Ok(()) => wan_to_lan(&flow, &link, &s).await,
                Err(end) => end,
            }
        }
    });
    let up = lan_to_wan(&flow, &link, &s).await;
    // A panicked task (a bug) counts as a reset: the node must not hang.
    let down = down.await.unwrap_or(End::Reset);
    tracing::debug!(peer = %link.peer(), flow = flow.id, ?up, ?down, "relay ended");
    // The link reader must not write any more, and must not keep the socket open.
    flow.rx.lock().unwrap().lan = None;
    if up == End::Reset || down == End::Reset || flow.is_aborted() {
        // The close stays an RST: the node sees a reset where the far end reset.
        link.metrics().flows_reset.fetch_add(1, Ordering::Relaxed);
    } else {
        // Both directions ended cleanly: an orderly close.
        let _ = socket2::SockRef::from(&*s).set_linger(None);
    }
    drop(s);
    link.metrics().flows_active.fetch_sub(1, Ordering::Relaxed);
    link.forget_flow(flow.id);
}

/// Resets `flow` because of something on our side, and tells the peer.
fn reset_here<L: Carrier + ?Sized>(flow: &Flow, link: &L, reason: ResetReason) {
    if !flow.is_aborted() {
        flow.abort();
        link.drop_queued(flow.id);
        link.queue_control(Frame::Reset {
            flow: flow.id,
            reason,
        });
    }
}

/// Reads `buf` from the socket, waiting for data (or the flow's reset: None).
/// `aborted` is the flow's `abort.cancelled()`, made once per relay: waiting
/// with poll_read_ready and a long-lived abort future registers nothing new per
/// message (a fresh `readable()` and `cancelled()` each time would register and
/// unregister two waiters under two locks, for every message relayed).
async fn read_some(
    s: &TcpStream,
    buf: &mut impl BufMut,
    aborted: &mut Pin<&mut WaitForCancellationFuture<'_>>,
) -> Option<std::io::Result<usize>> {
    loop {
        match try_read_drain(s, buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            r => return Some(r),
        }
        let ready = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = s.poll_read_ready(cx) {
                return Poll::Ready(Some(r));
            }
            if aborted.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        match ready {
            None => return None,
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(())) => {}
        }
    }
}

async fn lan_to_wan<L: Carrier>(flow: &Arc<Flow>, link: &Arc<L>, s: &TcpStream) -> End {
    let mut buf = BytesMut::new();
    let aborted = flow.abort.cancelled();
    tokio::pin!(aborted);
    let chunk_max = CHUNK_MAX.min(link.max_data());
    loop {
        // Wait until the peer, our queue and the shared budget all have room.
        let n = loop {
            let room = {
                let t = flow.tx.lock().unwrap();
                (t.credit as usize).min(flow.per_flow_buffer.saturating_sub(t.queued))
            };
            if room > 0 {
                break room.min(chunk_max);
            }
            tokio::select! {
                _ = flow.tx_wake.notified() => {}
                _ = &mut aborted => return End::Reset,
            }
        };
        let permit = match flow.send_pool.try_acquire_many(n as u32) {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return End::Reset,
            Err(TryAcquireError::NoPermits) => tokio::select! {
                p = flow.send_pool.acquire_many(n as u32) => match p {
                    Ok(p) => p,
                    Err(_) => return End::Reset,
                },
                _ = &mut aborted => return End::Reset,
            },
        };
        permit.forget();
        // Room for a DATA frame's prefix in front of the bytes: a small message on
        // an idle link then goes out as one contiguous send, header included,
        // without being copied (Carrier::send_data_now).
        buf.reserve(DATA_PREFIX + n);
        buf.put_bytes(0, DATA_PREFIX);
        let mut limited = (&mut buf).limit(n);
        let Some(res) = read_some(s, &mut limited, &mut aborted).await else {
            flow.send_pool.add_permits(n);
            return End::Reset;
        };
        match res {
            Ok(0) => {
                buf.clear();
                tracing::debug!(flow = flow.id, "LAN EOF, sending FIN");
                flow.send_pool.add_permits(n);
                flow.tx.lock().unwrap().fin_sent = true;
                link.push_chunk(Chunk::fin(flow.id));
                return End::Finished;
            }
            Ok(k) => {
                tracing::trace!(flow = flow.id, k, "LAN read");
                flow.tx.lock().unwrap().credit -= k as u64;
                flow.bytes_up.add(k as u64);
                // k <= n <= chunk_max <= max_data: a small read always fits a frame.
                if k <= FAST_MAX {
                    buf[..DATA_PREFIX].copy_from_slice(&data_prefix(flow.id, k));
                    if link.send_data_now(&buf, k) {
                        // On the wire already: the bytes never waited here.
                        buf.clear();
                        flow.send_pool.add_permits(n);
                        Release::sent(&**flow, k, true);
                        continue;
                    }
                }
                flow.send_pool.add_permits(n - k);
                flow.tx.lock().unwrap().queued += k;
                buf.advance(DATA_PREFIX);
                let lease = Lease::new(flow.clone(), k);
                // Onto the WAN socket from here if the link is idle (a chunk too
                // large for the fast path), else queued for the strategy (link/send.rs).
                link.push_chunk(Chunk {
                    flow: flow.id,
                    data: buf.split().freeze(),
                    fin: false,
                    lease: Some(lease),
                });
            }
            Err(_) => {
                flow.send_pool.add_permits(n);
                reset_here(flow, &**link, ResetReason::LanReset);
                return End::Reset;
            }
        }
    }
}

/// Writes the GSo1 header (remote side only), then lets the link reader write
/// received data to the LAN socket directly. Err: how the WAN → LAN direction
/// ended already.
async fn start_down<L: Carrier>(
    flow: &Arc<Flow>,
    link: &Arc<L>,
    s: &Arc<TcpStream>,
    origin: Option<Bytes>,
) -> Result<(), End> {
    if let Some(h) = origin {
        let mut header = vec![h];
        let ok = tokio::select! {
            r = write_all_segments(s, &mut header) => r.is_ok(),
            _ = flow.abort.cancelled() => return Err(End::Reset),
        };
        if !ok {
            reset_here(flow, &**link, ResetReason::LanReset);
            return Err(End::Reset);
        }
    }
    flow.rx.lock().unwrap().lan = Some(s.clone());
    Ok(())
}

async fn wan_to_lan<L: Carrier>(flow: &Arc<Flow>, link: &Arc<L>, s: &Arc<TcpStream>) -> End {
    let mut batch: Vec<Bytes> = Vec::with_capacity(MAX_IOV);
    loop {
        let fin = loop {
            {
                let mut rx = flow.rx.lock().unwrap();
                if !rx.writing {
                    if !rx.queue.is_empty() {
                        rx.take_batch(&mut batch);
                        break false;
                    }
                    if rx.fin {
                        rx.lan = None;
                        break true;
                    }
                }
            }
            tokio::select! {
                _ = flow.rx_wake.notified() => {}
                _ = flow.abort.cancelled() => return End::Reset,
            }
        };
        if fin {
            tracing::debug!(flow = flow.id, "FIN received, shutting down LAN write side");
            // The peer's node half-closed: pass the half-close on, keep reading.
            let _ = socket2::SockRef::from(&**s).shutdown(std::net::Shutdown::Write);
            return End::Finished;
        }
        let total: usize = batch.iter().map(|b| b.len()).sum();
        let res = tokio::select! {
            r = write_all_segments(s, &mut batch) => r,
            _ = flow.abort.cancelled() => return End::Reset,
        };
        let written = total - batch.iter().map(|b| b.len()).sum::<usize>();
        let grant = {
            let mut rx = flow.rx.lock().unwrap();
            flow.end_write(&mut rx, &mut batch, written)
        };
        flow.bytes_down.add(written as u64);
        link.metrics()
            .lan_queued_writes
            .fetch_add(1, Ordering::Relaxed);
        if res.is_err() {
            reset_here(flow, &**link, ResetReason::LanReset);
            return End::Reset;
        }
        if let Some(grant) = grant {
            link.queue_control(Frame::Credit {
                flow: flow.id,
                grant,
            });
        }
    }
}
