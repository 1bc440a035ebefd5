//! Peer authentication on a WAN link: a pre-shared-key challenge–response in which
//! both gateways prove they know the key before either relays anything.
//!
//! Each side sends HELLO carrying a fresh 32-byte random nonce (its challenge), then
//! AUTH carrying
//!
//! ```text
//! HMAC-SHA256(psk, "gridsplit-auth-v1" | sender_id | 0 | receiver_id | 0 |
//!                  receiver_nonce | sender_nonce)
//! ```
//!
//! An id names one gateway: its site's name when the site has one gateway,
//! else `SITE/INDEX` (config::Site::id). Naming both gateways and ordering them
//! by direction means a tag can't be reflected back at its author or replayed on
//! another link, and the receiver's fresh nonce means it can't be replayed later.
//! Tags are compared in constant time (the `hmac` crate's `verify_slice`). A HELLO
//! naming our own id is refused outright: that is what a reflection attempt looks
//! like.
//!
//! HELLO also says whether the sender seals what follows AUTH (`[wan]
//! encryption`): gateways that disagree both refuse the connection, naming the
//! setting, before either sends AUTH. Sealed links then run the Noise handshake
//! (transfer/seal.rs), whose prologue binds it to this exchange's gateway ids
//! and nonces.

use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::TryRngCore;
use sha2::Sha256;
use thiserror::Error;

use crate::transfer::{RecvError, WanConn};
use crate::wire::{Frame, FrameType, WireError, MIN_MAX_FRAME, NONCE_LEN, TAG_LEN, VERSION};

type HmacSha256 = Hmac<Sha256>;

const CONTEXT: &[u8] = b"gridsplit-auth-v1";

/// What the handshake established about the peer.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The peer's gateway id, as its HELLO named it and its AUTH proved.
    pub id: String,
    /// The peer's max_frame: we never send a frame larger than this.
    pub max_frame: usize,
    /// The HELLO nonces, ours and the peer's (the Noise prologue's).
    pub own_nonce: [u8; NONCE_LEN],
    pub peer_nonce: [u8; NONCE_LEN],
}

fn encryption_name(sealed: bool) -> &'static str {
    if sealed {
        "\"noise\" (the default)"
    } else {
        "\"insecure\""
    }
}

