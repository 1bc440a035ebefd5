//! Sealed WAN links (transfer/seal.rs, docs/design/wan-encryption.md) against
//! a man in the middle on loopback: a flipped byte, a replayed message and a
//! reordered one each close the WAN connection with one clear log line and a
//! counter; the session resumes on a new connection (new keys), and the flows
//! crossing it, both ways, arrive intact. Gateways whose `[wan] encryption`
//! differ refuse each other; two insecure gateways relay in clear.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use gridsplitd::lanproto::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpListener;

#[derive(Clone, Copy, Debug)]
enum Attack {
    Flip,
    Replay,
    Reorder,
}

struct Mitm {
    attack: Attack,
    /// Set by the test: the next sealed message alpha → beta is attacked.
    armed: AtomicBool,
    done: AtomicU32,
}

/// Reads exactly `n` bytes.
async fn take(s: &mut OwnedReadHalf, n: usize) -> Option<Vec<u8>> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).await.ok()?;
    Some(b)
}

/// Forwards alpha → beta message by message: HELLO and AUTH (8-byte header,
/// u32 length), then the length-prefixed Noise messages, attacking one once
/// armed.
async fn forward_parsed(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    m: Arc<Mitm>,
) -> Option<()> {
    for _ in 0..2 {
        let h = take(&mut from, 8).await?;
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let p = take(&mut from, len).await?;
        to.write_all(&[h, p].concat()).await.ok()?;
    }
    let mut held: Option<Vec<u8>> = None;
    loop {
        let l = take(&mut from, 2).await?;
        let n = u16::from_be_bytes([l[0], l[1]]) as usize;
        let mut msg = [l, take(&mut from, n).await?].concat();
        if let Some(h) = held.take() {
            // Reorder: the held message goes after the one that followed it.
            to.write_all(&msg).await.ok()?;
            to.write_all(&h).await.ok()?;
            continue;
        }
        if m.armed.swap(false, Ordering::SeqCst) {
            m.done.fetch_add(1, Ordering::SeqCst);
            match m.attack {
                Attack::Flip => {
                    let i = msg.len() / 2;
                    msg[i] ^= 0x40;
                }
                Attack::Replay => {
                    to.write_all(&msg).await.ok()?;
                }
                Attack::Reorder => {
                    held = Some(msg);
                    continue;
                }
            }
        }
        to.write_all(&msg).await.ok()?;
    }
}

/// A man in the middle at 127.K.2.253 (beta's gateway_wan in both configs)
/// relaying to beta's real WAN listener.
async fn mitm(k: u8, m: Arc<Mitm>) {
    let l = TcpListener::bind(addr(k, 2, 253, WAN_PORT)).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((a, _)) = l.accept().await else { return };
            let m = m.clone();
            tokio::spawn(async move {
                let sock = tokio::net::TcpSocket::new_v4().unwrap();
                sock.bind(std::net::SocketAddr::new(ip(k, 2, 253), 0))
                    .unwrap();
                let Ok(b) = sock.connect(addr(k, 2, 254, WAN_PORT)).await else {
                    return;
                };
                let (ar, mut aw) = a.into_split();
                let (mut br, bw) = b.into_split();
                let back = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut br, &mut aw).await;
                });
                forward_parsed(ar, bw, m).await;
                back.abort();
            });
        }
    });
}

