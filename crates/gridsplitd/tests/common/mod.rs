//! Test harness: gateways for two sites on loopback, and clients/servers that
//! speak the LAN formats of docs/protocol.md the way libgridsplit.so would.
//!
//! Every test gets its own second octet K, so its sites are 127.K.1.0/24 (alpha)
//! and 127.K.2.0/24 (beta): tests run in parallel on fixed ports without clashing,
//! and the subnet checks are real (nodes bind to addresses inside or outside them).
//! A site may have several gateways (`Opts::gateways`): gateway J of a site is
//! host `gw_host(J)` of its subnet (254, 244, ...), and its config says so with
//! `gateway_index = J`.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use gridsplitd::config::Config;
use gridsplitd::lanproto::{self, Status};
use gridsplitd::Gateway;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

pub const LAN_PORT: u16 = 7100;
pub const WAN_PORT: u16 = 7200;
pub const ADMIN_PORT: u16 = 7300;

pub fn ip(k: u8, site: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, k, site, host))
}

pub fn addr(k: u8, site: u8, host: u8, port: u16) -> SocketAddr {
    SocketAddr::new(ip(k, site, host), port)
}

pub struct Opts {
    pub strategy: &'static str,
    pub per_flow_buffer: usize,
    pub total_buffer: usize,
    pub connect_timeout_ms: u64,
    pub keepalive_ms: u64,
    /// `[wan] socket_buffer`; 0 = derived from bandwidth × RTT.
    pub wan_socket_buffer: u64,
    /// `[wan] outage_limit_s`.
    pub outage_limit_s: f64,
    /// `[wan] streams`.
    pub streams: u8,
    /// `[wan] encryption`.
    pub encryption: &'static str,
    /// `[wan] quickack`.
    pub quickack: bool,
    /// Beta's gateway_wan is 127.K.2.253 (a man in the middle the test runs)
    /// instead of its wan_listen, 127.K.2.254.
    pub via_proxy: bool,
    /// Gateways of alpha and of beta (each at least 1).
    pub gateways: [u8; 2],
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            strategy: "fair",
            per_flow_buffer: 256 * 1024,
            total_buffer: 64 << 20,
            connect_timeout_ms: 2000,
            keepalive_ms: 300,
            wan_socket_buffer: 0,
            outage_limit_s: 120.0,
            streams: 1,
            encryption: "noise",
            quickack: false,
            via_proxy: false,
            gateways: [1, 1],
        }
    }
}

/// Test K's directory for configs and keys. Named by K alone, not by process:
/// each test owns its K (its 127.K.x.y addresses too, so two runs of one test
/// cannot overlap anyway), its files are rewritten on every run, and the
/// directories stay as many as the tests instead of growing with every run.
pub fn dir(k: u8) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gridsplitd-e2e-{k}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The host part of gateway `index`'s addresses in its site's subnet.
pub fn gw_host(index: u8) -> u8 {
    254 - 10 * index
}

/// Whether `a` is the LAN address of a gateway of `site` in test K.
pub fn is_gateway_ip(k: u8, site: u8, a: IpAddr) -> bool {
    (0..4).any(|j| a == ip(k, site, gw_host(j)))
}

/// Writes the config of `site` (1 = alpha, 2 = beta) for test K and returns its path.
pub fn write_config(k: u8, site: u8, psk: &[u8], o: &Opts) -> PathBuf {
    write_gateway_config(k, site, 0, psk, o)
}