#[derive(Debug, Error)]
pub enum AuthError {
    #[error("peer's authentication tag is wrong (different pre-shared key?)")]
    BadTag,
    #[error("peer claims gateway id '{0}', which is not a peer it may be (a gateway of another site in our [[site]] tables, on the side of the pair that dials)")]
    UnexpectedSite(String),
    #[error("expected {expected:?} during the handshake, got {got:?}")]
    Unexpected { expected: FrameType, got: FrameType },
    #[error("peer's max_frame {0} is below the minimum")]
    TinyFrames(u32),
    #[error("peer speaks WAN protocol version {0}, this gateway speaks version {VERSION}: run the same gridsplitd release on both gateways")]
    Version(u8),
    #[error("the peer gateway has [wan] encryption = {} and this one {}: set the same [wan] encryption on both gateways", encryption_name(*peer), encryption_name(*own))]
    EncryptionMismatch { own: bool, peer: bool },
    #[error("{0}")]
    Crypto(#[from] crate::transfer::seal::CryptoError),
    #[error("handshake timed out")]
    Timeout,
    #[error("no randomness available: {0}")]
    Rng(String),
    #[error(transparent)]
    Recv(#[from] RecvError),
}

pub fn new_nonce() -> Result<[u8; NONCE_LEN], AuthError> {
    let mut n = [0u8; NONCE_LEN];
    rand::rngs::OsRng
        .try_fill_bytes(&mut n)
        .map_err(|e| AuthError::Rng(e.to_string()))?;
    Ok(n)
}

fn mac(
    psk: &[u8],
    sender: &str,
    receiver: &str,
    receiver_nonce: &[u8],
    sender_nonce: &[u8],
) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(psk).expect("HMAC takes keys of any length");
    m.update(CONTEXT);
    m.update(sender.as_bytes());
    m.update(&[0]);
    m.update(receiver.as_bytes());
    m.update(&[0]);
    m.update(receiver_nonce);
    m.update(sender_nonce);
    m
}

/// The tag `sender` presents to `receiver`.
pub fn tag(
    psk: &[u8],
    sender: &str,
    receiver: &str,
    receiver_nonce: &[u8],
    sender_nonce: &[u8],
) -> [u8; TAG_LEN] {
    mac(psk, sender, receiver, receiver_nonce, sender_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Constant-time check of a tag presented by `sender`.
pub fn verify(
    psk: &[u8],
    sender: &str,
    receiver: &str,
    receiver_nonce: &[u8],
    sender_nonce: &[u8],
    got: &[u8],
) -> bool {
    mac(psk, sender, receiver, receiver_nonce, sender_nonce)
        .verify_slice(got)
        .is_ok()
}

/// Runs the handshake on a fresh connection, as the gateway `own_site` (its
/// gateway id). `allowed` says whether a claimed gateway id may be on the other
/// end of this connection. Both directions are verified
/// before this returns Ok; on any error the caller closes the connection.
pub async fn handshake<C: WanConn>(
    conn: &mut C,
    psk: &[u8],
    own_site: &str,
    own_max_frame: usize,
    sealed: bool,
    allowed: impl Fn(&str) -> bool,
    limit: Duration,
) -> Result<PeerInfo, AuthError> {
    let ex = exchange(conn, psk, own_site, own_max_frame, sealed, allowed);
    match tokio::time::timeout(limit, ex).await {
        Ok(r) => r,
        Err(_) => Err(AuthError::Timeout),
    }
}

async fn exchange<C: WanConn>(
    conn: &mut C,
    psk: &[u8],
    own_site: &str,
    own_max_frame: usize,
    sealed: bool,
    allowed: impl Fn(&str) -> bool,
) -> Result<PeerInfo, AuthError> {
    let own_nonce = new_nonce()?;
    conn.send_frame(&Frame::Hello {
        max_frame: own_max_frame as u32,
        nonce: own_nonce,
        site: own_site.to_owned(),
        sealed,
    })
    .await
    .map_err(RecvError::Io)?;
    // The peer's first frame tells its protocol version: an older gateway gets a
    // refusal that says so, not a generic "bad frame".
    let first = match conn.recv_frame().await {
        Err(RecvError::Wire(WireError::BadVersion(v))) => return Err(AuthError::Version(v)),
        r => r?,
    };
    let (peer_site, peer_nonce, peer_max, peer_sealed) = match first {
        Frame::Hello {
            max_frame,
            nonce,
            site,
            sealed,
        } => (site, nonce, max_frame, sealed),
        other => {
            return Err(AuthError::Unexpected {
                expected: FrameType::Hello,
                got: other.kind(),
            })
        }
    };
    if peer_site == own_site || !allowed(&peer_site) {
        return Err(AuthError::UnexpectedSite(peer_site));
    }
    if (peer_max as usize) < MIN_MAX_FRAME {
        return Err(AuthError::TinyFrames(peer_max));
    }
    if peer_sealed != sealed {
        return Err(AuthError::EncryptionMismatch {
            own: sealed,
            peer: peer_sealed,
        });
    }
    let t = tag(psk, own_site, &peer_site, &peer_nonce, &own_nonce);
    conn.send_frame(&Frame::Auth { tag: t })
        .await
        .map_err(RecvError::Io)?;
    match conn.recv_frame().await? {
        Frame::Auth { tag } => {
            if !verify(psk, &peer_site, own_site, &own_nonce, &peer_nonce, &tag) {
                return Err(AuthError::BadTag);
            }
        }
        other => {
            return Err(AuthError::Unexpected {
                expected: FrameType::Auth,
                got: other.kind(),
            })
        }
    }
    Ok(PeerInfo {
        id: peer_site,
        max_frame: (peer_max as usize).min(own_max_frame),
        own_nonce,
        peer_nonce,
    })
}

/// Seals `conn` after a successful `handshake` (unless the link is insecure):
/// the Noise handshake of transfer/seal.rs, the dialer initiating, bound to
/// this authentication's sites and nonces.
pub async fn secure(
    conn: &mut crate::transfer::tcp::TcpConn,
    peer: &PeerInfo,
    own_site: &str,
    dialer: bool,
    psk: &[u8],
    limit: Duration,
) -> Result<(), AuthError> {
    use crate::transfer::seal::{prologue, Role};
    let (role, pro) = if dialer {
        let p = prologue(own_site, &peer.id, &peer.own_nonce, &peer.peer_nonce);
        (Role::Initiator, p)
    } else {
        let p = prologue(&peer.id, own_site, &peer.peer_nonce, &peer.own_nonce);
        (Role::Responder, p)
    };
    match tokio::time::timeout(limit, conn.secure(role, psk, &pro)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(AuthError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_bind_key_direction_and_nonces() {
        let k = b"0123456789abcdef";
        let (na, nb) = ([1u8; 32], [2u8; 32]);
        let t = tag(k, "a", "b", &nb, &na);
        assert!(verify(k, "a", "b", &nb, &na, &t));
        assert!(!verify(b"0123456789abcdeX", "a", "b", &nb, &na, &t));
        // Reflected back at its author, or with the nonces swapped: refused.
        assert!(!verify(k, "b", "a", &na, &nb, &t));
        assert!(!verify(k, "a", "b", &na, &nb, &t));
        assert!(!verify(k, "a", "b", &nb, &na, &t[..31]));
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(new_nonce().unwrap(), new_nonce().unwrap());
    }
}
