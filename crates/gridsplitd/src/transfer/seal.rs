//! Encryption of a WAN lane (one TCP connection): a Noise handshake after the
//! PSK authentication (auth.rs), then every byte of the link's stream in
//! length-prefixed ChaCha20-Poly1305 messages. Design, threat model and
//! numbers: docs/design/wan-encryption.md.
//!
//! Wire format after AUTH, per direction of each TCP connection:
//!
//! ```text
//! len u16 (big endian, 17..=65535) | ciphertext[len]   (plaintext + 16-byte tag)
//! ```
//!
//! The first message each way is the Noise handshake's (`NOISE_PARAMS`: the
//! dialer sends `psk, e`, the acceptor answers `e, ee`); every later one is a
//! transport message. Its nonce is not sent: it is the count of messages before
//! it on this connection, so a message that was replayed, dropped, reordered or
//! altered fails to decrypt, and the connection closes. Every `REKEY_EVERY`
//! messages both ends replace the direction's key (Noise's REKEY), in step,
//! without a message saying so.
//!
//! Partial writes. The drivers write without waiting (`try_write`): a socket
//! may take half a message. The rule that keeps this exact is that the caller's
//! plaintext is consumed only for messages written whole. A message written in
//! part is kept (`pending`) and finished first on the next call, which the
//! caller makes with the same unsent plaintext (link/send.rs always re-sends
//! its leftover first); that call then drops the plaintext the message carried.
//! Messages sealed in the same batch after one the socket did not touch are
//! discarded and their nonces used again: a ciphertext that never left the
//! process was never seen by anyone, so no nonce is ever used twice on the wire.

use std::io;
use std::sync::{Arc, RwLock};

use bytes::{Buf, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use snow::StatelessTransportState;
use tokio::net::TcpStream;

/// The Noise protocol: NN (ephemeral keys only, so every connection gets fresh
/// keys and recorded traffic stays secret if the PSK leaks later) with the
/// pre-shared key mixed in before the first message (psk0), so only holders of
/// the key can complete it. ChaChaPoly: constant time without AES hardware.
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// Noise's largest message, and its authentication tag.
pub const MAX_MSG: usize = 65535;
pub const TAG: usize = 16;
/// Most plaintext in one message.
pub const MAX_PLAIN: usize = MAX_MSG - TAG;
/// Length prefix of every message.
pub const LEN: usize = 2;
/// Messages between rekeys of a direction: 2^20 messages, at most 64 GiB.
pub const REKEY_EVERY: u64 = 1 << 20;
/// Most plaintext sealed for one write: a driver's batch is 256 KiB.
const SEAL_BATCH: usize = 512 * 1024;

/// The Noise PSK: an HMAC-SHA256 of a fixed label under the configured key,
/// so that a key file of any length (at least 16 bytes) gives Noise the 32
/// bytes it needs, and the HMAC challenge uses the file's key itself.
pub fn noise_psk(psk: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(psk).expect("HMAC takes keys of any length");
    m.update(b"gridsplit-noise-psk-v1");
    m.finalize().into_bytes().into()
}

/// The prologue both ends feed the handshake: the sites and the HELLO nonces
/// of the authentication just done, so a Noise handshake cannot be spliced onto
/// another connection's authentication.
pub fn prologue(initiator: &str, responder: &str, init_nonce: &[u8], resp_nonce: &[u8]) -> Vec<u8> {
    let mut p = b"gridsplit-noise-v1".to_vec();
    for part in [
        initiator.as_bytes(),
        &[0],
        responder.as_bytes(),
        &[0],
        init_nonce,
        resp_nonce,
    ] {
        p.extend_from_slice(part);
    }
    p
}

/// What can go wrong while opening a lane's messages.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("WAN message {0} failed authentication (tampered, replayed, reordered or cut)")]
    Forged(u64),
    #[error("WAN message length {0} is below the {TAG}-byte tag (not a sealed stream)")]
    Short(usize),
    #[error("Noise handshake failed: {0}")]
    Handshake(String),
}

/// One connection's two keys after the handshake, shared by its sending and
/// receiving halves (`StatelessTransportState` seals with `&self`; only a rekey
/// takes the write lock).
pub struct LaneKeys {
    state: RwLock<StatelessTransportState>,
}

impl LaneKeys {
    /// The connection's sealing and opening halves.
    pub fn halves(state: StatelessTransportState) -> (SealTx, OpenRx) {
        Self::with_rekey(state, REKEY_EVERY)
    }

    fn with_rekey(state: StatelessTransportState, rekey_every: u64) -> (SealTx, OpenRx) {
        let keys = Arc::new(LaneKeys {
            state: RwLock::new(state),
        });
        (
            SealTx {
                keys: keys.clone(),
                nonce: 0,
                rekey_every,
                out: Vec::new(),
                sent: 0,
                pending_end: 0,
                pending_plain: 0,
            },
            OpenRx {
                keys,
                nonce: 0,
                rekey_every,
                cbuf: BytesMut::new(),
            },
        )
    }
}

