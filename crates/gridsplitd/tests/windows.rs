//! Receive windows and the gateway's receive budget (flow/mod.rs): flows open
//! with a small window, so many more flows than `total_buffer / per_flow_buffer`
//! stay open at once; a bulk flow's window grows; and a gateway whose budget is
//! held by open flows refuses a new one within `connect_timeout` instead of
//! leaving the node waiting.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use gridsplitd::lanproto::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// 300 concurrent flows where full windows would fit 8 (64 MiB budget, 4 MiB per
/// flow), each echoing a message; then bulk flows both ways still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_flows_fit_a_budget_of_a_few_full_windows() {
    within(60, async {
        let k = 49;
        let o = Opts {
            per_flow_buffer: 4 << 20,
            total_buffer: 64 << 20,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let n = 300;
        let echo = tokio::spawn(async move {
            let mut held = Vec::new();
            for _ in 0..n {
                let (mut s, _, _) = accept_relayed(&l).await;
                let mut b = [0u8; 8];
                s.read_exact(&mut b).await.unwrap();
                s.write_all(&b).await.unwrap();
                held.push(s);
            }
            held
        });
        let mut open = Vec::new();
        for i in 0..n {
            let (mut c, st) = gs_connect(
                ip(k, 1, 10 + (i % 100) as u8),
                addr(k, 1, 254, LAN_PORT),
                addr(k, 2, 20, 5000),
            )
            .await;
            assert_eq!(st, Status::Ok, "flow {i} refused");
            c.write_all(&(i as u64).to_be_bytes()).await.unwrap();
            let mut r = [0u8; 8];
            c.read_exact(&mut r).await.unwrap();
            assert_eq!(u64::from_be_bytes(r), i as u64);
            open.push(c);
        }
        let held = echo.await.unwrap();
        assert_eq!(
            a.shared.metrics.flows_active.load(Ordering::Relaxed),
            n as u64
        );
        // A bulk flow while they are open: its window grows beyond the initial one.
        let sizes = Arc::new(vec![(20_000_000, 1000), (1000, 20_000_000)]);
        start_flows(k, sizes).await.await.unwrap();
        drop(open);
        drop(held);
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// A budget held by open flows: the next open is refused (GSa1 TIMEOUT) within
/// about connect_timeout, counted, and opens succeed again once flows close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_refuses_new_flows_instead_of_hanging() {
    within(30, async {
        let k = 50;
        let o = Opts {
            per_flow_buffer: 16 * 1024,
            total_buffer: 256 * 1024,
            connect_timeout_ms: 500,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let acc = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok(Ok((s, _))) =
                tokio::time::timeout(Duration::from_secs(5), l.accept()).await
            {
                held.push(s);
            }
            held
        });
        // 128 KiB of receive budget each side, 16 KiB of it the reserve: 7
        // windows of 16 KiB, then 4 of 4 KiB.
        let mut open = Vec::new();
        for i in 0..11 {
            let (c, st) = gs_connect(
                ip(k, 1, 10 + i),
                addr(k, 1, 254, LAN_PORT),
                addr(k, 2, 20, 5000),
            )
            .await;
            assert_eq!(st, Status::Ok, "flow {i}");
            open.push(c);
        }
        let t0 = Instant::now();
        let (_c, st) = gs_connect(
            ip(k, 1, 40),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Timeout);
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(
            a.shared
                .metrics
                .flows_refused_budget
                .load(Ordering::Relaxed),
            1
        );
        // Flows end when both ends close: their windows go back to the budget.
        drop(open);
        acc.abort();
        let _ = acc.await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (_c, st) = gs_connect(
            ip(k, 1, 41),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(
            st,
            Status::Refused,
            "the budget is free again (nothing listens now)"
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}

/// A bulk flow's receive window grows from the initial 16 KiB to
/// `per_flow_buffer` as data moves through it (status shows it), and a flow
/// that carried one small message keeps the initial window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_flow_grows_its_window_and_an_idle_one_does_not() {
    within(30, async {
        let k = 51;
        let o = Opts {
            per_flow_buffer: 1 << 20,
            ..Opts::default()
        };
        let (a, b) = pair(k, &o).await;
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let (mut big, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        let (mut big_srv, _, _) = accept_relayed(&l).await;
        let (mut small, st) = gs_connect(
            ip(k, 1, 11),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        let (mut small_srv, _, _) = accept_relayed(&l).await;
        small.write_all(b"hello").await.unwrap();
        let mut h = [0u8; 5];
        small_srv.read_exact(&mut h).await.unwrap();
        let data = pattern(1, 8 << 20);
        let w = tokio::spawn(async move {
            big.write_all(&data).await.unwrap();
            big
        });
        let mut got = vec![0u8; 8 << 20];
        big_srv.read_exact(&mut got).await.unwrap();
        assert_eq!(sha(&got), sha(&pattern(1, 8 << 20)));
        let _big = w.await.unwrap();
        // Beta received both flows' data: its windows are the ones that grew.
        let (flows, _) = b.shared.link_to("alpha").unwrap().flow_statuses(10);
        let mut windows: Vec<u64> = flows.iter().map(|f| f.window).collect();
        windows.sort();
        assert_eq!(windows, vec![16 * 1024, 1 << 20], "{flows:?}");
        drop(small);
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("timed out");
}
