//! Fuzzes the WAN frame decoder: whatever bytes a peer (or anyone reaching the WAN
//! port) sends, decoding must return frames or a typed error, never panic, and
//! every frame it accepts must re-encode to exactly the bytes it came from. The
//! checks live in `wire::check_decoder_invariants`, shared with the bounded fuzz
//! test that runs in `cargo test` on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gridsplitd::wire::check_decoder_invariants(data, 64 * 1024);
});