/// The sending half of a lane's encryption.
pub struct SealTx {
    keys: Arc<LaneKeys>,
    /// Nonce of the next message (messages sent so far).
    nonce: u64,
    rekey_every: u64,
    /// Ciphertext of the last batch; `out[sent..pending_end]` is the rest of a
    /// message the socket took only part of.
    out: Vec<u8>,
    sent: usize,
    pending_end: usize,
    /// Plaintext bytes that message carries, still at the front of the caller's
    /// segments.
    pending_plain: usize,
}

impl SealTx {
    /// A message is on the wire in part: the connection must write it before
    /// anything else (the striping driver then keeps its piece on this lane).
    pub fn has_pending(&self) -> bool {
        self.sent < self.pending_end
    }

    /// Message `nonce` went (at least in part) on the wire.
    fn commit(&mut self) {
        self.nonce += 1;
        if self.nonce.is_multiple_of(self.rekey_every) {
            self.keys.state.write().unwrap().rekey_outgoing();
        }
    }

    /// Seals the front of `segs` into `self.out`: messages of up to MAX_PLAIN
    /// bytes, at most SEAL_BATCH in all, stopping at a rekey boundary. Returns
    /// each message's (end in `out`, plaintext length).
    fn seal(&mut self, segs: &[Bytes], scratch: &mut Vec<u8>) -> io::Result<Vec<(usize, usize)>> {
        self.out.clear();
        self.sent = 0;
        self.pending_end = 0;
        let mut msgs = Vec::new();
        let st = self.keys.state.read().unwrap();
        let (mut i, mut off) = (0, 0);
        let mut nonce = self.nonce;
        let mut total = 0;
        while i < segs.len() && total < SEAL_BATCH {
            // One message: a slice of one segment if it holds a whole message,
            // else the next segments gathered.
            let want = MAX_PLAIN.min(SEAL_BATCH - total);
            let seg = &segs[i][off..];
            let plain: &[u8] = if seg.len() >= want || i + 1 == segs.len() {
                let p = &seg[..seg.len().min(want)];
                off += p.len();
                p
            } else {
                scratch.clear();
                while i < segs.len() && scratch.len() < want {
                    let s = &segs[i][off..];
                    let n = s.len().min(want - scratch.len());
                    scratch.extend_from_slice(&s[..n]);
                    off += n;
                    if off == segs[i].len() {
                        i += 1;
                        off = 0;
                    }
                }
                &scratch[..]
            };
            if i < segs.len() && off == segs[i].len() {
                i += 1;
                off = 0;
            }
            if plain.is_empty() {
                continue;
            }
            let start = self.out.len();
            self.out.resize(start + LEN + plain.len() + TAG, 0);
            let n = st
                .write_message(nonce, plain, &mut self.out[start + LEN..])
                .map_err(|e| io::Error::other(format!("sealing a WAN message: {e}")))?;
            self.out[start..start + LEN].copy_from_slice(&(n as u16).to_be_bytes());
            total += plain.len();
            msgs.push((self.out.len(), plain.len()));
            nonce += 1;
            if nonce.is_multiple_of(self.rekey_every) {
                break;
            }
        }
        Ok(msgs)
    }
}

/// Removes `n` bytes from the front of `segs`.
fn consume(segs: &mut Vec<Bytes>, mut n: usize) -> io::Result<()> {
    let mut used = 0;
    for s in segs.iter_mut() {
        if n == 0 {
            break;
        }
        let k = s.len().min(n);
        s.advance(k);
        n -= k;
        if s.is_empty() {
            used += 1;
        }
    }
    segs.drain(..used);
    if n > 0 {
        return Err(io::Error::other(
            "a WAN write resumed with less data than its pending message carried",
        ));
    }
    Ok(())
}

