//! Links striped over several TCP connections (transfer/striped.rs,
//! link/stripes.rs): every byte of every flow arrives once and in order, a
//! broken set is resumed as a whole, the acceptor caps the count, and a JOIN
//! that does not belong to a waiting set joins nothing.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use gridsplitd::transfer::WanConn;
use gridsplitd::wire::Frame;

fn streams_of(g: &gridsplitd::Gateway, peer: &str) -> usize {
    let st = g.shared.link_to(peer).expect("link").status();
    assert_eq!(st.tcp_info.len(), st.streams, "one tcp_info per stream");
    st.streams
}

/// 30 flows both ways, one of them 24 MB, over a link striped four ways, and
/// the set broken twice mid-transfer: all checked by sha256 at both ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_striped_link_carries_every_byte_once_and_in_order() {
    within(90, async {
        let k = 45;
        let o = Opts {
            streams: 4,
            per_flow_buffer: 256 * 1024,
            // Every lane read asks for quick ACKs: the bytes must not care.
            quickack: true,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        assert_eq!(streams_of(&a, "beta"), 4);
        assert_eq!(streams_of(&b, "alpha"), 4);
        let sizes: Vec<(usize, usize)> = (0..30)
            .map(|i| match i {
                0 => (24_000_000, 1000),
                1 => (10, 6_000_000),
                _ => (100 + 7000 * i, 50 + 3000 * i),
            })
            .collect();
        let sizes = Arc::new(sizes);
        let total: usize = sizes.iter().map(|(u, d)| u + d).sum();
        let all = start_flows(k, sizes.clone()).await;
        let moved = || {
            a.shared.metrics.relayed_bytes_out.load(Ordering::Relaxed)
                + b.shared.metrics.relayed_bytes_out.load(Ordering::Relaxed)
        };
        for (g, peer, share) in [(&a, "beta", 5), (&b, "alpha", 2)] {
            while moved() < (total / share) as u64 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            g.shared.link_to(peer).unwrap().break_connection();
            wait_link(&a, "beta").await;
            wait_link(&b, "alpha").await;
        }
        all.await.unwrap();
        assert_eq!(streams_of(&a, "beta"), 4, "the set came back whole");
        for g in [&a, &b] {
            let m = &g.shared.metrics;
            assert_eq!(m.wan_reconnects.load(Ordering::Relaxed), 2);
            assert_eq!(m.links_established.load(Ordering::Relaxed), 1);
            assert_eq!(m.flows_reset.load(Ordering::Relaxed), 0);
            assert_eq!(m.wan_protocol_errors.load(Ordering::Relaxed), 0);
        }
        // Each lane carried a share of the bytes (pieces go round robin to
        // lanes that take them).
        let st = a.shared.link_to("beta").unwrap().status();
        let busy = st
            .tcp_info
            .iter()
            .filter(|t| t.bytes_sent > 100_000)
            .count();
        assert!(
            busy >= 2,
            "pieces went over {busy} lane(s): {:?}",
            st.tcp_info
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// The dialer proposes 4, the acceptor allows 2: the link runs on 2. An
/// unstriped acceptor keeps it on 1, and flows still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acceptor_caps_the_stream_count() {
    within(30, async {
        let k = 46;
        let four = Opts {
            streams: 4,
            ..Opts::default()
        };
        let a = gateway(k, 1, PSK, &four).await;
        let b = gateway(
            k,
            2,
            PSK,
            &Opts {
                streams: 2,
                ..Opts::default()
            },
        )
        .await;
        wait_link(&a, "beta").await;
        wait_link(&b, "alpha").await;
        assert_eq!(streams_of(&a, "beta"), 2);
        assert_eq!(streams_of(&b, "alpha"), 2);
        b.stop().await;
        a.stop().await;
        let k = 47;
        let a = gateway(k, 1, PSK, &four).await;
        let b = gateway(k, 2, PSK, &Opts::default()).await;
        wait_link(&a, "beta").await;
        assert_eq!(streams_of(&a, "beta"), 1);
        let sizes = Arc::new(vec![(300_000, 200_000), (20, 20)]);
        start_flows(k, sizes).await.await.unwrap();
        b.stop().await;
        a.stop().await;
    })
    .await
    .expect("timed out");
}

/// An authenticated peer's JOIN with a token no set is waiting for is closed,
/// and the established link is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_without_a_waiting_set_joins_nothing() {
    within(30, async {
        let k = 48;
        let o = Opts {
            streams: 3,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let session = b.shared.link_to("alpha").unwrap().session;
        let mut conn = dial_as_alpha(k).await;
        conn.send_frame(&Frame::Join {
            session,
            token: 0x1234_5679,
        })
        .await
        .unwrap();
        let closed = within(5, async { while conn.recv_frame().await.is_ok() {} }).await;
        assert!(closed.is_ok(), "a stray JOIN's connection stayed open");
        let st = b.shared.link_to("alpha").unwrap().status();
        assert_eq!((st.state, st.streams, st.reconnects), ("up", 3, 0));
        let sizes = Arc::new(vec![(100_000, 100_000)]);
        start_flows(k, sizes).await.await.unwrap();
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}
