//! End to end through two real gateways (in-process, real TCP on loopback): what a
//! node observes must be what a direct TCP connection would have given it.
//! Each test has its own K (see common/mod.rs) and a hard time bound.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use gridsplitd::lanproto::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn many_flows(k: u8, strategy: &'static str, n: usize, max: usize) {
    let (a, b) = pair(
        k,
        &Opts {
            strategy,
            // The fifo run also asks for quick ACKs on its link (one plain connection).
            quickack: strategy == "fifo",
            ..Opts::default()
        },
    )
    .await;
    // Sizes: mostly small (MPI-like), some large; deterministic per test.
    let sizes: Vec<(usize, usize)> = (0..n)
        .map(|i| {
            let p = pattern(i as u64 + 1000, 16);
            let pick = |x: u8, y: u8| {
                let v = u16::from_be_bytes([x, y]) as usize;
                if x.is_multiple_of(4) {
                    8 + v * (max / 65536).max(1) % max
                } else {
                    8 + v % 4096
                }
            };
            (pick(p[0], p[1]), pick(p[2], p[3]) - 8)
        })
        .collect();
    start_flows(k, std::sync::Arc::new(sizes))
        .await
        .await
        .unwrap();
    let m = &a.shared.metrics;
    assert_eq!(
        m.flows_opened.load(Ordering::Relaxed)
            + b.shared.metrics.flows_opened.load(Ordering::Relaxed),
        n as u64
    );
    assert_eq!(m.wan_protocol_errors.load(Ordering::Relaxed), 0);
    // All flows ended cleanly: no resets, and the budgets are whole again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for g in [&a, &b] {
        assert_eq!(g.shared.metrics.flows_reset.load(Ordering::Relaxed), 0);
        assert_eq!(g.shared.metrics.flows_active.load(Ordering::Relaxed), 0);
        assert_eq!(
            g.shared.send_pool.available_permits(),
            32 << 20,
            "send budget leaked"
        );
        assert_eq!(
            g.shared.recv_pool.available_permits(),
            32 << 20,
            "receive budget leaked"
        );
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_flows_both_directions_fair() {
    within(90, many_flows(11, "fair", 50, 2 << 20))
        .await
        .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_with_aggregate_strategy() {
    within(90, many_flows(12, "aggregate", 30, 512 << 10))
        .await
        .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_with_fifo_strategy() {
    within(90, many_flows(13, "fifo", 30, 512 << 10))
        .await
        .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_keeps_the_other_direction() {
    within(30, async {
        let k = 14;
        let (a, b) = pair(k, &Opts::default()).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _, origin) = accept_relayed(&l).await;
            let req = read_all(&mut s).await.unwrap(); // EOF = the client's half-close
            assert_eq!(req, b"request");
            // Our direction is still open after the client's SHUT_WR.
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.write_all(b"late reply").await.unwrap();
            s.shutdown().await.unwrap();
            origin
        });
        let (mut c, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        c.write_all(b"request").await.unwrap();
        c.shutdown().await.unwrap();
        assert_eq!(read_all(&mut c).await.unwrap(), b"late reply");
        let origin = server.await.unwrap();
        assert_eq!(
            origin,
            c.local_addr().unwrap(),
            "GSo1 carries the real client address"
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_forbidden_destinations() {
    within(30, async {
        let k = 15;
        let (a, b) = pair(k, &Opts::default()).await;
        let gw = addr(k, 1, 254, LAN_PORT);
        // Nothing listens there: the far connect is refused.
        let (_, st) = gs_connect(ip(k, 1, 10), gw, addr(k, 2, 21, 5999)).await;
        assert_eq!(st, Status::Refused);
        // Outside every site: never an open relay.
        let (_, st) = gs_connect(ip(k, 1, 10), gw, addr(k, 9, 9, 80)).await;
        assert_eq!(st, Status::Forbidden);
        // Inside our own site: not for the gateway either.
        let (_, st) = gs_connect(ip(k, 1, 10), gw, addr(k, 1, 11, 80)).await;
        assert_eq!(st, Status::Forbidden);
        // A gateway's own listener: never a relay destination (no loops).
        let (_, st) = gs_connect(ip(k, 1, 10), gw, addr(k, 2, 254, LAN_PORT)).await;
        assert_eq!(st, Status::Forbidden);
        // From a node outside our site's subnet.
        let (_, st) = gs_connect(ip(k, 3, 10), gw, addr(k, 2, 20, 80)).await;
        assert_eq!(st, Status::Forbidden);
        // Garbage instead of GSq1.
        let mut s = tokio::net::TcpStream::connect(gw).await.unwrap();
        s.write_all(&[0x55; 24]).await.unwrap();
        let mut r = [0u8; 8];
        s.read_exact(&mut r).await.unwrap();
        assert_eq!(
            gridsplitd::lanproto::parse_reply(&r),
            Some(Status::BadRequest)
        );
        assert_eq!(
            s.read(&mut r).await.unwrap(),
            0,
            "closed after a non-zero status"
        );
        assert_eq!(a.shared.metrics.reply_count(Status::Forbidden), 4);
        assert_eq!(
            b.shared.metrics.remote_opens[Status::Refused as usize].load(Ordering::Relaxed),
            1
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_receiver_only_stops_its_own_flow() {
    within(60, async {
        let k = 16;
        let o = Opts {
            per_flow_buffer: 64 * 1024,
            total_buffer: 4 << 20,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let stalled_l = TcpListener::bind(addr(k, 2, 30, 5000)).await.unwrap();
        let big = pattern(7, 16 << 20);
        let big2 = big.clone();
        let writer = tokio::spawn(async move {
            let (mut s, st) = gs_connect(
                ip(k, 1, 10),
                addr(k, 1, 254, LAN_PORT),
                addr(k, 2, 30, 5000),
            )
            .await;
            assert_eq!(st, Status::Ok);
            s.write_all(&big2).await.unwrap();
            s.shutdown().await.unwrap();
            Instant::now()
        });
        let (mut stalled, _, _) = accept_relayed(&stalled_l).await;
        // Let the stalled flow fill every buffer on its path.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Meanwhile other flows go through, in both directions.
        let lb = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let la = TcpListener::bind(addr(k, 1, 20, 5000)).await.unwrap();
        let n = 10;
        let sizes = std::sync::Arc::new(
            (0..n)
                .map(|i| (8 + i * 10_000, i * 7_000))
                .collect::<Vec<_>>(),
        );
        let sb = tokio::spawn(serve(lb, n / 2, sizes.clone(), 1, k));
        let sa = tokio::spawn(serve(la, n / 2, sizes.clone(), 2, k));
        let started = Instant::now();
        let mut cs = Vec::new();
        for i in 0..n {
            let (from, dst) = if i % 2 == 0 {
                (1, addr(k, 2, 20, 5000))
            } else {
                (2, addr(k, 1, 20, 5000))
            };
            cs.push(tokio::spawn(flow(
                k,
                from,
                40 + i as u8,
                dst,
                i as u64,
                sizes[i].0,
                sizes[i].1,
            )));
        }
        for c in cs {
            c.await.unwrap();
        }
        sa.await.unwrap();
        sb.await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            !writer.is_finished(),
            "16 MB can't have fit in 64 KiB windows and socket buffers"
        );
        // Memory stayed bounded: the gateways hold at most a few windows of it.
        let held = (2 << 20) - a.shared.send_pool.available_permits();
        assert!(
            held <= 64 * 1024,
            "sender gateway queues {held} bytes for the stalled flow"
        );
        // Now the receiver reads: everything arrives, in order.
        let got = read_all(&mut stalled).await.unwrap();
        assert_eq!(sha(&got), sha(&big));
        writer.await.unwrap();
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_gateway_mid_transfer_resets_clients_quickly() {
    within(30, async {
        let k = 17;
        let (a, b) = pair(k, &Opts::default()).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _, _) = accept_relayed(&l).await;
            // Read until the relay dies: this side must see an error or EOF too.
            read_until_closed(&mut s).await;
        });
        let (mut c, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        let chunk = vec![1u8; 65536];
        for _ in 0..20 {
            c.write_all(&chunk).await.unwrap();
        }
        let t0 = Instant::now();
        b.stop().await;
        // The client keeps writing (and reading): it must get an error, not hang.
        let (mut cr, mut cw) = c.split();
        expect_reset_while_writing(&mut cr, &mut cw, &chunk, t0).await;
        within(5, server).await.expect("server side hung").unwrap();
        // The surviving gateway refuses new flows to the dead site (NO_LINK).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (_, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::NoLink);
        a.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_the_wrong_key_gets_nothing_relayed() {
    within(30, async {
        let k = 18;
        let o = Opts::default();
        let a = gateway(k, 1, PSK, &o).await;
        let b = gateway(k, 2, b"another-key-0123456789abcdef", &o).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(a.shared.link_to("beta").is_none());
        assert!(b.shared.link_to("alpha").is_none());
        assert!(a.shared.metrics.auth_failures.load(Ordering::Relaxed) >= 1);
        assert!(b.shared.metrics.auth_failures.load(Ordering::Relaxed) >= 1);
        let (_, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::NoLink);
        // And nothing ever reached the destination.
        assert!(tokio::time::timeout(Duration::from_millis(200), l.accept())
            .await
            .is_err());
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_wan_port_closes_only_that_connection() {
    within(30, async {
        let k = 19;
        let (a, b) = pair(k, &Opts::default()).await;
        for junk in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            &[1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff][..],
            &[0u8; 64][..],
        ] {
            let mut s = tokio::net::TcpStream::connect(addr(k, 2, 254, WAN_PORT))
                .await
                .unwrap();
            let _ = s.write_all(junk).await;
            // The gateway talks (its HELLO) and then hangs up on us.
            let closed = within(5, read_until_closed(&mut s)).await;
            assert!(closed.is_ok(), "gateway kept a garbage connection open");
        }
        assert!(b.shared.metrics.wan_protocol_errors.load(Ordering::Relaxed) >= 3);
        // The real link was never disturbed and still relays.
        assert!(b.shared.link_to("alpha").is_some());
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let sizes = std::sync::Arc::new(vec![(1000, 1000)]);
        let srv = tokio::spawn(serve(l, 1, sizes, 1, k));
        flow(k, 1, 10, addr(k, 2, 20, 5000), 0, 1000, 1000).await;
        srv.await.unwrap();
        // The admin endpoint reports it all.
        let m = http_get(b.admin_addr, "/metrics").await;
        assert!(m.contains("gridsplit_link_up{peer=\"alpha\"} 1"), "{m}");
        assert!(m.contains("gridsplit_wan_protocol_errors_total"), "{m}");
        let s = http_get(a.admin_addr, "/status").await;
        let body = &s[s.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["links"][0]["peer"], "beta");
        assert!(v["links"][0]["tcp_info"][0]["rtt_us"].is_u64());
        assert!(http_get(a.admin_addr, "/nope")
            .await
            .starts_with("HTTP/1.0 404"));
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_peer_breaking_the_protocol_loses_its_link() {
    use gridsplitd::transfer::WanConn;
    use gridsplitd::wire::Frame;
    within(30, async {
        let k = 20;
        let o = Opts::default();
        // Only beta runs; we play alpha by hand, with the right key.
        let b = gateway(k, 2, PSK, &o).await;
        let mut conn = dial_as_alpha(k).await;
        // A resume of a session beta never had: refused (counted), and a new
        // session starts instead.
        let answer = session(&mut conn, 0x5eed, 1234, true).await;
        assert_eq!((answer.session, answer.resume), (0x5eed, false));
        assert_eq!(b.shared.metrics.resume_refused.load(Ordering::Relaxed), 1);
        wait_link(&b, "alpha").await;
        // DATA for a flow nobody opened.
        conn.send_frame(&Frame::Data {
            flow: 77,
            data: bytes::Bytes::from_static(b"x"),
        })
        .await
        .unwrap();
        let closed = within(5, async {
            loop {
                if conn.recv_frame().await.is_err() {
                    break;
                }
            }
        })
        .await;
        assert!(closed.is_ok());
        assert_eq!(
            b.shared.metrics.wan_protocol_errors.load(Ordering::Relaxed),
            1
        );
        assert!(b.shared.link_to("alpha").is_none());
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// GET /status from a gateway's admin endpoint, parsed.
async fn status_of(g: &gridsplitd::Gateway) -> serde_json::Value {
    let resp = http_get(g.admin_addr, "/status").await;
    let body = resp.split_once("\r\n\r\n").expect("HTTP head").1;
    serde_json::from_str(body).expect("status JSON")
}

/// The /status entry of the flow from `src` to `dst`, if listed.
fn flow_entry(st: &serde_json::Value, src: &str, dst: &str) -> Option<serde_json::Value> {
    st["flows"]
        .as_array()?
        .iter()
        .find(|f| f["src"] == src && f["dst"] == dst)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_each_flow_with_its_bytes_and_endpoints() {
    within(30, async {
        let k = 25;
        let (a, b) = pair(k, &Opts::default()).await;
        let dst = addr(k, 2, 20, 5000);
        let l = TcpListener::bind(dst).await.unwrap();
        // (bytes alpha→beta, bytes beta→alpha) per flow.
        let sizes = [(100_000usize, 50_000usize), (3_000, 7_000)];
        let mut clients = Vec::new();
        let mut servers = Vec::new();
        for (i, &(up, down)) in sizes.iter().enumerate() {
            let (mut c, st) =
                gs_connect(ip(k, 1, 10 + i as u8), addr(k, 1, 254, LAN_PORT), dst).await;
            assert_eq!(st, Status::Ok);
            let (mut s, _, origin) = accept_relayed(&l).await;
            assert_eq!(origin, c.local_addr().unwrap());
            c.write_all(&pattern(i as u64, up)).await.unwrap();
            let mut got = vec![0u8; up];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(&pattern(i as u64 + 10, down)).await.unwrap();
            let mut got = vec![0u8; down];
            c.read_exact(&mut got).await.unwrap();
            clients.push(c);
            servers.push(s);
        }
        // Both flows still open; the counters settle right after the writes.
        let src: Vec<String> = clients
            .iter()
            .map(|c| c.local_addr().unwrap().to_string())
            .collect();
        let dst_s = dst.to_string();
        let expect = |g: &str, i: usize| {
            let (up, down) = sizes[i];
            if g == "a" {
                ("local", up as u64, down as u64)
            } else {
                ("remote", down as u64, up as u64)
            }
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        for (name, g) in [("a", &a), ("b", &b)] {
            for (i, src_i) in src.iter().enumerate() {
                let (origin, out, inn) = expect(name, i);
                let f = loop {
                    let st = status_of(g).await;
                    assert_eq!(st["flows_listed_max"], 256);
                    assert_eq!(st["flows_truncated"], 0);
                    let f = flow_entry(&st, src_i, &dst_s);
                    if let Some(f) = &f {
                        if f["bytes_out"] == out && f["bytes_in"] == inn && f["queued_bytes"] == 0 {
                            break f.clone();
                        }
                    }
                    assert!(
                        Instant::now() < deadline,
                        "gateway {name}, flow {i}: {f:?} (want out {out}, in {inn})"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                assert_eq!(f["origin"], origin);
                assert_eq!(f["state"], "open");
                assert_eq!(f["peer"], if name == "a" { "beta" } else { "alpha" });
                assert!(f["frames_out"].as_u64().unwrap() > 0, "{f}");
                assert!(f["credit"].as_u64().is_some(), "{f}");
                assert!(f["age_s"].as_f64().unwrap() >= 0.0, "{f}");
            }
        }
        // A half-close shows in the state, on both sides.
        clients[1].shutdown().await.unwrap();
        let mut eof = [0u8; 1];
        assert_eq!(servers[1].read(&mut eof).await.unwrap(), 0);
        let f = flow_entry(&status_of(&a).await, &src[1], &dst_s).unwrap();
        assert_eq!(f["state"], "half-closed-out");
        let f = flow_entry(&status_of(&b).await, &src[1], &dst_s).unwrap();
        assert_eq!(f["state"], "half-closed-in");
        drop(clients);
        drop(servers);
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_strategy_counts_the_chunks_it_packs() {
    within(30, async {
        let k = 26;
        let (a, b) = pair(
            k,
            &Opts {
                strategy: "aggregate",
                ..Opts::default()
            },
        )
        .await;
        let dst = addr(k, 2, 20, 5000);
        let l = TcpListener::bind(dst).await.unwrap();
        // Receivers that just drain.
        tokio::spawn(async move {
            loop {
                let (mut s, _, _) = accept_relayed(&l).await;
                tokio::spawn(async move { read_all(&mut s).await });
            }
        });
        let packed =
            |g: &gridsplitd::Gateway| g.shared.metrics.chunks_aggregated.load(Ordering::Relaxed);
        // Many small writes from several flows at once: while one write holds the
        // link, the others' chunks pile up and leave packed in BATCH frames.
        // Packing depends on timing, so rounds go on until it has happened.
        let deadline = Instant::now() + Duration::from_secs(15);
        while packed(&a) == 0 {
            assert!(Instant::now() < deadline, "no chunk was ever aggregated");
            let mut writers = Vec::new();
            for i in 0..8u8 {
                writers.push(tokio::spawn(async move {
                    let (mut c, st) =
                        gs_connect(ip(k, 1, 10 + i), addr(k, 1, 254, LAN_PORT), dst).await;
                    assert_eq!(st, Status::Ok);
                    for j in 0..200u32 {
                        c.write_all(&j.to_be_bytes().repeat(25)).await.unwrap();
                    }
                    c.shutdown().await.unwrap();
                    let _ = read_all(&mut c).await;
                }));
            }
            for w in writers {
                w.await.unwrap();
            }
        }
        let m = &a.shared.metrics;
        let batches = m.batch_frames.load(Ordering::Relaxed);
        assert!(
            batches > 0 && packed(&a) >= 2 * batches,
            "each BATCH packs 2+ chunks"
        );
        let st = status_of(&a).await;
        let link = &st["links"][0];
        assert!(link["chunks_aggregated"].as_u64().unwrap() >= 2, "{link}");
        assert!(link["batch_frames"].as_u64().unwrap() >= 1, "{link}");
        let text = http_get(a.admin_addr, "/metrics").await;
        for name in [
            "gridsplit_chunks_aggregated_total",
            "gridsplit_batch_frames_total",
        ] {
            let v: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing"))
                .parse()
                .unwrap();
            assert!(v > 0, "{name} = {v}");
        }
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}
