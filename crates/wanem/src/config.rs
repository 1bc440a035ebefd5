//! The JSON configuration: the contract with the Python lab that starts us.
//!
//! Everything the lab can get wrong is caught here, before a socket is opened, and
//! reported as one `field: problem` line, because the lab shows our stderr to a
//! person who has to fix the generator, not read a backtrace.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Longest one-way delay we accept. Beyond this the lab is surely mistaken (units),
/// and the queue bound would be the only thing left standing between a 1 Gb/s link
/// and gigabytes of buffered frames.
pub const MAX_DELAY_US: u64 = 10_000_000;

/// The queue must hold at least one maximal GSO frame or it could never forward one.
pub const MIN_QUEUE_BYTES: u64 = 128 * 1024;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub links: Vec<LinkConfig>,
    pub stats_path: PathBuf,
    #[serde(default = "default_stats_interval_ms")]
    pub stats_interval_ms: u64,
    #[serde(default = "default_late_threshold_us")]
    pub late_threshold_us: u64,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Per direction: frames in flight on one direction of one link.
    #[serde(default = "default_max_queue_bytes")]
    pub max_queue_bytes: u64,
    /// Run-time overrides (control.rs), read at start and on SIGHUP; a missing
    /// file means none. Absent: no run-time control.
    #[serde(default)]
    pub control_path: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    pub name: String,
    /// Interface (in our namespace) facing site A's router.
    pub a: String,
    /// Interface (in our namespace) facing site B's router.
    pub b: String,
    pub delay_us_ab: u64,
    pub delay_us_ba: u64,
    /// The link's rate in bits/s (0: none). Frames are then released no closer
    /// together than they would cross a link of that rate; see line.rs.
    #[serde(default)]
    pub rate_bps: u64,
    #[serde(default)]
    pub loss_ab: f64,
    #[serde(default)]
    pub loss_ba: f64,
}

fn default_stats_interval_ms() -> u64 {
    1000
}
fn default_late_threshold_us() -> u64 {
    200
}
fn default_seed() -> u64 {
    1
}
fn default_max_queue_bytes() -> u64 {
    64 * 1024 * 1024
}

/// A configuration problem, already phrased for the person who has to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {field}: {problem}")]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub problem: String,
}

impl ConfigError {
    fn new(file: &Path, field: impl fmt::Display, problem: impl fmt::Display) -> Self {
        ConfigError {
            file: file.display().to_string(),
            field: field.to_string(),
            problem: problem.to_string(),
        }
    }
}