/// Writes what the socket takes now of `segs`, sealed, removing the plaintext
/// of every message written whole. Ok(true) once `segs` is empty and nothing is
/// pending; Ok(false) when the socket is full. Same contract as
/// `sockio::try_write_segments`, on which the caller's rule (resend the unsent
/// rest first) is what keeps a pending message's plaintext in place.
pub fn try_write_sealed(
    stream: &TcpStream,
    tx: &mut SealTx,
    segs: &mut Vec<Bytes>,
) -> io::Result<bool> {
    let mut scratch = Vec::new();
    loop {
        if tx.has_pending() {
            match stream.try_write(&tx.out[tx.sent..tx.pending_end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => tx.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
            if tx.has_pending() {
                return Ok(false);
            }
            let plain = std::mem::take(&mut tx.pending_plain);
            consume(segs, plain)?;
        }
        segs.retain(|s| !s.is_empty());
        if segs.is_empty() {
            return Ok(true);
        }
        let msgs = tx.seal(segs, &mut scratch)?;
        let wrote = match stream.try_write(&tx.out) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        // Whole messages: committed and their plaintext consumed. The one the
        // write stopped in: committed and pending. Later ones: discarded.
        let mut start = 0;
        let mut whole = 0;
        for &(end, plain) in &msgs {
            if wrote >= end {
                tx.commit();
                whole += plain;
                start = end;
            } else {
                if wrote > start {
                    tx.commit();
                    tx.sent = wrote;
                    tx.pending_end = end;
                    tx.pending_plain = plain;
                }
                break;
            }
        }
        consume(segs, whole)?;
        if wrote < tx.out.len() {
            return Ok(false);
        }
    }
}

/// The receiving half of a lane's encryption.
pub struct OpenRx {
    keys: Arc<LaneKeys>,
    /// Nonce of the next message.
    nonce: u64,
    rekey_every: u64,
    /// Ciphertext read and not yet opened (at most one partial message after
    /// `open_all`).
    pub(crate) cbuf: BytesMut,
}

impl OpenRx {
    /// Opens every complete message in `cbuf`, appending the plaintext to
    /// `plain`.
    pub fn open_all(&mut self, plain: &mut BytesMut) -> Result<(), CryptoError> {
        loop {
            if self.cbuf.len() < LEN {
                return Ok(());
            }
            let n = u16::from_be_bytes([self.cbuf[0], self.cbuf[1]]) as usize;
            if n < TAG {
                return Err(CryptoError::Short(n));
            }
            if self.cbuf.len() < LEN + n {
                return Ok(());
            }
            let start = plain.len();
            plain.resize(start + n - TAG, 0);
            let r = self.keys.state.read().unwrap().read_message(
                self.nonce,
                &self.cbuf[LEN..LEN + n],
                &mut plain[start..],
            );
            if r.is_err() {
                plain.truncate(start);
                return Err(CryptoError::Forged(self.nonce));
            }
            self.cbuf.advance(LEN + n);
            self.nonce += 1;
            if self.nonce.is_multiple_of(self.rekey_every) {
                self.keys.state.write().unwrap().rekey_incoming();
            }
        }
    }

    /// True if a message has begun and not ended: a close now cuts it.
    pub fn mid_message(&self) -> bool {
        !self.cbuf.is_empty()
    }
}

/// Which end of the Noise handshake this gateway is: the dialer initiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Initiator,
    Responder,
}

/// Runs the Noise handshake on `stream`. `rbuf` holds what was read past the
/// authentication (the peer may already have sent its handshake message);
/// afterwards it is empty and any ciphertext read past the handshake is in the
/// returned `OpenRx`.
pub async fn handshake(
    stream: &TcpStream,
    rbuf: &mut BytesMut,
    role: Role,
    psk: &[u8],
    prologue: &[u8],
) -> Result<(SealTx, OpenRx), CryptoError> {
    let hs = |e: snow::Error| CryptoError::Handshake(e.to_string());
    let key = noise_psk(psk);
    let builder = snow::Builder::new(NOISE_PARAMS.parse().map_err(hs)?)
        .psk(0, &key)
        .map_err(hs)?
        .prologue(prologue)
        .map_err(hs)?;
    let mut state = match role {
        Role::Initiator => builder.build_initiator(),
        Role::Responder => builder.build_responder(),
    }
    .map_err(hs)?;
    let io = |e: io::Error| CryptoError::Handshake(e.to_string());
    let mut msg = [0u8; 256];
    let mut empty = [0u8; 256];
    if role == Role::Initiator {
        let n = state.write_message(&[], &mut msg[LEN..]).map_err(hs)?;
        msg[..LEN].copy_from_slice(&(n as u16).to_be_bytes());
        write_all(stream, &msg[..LEN + n]).await.map_err(io)?;
        let got = read_msg(stream, rbuf).await.map_err(io)?;
        state.read_message(&got, &mut empty).map_err(hs)?;
    } else {
        let got = read_msg(stream, rbuf).await.map_err(io)?;
        state.read_message(&got, &mut empty).map_err(hs)?;
        let n = state.write_message(&[], &mut msg[LEN..]).map_err(hs)?;
        msg[..LEN].copy_from_slice(&(n as u16).to_be_bytes());
        write_all(stream, &msg[..LEN + n]).await.map_err(io)?;
    }
    let (tx, mut rx) = LaneKeys::halves(state.into_stateless_transport_mode().map_err(hs)?);
    rx.cbuf = std::mem::take(rbuf);
    Ok((tx, rx))
}

async fn write_all(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        stream.writable().await?;
        match stream.try_write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One length-prefixed handshake message from `rbuf`, reading as needed.
async fn read_msg(stream: &TcpStream, rbuf: &mut BytesMut) -> io::Result<Bytes> {
    loop {
        if rbuf.len() >= LEN {
            let n = u16::from_be_bytes([rbuf[0], rbuf[1]]) as usize;
            if n > 200 {
                return Err(io::Error::other(format!(
                    "handshake message of {n} bytes (the peer is not encrypting: is its [wan] encryption \"insecure\"?)"
                )));
            }
            if rbuf.len() >= LEN + n {
                rbuf.advance(LEN);
                return Ok(rbuf.split_to(n).freeze());
            }
        }
        rbuf.reserve(4096);
        match crate::sockio::try_read_drain(stream, rbuf) {
            Ok(0) => {
                return Err(io::Error::other(
                    "connection closed during the Noise handshake",
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.readable().await?,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
#[path = "seal_tests.rs"]
mod tests;