/// One flow of `len` bytes from a node of `from` (1 alpha, 2 beta) to a sink
/// on the other site, checked by sha256 at the sink.
async fn one_way(k: u8, from: u8, host: u8, len: usize, seed: u64) {
    let to = 3 - from;
    let l = TcpListener::bind(addr(k, to, host, 6000)).await.unwrap();
    let data = pattern(seed, len);
    let want = sha(&data);
    let sink = tokio::spawn(async move {
        let (mut s, _, _) = accept_relayed(&l).await;
        let got = read_all(&mut s).await.unwrap();
        assert_eq!(got.len(), len, "flow {seed}: length");
        assert_eq!(sha(&got), want, "flow {seed}: bytes");
    });
    let (mut s, st) = gs_connect(
        ip(k, from, host),
        addr(k, from, 254, LAN_PORT),
        addr(k, to, host, 6000),
    )
    .await;
    assert_eq!(st, Status::Ok);
    // In pieces with pauses, so the flow is still running when the attack lands.
    for c in data.chunks(64 * 1024) {
        s.write_all(c).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    s.shutdown().await.unwrap();
    sink.await.unwrap();
}

async fn attacked(k: u8, attack: Attack) {
    within(60, async {
        let m = Arc::new(Mitm {
            attack,
            armed: AtomicBool::new(false),
            done: AtomicU32::new(0),
        });
        mitm(k, m.clone()).await;
        let o = Opts {
            via_proxy: true,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let up = tokio::spawn(one_way(k, 1, 10, 6 << 20, 1));
        let down = tokio::spawn(one_way(k, 2, 11, 6 << 20, 2));
        tokio::time::sleep(Duration::from_millis(100)).await;
        m.armed.store(true, Ordering::SeqCst);
        up.await.unwrap();
        down.await.unwrap();
        assert_eq!(m.done.load(Ordering::SeqCst), 1, "{attack:?} was made once");
        let forged = b.shared.metrics.wan_forged_messages.load(Ordering::Relaxed);
        assert_eq!(forged, 1, "{attack:?}: beta closed the connection once");
        let resumed = a.shared.metrics.wan_reconnects.load(Ordering::Relaxed);
        assert!(
            resumed >= 1,
            "{attack:?}: the session resumed on a new connection"
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_closes_the_connection_and_the_flows_resume_intact() {
    attacked(60, Attack::Flip).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_message_closes_the_connection_and_the_flows_resume_intact() {
    attacked(61, Attack::Replay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reordered_message_closes_the_connection_and_the_flows_resume_intact() {
    attacked(62, Attack::Reorder).await;
}

/// One gateway insecure, the other not: both refuse, naming the setting, and
/// no link comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insecure_gateway_and_a_sealed_one_refuse_each_other() {
    within(30, async {
        let k = 63;
        let a = gateway(k, 1, PSK, &Opts::default()).await;
        let insecure = Opts {
            encryption: "insecure",
            ..Opts::default()
        };
        let b = gateway(k, 2, PSK, &insecure).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(a.shared.link_to("beta").is_none() && b.shared.link_to("alpha").is_none());
        for g in [&a, &b] {
            let st = http_get(g.admin_addr, "/status").await;
            assert!(st.contains("[wan] encryption"), "{st}");
            assert!(g.shared.metrics.auth_failures.load(Ordering::Relaxed) >= 1);
        }
        let st = http_get(b.admin_addr, "/status").await;
        assert!(
            st.contains("in clear"),
            "the insecure gateway warns in status: {st}"
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// Two insecure gateways relay as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_insecure_gateways_relay() {
    within(30, async {
        let k = 64;
        let o = Opts {
            encryption: "insecure",
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        one_way(k, 1, 10, 1 << 20, 3).await;
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// Key rotation (SIGHUP calls `reload_key`): the link that is up keeps
/// relaying; a new connection must use the new key, and the old one is
/// refused; a bad key file is refused and the old key stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_key_is_used_by_new_connections_and_spares_the_link_up() {
    within(30, async {
        let k = 65;
        let (a, b) = pair(k, &Opts::default()).await;
        let new_key = b"a-new-key-0123456789abcdef";
        for (g, name) in [(&a, "alpha"), (&b, "beta")] {
            std::fs::write(dir(k).join(format!("psk-{name}")), new_key).unwrap();
            g.shared.reload_key().unwrap();
        }
        assert!(b.shared.link_to("alpha").is_some_and(|l| l.is_up()));
        one_way(k, 1, 10, 1 << 20, 4).await;
        // A new connection with the old key is refused; with the new one it passes.
        let dial =
            |key: &'static [u8]| async move { handshake_as_alpha(k, key).await.1.map(|_| ()) };
        assert!(matches!(
            dial(PSK).await,
            Err(gridsplitd::auth::AuthError::BadTag)
        ));
        assert!(dial(new_key).await.is_ok());
        // A key file that is too short: refused in one line, the key in use stays.
        std::fs::write(dir(k).join("psk-beta"), b"short").unwrap();
        let e = b.shared.reload_key().unwrap_err().to_string();
        assert!(e.contains("too short"), "{e}");
        assert_eq!(&**b.shared.psk(), new_key);
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}
