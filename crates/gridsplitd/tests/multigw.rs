//! Sites with several gateways (docs/protocol.md §5): every gateway links to
//! every gateway of the other site, a new flow takes the destination site's
//! gateway its node pair names (collect/route.rs) while that one's link is up,
//! and the next one up otherwise. Real gateways in one process on loopback, as in e2e.rs.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use gridsplitd::collect::route::spread_index;
use gridsplitd::lanproto::Status;
use gridsplitd::Gateway;
use tokio::net::TcpListener;

/// Two gateways for each site.
fn two_each() -> Opts {
    Opts {
        gateways: [2, 2],
        ..Opts::default()
    }
}

/// The port of the test servers.
const PORT: u16 = 6000;

/// A destination host of `to_site`, from host 20 on, that flows from `node` go
/// to gateway `index` of (of two) from: the node pair decides, not the port.
fn host_to(k: u8, node: IpAddr, to_site: u8, index: usize) -> u8 {
    (20..40)
        .find(|&h| spread_index(node, addr(k, to_site, h, PORT), 2) == index)
        .expect("a host for each gateway")
}

/// Bytes the link from `g` to the gateway `peer` has sent and received.
fn link_bytes(g: &Gateway, peer: &str) -> (u64, u64) {
    let l = g
        .shared
        .link_to(peer)
        .unwrap_or_else(|| panic!("no link to {peer}"));
    (
        l.bytes_out.load(Ordering::Relaxed),
        l.bytes_in.load(Ordering::Relaxed),
    )
}

