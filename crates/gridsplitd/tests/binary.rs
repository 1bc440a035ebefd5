//! The real `gridsplitd` binary: config checking and exit codes, a gateway
//! process killed with SIGKILL mid-transfer, and a clean stop on SIGTERM.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use gridsplitd::lanproto::Status;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const BIN: &str = env!("CARGO_BIN_EXE_gridsplitd");

/// Kills the child (by its PID) if the test ends early.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(config: &std::path::Path) -> Proc {
    Proc(
        Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("--log-level")
            .arg(std::env::var("GS_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            // GS_TEST_LOG=info shows the gateways' logs when a test needs explaining.
            .stderr(if std::env::var_os("GS_TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap(),
    )
}

#[test]
fn check_config_exit_codes() {
    let k = 22;
    let good = write_config(k, 1, PSK, &Opts::default());
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&good)
        .arg("--check-config")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: site alpha"));

    let bad = dir(k).join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&good)
            .unwrap()
            .replace("strategy = \"fair\"", "strategy = \"fair\"\ncolour = 1"),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&bad)
        .arg("--check-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("colour") && err.contains("fix:"), "{err}");

    let out = Command::new(BIN)
        .arg("--config")
        .arg(dir(k).join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_gateway_process_resets_clients_and_sigterm_stops_cleanly() {
    within(40, async {
        let k = 21;
        let o = Opts::default();
        let mut a = spawn(&write_config(k, 1, PSK, &o));
        let b = spawn(&write_config(k, 2, PSK, &o));
        // Wait until alpha reports the link up on its admin endpoint.
        let admin = addr(k, 0, 1, ADMIN_PORT);
        let t0 = Instant::now();
        loop {
            if let Ok(mut s) = tokio::net::TcpStream::connect(admin).await {
                let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
                let body = read_all(&mut s).await.unwrap_or_default();
                if String::from_utf8_lossy(&body).contains("gridsplit_link_up{peer=\"beta\"} 1") {
                    break;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "link never came up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let l = TcpListener::bind(addr(k, 2, 20, 5000)).await.unwrap();
        let server = sink(l);
        let (c, st) = gs_connect(
            ip(k, 1, 10),
            addr(k, 1, 254, LAN_PORT),
            addr(k, 2, 20, 5000),
        )
        .await;
        assert_eq!(st, Status::Ok);
        let (mut cr, mut cw) = c.into_split();
        let chunk = vec![3u8; 65536];
        for _ in 0..10 {
            cw.write_all(&chunk).await.unwrap();
        }
        drop(b); // SIGKILL to beta's PID
        expect_reset_while_writing(&mut cr, &mut cw, &chunk, Instant::now()).await;
        let _ = within(5, server).await;

        // SIGTERM: alpha stops by itself, with status 0.
        // SAFETY: kill(2) on the PID of a child we spawned and still own.
        unsafe { libc::kill(a.0.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = a.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no exit after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(status.code(), Some(0));
    })
    .await
    .expect("timed out");
}
