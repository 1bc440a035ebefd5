//! The gateway's configuration: the TOML file the lab generates (docs/protocol.md §5
//! for the `[[site]]` table, shared with libgridsplit.so), parsed strictly and
//! validated once at start.
//!
//! Every problem becomes one line naming the file, the field, what is wrong and how
//! to fix it, and main.rs exits with status 2. An operator (or the lab's Python)
//! should never have to read a backtrace to fix a typo, so nothing here panics.
//!
//! The code: this file holds the validated types that the rest of the gateway
//! reads; `subnet` the IP prefixes sites are told apart by; `wan` the per-link
//! WAN parameters (`[wan]` defaults, `[[link]]` overrides, their checks); `raw`
//! the file as written and its parsing; `validate` the checks that turn the raw
//! form into a `Config`. Everything is re-exported here: callers use `config::X`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod raw;
mod subnet;
#[cfg(test)]
mod tests;
mod validate;
mod wan;

pub use subnet::Subnet;
pub use wan::{WanParams, MAX_STREAMS};

/// A configuration problem, printed as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub reason: String,
    pub fix: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}; fix: {}",
            self.file, self.field, self.reason, self.fix
        )
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    Fifo,
    Aggregate,
    Fair,
}

impl StrategyKind {
    /// Every strategy, in the order they are listed (`gridsplitd --list-strategies`,
    /// which the Python side checks its own list against).
    pub const ALL: [StrategyKind; 3] = [
        StrategyKind::Fifo,
        StrategyKind::Aggregate,
        StrategyKind::Fair,
    ];

    pub fn from_name(name: &str) -> Option<StrategyKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Fifo => "fifo",
            StrategyKind::Aggregate => "aggregate",
            StrategyKind::Fair => "fair",
        }
    }
}

/// `[wan] encryption`: how WAN links protect what they carry after the
/// authentication (docs/design/wan-encryption.md). Both gateways of a pair
/// must agree; a mismatch is refused at the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encryption {
    /// The default: a Noise handshake per TCP connection, then every byte
    /// sealed with ChaCha20-Poly1305 (transfer/seal.rs).
    Noise,
    /// Frames in clear, authenticated only at the handshake: for a trusted
    /// private WAN. Warned about in the log and in status.
    Insecure,
}

impl Encryption {
    pub fn from_name(name: &str) -> Option<Encryption> {
        match name {
            "noise" => Some(Encryption::Noise),
            "insecure" => Some(Encryption::Insecure),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encryption::Noise => "noise",
            Encryption::Insecure => "insecure",
        }
    }
}

/// What the log and `gridsplit gateway status` say about an insecure gateway.
pub const INSECURE_WARNING: &str = "[wan] encryption = \"insecure\": WAN links carry MPI payloads and flow endpoints in clear, and frames after the handshake are not authenticated; use it only on a trusted private WAN";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub per_flow_buffer: usize,
    pub total_buffer: usize,
    pub max_frame: usize,
}

/// `[lan]`: how the gateway treats its LAN sockets (both origins). A relayed
/// connection's LAN leg never crosses the WAN, so it can use LAN-sized timers and
/// windows that a direct connection cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanParams {
    /// Bytes of incast the switch port toward the gateway holds without loss
    /// (its buffer plus the LAN's bandwidth-delay product, payload bytes),
    /// divided among LAN sockets as receive-window clamps (collect/incast.rs);
    /// 0 = off.
    pub window_budget: usize,
    /// Whether receive-window shares may go below one segment for flows whose
    /// senders can use them (collect/incast.rs), instead of lifting the clamps
    /// when whole segments do not fit.
    pub sub_segment: bool,
    /// The MSS the gateway offers its LAN senders (TCP_MAXSEG on the LAN
    /// listener, so its SYN-ACKs carry it); 0 = the interface's less 30 bytes,
    /// so that a LAN segment relayed alone is one WAN segment (collect/mss.rs). Meant for
    /// sites where one full segment per sender does not fit `window_budget`;
    /// on the paper grid it measured worse than sub-segment windows
    /// (docs/deployment.md, "LAN MSS").
    pub mss: u32,
    /// TCP_RTO_MIN_US on LAN sockets: a LAN loss that only a timeout recovers
    /// costs this instead of Linux's 200 ms; 0 = the kernel's default.
    pub rto_min_us: u32,
    /// TCP_DELACK_MAX_US on LAN sockets, so a delayed ACK never outlasts that
    /// minimum RTO (which would make the RTO fire for nothing); 0 = default.
    pub delack_max_us: u32,
    /// The LAN hosts' port rate (bits/s of IP bytes): the gateway's sockets
    /// toward one host are paced to share it (collect/egress.rs); 0 = no pacing.
    pub rate_bps: u64,
    /// Bytes queued toward one LAN host, over all its sockets, that its switch
    /// port absorbs: while they hold no more, each socket may use the whole
    /// `rate_bps`; above it, the busy ones share it (collect/egress.rs);
    /// 0 = always share.
    pub burst_bytes: u64,
}