/// Runs flows `seeds` of `sizes` from `from_site`'s node 10 through its first
/// gateway to `dst`, a server there checking each byte for byte both ways.
async fn flows_to(
    k: u8,
    from_site: u8,
    dst: SocketAddr,
    seeds: &[u64],
    sizes: &Arc<Vec<(usize, usize)>>,
) {
    let l = TcpListener::bind(dst).await.unwrap();
    let server = tokio::spawn(serve(l, seeds.len(), sizes.clone(), from_site, k));
    let clients: Vec<_> = seeds
        .iter()
        .map(|&s| {
            let (up, down) = sizes[s as usize];
            tokio::spawn(flow(k, from_site, 10, dst, s, up, down))
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_spread_over_both_gateways_and_fail_over_when_one_stops() {
    within(60, async {
        let k = 70;
        let a0 = gateway_at(k, 1, 0, PSK, &two_each()).await;
        let a1 = gateway_at(k, 1, 1, PSK, &two_each()).await;
        let b0 = gateway_at(k, 2, 0, PSK, &two_each()).await;
        let b1 = gateway_at(k, 2, 1, PSK, &two_each()).await;
        assert_eq!(a1.shared.cfg.id, "alpha/1");
        // The full mesh between the sites; none within a site.
        for a in [&a0, &a1] {
            wait_link(a, "beta/0").await;
            wait_link(a, "beta/1").await;
            assert!(a.shared.link_to("alpha/0").is_none() && a.shared.link_to("alpha/1").is_none());
        }
        for b in [&b0, &b1] {
            wait_link(b, "alpha/0").await;
            wait_link(b, "alpha/1").await;
        }
        let link = a0.shared.link_to("beta/1").unwrap();
        assert_eq!((link.site.as_str(), link.peer.as_str()), ("beta", "beta/1"));
        // /status: the gateway's own id and index, each link's peer id and site.
        let st = gridsplitd::admin::status_json(&a1.shared);
        assert_eq!(st["id"], "alpha/1");
        assert_eq!(st["gateway_index"], 1);
        let links = st["links"].as_array().unwrap();
        let shown: Vec<_> = links
            .iter()
            .map(|l| {
                (
                    l["peer"].clone(),
                    l["site"].clone(),
                    l["gateway_index"].clone(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [("beta/0", "beta", 0), ("beta/1", "beta", 1)].map(|(p, s, i)| (
                p.into(),
                s.into(),
                i.into()
            ))
        );

        // Node 10 of each site, through its site's first gateway, to hosts of
        // the other site whose pair with it goes to its gateway 0 and to its
        // gateway 1.
        let (na, nb) = (ip(k, 1, 10), ip(k, 2, 10));
        let to_b = [host_to(k, na, 2, 0), host_to(k, na, 2, 1)];
        let to_a = [host_to(k, nb, 1, 0), host_to(k, nb, 1, 1)];
        // Consecutive hosts alternate (10 + 20 is even: gateway 0).
        assert_eq!((to_b, to_a), ([20, 21], [20, 21]));
        let sizes: Arc<Vec<(usize, usize)>> = Arc::new(
            (0..12)
                .map(|i| (200_000 + 7919 * i, 150_000 + 4099 * i))
                .collect(),
        );
        let before = [link_bytes(&a0, "beta/0"), link_bytes(&a0, "beta/1")];
        tokio::join!(
            flows_to(k, 1, addr(k, 2, to_b[0], PORT), &[0, 1], &sizes),
            flows_to(k, 1, addr(k, 2, to_b[1], PORT), &[2, 3], &sizes),
            flows_to(k, 2, addr(k, 1, to_a[0], PORT), &[4, 5], &sizes),
            flows_to(k, 2, addr(k, 1, to_a[1], PORT), &[6, 7], &sizes),
        );
        // Each of alpha/0's links carried its two flows both ways...
        for (j, peer) in ["beta/0", "beta/1"].into_iter().enumerate() {
            let (out, inn) = link_bytes(&a0, peer);
            let seeds = [2 * j, 2 * j + 1];
            let up: usize = seeds.iter().map(|&s| sizes[s].0).sum();
            let down: usize = seeds.iter().map(|&s| sizes[s].1).sum();
            assert!(out - before[j].0 >= up as u64, "{peer}: {out} B out");
            assert!(inn - before[j].1 >= down as u64, "{peer}: {inn} B in");
        }
        // ...and beta/0's flows reached both of alpha's gateways.
        for peer in ["alpha/0", "alpha/1"] {
            let (out, _) = link_bytes(&b0, peer);
            assert!(out >= 2 * 150_000, "beta/0 to {peer}: {out} B out");
        }
        assert_eq!(b1.shared.metrics.flows_opened.load(Ordering::Relaxed), 0);
        assert_eq!(
            b1.shared.metrics.remote_opens[Status::Ok as usize].load(Ordering::Relaxed),
            2
        );

        // beta/1 stops: its peers end their sessions with it at its goodbye.
        b1.stop().await;
        for _ in 0..200 {
            if a0.shared.link_to("beta/1").is_none_or(|l| !l.is_up()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(a0.shared.link_to("beta/1").is_none_or(|l| !l.is_up()));
        let down = gridsplitd::admin::status_json(&a0.shared)["peers_down"].clone();
        assert_eq!(down, serde_json::json!(["beta/1"]));
        // New flows whose pair names beta/1 now go through beta/0, and still
        // arrive whole; those whose pair names beta/0 too.
        let opened = b0.shared.metrics.remote_opens[Status::Ok as usize].load(Ordering::Relaxed);
        let (out0, _) = link_bytes(&a0, "beta/0");
        tokio::join!(
            flows_to(k, 1, addr(k, 2, to_b[1], PORT), &[8, 9], &sizes),
            flows_to(k, 1, addr(k, 2, to_b[0], PORT), &[10], &sizes),
        );
        assert_eq!(
            b0.shared.metrics.remote_opens[Status::Ok as usize].load(Ordering::Relaxed),
            opened + 3
        );
        let up: usize = [8, 9, 10].iter().map(|&s| sizes[s].0).sum();
        let (out, _) = link_bytes(&a0, "beta/0");
        assert!(
            out - out0 >= up as u64,
            "beta/0: {} B out since",
            out - out0
        );
        for g in [&a0, &a1, &b0] {
            assert_eq!(
                g.shared.metrics.wan_protocol_errors.load(Ordering::Relaxed),
                0
            );
        }
        for g in [a0, a1, b0] {
            g.stop().await;
        }
    })
    .await
    .expect("timed out");
}

/// A gateway accepts a peer id only if it is a configured gateway of another
/// site: with two alpha gateways, "alpha/0" is one, "alpha" and "alpha/2" not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_configured_gateway_ids_are_accepted() {
    within(30, async {
        let k = 71;
        let b0 = gateway_at(k, 2, 0, PSK, &two_each()).await;
        // Authenticates as `own`, and seals the connection when that passes
        // (as a gateway would: a connection left unsealed counts as refused).
        let hello = |own: &'static str| async move {
            let mut conn = connect_to_beta(k).await;
            let limit = Duration::from_secs(2);
            let auth = gridsplitd::auth::handshake(
                &mut conn,
                PSK,
                own,
                65536,
                true,
                |s| s == "beta/0",
                limit,
            );
            let peer = auth.await?;
            gridsplitd::auth::secure(&mut conn, &peer, own, true, PSK, limit).await?;
            Ok::<_, gridsplitd::auth::AuthError>(peer.id)
        };
        assert_eq!(hello("alpha/0").await.unwrap(), "beta/0");
        let failures = b0.shared.metrics.auth_failures.load(Ordering::Relaxed);
        for bad in ["alpha", "alpha/2", "beta/1"] {
            assert!(hello(bad).await.is_err(), "{bad} was accepted");
        }
        // Counted once the acceptor's side of each refusal has run.
        let counted = || b0.shared.metrics.auth_failures.load(Ordering::Relaxed) - failures;
        for _ in 0..200 {
            if counted() >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(counted(), 3, "refusals counted by beta/0");
        b0.stop().await;
    })
    .await
    .expect("timed out");
}