/// Writes the config of gateway `index` of `site` for test K, with a
/// `[[site]]` table per gateway of each site, and returns its path.
pub fn write_gateway_config(k: u8, site: u8, index: u8, psk: &[u8], o: &Opts) -> PathBuf {
    let d = dir(k);
    let names = ["alpha", "beta"];
    let name = names[site as usize - 1];
    let psk_path = d.join(format!("psk-{name}"));
    std::fs::write(&psk_path, psk).unwrap();
    let mut sites = String::new();
    for (s, n) in [(1u8, o.gateways[0]), (2, o.gateways[1])] {
        for j in 0..n {
            let h = gw_host(j);
            let wan = if s == 2 && j == 0 && o.via_proxy {
                253
            } else {
                h
            };
            sites += &format!(
                "[[site]]\nname = \"{}\"\nsubnet = \"127.{k}.{s}.0/24\"\n\
                 gateway_lan = \"127.{k}.{s}.{h}:{LAN_PORT}\"\n\
                 gateway_wan = \"127.{k}.{s}.{wan}:{WAN_PORT}\"\n",
                names[s as usize - 1]
            );
        }
    }
    // A top-level key: before the first table.
    let top = if o.gateways[site as usize - 1] > 1 {
        format!("gateway_index = {index}")
    } else {
        String::new()
    };
    let host = gw_host(index);
    let text = format!(
        r#"{top}
[gateway]
site = "{name}"
lan_listen = "127.{k}.{site}.{host}:{LAN_PORT}"
wan_listen = "127.{k}.{site}.{host}:{WAN_PORT}"
admin_listen = "127.{k}.0.{admin}:{ADMIN_PORT}"
strategy = "{strategy}"
psk_file = "{psk}"
connect_timeout_ms = {cto}
[limits]
per_flow_buffer = {pfb}
total_buffer = {tb}
max_frame = 65536
[wan]
congestion = "cubic"
bandwidth_bps = 1000000000
rtt_ms = 1.0
keepalive_ms = {ka}
socket_buffer = {wsb}
outage_limit_s = {olim:?}
streams = {streams}
encryption = "{enc}"
quickack = {qa}
{sites}"#,
        admin = site + 10 * index,
        strategy = o.strategy,
        psk = psk_path.display(),
        cto = o.connect_timeout_ms,
        pfb = o.per_flow_buffer,
        tb = o.total_buffer,
        ka = o.keepalive_ms,
        wsb = o.wan_socket_buffer,
        olim = o.outage_limit_s,
        streams = o.streams,
        enc = o.encryption,
        qa = o.quickack,
    );
    let file = if index == 0 {
        format!("{name}.toml")
    } else {
        format!("{name}-{index}.toml")
    };
    let path = d.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

pub const PSK: &[u8] = b"test-key-0123456789abcdef";

pub async fn gateway(k: u8, site: u8, psk: &[u8], o: &Opts) -> Gateway {
    gateway_at(k, site, 0, psk, o).await
}

/// Gateway `index` of `site` (see `write_gateway_config`).
pub async fn gateway_at(k: u8, site: u8, index: u8, psk: &[u8], o: &Opts) -> Gateway {
    // GS_TEST_LOG=debug shows the gateways' logs when a test needs explaining.
    if let Ok(level) = std::env::var("GS_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_max_level(
                level
                    .parse::<tracing::Level>()
                    .unwrap_or(tracing::Level::DEBUG),
            )
            .with_test_writer()
            .try_init();
    }
    let path = write_gateway_config(k, site, index, psk, o);
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    Gateway::start(cfg).await.unwrap()
}

/// Two gateways with an authenticated link between them.
pub async fn pair(k: u8, o: &Opts) -> (Gateway, Gateway) {
    let a = gateway(k, 1, PSK, o).await;
    let b = gateway(k, 2, PSK, o).await;
    wait_link(&a, "beta").await;
    wait_link(&b, "alpha").await;
    (a, b)
}

