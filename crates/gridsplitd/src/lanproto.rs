//! The LAN formats of docs/protocol.md §§1–3, byte for byte: the GSq1 connect
//! request a node sends to its gateway, the GSa1 reply, and the GSo1 origin header
//! the remote gateway sends to the destination. libgridsplit.so (C) implements the
//! other end of each, so nothing here may change without changing that document.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use thiserror::Error;

pub const REQUEST_LEN: usize = 24;
pub const REPLY_LEN: usize = 8;
pub const ORIGIN_LEN: usize = 24;
const REQUEST_MAGIC: &[u8; 4] = b"GSq1";
const REPLY_MAGIC: &[u8; 4] = b"GSa1";
const ORIGIN_MAGIC: &[u8; 4] = b"GSo1";
const VERSION: u8 = 1;

wire_enum! {
    /// GSa1 status codes (§2). Also carried verbatim in WAN OPEN_REPLY frames.
    pub enum Status {
        Ok = 0,
        Refused = 1,
        Unreachable = 2,
        Forbidden = 3,
        Timeout = 4,
        NoLink = 5,
        BadRequest = 6,
    }
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Refused => "refused",
            Status::Unreachable => "unreachable",
            Status::Forbidden => "forbidden",
            Status::Timeout => "timeout",
            Status::NoLink => "no_link",
            Status::BadRequest => "bad_request",
        }
    }

    /// Maps the error of a far-side connect() to the status the node will see.
    pub fn from_connect_error(e: &std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => Status::Refused,
            Some(libc::ETIMEDOUT) => Status::Timeout,
            _ if e.kind() == std::io::ErrorKind::TimedOut => Status::Timeout,
            // EHOSTUNREACH, ENETUNREACH, EADDRNOTAVAIL and anything else we can't
            // attribute: the destination could not be reached.
            _ => Status::Unreachable,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LanError {
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    #[error("bad version {0}")]
    BadVersion(u8),
    #[error("bad address family {0}")]
    BadFamily(u8),
    #[error("port 0")]
    ZeroPort,
}

/// Encodes magic | version | family | port | address[16] (the GSq1 and GSo1 layout).
fn encode_addr(magic: &[u8; 4], addr: SocketAddr) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..4].copy_from_slice(magic);
    b[4] = VERSION;
    b[6..8].copy_from_slice(&addr.port().to_be_bytes());
    match addr.ip() {
        IpAddr::V4(v4) => {
            b[5] = 4;
            b[8..12].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            b[5] = 6;
            b[8..24].copy_from_slice(&v6.octets());
        }
    }
    b
}

fn decode_addr(magic: &[u8; 4], b: &[u8; 24]) -> Result<SocketAddr, LanError> {
    if &b[..4] != magic {
        return Err(LanError::BadMagic([b[0], b[1], b[2], b[3]]));
    }
    if b[4] != VERSION {
        return Err(LanError::BadVersion(b[4]));
    }
    let port = u16::from_be_bytes([b[6], b[7]]);
    let ip = match b[5] {
        4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        f => return Err(LanError::BadFamily(f)),
    };
    Ok(SocketAddr::new(ip, port))
}

/// §1: parses a GSq1 connect request into the requested destination.
pub fn parse_request(b: &[u8; REQUEST_LEN]) -> Result<SocketAddr, LanError> {
    let dst = decode_addr(REQUEST_MAGIC, b)?;
    if dst.port() == 0 {
        return Err(LanError::ZeroPort);
    }
    Ok(dst)
}

/// §1, for clients written in Rust (tests, tools).
pub fn encode_request(dst: SocketAddr) -> [u8; REQUEST_LEN] {
    encode_addr(REQUEST_MAGIC, dst)
}

/// §2: the GSa1 reply.
pub fn encode_reply(status: Status) -> [u8; REPLY_LEN] {
    let mut b = [0u8; REPLY_LEN];
    b[..4].copy_from_slice(REPLY_MAGIC);
    b[4] = status as u8;
    b
}

/// §2, client side: returns the status byte, or None if the magic is wrong.
pub fn parse_reply(b: &[u8; REPLY_LEN]) -> Option<Status> {
    if &b[..4] != REPLY_MAGIC {
        return None;
    }
    Status::from_u8(b[4])
}

/// §3: the GSo1 origin header sent to the destination before any relayed byte.
pub fn encode_origin(src: SocketAddr) -> [u8; ORIGIN_LEN] {
    encode_addr(ORIGIN_MAGIC, src)
}

/// §3, receiving side (tests; libgridsplit.so does this in C).
pub fn parse_origin(b: &[u8; ORIGIN_LEN]) -> Result<SocketAddr, LanError> {
    decode_addr(ORIGIN_MAGIC, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_matches_protocol_md() {
        let dst: SocketAddr = "10.71.2.5:5001".parse().unwrap();
        let b = encode_request(dst);
        assert_eq!(&b[..8], &[0x47, 0x53, 0x71, 0x31, 1, 4, 0x13, 0x89]);
        assert_eq!(&b[8..12], &[10, 71, 2, 5]);
        assert!(b[12..].iter().all(|&x| x == 0));
        assert_eq!(parse_request(&b).unwrap(), dst);
        let v6: SocketAddr = "[fd00::1]:80".parse().unwrap();
        assert_eq!(parse_request(&encode_request(v6)).unwrap(), v6);
    }

    #[test]
    fn bad_requests_are_rejected() {
        let mut b = encode_request("10.0.0.1:1".parse().unwrap());
        b[5] = 5;
        assert_eq!(parse_request(&b), Err(LanError::BadFamily(5)));
        b[4] = 2;
        assert_eq!(parse_request(&b), Err(LanError::BadVersion(2)));
        b[0] = b'X';
        assert!(matches!(parse_request(&b), Err(LanError::BadMagic(_))));
        let z = encode_request("10.0.0.1:0".parse().unwrap());
        assert_eq!(parse_request(&z), Err(LanError::ZeroPort));
    }

    #[test]
    fn reply_and_origin_layouts() {
        assert_eq!(
            encode_reply(Status::Forbidden),
            [b'G', b'S', b'a', b'1', 3, 0, 0, 0]
        );
        assert_eq!(
            parse_reply(&encode_reply(Status::NoLink)),
            Some(Status::NoLink)
        );
        let src: SocketAddr = "10.71.1.7:40000".parse().unwrap();
        let o = encode_origin(src);
        assert_eq!(&o[..6], b"GSo1\x01\x04");
        assert_eq!(parse_origin(&o).unwrap(), src);
    }
}
