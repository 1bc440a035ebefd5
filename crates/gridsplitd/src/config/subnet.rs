//! `Subnet`, an IP prefix: how a `[[site]]` names its nodes, and how the gateway
//! tells which site an address belongs to.

use std::fmt;
use std::net::IpAddr;

/// An IP prefix such as `10.71.1.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Subnet {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').ok_or("missing '/prefix'")?;
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{a}' is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = p
            .trim()
            .parse()
            .map_err(|_| format!("'{p}' is not a prefix length"))?;
        if prefix > max {
            return Err(format!("prefix /{prefix} is longer than {max} bits"));
        }
        let net = Subnet { addr, prefix };
        if net.network() != addr {
            return Err(format!(
                "host bits are set (the network is {}/{prefix})",
                net.network()
            ));
        }
        Ok(net)
    }

    fn mask_bits(&self) -> u128 {
        let width = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == 0 {
            0
        } else {
            (!0u128 << (width - self.prefix as u32)) & (!0u128 >> (128 - width))
        }
    }

    fn bits(ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(v4) => u32::from(v4) as u128,
            IpAddr::V6(v6) => u128::from(v6),
        }
    }

    fn network(&self) -> IpAddr {
        let b = Self::bits(self.addr) & self.mask_bits();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((b as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(b.into()),
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // A v4-mapped v6 peer (dual-stack listener) is judged by its v4 address.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        ip.is_ipv4() == self.addr.is_ipv4()
            && Self::bits(ip) & self.mask_bits() == Self::bits(self.addr) & self.mask_bits()
    }

    pub(super) fn overlaps(&self, other: &Subnet) -> bool {
        if self.addr.is_ipv4() != other.addr.is_ipv4() {
            return false;
        }
        let shorter = if self.prefix <= other.prefix {
            self
        } else {
            other
        };
        let longer = if shorter == self { other } else { self };
        shorter.contains(longer.addr)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}