/// One `[[site]]` table: one gateway of a site. A site with several gateways
/// has one table per gateway, in the same order in every gateway's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub name: String,
    pub subnet: Subnet,
    pub gateway_lan: SocketAddr,
    pub gateway_wan: SocketAddr,
    /// This gateway's position among its site's tables (0, 1, ...).
    pub index: usize,
    /// The gateway's id: the site name when the site has one gateway, else
    /// `SITE/INDEX` (site names have no '/', so an id names one gateway). It is
    /// what HELLO carries and what links are keyed by.
    pub id: String,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub site: String,
    /// Top-level `gateway_index`: which of its site's `[[site]]` tables this
    /// gateway is (default 0).
    pub gateway_index: usize,
    /// This gateway's id (`Site::id` of its own table).
    pub id: String,
    pub lan_listen: SocketAddr,
    pub wan_listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub allow_remote_admin: bool,
    pub strategy: StrategyKind,
    pub psk_file: PathBuf,
    /// The key as read at start; the gateway's current key (reloaded on
    /// SIGHUP) is `Shared::psk()`.
    pub psk: Vec<u8>,
    pub encryption: Encryption,
    pub connect_timeout: Duration,
    pub limits: Limits,
    pub lan: LanParams,
    pub wan: WanParams,
    pub sites: Vec<Site>,
    /// Effective WAN parameters per peer site (defaults merged with `[[link]]`).
    pub links: BTreeMap<String, WanParams>,
}

impl Config {
    /// This gateway's own `[[site]]` table.
    pub fn own_site(&self) -> &Site {
        self.sites
            .iter()
            .find(|s| s.name == self.site && s.index == self.gateway_index)
            .expect("validated")
    }

    /// The gateways of the other sites: each one a WAN link of this gateway.
    pub fn peers(&self) -> impl Iterator<Item = &Site> {
        self.sites.iter().filter(move |s| s.name != self.site)
    }

    /// The gateways of `site`, in index order.
    pub fn gateways_of<'a>(&'a self, site: &'a str) -> impl Iterator<Item = &'a Site> + 'a {
        self.sites.iter().filter(move |s| s.name == site)
    }

    /// The gateway whose id is `id`.
    pub fn gateway(&self, id: &str) -> Option<&Site> {
        self.sites.iter().find(|s| s.id == id)
    }

    pub fn site_of(&self, ip: IpAddr) -> Option<&Site> {
        self.sites.iter().find(|s| s.subnet.contains(ip))
    }

    /// Whether some WAN link is paced by Linux's own rate rule (a pacing cap
    /// under a congestion control other than BBR, which sets its own rate).
    pub fn paced(&self) -> bool {
        self.peers()
            .map(|p| self.wan_params(&p.name))
            .any(|p| p.pacing_bps > 0 && p.congestion != "bbr")
    }

    /// Reads and checks a key file (at start, and again on SIGHUP).
    pub fn read_psk(&self) -> Result<Vec<u8>, ConfigError> {
        validate::read_psk(&self.psk_file, &self.path.display().to_string())
    }

    /// The WAN parameters of links to the gateways of site `peer`.
    pub fn wan_params(&self, peer: &str) -> &WanParams {
        self.links.get(peer).unwrap_or(&self.wan)
    }

    /// The WAN parameters of the link to the gateway `id`: its site's.
    pub fn gateway_params(&self, id: &str) -> &WanParams {
        self.wan_params(self.gateway(id).map_or(id, |g| g.name.as_str()))
    }

    /// Loads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            field: "(file)".into(),
            reason: format!("cannot read: {e}"),
            fix: "pass an existing, readable TOML file to --config".into(),
        })?;
        Self::from_toml(&text, path)
    }

    /// Parses and validates TOML text; `path` is used for messages and to resolve
    /// a relative `psk_file`.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let raw = raw::parse_raw(text, &file)?;
        validate::validate(raw, path, &file)
    }
}
