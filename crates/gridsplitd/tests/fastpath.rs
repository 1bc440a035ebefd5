//! The direct paths (link.rs `Link::kick`, flow.rs `Flow::flush_to_lan`): on an
//! idle link a message is written by the task that read it, and the queued paths
//! (writer task, flow task) take over only for what the sockets won't take at
//! once. These tests check that the direct paths really carry small messages, and
//! that bytes stay in order when the two kinds of path interleave on busy links
//! and full sockets. Real gateways on loopback, as in e2e.rs.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use gridsplitd::lanproto::Status;
use gridsplitd::Gateway;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};

fn counter(g: &Gateway, name: &str) -> u64 {
    g.shared
        .metrics
        .scalars()
        .into_iter()
        .find(|(n, ..)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_goes_direct_in_both_gateways() {
    within(30, async {
        let k = 23;
        let (a, b) = pair(k, &Opts::default()).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let rounds = 500u32;
        let server = tokio::spawn(async move {
            let (mut s, _, _) = accept_relayed(&l).await;
            let mut m = [0u8; 8];
            for i in 0..rounds {
                s.read_exact(&mut m).await.unwrap();
                assert_eq!(u32::from_be_bytes(m[..4].try_into().unwrap()), i);
                m[4..].copy_from_slice(&(!i).to_be_bytes());
                s.write_all(&m).await.unwrap();
            }
        });
        let (mut c, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        let before: Vec<u64> = [&a, &b]
            .iter()
            .map(|g| counter(g, "wan_direct_sends") + counter(g, "lan_direct_writes"))
            .collect();
        let mut m = [0u8; 8];
        for i in 0..rounds {
            m[..4].copy_from_slice(&i.to_be_bytes());
            c.write_all(&m).await.unwrap();
            c.read_exact(&mut m).await.unwrap();
            assert_eq!(u32::from_be_bytes(m[4..].try_into().unwrap()), !i);
        }
        server.await.unwrap();
        for (g, before) in [&a, &b].into_iter().zip(before) {
            // Each gateway sends one message per round trip to the WAN and writes
            // one to the LAN; keepalives may take the wire now and then, hence 90 %.
            let direct = counter(g, "wan_direct_sends") + counter(g, "lan_direct_writes") - before;
            assert!(
                direct >= 2 * rounds as u64 * 9 / 10,
                "{}: only {direct} direct writes for {rounds} round trips",
                g.shared.cfg.site
            );
        }
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// A listener whose accepted sockets have a tiny receive buffer, so that the far
/// gateway's LAN writes fill it and must wait (the queued path).
fn small_rcvbuf_listener(at: std::net::SocketAddr) -> TcpListener {
    let s = TcpSocket::new_v4().unwrap();
    s.set_reuseaddr(true).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.bind(at).unwrap();
    s.listen(64).unwrap()
}

/// Bulk and small messages on several flows at once, in both directions, with
/// receivers that stall now and then: WAN writes contend and fill the socket, LAN
/// writes hit full sockets, so direct and queued writes interleave within each
/// flow. Every flow must still deliver its exact byte stream. Sealed (the
/// default) and in clear: sealing changes what a partial WAN write leaves
/// behind (transfer/seal.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_queued_paths_interleave_without_reordering() {
    interleave(24, "noise").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_queued_paths_interleave_without_reordering_in_clear() {
    interleave(27, "insecure").await;
}

async fn interleave(k: u8, encryption: &'static str) {
    within(90, async {
        // A small WAN socket buffer, so that bulk flows fill it and queued
        // sends happen on any machine: on loopback with the derived buffer a
        // fast machine can send everything directly (seen once in CI, where
        // the test then could not check the interleaving it is about).
        let opts = Opts {
            wan_socket_buffer: 32 << 10,
            encryption,
            ..Opts::default()
        };
        let (a, b) = pair(k, &opts).await;
        let flows = 8u64;
        let size = |i: u64| {
            if i.is_multiple_of(2) {
                3 << 20
            } else {
                200_000
            }
        };
        let lb = small_rcvbuf_listener(addr(k, 2, 20, 5000));
        let la = small_rcvbuf_listener(addr(k, 1, 20, 5000));
        // Receivers: read in odd sizes, pausing from time to time; check the hash.
        let receive = |l: TcpListener, n: u64| {
            tokio::spawn(async move {
                let mut tasks = Vec::new();
                for _ in 0..n {
                    let (mut s, _, _) = accept_relayed(&l).await;
                    tasks.push(tokio::spawn(async move {
                        let mut got = Vec::new();
                        let mut buf = vec![0u8; 7919];
                        let mut reads = 0u32;
                        // Not reading at first fills the small receive buffer, so the
                        // gateway's LAN writes must queue (lan_queued_writes) however
                        // slow the WAN side is on a loaded machine.
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        loop {
                            let n = s.read(&mut buf).await.unwrap();
                            if n == 0 {
                                break;
                            }
                            got.extend_from_slice(&buf[..n]);
                            reads += 1;
                            if reads.is_multiple_of(32) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                        let seed = u64::from_be_bytes(got[..8].try_into().unwrap());
                        let mut want = pattern(seed, got.len());
                        want[..8].copy_from_slice(&seed.to_be_bytes());
                        assert_eq!(got.len(), size(seed), "flow {seed}: length");
                        assert!(got == want, "flow {seed}: bytes out of order or corrupted");
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            })
        };
        let rb = receive(lb, flows / 2);
        let ra = receive(la, flows / 2);
        let mut senders = Vec::new();
        for seed in 0..flows {
            let (from, dst) = if seed % 4 < 2 {
                (1, addr(k, 2, 20, 5000))
            } else {
                (2, addr(k, 1, 20, 5000))
            };
            senders.push(tokio::spawn(async move {
                let (mut s, st) = gs_connect(
                    ip(k, from, 10 + seed as u8),
                    addr(k, from, 254, LAN_PORT),
                    dst,
                )
                .await;
                assert_eq!(st, Status::Ok);
                let mut data = pattern(seed, size(seed));
                data[..8].copy_from_slice(&seed.to_be_bytes());
                // Small writes (each may go direct) mixed with large ones.
                let mut off = 0;
                let mut i = 0usize;
                while off < data.len() {
                    let n = if i.is_multiple_of(3) {
                        100_000
                    } else {
                        1 + i * 37 % 3000
                    };
                    let end = (off + n).min(data.len());
                    s.write_all(&data[off..end]).await.unwrap();
                    off = end;
                    i += 1;
                    if i.is_multiple_of(50) {
                        tokio::task::yield_now().await;
                    }
                }
                s.shutdown().await.unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).await.unwrap();
                assert!(rest.is_empty());
            }));
        }
        for s in senders {
            s.await.unwrap();
        }
        rb.await.unwrap();
        ra.await.unwrap();
        let total = |name| counter(&a, name) + counter(&b, name);
        let c = [
            "wan_direct_sends",
            "wan_queued_sends",
            "lan_direct_writes",
            "lan_queued_writes",
        ]
        .map(|n| (n, total(n)));
        eprintln!("write paths taken: {c:?}");
        for (name, v) in c {
            assert!(v > 0, "{name} never happened ({encryption}): {c:?}");
        }
        for g in [&a, &b] {
            assert_eq!(g.shared.metrics.flows_reset.load(Ordering::Relaxed), 0);
            assert_eq!(
                g.shared.metrics.wan_protocol_errors.load(Ordering::Relaxed),
                0
            );
        }
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}
