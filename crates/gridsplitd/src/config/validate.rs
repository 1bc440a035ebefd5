//! From the raw form to a `Config`: every cross-reference (sites, peers, the
//! own site), address, limit and key file is checked here, once at start, and
//! the first problem is returned as a `ConfigError` with its fix.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{RawConfig, RawLan};
use super::wan::check_wan;
use super::{
    Config, ConfigError, Encryption, LanParams, Limits, Site, StrategyKind, Subnet, WanParams,
};

pub(super) fn validate(raw: RawConfig, path: &Path, file: &str) -> Result<Config, ConfigError> {
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
    // A site may repeat: each of its tables is one of its gateways, the
    // table order being the gateways' indexes (docs/protocol.md §5).
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
        let subnet = Subnet::parse(&s.subnet).map_err(|r| {
            err(
                &f("subnet"),
                format!("'{}': {r}", s.subnet),
                "write a network prefix like \"10.71.1.0/24\"",
            )
        })?;
        if let Some(o) = sites.iter().find(|o| o.name == s.name) {
            if o.subnet != subnet {
                return Err(err(
                    &f("subnet"),
                    format!(
                        "site '{}' has another gateway's table with subnet {} and this one with {subnet}",
                        s.name, o.subnet
                    ),
                    "give every [[site]] table of one site (one per gateway) the same subnet",
                ));
            }
        } else if let Some(o) = sites.iter().find(|o| o.subnet.overlaps(&subnet)) {
            return Err(err(
                &f("subnet"),
                format!("{subnet} overlaps site '{}' ({})", o.name, o.subnet),
                "give each site a disjoint subnet",
            ));
        }
        let gateway_lan = addr(&f("gateway_lan"), &s.gateway_lan)?;
        let gateway_wan = addr(&f("gateway_wan"), &s.gateway_wan)?;
        // Nodes and peers tell gateways apart by these addresses.
        for (key, a, same) in [
            (
                "gateway_lan",
                gateway_lan,
                sites.iter().find(|o| o.gateway_lan == gateway_lan),
            ),
            (
                "gateway_wan",
                gateway_wan,
                sites.iter().find(|o| o.gateway_wan == gateway_wan),
            ),
        ] {
            if let Some(o) = same {
                return Err(err(
                    &f(key),
                    format!("{a} is also the {key} of a gateway of site '{}'", o.name),
                    &format!("give every gateway ([[site]] table) its own {key}"),
                ));
            }
        }
        let index = sites.iter().filter(|o| o.name == s.name).count();
        sites.push(Site {
            name: s.name.clone(),
            subnet,
            gateway_lan,
            gateway_wan,
            index,
            id: String::new(),
        });
    }
    let counts: Vec<usize> = sites
        .iter()
        .map(|s| sites.iter().filter(|o| o.name == s.name).count())
        .collect();
    for (s, n) in sites.iter_mut().zip(counts) {
        s.id = gateway_id(&s.name, s.index, n);
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
    let gateways = sites.iter().filter(|s| s.name == g.site).count();
    if raw.gateway_index >= gateways as u64 {
        return Err(err(
            "gateway_index",
            format!(
                "{} is out of range: site '{}' has {gateways} [[site]] table(s), so its gateways are 0..={}",
                raw.gateway_index,
                g.site,
                gateways - 1
            ),
            "set the top-level gateway_index to this gateway's position among its site's [[site]] tables, counting from 0",
        ));
    }
    let gateway_index = raw.gateway_index as usize;
    let id = gateway_id(&g.site, gateway_index, gateways);
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
    let psk = read_psk(&psk_file, file)?;

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
    let encryption = match raw.wan.encryption.as_deref() {
        None => Encryption::Noise,
        Some(name) => Encryption::from_name(name).ok_or_else(|| {
            err(
                "wan.encryption",
                format!("'{name}' is not an encryption setting"),
                "use \"noise\" (the default) or \"insecure\" (frames in clear, for a trusted private WAN only)",
            )
        })?,
    };
    let mut links = BTreeMap::new();
    let mut seen = HashSet::new();
    for (i, lk) in raw.link.iter().enumerate() {
        if lk.wan.encryption.is_some() {
            return Err(err(
                &format!("link[{i}].encryption"),
                "encryption is set for the whole gateway, not per link".into(),
                "move it to [wan] (the same value on every gateway)",
            ));
        }
        let field = format!("link[{i}].peer");
        if lk.peer == g.site || !sites.iter().any(|s| s.name == lk.peer) {
            return Err(err(
                &field,
                format!("'{}' is not a peer site", lk.peer),
                "name another [[site]] by its site name (a [[link]] applies to every gateway of that site)",
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
        gateway_index,
        id,
        lan_listen,
        wan_listen,
        admin_listen,
        allow_remote_admin: g.allow_remote_admin,
        strategy,
        psk_file,
        psk,
        encryption,
        connect_timeout: Duration::from_millis(g.connect_timeout_ms),
        limits,
        lan,
        wan,
        sites,
        links,
    })
}

/// A gateway's id: its site's name when the site has one gateway, else
/// `SITE/INDEX`.
pub(super) fn gateway_id(site: &str, index: usize, gateways: usize) -> String {
    if gateways == 1 {
        site.to_string()
    } else {
        format!("{site}/{index}")
    }
}

/// Reads a key file: the HMAC key and the source of the Noise PSK (at least 16
/// bytes; a trailing newline is not part of it).
pub(super) fn read_psk(psk_file: &Path, file: &str) -> Result<Vec<u8>, ConfigError> {
    let err = |reason: String, fix: &str| ConfigError {
        file: file.to_string(),
        field: "gateway.psk_file".into(),
        reason,
        fix: fix.to_string(),
    };
    let mut psk = std::fs::read(psk_file).map_err(|e| {
        err(format!("cannot read {}: {e}", psk_file.display()), "create the shared key file (the same bytes on every gateway), e.g. head -c 32 /dev/urandom > FILE")
    })?;
    // Key files are often written with echo: a trailing newline is not part of the key.
    while matches!(psk.last(), Some(b'\n' | b'\r')) {
        psk.pop();
    }
    if psk.len() < 16 {
        return Err(err(
            format!("key is {} bytes long, too short", psk.len()),
            "use at least 16 bytes of random key material",
        ));
    }
    Ok(psk)
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
    if l.burst_bytes > 1 << 30 {
        return Err(err(
            "burst_bytes",
            l.burst_bytes,
            "use 0 (always share the rate) or at most 1073741824 bytes: a LAN host's switch port buffer plus the LAN's bandwidth-delay product",
        ));
    }
    Ok(LanParams {
        window_budget: l.window_budget as usize,
        sub_segment: l.sub_segment,
        mss: l.mss as u32,
        rto_min_us: l.rto_min_us as u32,
        delack_max_us: l.delack_max_us as u32,
        rate_bps: l.rate_bps,
        burst_bytes: l.burst_bytes,
    })
}
