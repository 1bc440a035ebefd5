//! WAN sessions that outlive their TCP connections (link/mod.rs): a connection
//! killed under many busy flows is replaced and every byte still arrives, once
//! and in order; a session left without a connection past `outage_limit_s`
//! resets its flows, and the applications get an error, not a hang.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use gridsplitd::lanproto::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// 40 flows, both directions, up to 2 MB each, checked by sha256 at both ends,
/// while the WAN connection is killed three times mid-transfer (from either
/// side). Small flow windows keep the flows waiting on credit, so CREDIT
/// frames are in flight at every kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_wan_connection_mid_transfer_loses_no_byte() {
    within(90, async {
        let k = 40;
        let o = Opts {
            per_flow_buffer: 64 * 1024,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let n = 40usize;
        let sizes: Vec<(usize, usize)> = (0..n)
            .map(|i| {
                let big = i % 4 == 0;
                let up = if big { 8_000_000 } else { 8 + 3000 * i };
                let down = if big { 6_000_000 } else { 100 + 1000 * i };
                (up, down)
            })
            .collect();
        let sizes = std::sync::Arc::new(sizes);
        let all = start_flows(k, sizes.clone()).await;
        // Kill the connection while data moves, at about a tenth, a third and
        // a half of the bytes: from alpha (the dialer), from beta, then from
        // alpha again.
        let total: usize = sizes.iter().map(|(u, d)| u + d).sum();
        let moved = || {
            a.shared.metrics.relayed_bytes_out.load(Ordering::Relaxed)
                + b.shared.metrics.relayed_bytes_out.load(Ordering::Relaxed)
        };
        let mut kills = 0;
        for (g, share) in [(&a, 10), (&b, 3), (&a, 2)] {
            while moved() < (total / share) as u64 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let peer = if std::ptr::eq(g, &a) { "beta" } else { "alpha" };
            let link = g.shared.link_to(peer).expect("session kept");
            assert!(link.flow_count() > 0, "kill {kills}: no flow left to test");
            link.break_connection();
            kills += 1;
            wait_link(&a, "beta").await;
            wait_link(&b, "alpha").await;
        }
        all.await.unwrap();
        let (ma, mb) = (&a.shared.metrics, &b.shared.metrics);
        assert_eq!(
            ma.wan_reconnects.load(Ordering::Relaxed),
            kills,
            "every kill was resumed"
        );
        assert_eq!(mb.wan_reconnects.load(Ordering::Relaxed), kills);
        assert_eq!(
            ma.links_established.load(Ordering::Relaxed),
            1,
            "one session"
        );
        let replayed = ma.wan_bytes_replayed.load(Ordering::Relaxed)
            + mb.wan_bytes_replayed.load(Ordering::Relaxed);
        assert!(replayed > 0, "nothing was in flight at any kill");
        tokio::time::sleep(Duration::from_millis(100)).await;
        for g in [&a, &b] {
            let m = &g.shared.metrics;
            assert_eq!(m.flows_reset.load(Ordering::Relaxed), 0);
            assert_eq!(m.wan_protocol_errors.load(Ordering::Relaxed), 0);
            assert_eq!(m.resume_refused.load(Ordering::Relaxed), 0);
            assert_eq!(m.flows_active.load(Ordering::Relaxed), 0);
            assert_eq!(g.shared.send_pool.available_permits(), 32 << 20);
            assert_eq!(g.shared.recv_pool.available_permits(), 32 << 20);
        }
        // The replay buffer is bounded by what the peer may have in flight:
        // all flows are done, so once the keepalive has acked, it is small.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let st = a.shared.link_to("beta").unwrap().status();
        assert_eq!((st.state, st.reconnects), ("up", kills));
        assert!(
            st.replay_bytes < 4096,
            "replay holds {} bytes",
            st.replay_bytes
        );
        let m = http_get(a.admin_addr, "/metrics").await;
        assert!(
            m.contains("gridsplit_link_reconnects_total{peer=\"beta\"} 3"),
            "{m}"
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// The peer's gateway vanishes without a word (its connection just breaks,
/// and as the dialer it never comes back): the surviving gateway, which cannot
/// tell this from a WAN outage, holds its node's flow for `outage_limit_s`,
/// then resets it, and the node gets a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_down_past_the_outage_limit_resets_its_flows() {
    within(30, async {
        let k = 41;
        let o = Opts {
            outage_limit_s: 2.0,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let l = TcpListener::bind(addr(k, 1, 20, 5000)).await.unwrap();
        let server = sink(l);
        let (mut c, st) = gs_connect(
            ip(k, 2, 10),
            addr(k, 2, 254, LAN_PORT),
            addr(k, 1, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        c.write_all(b"hello").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Alpha (the dialer) goes away: its listeners and link vanish at once.
        let t0 = Instant::now();
        a.shared.stopping.cancel();
        a.shared.link_to("beta").unwrap().break_connection();
        drop(a);
        // Within the limit the flow is held: the node sees nothing.
        let mut one = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(1200), c.read(&mut one)).await;
        assert!(
            early.is_err(),
            "the flow ended before the outage limit: {early:?}"
        );
        let link = b.shared.link_to("alpha").expect("held");
        assert_eq!(link.status().state, "reconnecting");
        let st = http_get(b.admin_addr, "/status").await;
        assert!(st.contains("\"state\": \"reconnecting\""), "{st}");
        assert!(st.contains("\"flows_held\": 1"), "{st}");
        // Past it: a reset, within the limit plus a little.
        let (mut cr, mut cw) = c.split();
        expect_reset_while_writing(&mut cr, &mut cw, &[7u8; 1000], t0 + Duration::from_secs(2))
            .await;
        assert!(
            t0.elapsed() >= Duration::from_millis(1900),
            "{:?}",
            t0.elapsed()
        );
        let m = &b.shared.metrics;
        assert_eq!(m.sessions_expired.load(Ordering::Relaxed), 1);
        assert_eq!(m.flows_reset_outage.load(Ordering::Relaxed), 1);
        assert!(b.shared.link_to("alpha").is_none());
        let (_, st) = gs_connect(
            ip(k, 2, 10),
            addr(k, 2, 254, LAN_PORT),
            addr(k, 1, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::NoLink);
        server.abort();
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// A gateway killed and restarted (new process, no session) while its peer
/// held one: the old session's flows are reset at once, not after the outage
/// limit (the dialer sees the dead gateway refuse its SYN, or the restarted
/// one refuse the resume), and a new session relays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_peer_ends_the_old_session_and_its_flows_at_once() {
    within(30, async {
        let k = 42;
        let o = Opts::default();
        let (a, b) = pair(k, &o).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let (mut c, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        let (_s, _, _) = accept_relayed(&l).await;
        let old = a.shared.link_to("beta").unwrap().session;
        // Beta dies without a goodbye and a new beta starts.
        b.shared.stopping.cancel();
        b.shared.link_to("alpha").unwrap().break_connection();
        drop(b);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t0 = Instant::now();
        let b2 = gateway(k, 2, PSK, &o).await;
        let (mut cr, mut cw) = c.split();
        expect_reset_while_writing(&mut cr, &mut cw, &[1u8; 1000], t0).await;
        wait_link(&a, "beta").await;
        assert_ne!(a.shared.link_to("beta").unwrap().session, old);
        drop(l);
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let sizes = std::sync::Arc::new(vec![(5000, 5000)]);
        let srv = tokio::spawn(serve(l, 1, sizes, 1, k));
        flow(k, 1, 11, addr(k, 2, 20, 5000), 0, 5000, 5000).await;
        srv.await.unwrap();
        a.stop().await;
        b2.stop().await;
    })
    .await
    .expect("timed out");
}

/// A gateway of the previous protocol version is refused with a message that
/// names both versions, and nothing is relayed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_on_the_old_protocol_is_refused() {
    within(15, async {
        let k = 43;
        let b = gateway(k, 2, PSK, &Opts::default()).await;
        let mut s = tokio::net::TcpStream::connect(addr(k, 2, 254, WAN_PORT))
            .await
            .unwrap();
        // A version 1 HELLO header, as a gateway before sessions sent it.
        let mut hello = vec![1u8, 1, 0, 0, 0, 0, 0, 46];
        hello.extend_from_slice(b"GSW1");
        hello.extend_from_slice(&65536u32.to_be_bytes());
        hello.extend_from_slice(&[9u8; 32]);
        hello.push(5);
        hello.extend_from_slice(b"alpha");
        s.write_all(&hello).await.unwrap();
        let closed = within(5, read_until_closed(&mut s)).await;
        assert!(closed.is_ok(), "an old peer's connection was kept open");
        assert_eq!(b.shared.metrics.auth_failures.load(Ordering::Relaxed), 1);
        assert!(b.shared.link_to("alpha").is_none());
        let e = gridsplitd::auth::AuthError::Version(1).to_string();
        assert!(e.contains("version 1") && e.contains("version 4"), "{e}");
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// An ACK beyond what was ever sent closes that connection only: the session
/// is held, as in an outage, and the same peer resumes it on a new connection.
/// A resume whose received count is beyond what beta sent is refused, and the
/// session starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_out_of_range_closes_the_connection_and_the_session_resumes() {
    use gridsplitd::transfer::WanConn;
    use gridsplitd::wire::Frame;
    within(30, async {
        let k = 44;
        let o = Opts::default();
        let b = gateway(k, 2, PSK, &o).await;
        // We play alpha by hand, with the right key.
        let dial = || dial_as_alpha(k);
        let mut conn = dial().await;
        assert!(
            !session(&mut conn, 0xabc, 0, false).await.resume,
            "a new session"
        );
        wait_link(&b, "alpha").await;
        conn.send_frame(&Frame::Ack { received: 1 << 40 })
            .await
            .unwrap();
        let closed = within(5, async { while conn.recv_frame().await.is_ok() {} }).await;
        assert!(closed.is_ok(), "the connection stayed open");
        let link = b.shared.link_to("alpha").expect("the session is held");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(link.status().state, "reconnecting");
        assert_eq!(
            b.shared.metrics.wan_protocol_errors.load(Ordering::Relaxed),
            0
        );
        // The same session resumes on a new connection.
        let mut conn = dial().await;
        assert!(session(&mut conn, 0xabc, 0, true).await.resume, "resumed");
        wait_link(&b, "alpha").await;
        assert_eq!(
            b.shared
                .link_to("alpha")
                .unwrap()
                .reconnects
                .load(Ordering::Relaxed),
            1
        );
        drop(conn);
        // A resume claiming more than beta ever sent: refused, a new session.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut conn = dial().await;
        assert!(
            !session(&mut conn, 0xabc, 1 << 40, true).await.resume,
            "refused"
        );
        assert_eq!(b.shared.metrics.resume_refused.load(Ordering::Relaxed), 1);
        b.stop().await;
    })
    .await
    .expect("timed out");
}