impl Config {
    /// Reads, parses and validates `path`, including that every interface exists in
    /// the network namespace we run in.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path, "(file)", format!("cannot read: {e}")))?;
        let config = Config::parse(path, &text)?;
        config.validate(path, interface_exists)?;
        Ok(config)
    }

    /// Parses without validating, so tests can feed text directly.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            // An empty path means the problem is the document itself (syntax, or a
            // missing top-level field); serde_json's message says which.
            let field = match e.path().to_string() {
                p if p == "." || p.is_empty() => "(document)".to_string(),
                p => p,
            };
            ConfigError::new(path, field, e.inner())
        })
    }

    /// Checks the values the type system cannot. `iface_exists` is a parameter so the
    /// rules can be tested without the lab's interfaces.
    pub fn validate(
        &self,
        path: &Path,
        iface_exists: impl Fn(&str) -> bool,
    ) -> Result<(), ConfigError> {
        let err = |field: String, problem: String| Err(ConfigError::new(path, field, problem));

        if self.links.is_empty() {
            return err("links".into(), "is empty; list at least one link".into());
        }
        if self.stats_interval_ms < 10 || self.stats_interval_ms > 3_600_000 {
            return err(
                "stats_interval_ms".into(),
                format!(
                    "{} is out of range; use 10..=3600000",
                    self.stats_interval_ms
                ),
            );
        }
        if self.max_queue_bytes < MIN_QUEUE_BYTES {
            return err(
                "max_queue_bytes".into(),
                format!(
                    "{} is too small to hold one 64 KiB GSO frame; use at least {MIN_QUEUE_BYTES}",
                    self.max_queue_bytes
                ),
            );
        }
        if self.stats_path.file_name().is_none() {
            return err("stats_path".into(), "must name a file".into());
        }
        let dir = match self.stats_path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return err(
                "stats_path".into(),
                format!(
                    "directory {} does not exist; create it first",
                    dir.display()
                ),
            );
        }

        let mut names = HashSet::new();
        let mut ifaces = HashSet::new();
        for (i, link) in self.links.iter().enumerate() {
            let at = |field: &str| format!("links[{i}].{field}");
            if link.name.is_empty() {
                return err(at("name"), "is empty; give the link a name".into());
            }
            if !names.insert(link.name.as_str()) {
                return err(
                    at("name"),
                    format!(
                        "{:?} is used by another link; names must be unique",
                        link.name
                    ),
                );
            }
            for (field, iface) in [("a", &link.a), ("b", &link.b)] {
                if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains('/') {
                    return err(
                        at(field),
                        format!("{iface:?} is not a valid interface name"),
                    );
                }
                // Two sockets on one interface would each forward every frame: the
                // traffic would be duplicated, not delayed.
                if !ifaces.insert(iface.as_str()) {
                    return err(at(field), format!("interface {iface:?} is already used; each interface belongs to one link end"));
                }
                if !iface_exists(iface) {
                    return err(
                        at(field),
                        format!("interface {iface:?} does not exist in this network namespace"),
                    );
                }
            }
            for (field, delay) in [
                ("delay_us_ab", link.delay_us_ab),
                ("delay_us_ba", link.delay_us_ba),
            ] {
                if delay > MAX_DELAY_US {
                    return err(
                        at(field),
                        format!(
                            "{delay} is over the 10 s limit; use 0..={MAX_DELAY_US} (microseconds)"
                        ),
                    );
                }
            }
            for (field, loss) in [("loss_ab", link.loss_ab), ("loss_ba", link.loss_ba)] {
                if !(0.0..1.0).contains(&loss) {
                    return err(
                        at(field),
                        format!("{loss} is out of range; use a probability with 0 <= loss < 1"),
                    );
                }
            }
        }
        Ok(())
    }
}

