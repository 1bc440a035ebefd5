//! Unit tests of the configuration: the documented example loads, `[[link]]`
//! merges over `[wan]`, every error is one line naming its field, and subnets.

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
fn quickack_is_off_unless_wan_or_a_link_turns_it_on() {
    let c = load(&sample("", "")).unwrap();
    assert!(!c.wan_params("sophia").quickack);
    let on = sample("", "").replace("nodelay = true\n", "nodelay = true\nquickack = true\n");
    assert!(load(&on).unwrap().wan_params("sophia").quickack);
    // A link may turn it off again.
    let link = sample("", "[[link]]\npeer = \"sophia\"\nquickack = false\n")
        .replace("nodelay = true\n", "nodelay = true\nquickack = true\n");
    assert!(!load(&link).unwrap().wan_params("sophia").quickack);
}

#[test]
fn adaptive_pacing_takes_the_far_port_and_a_floor_per_link() {
    let adaptive = "[[link]]\npeer = \"sophia\"\npacing_bps = 190000000\n\
                    pacing_far_port_bps = 200000000\npacing_floor_bps = 100000000\n";
    let c = load(&sample("", adaptive)).unwrap();
    let p = c.wan_params("sophia");
    assert_eq!(
        (p.pacing_bps, p.pacing_far_port_bps, p.pacing_floor_bps),
        (190_000_000, 200_000_000, 100_000_000)
    );
    let c = load(&sample("", "")).unwrap();
    assert_eq!(c.wan_params("sophia").pacing_far_port_bps, 0);
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
        (
            sample("", "[lan]\nburst_bytes = 2000000000\n"),
            "lan.burst_bytes",
        ),
        (sample("", "[lan]\nrto_min = 8\n"), "lan"),
        (
            sample(
                "",
                "[[link]]\npeer = \"sophia\"\npacing_bps = 98000000\npacing_far_port_bps = 200000000\n\
                 pacing_floor_bps = 150000000\n",
            ),
            "link[0].pacing_floor_bps",
        ),
        (
            sample("", "[[link]]\npeer = \"sophia\"\npacing_far_port_bps = 200000000\n"),
            "link[0].pacing_floor_bps",
        ),
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

/// The sample with a second gateway for each site (tables 2 and 3, after
/// both sites' first), `top` before every table and `tail` after them.
fn two_gateways_each(top: &str, tail: &str) -> String {
    let second = r#"
[[site]]
name = "bordeaux"
subnet = "10.71.1.0/24"
gateway_lan = "10.71.1.253:7100"
gateway_wan = "10.71.1.253:7200"
[[site]]
name = "sophia"
subnet = "10.71.2.0/24"
gateway_lan = "10.71.2.253:7100"
gateway_wan = "10.71.2.253:7200"
"#;
    format!("{top}\n{}", sample("", &format!("{second}{tail}")))
}

#[test]
fn a_site_may_have_several_gateways() {
    let tail = "[[link]]\npeer = \"sophia\"\ncongestion = \"bbr\"\n";
    let c = load(&two_gateways_each("gateway_index = 1", tail)).unwrap();
    assert_eq!((c.site.as_str(), c.gateway_index), ("bordeaux", 1));
    assert_eq!(c.id, "bordeaux/1");
    assert_eq!(
        c.own_site().gateway_lan,
        "10.71.1.253:7100".parse().unwrap()
    );
    let peers: Vec<&str> = c.peers().map(|p| p.id.as_str()).collect();
    assert_eq!(peers, ["sophia/0", "sophia/1"]);
    let sophia: Vec<usize> = c.gateways_of("sophia").map(|g| g.index).collect();
    assert_eq!(sophia, [0, 1]);
    assert_eq!(
        c.gateway("sophia/1").unwrap().gateway_wan.to_string(),
        "10.71.2.253:7200"
    );
    // A [[link]] names a site and applies to each of its gateways.
    assert_eq!(c.gateway_params("sophia/0").congestion, "bbr");
    assert_eq!(c.gateway_params("sophia/1").congestion, "bbr");
    assert_eq!(
        c.site_of("10.71.2.3".parse().unwrap()).unwrap().name,
        "sophia"
    );

    // The default index is 0; a site with one gateway keeps its name as its id.
    let c = load(&two_gateways_each("", "")).unwrap();
    assert_eq!(c.id, "bordeaux/0");
    let c = load(&sample("", "")).unwrap();
    assert_eq!((c.id.as_str(), c.gateway_index), ("bordeaux", 0));
    assert_eq!(
        c.peers().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        ["sophia"]
    );
}

#[test]
fn several_gateways_errors_name_the_key_and_the_fix() {
    let second_bordeaux = |lan: &str, wan: &str, subnet: &str| {
        format!(
            "[[site]]\nname = \"bordeaux\"\nsubnet = \"{subnet}\"\ngateway_lan = \"{lan}\"\ngateway_wan = \"{wan}\"\n"
        )
    };
    let ok_lan = "10.71.1.253:7100";
    let ok_wan = "10.71.1.253:7200";
    let cases = [
        // Past the site's tables: 2 gateways are 0 and 1; one gateway is 0.
        (
            two_gateways_each("gateway_index = 2", ""),
            "gateway_index",
            "0..=1",
        ),
        (
            format!("gateway_index = 1\n{}", sample("", "")),
            "gateway_index",
            "0..=0",
        ),
        // Written inside [gateway] rather than at the top.
        (
            sample("gateway_index = 1", ""),
            "gateway.gateway_index",
            "top level",
        ),
        (
            sample("", &second_bordeaux(ok_lan, ok_wan, "10.71.3.0/24")),
            "site[2].subnet",
            "same subnet",
        ),
        (
            sample(
                "",
                &second_bordeaux("10.71.1.254:7100", ok_wan, "10.71.1.0/24"),
            ),
            "site[2].gateway_lan",
            "its own gateway_lan",
        ),
        (
            sample(
                "",
                &second_bordeaux(ok_lan, "10.71.2.254:7200", "10.71.1.0/24"),
            ),
            "site[2].gateway_wan",
            "its own gateway_wan",
        ),
        // A [[link]] names a site, not one of its gateways.
        (
            two_gateways_each("", "[[link]]\npeer = \"sophia/1\"\n"),
            "link[0].peer",
            "every gateway of that site",
        ),
    ];
    for (text, field, says) in cases {
        let e = load(&text).unwrap_err();
        let line = e.to_string();
        assert_eq!(e.field, field, "{line}");
        assert!(line.contains(says), "{field} should say '{says}': {line}");
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("fix:"), "{line}");
    }
}
