//! The replay buffer of one session: every byte written to the link stream since
//! the peer last acknowledged, kept so that a new connection can send again what
//! the old one may have lost.
//!
//! Offsets count the bytes of the link stream after the handshake (the frames
//! after SESSION), in the order they were committed to the wire. The peer acks
//! offsets at frame boundaries (it counts the frames it has handled), so what a
//! resume replays always starts with a whole frame.
//!
//! The buffer holds `Bytes` handles: the DATA payloads in it are the same
//! allocations the flows read from the LAN, not copies. What it holds is bounded
//! by the peer's credit windows (no more DATA is ever unacknowledged than the
//! peer granted) plus the control frames and the ACK interval
//! (docs/design/wan-sessions.md).

use std::collections::VecDeque;

use bytes::Bytes;

#[derive(Debug, Default)]
pub struct Replay {
    segs: VecDeque<Bytes>,
    /// Stream offset of the first byte of `segs[0]`.
    start: u64,
    /// Stream offset just after the last recorded byte.
    end: u64,
}

/// An offset the peer gave that this side cannot honour.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfRange {
    pub got: u64,
    pub start: u64,
    pub end: u64,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "peer's received count {} is outside what was sent and not yet acknowledged [{}, {}]",
            self.got, self.start, self.end
        )
    }
}

impl Replay {
    /// Appends bytes just committed to the stream.
    pub fn record<'a>(&mut self, segs: impl IntoIterator<Item = &'a Bytes>) {
        for s in segs {
            if !s.is_empty() {
                self.end += s.len() as u64;
                self.segs.push_back(s.clone());
            }
        }
    }

    /// Bytes held (sent, not yet acknowledged).
    pub fn held(&self) -> u64 {
        self.end - self.start
    }

    /// The peer has received everything before `upto`: forget it. An ack below
    /// what is already forgotten is stale (a replayed old ACK) and ignored; one
    /// beyond what was sent is an error.
    pub fn ack(&mut self, upto: u64) -> Result<(), OutOfRange> {
        if upto > self.end {
            return Err(self.range(upto));
        }
        while self.start < upto {
            let Some(front) = self.segs.front_mut() else {
                break;
            };
            let drop = (upto - self.start).min(front.len() as u64) as usize;
            if drop == front.len() {
                self.segs.pop_front();
            } else {
                bytes::Buf::advance(front, drop);
            }
            self.start += drop as u64;
        }
        Ok(())
    }

    /// Whether a peer that received exactly `received` bytes can be resumed:
    /// nothing it lacks may have been forgotten, and it cannot have more than
    /// was sent.
    pub fn check(&self, received: u64) -> Result<(), OutOfRange> {
        if received < self.start || received > self.end {
            Err(self.range(received))
        } else {
            Ok(())
        }
    }

    /// For a resume: forgets what the peer has (`received`, already checked) and
    /// returns what it lacks, in order, to be sent first on the new connection.
    pub fn resume_from(&mut self, received: u64) -> Vec<Bytes> {
        let _ = self.ack(received);
        self.segs.iter().cloned().collect()
    }

    fn range(&self, got: u64) -> OutOfRange {
        OutOfRange {
            got,
            start: self.start,
            end: self.end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static [u8]) -> Bytes {
        Bytes::from_static(s)
    }

    fn concat(v: &[Bytes]) -> Vec<u8> {
        v.iter().flat_map(|s| s.to_vec()).collect()
    }

    #[test]
    fn acks_trim_whole_and_partial_segments() {
        let mut r = Replay::default();
        r.record(&[b(b"abcd"), b(b""), b(b"efgh")]);
        assert_eq!(r.held(), 8);
        r.ack(2).unwrap();
        assert_eq!(r.held(), 6);
        r.ack(1).unwrap(); // stale: ignored
        assert_eq!(r.held(), 6);
        r.ack(4).unwrap();
        assert_eq!(r.held(), 4);
        assert_eq!(concat(&r.resume_from(5)), b"fgh");
        assert_eq!(r.held(), 3);
    }

    #[test]
    fn the_peer_cannot_claim_more_or_less_than_is_possible() {
        let mut r = Replay::default();
        r.record(&[b(b"0123456789")]);
        r.ack(4).unwrap();
        assert_eq!(
            r.ack(11),
            Err(OutOfRange {
                got: 11,
                start: 4,
                end: 10
            })
        );
        assert!(r.check(3).is_err(), "bytes it lacks were forgotten");
        assert!(r.check(11).is_err(), "more than was ever sent");
        assert!(r.check(4).is_ok() && r.check(10).is_ok());
        assert_eq!(concat(&r.resume_from(10)), b"");
    }
}
