//! Bounded fuzzing of the WAN frame decoder on stable Rust, for `cargo test` and
//! CI: random bytes and mutations of valid frames (bit flips, truncation,
//! extension, splices of two frames, forged lengths), checked against the same
//! contract as the cargo-fuzz target (crates/fuzz). Deterministic: a failure
//! prints the seed and iteration, and reruns identically.
//!
//! GS_FUZZ_ITERS raises the iteration count for a longer run.

use std::net::SocketAddr;

use bytes::Bytes;
use gridsplitd::wire::{check_decoder_invariants, BatchEntry, Frame, ResetReason};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn corpus() -> Vec<Vec<u8>> {
    let a: SocketAddr = "127.0.1.10:4000".parse().unwrap();
    let b: SocketAddr = "[fd00::2]:80".parse().unwrap();
    [
        Frame::Hello {
            max_frame: 65536,
            nonce: [7; 32],
            site: "bordeaux".into(),
            sealed: false,
        },
        Frame::Auth { tag: [9; 32] },
        Frame::Open {
            flow: 3,
            window: 1 << 20,
            dst: b,
            src: a,
        },
        Frame::OpenReply {
            flow: 3,
            status: 0,
            window: 65536,
        },
        Frame::Data {
            flow: 5,
            data: Bytes::from_static(b"hello world"),
        },
        Frame::Batch(vec![
            BatchEntry {
                flow: 1,
                fin: false,
                data: Bytes::from_static(b"ab"),
            },
            BatchEntry {
                flow: 2,
                fin: true,
                data: Bytes::new(),
            },
        ]),
        Frame::Credit {
            flow: 9,
            grant: 12345,
        },
        Frame::Fin { flow: 9 },
        Frame::Reset {
            flow: 9,
            reason: ResetReason::Aborted,
        },
        Frame::Ping { token: 42 },
        Frame::Pong { token: 43 },
    ]
    .iter()
    .map(|f| f.to_bytes().to_vec())
    .collect()
}

#[test]
fn decoder_survives_random_and_mutated_input() {
    let iters: usize = std::env::var("GS_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let seed = 0x6772_6964_7370_6c74; // "gridsplt"
    let mut rng = StdRng::seed_from_u64(seed);
    let corpus = corpus();
    for i in 0..iters {
        let mut v = corpus[rng.random_range(0..corpus.len())].clone();
        match rng.random_range(0..7) {
            0 => v = (0..rng.random_range(0..80)).map(|_| rng.random()).collect(),
            1 => {
                for _ in 0..rng.random_range(1..4) {
                    let j = rng.random_range(0..v.len());
                    v[j] ^= 1 << rng.random_range(0..8);
                }
            }
            2 => v.truncate(rng.random_range(0..v.len())),
            3 => v.extend((0..rng.random_range(1..40)).map(|_| rng.random::<u8>())),
            4 => v.extend_from_slice(&corpus[rng.random_range(0..corpus.len())]),
            5 => {
                // Forge the length field.
                let len: u32 = if rng.random() {
                    rng.random()
                } else {
                    rng.random_range(0..64)
                };
                v[4..8].copy_from_slice(&len.to_be_bytes());
            }
            _ => {
                let j = rng.random_range(0..v.len());
                v[j] = rng.random();
            }
        }
        let r = std::panic::catch_unwind(|| check_decoder_invariants(&v, 4096));
        assert!(r.is_ok(), "seed {seed:#x} iteration {i}: input {v:02x?}");
    }
}
