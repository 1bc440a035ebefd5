//! gridsplitd, the site gateway of gridsplit: it splits every cross-site TCP
//! connection of its site's nodes into three — node → this gateway (LAN), one
//! long-lived, tuned, authenticated WAN link per peer gateway carrying all flows
//! multiplexed, and far gateway → destination node (LAN). A site may have
//! several gateways; every gateway links to every gateway of the other sites.
//!
//! The layers follow NewMadeleine's: `collect` takes data from LAN connections,
//! `schedule` decides what goes out next on a link, `transfer` drives the WAN
//! transport, and `link` ties them together for one peer as a resumable session.
//! Dependencies run one way: collect → link → flow → schedule, transfer → sockio,
//! wire (docs/architecture.md).
//! `wire`, `lanproto` and `auth` are the formats; `sockio` the plain socket I/O
//! under both the LAN legs and the WAN driver; `tune` and `metrics` the knobs
//! and the gauges; `admin` the status endpoint; `accept` the listeners' loop.
//!
//! This file assembles a running gateway from a config, for main.rs and for the
//! end-to-end tests (which run several gateways in one process).

#[macro_use]
mod wire_enum;

pub mod accept;
pub mod admin;
pub mod auth;
pub mod collect;
pub mod config;
pub mod flow;
pub mod lanproto;
pub mod link;
pub mod metrics;
pub mod schedule;
pub mod sockio;
pub mod transfer;
pub mod tune;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use config::Config;
use link::Link;
use metrics::Metrics;

/// State shared by every task of one gateway.
pub struct Shared {
    pub cfg: Config,
    pub metrics: Metrics,
    /// Bytes read from LAN sockets and not yet handed to a WAN driver
    /// (half of `total_buffer`).
    pub send_pool: Arc<Semaphore>,
    /// Receive windows granted to peers (the other half): bytes that may arrive
    /// from WAN links and wait for a LAN socket.
    pub recv_pool: Arc<Semaphore>,
    /// Receive-window clamps of LAN sockets (LAN incast control).
    pub lan_windows: Arc<collect::incast::LanWindows>,
    /// Pacing of what the gateway writes toward each LAN host (LAN egress).
    pub lan_egress: Arc<collect::egress::LanEgress>,
    /// The sessions with peer gateways, by the peer's gateway id.
    links: Mutex<HashMap<String, Arc<Link>>>,
    pub stopping: CancellationToken,
    /// Serves an OPEN from a peer (collect::serve_remote_open).
    pub on_open: link::OpenHandler,
    /// The WAN key now: read at start, replaced on SIGHUP (`reload_key`). New
    /// connections use it; established ones keep their session keys.
    psk: RwLock<Arc<Vec<u8>>>,
    /// Handshake refusals already logged, by address and kind: a peer with
    /// the wrong key retries every few seconds, and is logged once
    /// (link/establish.rs) until a handshake from that address succeeds.
    pub(crate) refusals_logged: Mutex<HashSet<(IpAddr, String)>>,
    /// The last handshake refusal, for /status.
    pub(crate) last_refusal: Mutex<Option<String>>,
}

impl Shared {
    /// The live session with the gateway `id` (docs/protocol.md §5: a site
    /// name when the site has one gateway), connected or being held while it
    /// reconnects.
    pub fn link_to(&self, id: &str) -> Option<Arc<Link>> {
        self.links
            .lock()
            .unwrap()
            .get(id)
            .filter(|l| !l.is_closed())
            .cloned()
    }

    pub fn links(&self) -> Vec<Arc<Link>> {
        let mut v: Vec<_> = self.links.lock().unwrap().values().cloned().collect();
        v.sort_by(|a, b| a.peer.cmp(&b.peer));
        v
    }

    /// Makes `link` the current link to its peer; returns the one it replaces.
    pub(crate) fn install_link(&self, link: Arc<Link>) -> Option<Arc<Link>> {
        self.links.lock().unwrap().insert(link.peer.clone(), link)
    }

    /// The current WAN key.
    pub fn psk(&self) -> Arc<Vec<u8>> {
        self.psk.read().unwrap().clone()
    }

    /// Whether WAN links are sealed (`[wan] encryption`, default "noise").
    pub fn sealed(&self) -> bool {
        self.cfg.encryption == config::Encryption::Noise
    }

    /// Re-reads the key file (SIGHUP): connections made from now on use the
    /// new key; links up keep their Noise keys, so no flow is dropped. On a bad
    /// file the old key stays.
    pub fn reload_key(&self) -> Result<(), config::ConfigError> {
        let k = self.cfg.read_psk()?;
        let same = **self.psk.read().unwrap() == k;
        *self.psk.write().unwrap() = Arc::new(k);
        self.metrics
            .key_reloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A peer refused with the old key may be right with the new one.
        self.refusals_logged.lock().unwrap().clear();
        info!(file = %self.cfg.psk_file.display(), changed = !same,
            "WAN key reloaded: new WAN connections use it, links up keep their session keys");
        Ok(())
    }

    pub(crate) fn remove_link(&self, link: &Arc<Link>) {
        let mut m = self.links.lock().unwrap();
        if m.get(&link.peer).is_some_and(|l| Arc::ptr_eq(l, link)) {
            m.remove(&link.peer);
        }
    }
}

/// A running gateway.
pub struct Gateway {
    pub shared: Arc<Shared>,
    pub lan_addr: SocketAddr,
    pub wan_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    tasks: JoinSet<()>,
}

