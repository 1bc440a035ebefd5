//! The gateway's configuration: the TOML file the lab generates (docs/protocol.md §5
//! for the `[[site]]` table, shared with libgridsplit.so), parsed strictly and
//! validated once at start.
//!
//! Every problem becomes one line naming the file, the field, what is wrong and how
//! to fix it, and main.rs exits with status 2. An operator (or the lab's Python)
//! should never have to read a backtrace to fix a typo, so nothing here panics.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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

/// An IP prefix such as `10.71.1.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Subnet {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').ok_or("missing '/prefix'")?;
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{a}' is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = p
            .trim()
            .parse()
            .map_err(|_| format!("'{p}' is not a prefix length"))?;
        if prefix > max {
            return Err(format!("prefix /{prefix} is longer than {max} bits"));
        }
        let net = Subnet { addr, prefix };
        if net.network() != addr {
            return Err(format!(
                "host bits are set (the network is {}/{prefix})",
                net.network()
            ));
        }
        Ok(net)
    }

    fn mask_bits(&self) -> u128 {
        let width = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == 0 {
            0
        } else {
            (!0u128 << (width - self.prefix as u32)) & (!0u128 >> (128 - width))
        }
    }

    fn bits(ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(v4) => u32::from(v4) as u128,
            IpAddr::V6(v6) => u128::from(v6),
        }
    }

    fn network(&self) -> IpAddr {
        let b = Self::bits(self.addr) & self.mask_bits();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((b as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(b.into()),
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // A v4-mapped v6 peer (dual-stack listener) is judged by its v4 address.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        ip.is_ipv4() == self.addr.is_ipv4()
            && Self::bits(ip) & self.mask_bits() == Self::bits(self.addr) & self.mask_bits()
    }

    fn overlaps(&self, other: &Subnet) -> bool {
        if self.addr.is_ipv4() != other.addr.is_ipv4() {
            return false;
        }
        let shorter = if self.prefix <= other.prefix {
            self
        } else {
            other
        };
        let longer = if shorter == self { other } else { self };
        shorter.contains(longer.addr)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

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

/// WAN socket parameters; `[wan]` gives the defaults, `[[link]]` overrides per peer.
#[derive(Debug, Clone, PartialEq)]
pub struct WanParams {
    pub congestion: String,
    pub bandwidth_bps: u64,
    pub rtt_ms: f64,
    /// 0 = derive from bandwidth × RTT.
    pub socket_buffer: u64,
    /// 0 = no pacing cap.
    pub pacing_bps: u64,
    /// TCP_NOTSENT_LOWAT of the WAN socket, bytes; 0 = derived from the
    /// bandwidth (tune::target_lowat).
    pub notsent_lowat: u64,
    pub nodelay: bool,
    /// Link liveness probe period; a connection is declared dead after 5 silent
    /// periods (its session then reconnects and resumes).
    pub keepalive_ms: u64,
    /// How long a session may stay without a WAN connection before its flows
    /// are reset on both sides; within it they are held (link/session.rs).
    pub outage_limit_s: f64,
    /// Parallel TCP connections the link's byte stream is striped over
    /// (transfer/striped.rs); 1 = one plain connection (transfer/tcp.rs). The
    /// dialer proposes it, the acceptor caps it at its own (docs/protocol.md §4.2).
    pub streams: u8,
}

/// Most TCP connections one link may be striped over.
pub const MAX_STREAMS: u8 = 16;

impl Default for WanParams {
    fn default() -> Self {
        Self {
            congestion: "cubic".into(),
            bandwidth_bps: 1_000_000_000,
            rtt_ms: 10.6,
            socket_buffer: 0,
            pacing_bps: 0,
            notsent_lowat: 0,
            nodelay: true,
            keepalive_ms: 1000,
            outage_limit_s: 120.0,
            streams: 1,
        }
    }
}

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
    /// listener, so its SYN-ACKs carry it); 0 = the interface's. Meant for
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
    /// The LAN hosts' port rate (bits/s of IP bytes): LAN sockets are paced at
    /// it (collect/incast.rs); 0 = no pacing.
    pub rate_bps: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub name: String,
    pub subnet: Subnet,
    pub gateway_lan: SocketAddr,
    pub gateway_wan: SocketAddr,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub site: String,
    pub lan_listen: SocketAddr,
    pub wan_listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub allow_remote_admin: bool,
    pub strategy: StrategyKind,
    pub psk_file: PathBuf,
    pub psk: Vec<u8>,
    pub connect_timeout: Duration,
    pub limits: Limits,
    pub lan: LanParams,
    pub wan: WanParams,
    pub sites: Vec<Site>,
    /// Effective WAN parameters per peer site (defaults merged with `[[link]]`).
    pub links: BTreeMap<String, WanParams>,
}

impl Config {
    pub fn own_site(&self) -> &Site {
        self.sites
            .iter()
            .find(|s| s.name == self.site)
            .expect("validated")
    }

    pub fn peers(&self) -> impl Iterator<Item = &Site> {
        self.sites.iter().filter(move |s| s.name != self.site)
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

    pub fn wan_params(&self, peer: &str) -> &WanParams {
        self.links.get(peer).unwrap_or(&self.wan)
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
        let raw = parse_raw(text, &file)?;
        validate(raw, path, &file)
    }
}

// ---- raw (as written) form ------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    gateway: RawGateway,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    lan: RawLan,
    #[serde(default)]
    wan: RawWan,
    #[serde(default)]
    site: Vec<RawSite>,
    #[serde(default)]
    link: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    site: String,
    lan_listen: String,
    wan_listen: String,
    #[serde(default = "default_admin")]
    admin_listen: String,
    #[serde(default)]
    allow_remote_admin: bool,
    #[serde(default = "default_strategy")]
    strategy: String,
    psk_file: String,
    #[serde(default = "default_connect_timeout")]
    connect_timeout_ms: u64,
}

fn default_admin() -> String {
    "127.0.0.1:7300".into()
}
fn default_strategy() -> String {
    "fair".into()
}
fn default_connect_timeout() -> u64 {
    5000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default = "default_per_flow")]
    per_flow_buffer: u64,
    #[serde(default = "default_total")]
    total_buffer: u64,
    #[serde(default = "default_max_frame")]
    max_frame: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLan {
    #[serde(default)]
    window_budget: u64,
    #[serde(default = "default_true")]
    sub_segment: bool,
    #[serde(default)]
    mss: u64,
    #[serde(default)]
    rto_min_us: u64,
    #[serde(default)]
    delack_max_us: u64,
    #[serde(default)]
    rate_bps: u64,
}

impl Default for RawLan {
    fn default() -> Self {
        RawLan {
            window_budget: 0,
            sub_segment: true,
            mss: 0,
            rto_min_us: 0,
            delack_max_us: 0,
            rate_bps: 0,
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_per_flow() -> u64 {
    4 << 20
}
fn default_total() -> u64 {
    256 << 20
}
fn default_max_frame() -> u64 {
    256 << 10
}

impl Default for RawLimits {
    fn default() -> Self {
        Self {
            per_flow_buffer: default_per_flow(),
            total_buffer: default_total(),
            max_frame: default_max_frame(),
        }
    }
}

/// `[wan]` and `[[link]]` share these keys; unset ones fall back (link → wan → default).
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawWan {
    congestion: Option<String>,
    bandwidth_bps: Option<u64>,
    rtt_ms: Option<f64>,
    socket_buffer: Option<u64>,
    pacing_bps: Option<u64>,
    notsent_lowat: Option<u64>,
    nodelay: Option<bool>,
    keepalive_ms: Option<u64>,
    outage_limit_s: Option<f64>,
    streams: Option<i64>,
}

impl RawWan {
    fn over(&self, base: &WanParams) -> WanParams {
        WanParams {
            congestion: self
                .congestion
                .clone()
                .unwrap_or_else(|| base.congestion.clone()),
            bandwidth_bps: self.bandwidth_bps.unwrap_or(base.bandwidth_bps),
            rtt_ms: self.rtt_ms.unwrap_or(base.rtt_ms),
            socket_buffer: self.socket_buffer.unwrap_or(base.socket_buffer),
            pacing_bps: self.pacing_bps.unwrap_or(base.pacing_bps),
            notsent_lowat: self.notsent_lowat.unwrap_or(base.notsent_lowat),
            nodelay: self.nodelay.unwrap_or(base.nodelay),
            keepalive_ms: self.keepalive_ms.unwrap_or(base.keepalive_ms),
            outage_limit_s: self.outage_limit_s.unwrap_or(base.outage_limit_s),
            // Out-of-range values are kept recognisable (0) for check_wan's message.
            streams: self
                .streams
                .map(|k| u8::try_from(k).unwrap_or(0))
                .unwrap_or(base.streams),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSite {
    name: String,
    subnet: String,
    gateway_lan: String,
    gateway_wan: String,
    /// The split policy, read by libgridsplit.so: sites whose connections with
    /// this one stay direct. The gateway only checks the names.
    direct_to: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    peer: String,
    #[serde(flatten)]
    wan: RawWan,
}

fn parse_raw(text: &str, file: &str) -> Result<RawConfig, ConfigError> {
    let syntax = |e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        ConfigError {
            file: match line {
                Some(l) => format!("{file}:{l}"),
                None => file.to_string(),
            },
            field: "(syntax)".into(),
            reason: one_line(e.message()),
            fix: "correct the TOML syntax at that line".into(),
        }
    };
    let de = toml::Deserializer::parse(text).map_err(syntax)?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let msg = one_line(inner.message());
        let fix = if msg.starts_with("unknown field") {
            "remove or rename the key (see the expected names above)".to_string()
        } else if msg.starts_with("missing field") {
            "add the required key".to_string()
        } else {
            "give the key a value of the expected type".to_string()
        };
        let line = inner
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        ConfigError {
            file: match line {
                Some(l) => format!("{file}:{l}"),
                None => file.to_string(),
            },
            field: if field == "." {
                "(top level)".into()
            } else {
                field
            },
            reason: msg,
            fix,
        }
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn validate(raw: RawConfig, path: &Path, file: &str) -> Result<Config, ConfigError> {
    let err = |field: &str, reason: String, fix: &str| ConfigError {
        file: file.to_string(),
        field: field.to_string(),
        reason,
        fix: fix.to_string(),
    };
    let addr = |field: &str, v: &str| -> Result<SocketAddr, ConfigError> {
        v.parse().map_err(|_| {
            err(
                field,
                format!("'{v}' is not an IP:port address"),
                "write it like \"10.71.1.254:7100\"",
            )
        })
    };

    // Sites first: everything else refers to them.
    if raw.site.is_empty() {
        return Err(err(
            "site",
            "no [[site]] table".into(),
            "add one [[site]] per site, including this one",
        ));
    }
    let mut sites: Vec<Site> = Vec::new();
    for (i, s) in raw.site.iter().enumerate() {
        let f = |k: &str| format!("site[{i}].{k}");
        let ok_name = !s.name.is_empty()
            && s.name.len() <= 64
            && s.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok_name {
            return Err(err(
                &f("name"),
                format!("'{}' is not a valid site name", s.name),
                "use 1-64 characters from [A-Za-z0-9_-]",
            ));
        }
        if sites.iter().any(|o| o.name == s.name) {
            return Err(err(
                &f("name"),
                format!("site '{}' is defined twice", s.name),
                "give every [[site]] a unique name",
            ));
        }
        let subnet = Subnet::parse(&s.subnet).map_err(|r| {
            err(
                &f("subnet"),
                format!("'{}': {r}", s.subnet),
                "write a network prefix like \"10.71.1.0/24\"",
            )
        })?;
        if let Some(o) = sites.iter().find(|o| o.subnet.overlaps(&subnet)) {
            return Err(err(
                &f("subnet"),
                format!("{subnet} overlaps site '{}' ({})", o.name, o.subnet),
                "give each site a disjoint subnet",
            ));
        }
        sites.push(Site {
            name: s.name.clone(),
            subnet,
            gateway_lan: addr(&f("gateway_lan"), &s.gateway_lan)?,
            gateway_wan: addr(&f("gateway_wan"), &s.gateway_wan)?,
        });
    }

    for (i, s) in raw.site.iter().enumerate() {
        let list = s.direct_to.as_deref().unwrap_or("");
        for name in list.split([' ', ',']).filter(|n| !n.is_empty()) {
            if !sites.iter().any(|o| o.name == name) {
                return Err(err(
                    &format!("site[{i}].direct_to"),
                    format!("'{name}' is not the name of a [[site]]"),
                    "list site names separated by spaces, e.g. direct_to = \"west north\"",
                ));
            }
        }
    }

    let g = &raw.gateway;
    if !sites.iter().any(|s| s.name == g.site) {
        let names: Vec<_> = sites.iter().map(|s| s.name.as_str()).collect();
        return Err(err(
            "gateway.site",
            format!("'{}' is not the name of a [[site]]", g.site),
            &format!("use one of: {}", names.join(", ")),
        ));
    }
    let lan_listen = addr("gateway.lan_listen", &g.lan_listen)?;
    let wan_listen = addr("gateway.wan_listen", &g.wan_listen)?;
    let admin_listen = addr("gateway.admin_listen", &g.admin_listen)?;
    if !admin_listen.ip().is_loopback() && !g.allow_remote_admin {
        return Err(err(
            "gateway.admin_listen",
            format!("{admin_listen} is not a loopback address"),
            "use 127.0.0.1:PORT, or set allow_remote_admin = true",
        ));
    }
    let Some(strategy) = StrategyKind::from_name(&g.strategy) else {
        let names: Vec<String> = StrategyKind::ALL
            .iter()
            .map(|k| format!("\"{}\"", k.name()))
            .collect();
        return Err(err(
            "gateway.strategy",
            format!("unknown strategy '{}'", g.strategy),
            &format!("use one of {}", names.join(", ")),
        ));
    };
    if g.connect_timeout_ms == 0 || g.connect_timeout_ms > 600_000 {
        return Err(err(
            "gateway.connect_timeout_ms",
            format!("{} is out of range", g.connect_timeout_ms),
            "use 1..=600000 milliseconds",
        ));
    }

    // The key is read now so that a bad key file fails at start, not at the first link.
    let mut psk_file = PathBuf::from(&g.psk_file);
    if psk_file.is_relative() {
        if let Some(dir) = path.parent() {
            psk_file = dir.join(psk_file);
        }
    }
    let mut psk = std::fs::read(&psk_file).map_err(|e| {
        err("gateway.psk_file", format!("cannot read {}: {e}", psk_file.display()), "create the shared key file (the same bytes on every gateway), e.g. head -c 32 /dev/urandom > FILE")
    })?;
    // Key files are often written with echo: a trailing newline is not part of the key.
    while matches!(psk.last(), Some(b'\n' | b'\r')) {
        psk.pop();
    }
    if psk.len() < 16 {
        return Err(err(
            "gateway.psk_file",
            format!("key is {} bytes long, too short", psk.len()),
            "use at least 16 bytes of random key material",
        ));
    }

    let l = &raw.limits;
    if l.max_frame < crate::wire::MIN_MAX_FRAME as u64
        || l.max_frame > crate::wire::MAX_MAX_FRAME as u64
    {
        return Err(err(
            "limits.max_frame",
            format!("{} is out of range", l.max_frame),
            &format!(
                "use {}..={} bytes",
                crate::wire::MIN_MAX_FRAME,
                crate::wire::MAX_MAX_FRAME
            ),
        ));
    }
    if l.per_flow_buffer < 4096 || l.per_flow_buffer > u32::MAX as u64 / 2 {
        return Err(err(
            "limits.per_flow_buffer",
            format!("{} is out of range", l.per_flow_buffer),
            "use 4096..=2147483647 bytes",
        ));
    }
    if l.total_buffer < 4 * l.per_flow_buffer {
        return Err(err(
            "limits.total_buffer",
            format!(
                "{} is less than 4 × per_flow_buffer ({})",
                l.total_buffer, l.per_flow_buffer
            ),
            "raise total_buffer or lower per_flow_buffer",
        ));
    }
    let limits = Limits {
        per_flow_buffer: l.per_flow_buffer as usize,
        total_buffer: l.total_buffer as usize,
        max_frame: l.max_frame as usize,
    };
    let lan = validate_lan(&raw.lan, file)?;

    let wan = raw.wan.over(&WanParams::default());
    check_wan("wan", &wan, file)?;
    let mut links = BTreeMap::new();
    let mut seen = HashSet::new();
    for (i, lk) in raw.link.iter().enumerate() {
        let field = format!("link[{i}].peer");
        if lk.peer == g.site || !sites.iter().any(|s| s.name == lk.peer) {
            return Err(err(
                &field,
                format!("'{}' is not a peer site", lk.peer),
                "name another [[site]]",
            ));
        }
        if !seen.insert(lk.peer.clone()) {
            return Err(err(
                &field,
                format!("'{}' has two [[link]] tables", lk.peer),
                "merge them into one",
            ));
        }
        let p = lk.wan.over(&wan);
        check_wan(&format!("link[{i}]"), &p, file)?;
        links.insert(lk.peer.clone(), p);
    }

    Ok(Config {
        path: path.to_path_buf(),
        site: g.site.clone(),
        lan_listen,
        wan_listen,
        admin_listen,
        allow_remote_admin: g.allow_remote_admin,
        strategy,
        psk_file,
        psk,
        connect_timeout: Duration::from_millis(g.connect_timeout_ms),
        limits,
        lan,
        wan,
        sites,
        links,
    })
}

fn validate_lan(l: &RawLan, file: &str) -> Result<LanParams, ConfigError> {
    let err = |k: &str, v: u64, fix: &str| ConfigError {
        file: file.to_string(),
        field: format!("lan.{k}"),
        reason: format!("{v} is out of range"),
        fix: fix.to_string(),
    };
    if l.window_budget != 0 && !(4096..=1 << 30).contains(&l.window_budget) {
        return Err(err(
            "window_budget",
            l.window_budget,
            "use 0 (off) or 4096..=1073741824 bytes: the buffer of the switch port toward the gateway plus the LAN's bandwidth-delay product",
        ));
    }
    // Linux accepts 2 jiffies (2-20 ms, with HZ) up to 200 ms for the minimum RTO,
    // and up to 200 ms for the delayed-ACK bound; the kernel has the last word
    // (tune::apply_lan warns once when it refuses a value).
    for (k, v) in [
        ("rto_min_us", l.rto_min_us),
        ("delack_max_us", l.delack_max_us),
    ] {
        if v > 200_000 {
            return Err(err(
                k,
                v,
                "use 0 (the kernel's default) or at most 200000 µs",
            ));
        }
    }
    // 536: the MSS every IPv4 host must accept (RFC 1122; Linux would take
    // 88). Above the interface's MSS the kernel keeps the smaller.
    if l.mss != 0 && !(536..=65495).contains(&l.mss) {
        return Err(err(
            "mss",
            l.mss,
            "use 0 (the interface's) or 536-65495 bytes",
        ));
    }
    Ok(LanParams {
        window_budget: l.window_budget as usize,
        sub_segment: l.sub_segment,
        mss: l.mss as u32,
        rto_min_us: l.rto_min_us as u32,
        delack_max_us: l.delack_max_us as u32,
        rate_bps: l.rate_bps,
    })
}

fn check_wan(table: &str, w: &WanParams, file: &str) -> Result<(), ConfigError> {
    let err = |k: &str, reason: String, fix: &str| ConfigError {
        file: file.to_string(),
        field: format!("{table}.{k}"),
        reason,
        fix: fix.to_string(),
    };
    if w.congestion.is_empty()
        || w.congestion.len() > 15
        || !w
            .congestion
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(err(
            "congestion",
            format!("'{}' is not a congestion control name", w.congestion),
            "use a name from /proc/sys/net/ipv4/tcp_available_congestion_control, e.g. \"cubic\"",
        ));
    }
    if w.bandwidth_bps == 0 {
        return Err(err(
            "bandwidth_bps",
            "must be positive".into(),
            "give the WAN bandwidth in bits per second",
        ));
    }
    if !(w.rtt_ms > 0.0 && w.rtt_ms < 60_000.0) {
        return Err(err(
            "rtt_ms",
            format!("{} is out of range", w.rtt_ms),
            "give the WAN round-trip time in milliseconds (> 0)",
        ));
    }
    if w.socket_buffer > (1 << 30) {
        return Err(err(
            "socket_buffer",
            format!("{} is above 1 GiB", w.socket_buffer),
            "use 0 (derive from bandwidth × RTT) or a byte count ≤ 1073741824",
        ));
    }
    if w.notsent_lowat > (1 << 30) {
        return Err(err(
            "notsent_lowat",
            format!("{} is above 1 GiB", w.notsent_lowat),
            "use 0 (derive from the bandwidth) or a byte count ≤ 1073741824",
        ));
    }
    if w.keepalive_ms < 50 || w.keepalive_ms > 600_000 {
        return Err(err(
            "keepalive_ms",
            format!("{} is out of range", w.keepalive_ms),
            "use 50..=600000 milliseconds",
        ));
    }
    if !(w.outage_limit_s >= 1.0 && w.outage_limit_s <= 86_400.0) {
        return Err(err(
            "outage_limit_s",
            format!("{} is out of range", w.outage_limit_s),
            "use 1..=86400 seconds (how long flows are held while their WAN link is down; default 120)",
        ));
    }
    if w.streams == 0 || w.streams > MAX_STREAMS {
        return Err(err(
            "streams",
            "must be 1..=16".into(),
            "use streams = 1 (one WAN connection) up to 16 (`gridsplit gateway config` picks it from the path's RTT and loss)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(extra_gateway: &str, tail: &str) -> String {
        format!(
            r#"
[gateway]
site = "bordeaux"
lan_listen = "10.71.1.254:7100"
wan_listen = "10.71.1.254:7200"
admin_listen = "127.0.0.1:7300"
strategy = "fair"
psk_file = "PSK"
connect_timeout_ms = 5000
{extra_gateway}
[limits]
per_flow_buffer = 4194304
total_buffer = 268435456
max_frame = 262144
[wan]
congestion = "cubic"
bandwidth_bps = 1000000000
rtt_ms = 10.6
socket_buffer = 0
pacing_bps = 0
nodelay = true
[[site]]
name = "bordeaux"
subnet = "10.71.1.0/24"
gateway_lan = "10.71.1.254:7100"
gateway_wan = "10.71.1.254:7200"
[[site]]
name = "sophia"
subnet = "10.71.2.0/24"
gateway_lan = "10.71.2.254:7100"
gateway_wan = "10.71.2.254:7200"
{tail}
"#
        )
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        // One directory per call: tests run in parallel and must not share the key file.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gs-cfg-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("PSK"), b"0123456789abcdef0123\n").unwrap();
        Config::from_toml(text, &dir.join("gw.toml"))
    }

    #[test]
    fn the_documented_example_loads() {
        let c = load(&sample("", "")).unwrap();
        assert_eq!(c.site, "bordeaux");
        assert_eq!(c.strategy, StrategyKind::Fair);
        assert_eq!(c.psk, b"0123456789abcdef0123");
        assert_eq!(c.peers().count(), 1);
        assert!(c.own_site().subnet.contains("10.71.1.9".parse().unwrap()));
        assert_eq!(
            c.site_of("10.71.2.3".parse().unwrap()).unwrap().name,
            "sophia"
        );
        assert_eq!(c.wan_params("sophia").rtt_ms, 10.6);
    }

    #[test]
    fn link_overrides_merge_over_wan() {
        let c = load(&sample(
            "",
            "[[link]]\npeer = \"sophia\"\ncongestion = \"bbr\"\n",
        ))
        .unwrap();
        let p = c.wan_params("sophia");
        assert_eq!(p.congestion, "bbr");
        assert_eq!(p.bandwidth_bps, 1_000_000_000);
    }

    #[test]
    fn paced_means_a_cap_that_linux_paces_below() {
        assert!(!load(&sample("", "")).unwrap().paced());
        let capped = "[[link]]\npeer = \"sophia\"\npacing_bps = 98000000\n";
        assert!(load(&sample("", capped)).unwrap().paced());
        let bbr = format!("{capped}congestion = \"bbr\"\n");
        assert!(!load(&sample("", &bbr)).unwrap().paced());
    }

    #[test]
    fn errors_are_one_line_and_name_the_field() {
        let cases = [
            (sample("bogus = 1", ""), "gateway"),
            (
                sample("", "[[link]]\npeer = \"bordeaux\"\n"),
                "link[0].peer",
            ),
            (
                sample("", "").replace("\"fair\"", "\"lifo\""),
                "gateway.strategy",
            ),
            (
                sample("", "").replace("127.0.0.1:7300", "10.71.1.254:7300"),
                "gateway.admin_listen",
            ),
            (
                sample("", "").replace("10.71.2.0/24", "10.71.1.128/25"),
                "site[1].subnet",
            ),
            (
                sample("", "").replace("site = \"bordeaux\"", "site = \"lyon\""),
                "gateway.site",
            ),
            (
                sample("", "").replace("max_frame = 262144", "max_frame = 10"),
                "limits.max_frame",
            ),
            (
                sample("", "").replace("\"PSK\"", "\"missing\""),
                "gateway.psk_file",
            ),
            (
                sample("", "").replace("rtt_ms = 10.6", "rtt_ms = \"x\""),
                "wan.rtt_ms",
            ),
            (
                sample("", "[lan]\nwindow_budget = 100\n"),
                "lan.window_budget",
            ),
            (sample("", "[lan]\nrto_min_us = 900000\n"), "lan.rto_min_us"),
            (sample("", "[lan]\nmss = 100\n"), "lan.mss"),
            (sample("", "[lan]\nrto_min = 8\n"), "lan"),
        ];
        for (text, field) in cases {
            let e = load(&text).unwrap_err();
            let line = e.to_string();
            assert!(e.field.starts_with(field), "{field}: {line}");
            assert!(!line.contains('\n'), "{line}");
            assert!(line.contains("fix:"), "{line}");
        }
    }

    #[test]
    fn subnets() {
        let s = Subnet::parse("10.0.0.0/8").unwrap();
        assert!(s.contains("10.255.1.1".parse().unwrap()));
        assert!(!s.contains("11.0.0.1".parse().unwrap()));
        assert!(s.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(Subnet::parse("10.0.0.1/8").is_err());
        assert!(Subnet::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
        assert!(Subnet::parse("fd00::/64")
            .unwrap()
            .contains("fd00::5".parse().unwrap()));
    }
}