fn interface_exists(name: &str) -> bool {
    crate::packet::interface_index(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"links":[{"name":"bordeaux-sophia","a":"gsw0a","b":"gsw0b","delay_us_ab":5300,"delay_us_ba":5300,"loss_ab":0.0,"loss_ba":0.0}],
        "stats_path":"/tmp/wanem.json","stats_interval_ms":1000,"late_threshold_us":200,"seed":1,"max_queue_bytes":67108864}"#;

    fn path() -> &'static Path {
        Path::new("test.json")
    }

    fn check(text: &str) -> Result<Config, ConfigError> {
        let c = Config::parse(path(), text)?;
        c.validate(path(), |name| name.starts_with("gsw"))?;
        Ok(c)
    }

    #[test]
    fn parses_the_documented_example() {
        let c = check(GOOD).unwrap();
        assert_eq!(c.links.len(), 1);
        assert_eq!(c.links[0].delay_us_ab, 5300);
        assert_eq!(c.max_queue_bytes, 64 << 20);
    }

    #[test]
    fn optional_fields_default() {
        let c = check(r#"{"links":[{"name":"l","a":"gsw1","b":"gsw2","delay_us_ab":1,"delay_us_ba":2}],"stats_path":"/tmp/s.json"}"#).unwrap();
        assert_eq!(c.links[0].loss_ab, 0.0);
        assert_eq!(c.stats_interval_ms, 1000);
        assert_eq!(c.late_threshold_us, 200);
        assert_eq!(c.seed, 1);
    }

    #[test]
    fn unknown_field_is_rejected_with_its_path() {
        let e = check(&GOOD.replace("\"loss_ba\"", "\"los_ba\"")).unwrap_err();
        assert!(e.field.starts_with("links[0]"), "{e}");
        assert!(e.problem.contains("unknown field"), "{e}");
        let e = check(&GOOD.replace("\"seed\"", "\"sed\"")).unwrap_err();
        assert!(e.problem.contains("unknown field `sed`"), "{e}");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e =
            check(&GOOD.replace("\"delay_us_ab\":5300", "\"delay_us_ab\":\"5ms\"")).unwrap_err();
        assert_eq!(e.field, "links[0].delay_us_ab", "{e}");
        let e = check(&GOOD.replace("\"delay_us_ba\":5300", "\"delay_us_ba\":-1")).unwrap_err();
        assert_eq!(e.field, "links[0].delay_us_ba", "{e}");
    }

    #[test]
    fn missing_required_field() {
        let e = check(r#"{"links":[{"name":"l","a":"gsw1","b":"gsw2","delay_us_ab":1}],"stats_path":"/tmp/s"}"#).unwrap_err();
        assert!(e.problem.contains("missing field `delay_us_ba`"), "{e}");
        let e = check(r#"{"links":[]}"#).unwrap_err();
        assert!(e.problem.contains("stats_path"), "{e}");
    }

    #[test]
    fn syntax_error_is_one_line() {
        let e = check("{\"links\": [,]}").unwrap_err();
        assert!(!e.to_string().contains('\n'));
        assert!(e.problem.contains("line 1"), "{e}");
    }

    #[test]
    fn range_checks() {
        let e = check(&GOOD.replace("\"loss_ab\":0.0", "\"loss_ab\":1.0")).unwrap_err();
        assert_eq!(e.field, "links[0].loss_ab");
        let e = check(&GOOD.replace("\"loss_ba\":0.0", "\"loss_ba\":-0.1")).unwrap_err();
        assert_eq!(e.field, "links[0].loss_ba");
        assert!(check(&GOOD.replace("\"loss_ba\":0.0", "\"loss_ba\":0.999")).is_ok());
        let e =
            check(&GOOD.replace("\"delay_us_ab\":5300", "\"delay_us_ab\":10000001")).unwrap_err();
        assert_eq!(e.field, "links[0].delay_us_ab");
        assert!(check(&GOOD.replace("\"delay_us_ab\":5300", "\"delay_us_ab\":10000000")).is_ok());
        let e = check(&GOOD.replace("67108864", "1000")).unwrap_err();
        assert_eq!(e.field, "max_queue_bytes");
        let e = check(&GOOD.replace("\"stats_interval_ms\":1000", "\"stats_interval_ms\":0"))
            .unwrap_err();
        assert_eq!(e.field, "stats_interval_ms");
    }

    #[test]
    fn interfaces_must_exist_and_be_distinct() {
        let e = check(&GOOD.replace("gsw0b", "eth9")).unwrap_err();
        assert_eq!(e.field, "links[0].b");
        assert!(e.problem.contains("does not exist"));
        let e = check(&GOOD.replace("gsw0b", "gsw0a")).unwrap_err();
        assert_eq!(e.field, "links[0].b");
        let two = GOOD.replace(
            "}],",
            r#"},{"name":"x","a":"gsw1a","b":"gsw0a","delay_us_ab":1,"delay_us_ba":1}],"#,
        );
        let e = check(&two).unwrap_err();
        assert_eq!(e.field, "links[1].b", "{e}");
        let e = check(&GOOD.replace("gsw0b", "gsw-very-long-name0")).unwrap_err();
        assert!(e.problem.contains("not a valid interface name"));
    }

    #[test]
    fn duplicate_link_names_and_missing_stats_dir() {
        let two = GOOD.replace(
            "}],",
            r#"},{"name":"bordeaux-sophia","a":"gsw1a","b":"gsw1b","delay_us_ab":1,"delay_us_ba":1}],"#,
        );
        assert_eq!(check(&two).unwrap_err().field, "links[1].name");
        let e = check(&GOOD.replace("/tmp/wanem.json", "/nonexistent-dir/w.json")).unwrap_err();
        assert_eq!(e.field, "stats_path");
        let e = check(&GOOD.replace(r#""links":[{"#, r#""links":[],"x":[{"#)).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}
