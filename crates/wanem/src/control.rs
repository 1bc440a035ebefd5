//! Run-time overrides: the lab's fault injection adds delay to a link without
//! restarting us (a restart would drop every frame in flight).
//!
//! The overrides live in a small JSON file (`control_path` in the configuration),
//! read at start and again on SIGHUP:
//!
//! ```json
//! {"links":[{"name":"east-west","add_delay_us_ab":50000,"add_delay_us_ba":50000}]}
//! ```
//!
//! A missing file means no overrides, and so does a link the file does not name:
//! the file is the whole current state, never a change to the previous one. A bad
//! file is refused whole, with one `field: problem` line, and the overrides in force
//! stay as they were.

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;

use crate::config::{Config, MAX_DELAY_US};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ControlFile {
    links: Vec<LinkOverride>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkOverride {
    name: String,
    #[serde(default)]
    add_delay_us_ab: u64,
    #[serde(default)]
    add_delay_us_ba: u64,
}

/// Extra one-way delay in µs per configured link, in configuration order: (ab, ba).
pub type Extras = Vec<(u64, u64)>;

/// Reads the control file; a missing file is "no overrides".
pub fn load(path: &Path, config: &Config) -> Result<Extras, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, config).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![(0, 0); config.links.len()]),
        Err(e) => Err(format!("{}: (file): cannot read: {e}", path.display())),
    }
}

/// Parses and validates the overrides against the configured links.
pub fn parse(text: &str, config: &Config) -> Result<Extras, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let file: ControlFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = match e.path().to_string() {
            p if p == "." || p.is_empty() => "(document)".to_string(),
            p => p,
        };
        format!("{field}: {}", e.inner())
    })?;
    let mut extras = vec![(0, 0); config.links.len()];
    let mut seen = HashSet::new();
    for (i, o) in file.links.iter().enumerate() {
        let Some(k) = config.links.iter().position(|l| l.name == o.name) else {
            let names: Vec<&str> = config.links.iter().map(|l| l.name.as_str()).collect();
            return Err(format!(
                "links[{i}].name: no link {:?}; links: {}",
                o.name,
                names.join(", ")
            ));
        };
        if !seen.insert(k) {
            return Err(format!(
                "links[{i}].name: {:?} is given twice; give each link once",
                o.name
            ));
        }
        let link = &config.links[k];
        for (field, add, base) in [
            ("add_delay_us_ab", o.add_delay_us_ab, link.delay_us_ab),
            ("add_delay_us_ba", o.add_delay_us_ba, link.delay_us_ba),
        ] {
            if base + add > MAX_DELAY_US {
                return Err(format!(
                    "links[{i}].{field}: {add} takes the delay over the 10 s limit; use at most {}",
                    MAX_DELAY_US - base
                ));
            }
        }
        extras[k] = (o.add_delay_us_ab, o.add_delay_us_ba);
    }
    Ok(extras)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            Path::new("c.json"),
            r#"{"links":[{"name":"east-west","a":"l0a","b":"l0b","delay_us_ab":5000,"delay_us_ba":5000},
                         {"name":"east-north","a":"l1a","b":"l1b","delay_us_ab":1000,"delay_us_ba":2000}],
                "stats_path":"/tmp/s.json"}"#,
        )
        .unwrap()
    }

    #[test]
    fn names_links_and_defaults_the_rest_to_zero() {
        let e = parse(
            r#"{"links":[{"name":"east-north","add_delay_us_ab":7,"add_delay_us_ba":9}]}"#,
            &config(),
        )
        .unwrap();
        assert_eq!(e, vec![(0, 0), (7, 9)]);
        let e = parse(
            r#"{"links":[{"name":"east-west","add_delay_us_ba":3}]}"#,
            &config(),
        )
        .unwrap();
        assert_eq!(e, vec![(0, 3), (0, 0)]);
        assert_eq!(
            parse(r#"{"links":[]}"#, &config()).unwrap(),
            vec![(0, 0); 2]
        );
    }

    #[test]
    fn a_missing_file_is_no_override() {
        let p = std::env::temp_dir().join(format!("wanem-control-none-{}", std::process::id()));
        assert_eq!(load(&p, &config()).unwrap(), vec![(0, 0); 2]);
    }

    #[test]
    fn bad_input_is_one_line_naming_the_field() {
        let c = config();
        let e = parse(
            r#"{"links":[{"name":"west-east","add_delay_us_ab":1}]}"#,
            &c,
        )
        .unwrap_err();
        assert!(
            e.starts_with("links[0].name: no link \"west-east\"; links: east-west, east-north"),
            "{e}"
        );
        let e = parse(
            r#"{"links":[{"name":"east-west","add_delay_ms_ab":1}]}"#,
            &c,
        )
        .unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = parse(
            r#"{"links":[{"name":"east-west","add_delay_us_ab":-1}]}"#,
            &c,
        )
        .unwrap_err();
        assert!(e.starts_with("links[0].add_delay_us_ab"), "{e}");
        let e = parse(
            r#"{"links":[{"name":"east-west"},{"name":"east-west"}]}"#,
            &c,
        )
        .unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let e = parse(
            r#"{"links":[{"name":"east-north","add_delay_us_ba":9998001}]}"#,
            &c,
        )
        .unwrap_err();
        assert!(e.contains("use at most 9998000"), "{e}");
        let e = parse("{\"links\": [,]}", &c).unwrap_err();
        assert!(!e.contains('\n') && e.contains("line 1"), "{e}");
    }

    #[test]
    fn an_unreadable_file_names_itself() {
        let dir = std::env::temp_dir().join(format!("wanem-control-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = load(&dir, &config()).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
