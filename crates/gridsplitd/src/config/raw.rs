//! The configuration as written: serde mirrors of the TOML tables (unknown keys
//! are errors), their defaults, and `parse_raw`, which turns a TOML or type
//! error into a one-line `ConfigError` that names the line and the key.

use serde::Deserialize;

use super::wan::RawWan;
use super::ConfigError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    /// Which of its own site's `[[site]]` tables this gateway is; a top-level
    /// key (before the first table), since it picks among the site tables.
    #[serde(default)]
    pub(super) gateway_index: u64,
    pub(super) gateway: RawGateway,
    #[serde(default)]
    pub(super) limits: RawLimits,
    #[serde(default)]
    pub(super) lan: RawLan,
    #[serde(default)]
    pub(super) wan: RawWan,
    #[serde(default)]
    pub(super) site: Vec<RawSite>,
    #[serde(default)]
    pub(super) link: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    pub(super) site: String,
    pub(super) lan_listen: String,
    pub(super) wan_listen: String,
    #[serde(default = "default_admin")]
    pub(super) admin_listen: String,
    #[serde(default)]
    pub(super) allow_remote_admin: bool,
    #[serde(default = "default_strategy")]
    pub(super) strategy: String,
    pub(super) psk_file: String,
    #[serde(default = "default_connect_timeout")]
    pub(super) connect_timeout_ms: u64,
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
pub(super) struct RawLimits {
    #[serde(default = "default_per_flow")]
    pub(super) per_flow_buffer: u64,
    #[serde(default = "default_total")]
    pub(super) total_buffer: u64,
    #[serde(default = "default_max_frame")]
    pub(super) max_frame: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLan {
    #[serde(default)]
    pub(super) window_budget: u64,
    #[serde(default = "default_true")]
    pub(super) sub_segment: bool,
    #[serde(default)]
    pub(super) mss: u64,
    #[serde(default)]
    pub(super) rto_min_us: u64,
    #[serde(default)]
    pub(super) delack_max_us: u64,
    #[serde(default)]
    pub(super) rate_bps: u64,
    #[serde(default)]
    pub(super) burst_bytes: u64,
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
            burst_bytes: 0,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSite {
    pub(super) name: String,
    pub(super) subnet: String,
    pub(super) gateway_lan: String,
    pub(super) gateway_wan: String,
    /// The split policy, read by libgridsplit.so: sites whose connections with
    /// this one stay direct. The gateway only checks the names.
    pub(super) direct_to: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLink {
    pub(super) peer: String,
    #[serde(flatten)]
    pub(super) wan: RawWan,
}

pub(super) fn parse_raw(text: &str, file: &str) -> Result<RawConfig, ConfigError> {
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
        let fix = if msg.starts_with("unknown field `gateway_index`") {
            // Written inside a table (after [gateway], say) instead of before all.
            "move gateway_index to the top level, before the first [table] of the file".to_string()
        } else if msg.starts_with("unknown field") {
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