pub async fn wait_link(g: &Gateway, peer: &str) {
    for _ in 0..200 {
        if g.shared.link_to(peer).is_some_and(|l| l.is_up()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no link to {peer} after 5 s");
}

/// Connects like libgridsplit.so: from `from` to the site gateway `gw`, sends
/// GSq1 for `dst`, returns the stream and the GSa1 status.
pub async fn gs_connect(from: IpAddr, gw: SocketAddr, dst: SocketAddr) -> (TcpStream, Status) {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let mut s = sock.connect(gw).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(&lanproto::encode_request(dst)).await.unwrap();
    let mut r = [0u8; 8];
    s.read_exact(&mut r).await.expect("GSa1 reply");
    let st = lanproto::parse_reply(&r).expect("GSa1 magic");
    (s, st)
}

/// Accepts one relayed connection and consumes its GSo1 header.
pub async fn accept_relayed(l: &TcpListener) -> (TcpStream, SocketAddr, SocketAddr) {
    let (mut s, peer) = l.accept().await.unwrap();
    let mut h = [0u8; lanproto::ORIGIN_LEN];
    s.read_exact(&mut h).await.expect("GSo1 header");
    let origin = lanproto::parse_origin(&h).expect("GSo1");
    (s, peer, origin)
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

pub async fn read_all(s: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    s.read_to_end(&mut v).await?;
    Ok(v)
}

/// Reads and drops whatever arrives until the peer closes the connection or it
/// fails.
pub async fn read_until_closed(s: &mut (impl AsyncReadExt + Unpin)) {
    let mut buf = vec![0u8; 65536];
    while let Ok(1..) = s.read(&mut buf).await {}
}

pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    String::from_utf8(read_all(&mut s).await.unwrap()).unwrap()
}

/// A relayed connection whose far side just died (gateway killed or stopped at
/// `since`): the node keeps writing `chunk` and reading, and must get a reset or
/// a broken pipe within 5 s, never a clean EOF (a silent truncation) nor a hang.
pub async fn expect_reset_while_writing(
    r: &mut (impl AsyncReadExt + Unpin),
    w: &mut (impl AsyncWriteExt + Unpin),
    chunk: &[u8],
    since: std::time::Instant,
) {
    let mut small = [0u8; 16];
    let err = loop {
        tokio::select! {
            res = w.write_all(chunk) => if let Err(e) = res { break e },
            res = r.read(&mut small) => match res {
                Err(e) => break e,
                Ok(0) => panic!("clean EOF: the flow was truncated silently"),
                Ok(_) => {}
            },
        }
    };
    assert!(
        since.elapsed() < Duration::from_secs(5),
        "error only after {:?}",
        since.elapsed()
    );
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        "{err}"
    );
}

pub fn within<F: std::future::Future>(secs: u64, f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(Duration::from_secs(secs), f)
}

/// Serves `n` flows: for each, reads to EOF, checks size+hash against the sizes
/// table (indexed by the seed the client announces in its first 8 bytes), replies.
pub async fn serve(
    l: TcpListener,
    n: usize,
    sizes: std::sync::Arc<Vec<(usize, usize)>>,
    expect_site: u8,
    k: u8,
) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (mut s, peer, origin) = accept_relayed(&l).await;
        // Relayed from a far gateway's LAN address, on behalf of the real client.
        assert!(
            is_gateway_ip(k, 3 - expect_site, peer.ip()),
            "relayed from {peer}"
        );
        assert_eq!(
            origin.ip().to_string().split('.').nth(2).unwrap(),
            expect_site.to_string()
        );
        let sizes = sizes.clone();
        tasks.push(tokio::spawn(async move {
            let got = read_all(&mut s).await.unwrap();
            let seed = u64::from_be_bytes(got[..8].try_into().unwrap());
            let (up, down) = sizes[seed as usize];
            assert_eq!(got.len(), up);
            assert_eq!(
                sha(&got[8..]),
                sha(&pattern(seed, up)[8..]),
                "flow {seed}: request bytes"
            );
            s.write_all(&pattern(seed ^ 0xdead, down)).await.unwrap();
            s.shutdown().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Like `exchange` but with the seed in the first 8 bytes so the server can check.
pub async fn flow(
    k: u8,
    from_site: u8,
    host: u8,
    dst: std::net::SocketAddr,
    seed: u64,
    up: usize,
    down: usize,
) {
    let gw = addr(k, from_site, 254, LAN_PORT);
    let (mut s, st) = gs_connect(ip(k, from_site, host), gw, dst).await;
    assert_eq!(st, Status::Ok, "flow {seed}");
    let mut payload = pattern(seed, up);
    payload[..8].copy_from_slice(&seed.to_be_bytes());
    let (mut r, mut w) = s.split();
    let send = async {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let recv = async { read_all(&mut r).await.unwrap() };
    let ((), got) = tokio::join!(send, recv);
    assert_eq!(got.len(), down, "flow {seed}: reply length");
    assert_eq!(
        sha(&got),
        sha(&pattern(seed ^ 0xdead, down)),
        "flow {seed}: reply bytes"
    );
}

/// Starts flow i of `sizes` from alpha to beta (even i) or beta to alpha (odd
/// i), each checked at both ends (`serve`, `flow`); the handle completes when
/// every client and server is done.
pub async fn start_flows(
    k: u8,
    sizes: std::sync::Arc<Vec<(usize, usize)>>,
) -> tokio::task::JoinHandle<()> {
    let n = sizes.len();
    let la = TcpListener::bind(addr(k, 1, 20, 5000)).await.unwrap();
    let lb = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
    let to_b = (0..n).filter(|i| i % 2 == 0).count();
    let sb = tokio::spawn(serve(lb, to_b, sizes.clone(), 1, k));
    let sa = tokio::spawn(serve(la, n - to_b, sizes.clone(), 2, k));
    let mut clients = Vec::new();
    for i in 0..n {
        let (from, dst) = if i % 2 == 0 {
            (1, addr(k, 2, 20, 5000))
        } else {
            (2, addr(k, 1, 20, 5000))
        };
        let (up, down) = sizes[i];
        clients.push(tokio::spawn(flow(
            k,
            from,
            10 + (i % 50) as u8,
            dst,
            i as u64,
            up,
            down,
        )));
    }
    tokio::spawn(async move {
        for c in clients {
            c.await.unwrap();
        }
        sa.await.unwrap();
        sb.await.unwrap();
    })
}

/// A destination that accepts one relayed connection and reads it to its end.
pub fn sink(l: TcpListener) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (mut s, _, _) = accept_relayed(&l).await;
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
}

/// A plain TCP connection from alpha's gateway address to beta's WAN port of
/// test K, before any handshake: for tests that play alpha's gateway by hand.
pub async fn connect_to_beta(k: u8) -> gridsplitd::transfer::tcp::TcpConn {
    let (conn, _) = gridsplitd::transfer::tcp::TcpConn::connect(
        Some(ip(k, 1, 254)),
        addr(k, 2, 254, WAN_PORT),
        &gridsplitd::config::WanParams::default(),
        65536,
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    conn
}

/// Connects to beta's gateway of test K and runs the key check as alpha with
/// `key`; the connection and beta's answer.
pub async fn handshake_as_alpha(
    k: u8,
    key: &[u8],
) -> (
    gridsplitd::transfer::tcp::TcpConn,
    Result<gridsplitd::auth::PeerInfo, gridsplitd::auth::AuthError>,
) {
    let mut conn = connect_to_beta(k).await;
    let peer = gridsplitd::auth::handshake(
        &mut conn,
        key,
        "alpha",
        65536,
        true,
        |s| s == "beta",
        Duration::from_secs(2),
    )
    .await;
    (conn, peer)
}

/// A WAN connection to beta's gateway of test K, authenticated as alpha with
/// the test key: for tests that play alpha's gateway by hand.
pub async fn dial_as_alpha(k: u8) -> gridsplitd::transfer::tcp::TcpConn {
    let (mut conn, peer) = handshake_as_alpha(k, PSK).await;
    let peer = peer.unwrap();
    assert_eq!(peer.id, "beta");
    gridsplitd::auth::secure(&mut conn, &peer, "alpha", true, PSK, Duration::from_secs(2))
        .await
        .unwrap();
    conn
}

/// Sends SESSION(session, received, resume) on `conn` as a dialing gateway
/// would, and returns the acceptor's answer.
pub async fn session(
    conn: &mut gridsplitd::transfer::tcp::TcpConn,
    session: u64,
    received: u64,
    resume: bool,
) -> gridsplitd::wire::Session {
    use gridsplitd::transfer::WanConn;
    use gridsplitd::wire::{Frame, Session};
    conn.send_frame(&Frame::Session(Session {
        session,
        received,
        resume,
        streams: 1,
        token: 0,
    }))
    .await
    .unwrap();
    match conn.recv_frame().await.unwrap() {
        Frame::Session(answer) => answer,
        other => panic!("{other:?}"),
    }
}