impl Gateway {
    /// Binds the three listeners and starts serving. Must be called inside a tokio
    /// runtime. Fails (without starting anything) if a listener can't be bound.
    pub async fn start(cfg: Config) -> anyhow::Result<Gateway> {
        let half = cfg.limits.total_buffer / 2;
        // Every link's tuning goes on the listener: window scaling is fixed at SYN.
        let mut listen_params = cfg.wan.clone();
        for p in cfg.links.values() {
            if tune::target_buffer(p) > tune::target_buffer(&listen_params) {
                listen_params.socket_buffer = tune::target_buffer(p) as u64;
            }
        }
        let (wan, warnings) = transfer::tcp::listen(cfg.wan_listen, &listen_params)
            .with_context(|| format!("cannot listen on wan_listen {}", cfg.wan_listen))?;
        for w in warnings {
            warn!("WAN listener tuning: {w}");
        }
        let host = tune::host_tcp();
        info!(?host, "host TCP settings");
        for advice in tune::host_advice(&host, cfg.paced()) {
            warn!("{advice}");
        }
        let lan = bind(cfg.lan_listen, cfg.lan.mss)
            .await
            .with_context(|| format!("cannot listen on lan_listen {}", cfg.lan_listen))?;
        let admin = TcpListener::bind(cfg.admin_listen)
            .await
            .with_context(|| format!("cannot listen on admin_listen {}", cfg.admin_listen))?;
        let (lan_addr, wan_addr, admin_addr) =
            (lan.local_addr()?, wan.local_addr()?, admin.local_addr()?);

        // Lifted clamps give what autotuning would have grown to.
        let ceiling = tune::autotune_max_rcvbuf().unwrap_or(cfg.limits.per_flow_buffer);
        let lan_windows =
            collect::incast::LanWindows::new(cfg.lan.window_budget, ceiling, cfg.lan.sub_segment);
        let lan_egress = collect::egress::LanEgress::new(cfg.lan.rate_bps, cfg.lan.burst_bytes);
        if cfg.encryption == config::Encryption::Insecure {
            warn!("{}", config::INSECURE_WARNING);
        }
        let psk = RwLock::new(Arc::new(cfg.psk.clone()));
        let shared = Arc::new(Shared {
            psk,
            refusals_logged: Mutex::new(HashSet::new()),
            last_refusal: Mutex::new(None),
            cfg,
            metrics: Metrics::default(),
            send_pool: Arc::new(Semaphore::new(half)),
            recv_pool: Arc::new(Semaphore::new(half)),
            lan_windows,
            lan_egress,
            links: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            on_open: |shared, link, flow, dst, src| {
                Box::pin(collect::serve_remote_open(shared, link, flow, dst, src))
            },
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(collect::serve(shared.clone(), lan));
        tasks.spawn(shared.lan_windows.clone().maintain(shared.stopping.clone()));
        tasks.spawn(shared.lan_egress.clone().maintain(shared.stopping.clone()));
        tasks.spawn(link::accept_loop(shared.clone(), wan));
        tasks.spawn(admin::serve(shared.clone(), admin));
        // Full mesh between the gateways of different sites without duplicate
        // links: of each pair, the gateway whose id sorts first dials.
        let own = shared.cfg.id.clone();
        for peer in shared
            .cfg
            .peers()
            .filter(|p| own < p.id)
            .cloned()
            .collect::<Vec<_>>()
        {
            tasks.spawn(link::dial_loop(shared.clone(), peer));
        }
        info!(
            site = %shared.cfg.site, id = %shared.cfg.id, %lan_addr, %wan_addr, %admin_addr,
            strategy = shared.cfg.strategy.name(), encryption = shared.cfg.encryption.name(),
            "gateway started"
        );
        Ok(Gateway {
            shared,
            lan_addr,
            wan_addr,
            admin_addr,
            tasks,
        })
    }

    /// Stops the gateway: listeners close, every link closes, every flow is reset
    /// (its nodes see a reset rather than a silent hang).
    pub async fn stop(mut self) {
        // Peers reset our flows now rather than hold them for their outage limit.
        let links = self.shared.links();
        for l in &links {
            l.say_goodbye();
        }
        if links.iter().any(|l| l.is_up()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.shared.stopping.cancel();
        for l in self.shared.links() {
            l.close();
        }
        self.shared.send_pool.close();
        self.shared.recv_pool.close();
        let drain = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(3), drain)
            .await
            .is_err()
        {
            self.tasks.abort_all();
        }
        // Give flow tasks a moment to send their RSTs.
        tokio::time::sleep(Duration::from_millis(20)).await;
        info!(site = %self.shared.cfg.site, id = %self.shared.cfg.id, "gateway stopped");
    }
}

/// The LAN listener. `mss` (non-zero) is set before listen(): the accepted
/// sockets inherit it and their SYN-ACKs offer it, which is the only point at
/// which a receiver can choose its senders' segment size.
async fn bind(addr: SocketAddr, mss: u32) -> std::io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    if mss > 0 {
        socket2::SockRef::from(&sock).set_tcp_mss(mss)?;
    }
    sock.bind(addr)?;
    sock.listen(1024)
}

#[cfg(test)]
mod tests {
    /// A sender's segments follow the MSS the LAN listener offers (a real
    /// loopback connection: its own MTU would allow 64 KB segments).
    #[tokio::test]
    async fn lan_listener_offers_its_mss() {
        for (offer, range) in [(1000, 900..=1000), (0, 16_000..=65_495)] {
            let l = super::bind("127.0.0.1:0".parse().unwrap(), offer)
                .await
                .unwrap();
            let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let (_s, _) = l.accept().await.unwrap();
            let mss = socket2::SockRef::from(&c).tcp_mss().unwrap();
            assert!(
                range.contains(&mss),
                "offered {offer}: the sender's MSS is {mss}"
            );
        }
    }
}
