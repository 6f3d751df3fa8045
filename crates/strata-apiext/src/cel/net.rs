//! IP addresses and CIDRs for the CEL `ip` and `cidr` libraries (Kubernetes 1.30+): Go's
//! `netip` parsing rules as Kubernetes applies them (no zones, no IPv4-mapped IPv6) and the
//! accessors and containment checks it exposes.

use std::net::IpAddr;
use std::str::FromStr;

use strata_object::go::quote;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ip(pub IpAddr);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    pub addr: IpAddr,
    pub bits: u8,
}

fn parse_addr(raw: &str) -> Result<IpAddr, String> {
    if raw.contains('%') {
        return Err(format!(
            "IP address {} with zone value is not allowed",
            quote(raw)
        ));
    }
    let addr = IpAddr::from_str(raw).map_err(|_| {
        format!(
            "IP Address {} parse error during conversion from string: ParseAddr({}): unable to parse IP",
            quote(raw),
            quote(raw)
        )
    })?;
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!(
                "IPv4-mapped IPv6 address {} is not allowed",
                quote(raw)
            ));
        }
    }
    Ok(addr)
}

impl Ip {
    /// Parses an address as Kubernetes' `ip()` does.
    pub fn parse(raw: &str) -> Result<Ip, String> {
        parse_addr(raw).map(Ip)
    }

    pub fn family(&self) -> i64 {
        match self.0 {
            IpAddr::V4(_) => 4,
            IpAddr::V6(_) => 6,
        }
    }

    pub fn is_unspecified(&self) -> bool {
        self.0.is_unspecified()
    }

    pub fn is_loopback(&self) -> bool {
        self.0.is_loopback()
    }

    pub fn is_link_local_multicast(&self) -> bool {
        match self.0 {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                o[0] == 224 && o[1] == 0 && o[2] == 0
            }
            IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
        }
    }

    pub fn is_link_local_unicast(&self) -> bool {
        match self.0 {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
        }
    }

    pub fn is_global_unicast(&self) -> bool {
        if let IpAddr::V4(v4) = self.0 {
            if v4.is_broadcast() {
                return false;
            }
        }
        !self.is_unspecified()
            && !self.is_loopback()
            && !self.0.is_multicast()
            && !self.is_link_local_unicast()
    }
}

impl std::fmt::Display for Ip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn mask(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            IpAddr::V4((u32::from(v4) & m).into())
        }
        IpAddr::V6(v6) => {
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            IpAddr::V6((u128::from(v6) & m).into())
        }
    }
}

impl Cidr {
    /// Parses a prefix as Kubernetes' `cidr()` does.
    pub fn parse(raw: &str) -> Result<Cidr, String> {
        let fail = |detail: &str| {
            format!(
                "network address {} parse error during conversion from string: netip.ParsePrefix({}): {detail}",
                quote(raw),
                quote(raw)
            )
        };
        let Some((addr, bits)) = raw.split_once('/') else {
            return Err(fail("no '/'"));
        };
        if addr.contains('%') {
            return Err(format!(
                "CIDR {} with zone value is not allowed",
                quote(raw)
            ));
        }
        let addr = IpAddr::from_str(addr).map_err(|_| fail("ParseAddr: unable to parse IP"))?;
        if let IpAddr::V6(v6) = addr {
            if v6.to_ipv4_mapped().is_some() {
                return Err(format!(
                    "IPv4-mapped IPv6 address {} is not allowed",
                    quote(raw)
                ));
            }
        }
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits: u8 = bits
            .parse()
            .ok()
            .filter(|b| {
                *b <= max && !bits.starts_with('+') && (bits == "0" || !bits.starts_with('0'))
            })
            .ok_or_else(|| fail(&format!("bad bits after slash: {}", quote(bits))))?;
        Ok(Cidr { addr, bits })
    }

    pub fn ip(&self) -> Ip {
        Ip(self.addr)
    }

    pub fn masked(&self) -> Cidr {
        Cidr {
            addr: mask(self.addr, self.bits),
            bits: self.bits,
        }
    }

    pub fn contains_ip(&self, ip: &Ip) -> bool {
        self.addr.is_ipv4() == ip.0.is_ipv4() && mask(ip.0, self.bits) == mask(self.addr, self.bits)
    }

    pub fn contains_cidr(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.bits <= other.bits
            && mask(other.addr, self.bits) == mask(self.addr, self.bits)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_kubernetes_allows() {
        assert_eq!(Ip::parse("10.0.0.1").unwrap().family(), 4);
        assert_eq!(Ip::parse("2001:db8::1").unwrap().family(), 6);
        assert!(Ip::parse("::ffff:1.2.3.4")
            .unwrap_err()
            .contains("IPv4-mapped"));
        assert!(Ip::parse("fe80::1%eth0").unwrap_err().contains("zone"));
        assert!(Ip::parse("300.1.1.1").is_err());
        assert!(Ip::parse("01.2.3.4").is_err());
        assert_eq!(
            Ip::parse("2001:DB8:0:0::1").unwrap().to_string(),
            "2001:db8::1"
        );
    }

    #[test]
    fn address_classes() {
        let ip = |s| Ip::parse(s).unwrap();
        assert!(ip("0.0.0.0").is_unspecified() && ip("::").is_unspecified());
        assert!(ip("127.0.0.1").is_loopback() && ip("::1").is_loopback());
        assert!(
            ip("224.0.0.1").is_link_local_multicast() && !ip("224.0.1.1").is_link_local_multicast()
        );
        assert!(
            ip("ff02::1").is_link_local_multicast() && !ip("fd00::1").is_link_local_multicast()
        );
        assert!(
            ip("169.254.169.254").is_link_local_unicast() && ip("fe80::1").is_link_local_unicast()
        );
        assert!(
            ip("192.168.0.1").is_global_unicast() && !ip("255.255.255.255").is_global_unicast()
        );
        assert!(ip("2001:db8::abcd").is_global_unicast() && !ip("ff00::1").is_global_unicast());
    }

    #[test]
    fn prefixes_contain() {
        let net = Cidr::parse("192.168.0.0/16").unwrap();
        assert!(net.contains_ip(&Ip::parse("192.168.3.4").unwrap()));
        assert!(!net.contains_ip(&Ip::parse("10.0.0.1").unwrap()));
        assert!(net.contains_cidr(&Cidr::parse("192.168.1.0/24").unwrap()));
        assert!(!net.contains_cidr(&Cidr::parse("192.0.0.0/8").unwrap()));
        let host = Cidr::parse("10.1.2.3/8").unwrap();
        assert_eq!(host.ip().to_string(), "10.1.2.3");
        assert_eq!(host.masked().to_string(), "10.0.0.0/8");
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("10.0.0.0").is_err());
    }
}
