//! Where the server may send a request of its own (a webhook's delivery, SPEC §18):
//! `https` (or `http` when the deployment allows it), to a host none of whose addresses
//! is in a block that is not globally reachable (loopback, private, link-local,
//! metadata, unique-local, documentation, ... as IANA's special-purpose registries
//! mark them), unless the deployment admits its network (`serve --webhook-allow
//! CIDR`). Checked when a URL is given on every address its name resolves to, and
//! again on the address each request connects to, so a name that resolves elsewhere
//! later (DNS rebinding) reaches nothing. The one place that answers "may this address
//! be reached" for every outward-facing part.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use fleet_guest::grammar::quoted;
use hyper::Uri;
use ipnet::IpNet;

/// What the deployment lets webhooks reach.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// `serve --webhook-allow-http`.
    pub allow_http: bool,
    /// `serve --webhook-allow CIDR`: networks admitted although not public.
    pub allow: Vec<IpNet>,
}

/// A subscription's URL, parsed and checked for its form.
#[derive(Debug, Clone)]
pub struct Target {
    pub uri: Uri,
    pub https: bool,
    pub host: String,
    pub port: u16,
}

/// The longest URL kept.
const MAX_URL: usize = 2048;

impl Reach {
    /// `url` as a target, or why it is none (before any address is looked at).
    pub fn target(&self, url: &str) -> Result<Target, String> {
        if url.len() > MAX_URL {
            return Err(format!("must be at most {MAX_URL} bytes"));
        }
        let uri: Uri = url.parse().map_err(|_| "must be an absolute URL, https://host/path".to_owned())?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if self.allow_http => false,
            Some("http") => return Err("must be https (this server does not send webhooks over http)".to_owned()),
            _ => return Err("must be an https:// URL".to_owned()),
        };
        let authority = uri.authority().ok_or("must name a host")?;
        if authority.as_str().contains('@') {
            return Err("must not carry credentials; sign with the webhook's secret instead".to_owned());
        }
        let bracketed = authority.host().starts_with('[');
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        if host.is_empty() {
            return Err("must name a host".to_owned());
        }
        // Brackets hold an IPv6 address (RFC 3986), and nothing else.
        if bracketed && host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("must name a host: {} in brackets is no IPv6 address", quoted(&host)));
        }
        // The port as written: the URI parser takes `99999`, an empty port or `80abc`,
        // and has no number for them, which would send to the scheme's default.
        let written = match authority.as_str().strip_prefix('[') {
            Some(bracketed) => bracketed.split_once(']').map_or("", |(_, after)| after),
            None => authority.as_str().rfind(':').map_or("", |at| &authority.as_str()[at..]),
        };
        let port = match written.strip_prefix(':') {
            None => {
                if https {
                    443
                } else {
                    80
                }
            }
            Some(digits) => digits
                .parse::<u16>()
                .ok()
                .filter(|port| *port != 0 && digits.bytes().all(|byte| byte.is_ascii_digit()))
                .ok_or_else(|| format!("names port {}, which is no port (1 to 65535)", quoted(digits)))?,
        };
        Ok(Target { uri, https, host, port })
    }

    /// Whether a delivery may connect to `address`.
    pub fn admits(&self, address: IpAddr) -> bool {
        let mapped = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        is_global(address) || self.allow.iter().any(|network| network.contains(&address) || network.contains(&mapped))
    }

    /// The addresses of `target` a delivery may connect to, or why there is none: every
    /// address it resolves to must be admitted (a name that also resolves inside is
    /// refused whole).
    pub fn check(&self, target: &Target, resolved: &[SocketAddr]) -> Result<(), String> {
        if resolved.is_empty() {
            return Err(format!("{} resolves to no address", target.host));
        }
        match resolved.iter().find(|address| !self.admits(address.ip())) {
            Some(inside) => Err(format!(
                "{} resolves to {}, which is not a public address (serve --webhook-allow admits a network)",
                target.host,
                inside.ip()
            )),
            None => Ok(()),
        }
    }
}

/// Whether `address` is globally reachable: not in a block that IANA's IPv4 and IPv6
/// Special-Purpose Address Registries mark not globally reachable (loopback, private,
/// link-local with the clouds' metadata address 169.254.169.254, shared CGNAT space,
/// documentation, benchmarking, reserved, discard-only, ...), nor multicast, nor a
/// deprecated block (site-local, 6to4 relay anycast, IPv4-compatible IPv6). An IPv6
/// address that embeds an IPv4 one (mapped, translated, NAT64, 6to4) is judged by the
/// IPv4 address it carries; Teredo's, which hides it, is refused.
pub fn is_global(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, d] = v4.octets();
    let not_global = a == 0                          // 0.0.0.0/8 "this network"
        || a == 10                                   // 10.0.0.0/8 private
        || (a == 100 && (64..128).contains(&b))      // 100.64.0.0/10 shared (CGNAT)
        || a == 127                                  // 127.0.0.0/8 loopback
        || (a == 169 && b == 254)                    // 169.254.0.0/16 link-local, metadata
        || (a == 172 && (16..32).contains(&b))       // 172.16.0.0/12 private
        // 192.0.0.0/24 IETF protocol assignments, but for the two anycast services
        // 192.0.0.9 (PCP) and 192.0.0.10 (TURN), which are global.
        || (a == 192 && b == 0 && c == 0 && d != 9 && d != 10)
        || (a == 192 && b == 0 && c == 2)            // 192.0.2.0/24 documentation
        || (a == 192 && b == 88 && c == 99)          // 192.88.99.0/24 6to4 relay anycast (deprecated)
        || (a == 192 && b == 168)                    // 192.168.0.0/16 private
        || (a == 198 && (b == 18 || b == 19))        // 198.18.0.0/15 benchmarking
        || (a == 198 && b == 51 && c == 100)         // 198.51.100.0/24 documentation
        || (a == 203 && b == 0 && c == 113)          // 203.0.113.0/24 documentation
        || a >= 224; // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved, 255.255.255.255 broadcast
    !not_global
}

fn is_global_v6(v6: Ipv6Addr) -> bool {
    let segments = v6.segments();
    let embedded = |high: usize| {
        let [a, b] = segments[high].to_be_bytes();
        let [c, d] = segments[high + 1].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match segments {
        // ::/96 unspecified, loopback and IPv4-compatible (deprecated); ::ffff:0:0/96
        // IPv4-mapped; ::ffff:0:0:0/96 IPv4-translated (SIIT): never a route of its own,
        // or the IPv4 address's route, which is judged as itself.
        [0, 0, 0, 0, 0, 0, ..] => false,
        [0, 0, 0, 0, 0, 0xffff, ..] => is_global_v4(embedded(6)),
        [0, 0, 0, 0, 0xffff, 0, ..] => false,
        // 64:ff9b::/96 the well-known NAT64 prefix: the IPv4 address it translates to.
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => is_global_v4(embedded(6)),
        // 2002::/16 6to4: the IPv4 address of its relay.
        [0x2002, ..] => is_global_v4(embedded(1)),
        // 2001::/23 IETF protocol assignments (Teredo 2001::/32, benchmarking 2001:2::/48,
        // ...), but for the global ones: 2001:1::1 and ::2 (PCP, TURN anycast),
        // 2001:3::/32 (AMT), 2001:4:112::/48 (AS112), 2001:20::/28 (ORCHIDv2),
        // 2001:30::/28 (DRIP).
        [0x2001, second, third, ..] if second < 0x0200 => {
            matches!(v6.octets(), [0x20, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 | 2])
                || second == 0x0003
                || (second == 0x0004 && third == 0x0112)
                || (0x0020..0x0040).contains(&second)
        }
        // 2001:db8::/32 and 3fff::/20 documentation.
        [0x2001, 0x0db8, ..] => false,
        [0x3fff, second, ..] if second < 0x1000 => false,
        // Global unicast is 2000::/3; everything else (discard-only 100::/64, ULA
        // fc00::/7, link-local fe80::/10, site-local fec0::/10, multicast ff00::/8,
        // SRv6 5f00::/16 and the reserved rest) is not reachable from everywhere.
        [first, ..] => first & 0xe000 == 0x2000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_unless_admitted() {
        let reach = Reach::default();
        for inside in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!reach.admits(inside.parse().unwrap()), "{inside}");
        }
        for public in ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"] {
            assert!(reach.admits(public.parse().unwrap()), "{public}");
        }
        // What IANA's special-purpose registries mark not globally reachable, and IPv6
        // forms that carry such an IPv4 address.
        for inside in [
            "::127.0.0.1",
            "2002:7f00:1::",
            "::ffff:0:7f00:1",
            "64:ff9b::a00:1",
            "192.0.0.1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "fec0::1",
            "3fff::1",
            "192.88.99.1",
            "198.18.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "ff02::1",
            "5f00::1",
            "2001:db8::1",
        ] {
            assert!(!reach.admits(inside.parse().unwrap()), "{inside}");
        }
        for global in ["192.0.0.9", "2001:1::1", "2001:4:112::1", "2002:5db8:d822::1", "64:ff9b::808:808", "2001:20::1"]
        {
            assert!(reach.admits(global.parse().unwrap()), "{global}");
        }
        let admitted = Reach { allow: vec!["127.0.0.0/8".parse().unwrap()], ..Reach::default() };
        assert!(admitted.admits("127.0.0.1".parse().unwrap()));
        assert!(!admitted.admits("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn urls_are_https_with_a_host_and_no_credentials() {
        let reach = Reach::default();
        assert_eq!(reach.target("https://hooks.example.com/x").unwrap().port, 443);
        assert!(reach.target("http://hooks.example.com/x").unwrap_err().contains("https"));
        assert!(reach.target("ftp://x/").is_err());
        assert!(reach.target("https://user:pw@example.com/").unwrap_err().contains("credentials"));
        assert!(reach.target("/relative").is_err());
        for port in ["99999", "65536", "0", "", "18090abc", "+80"] {
            let url = format!("https://hooks.example.com:{port}/x");
            assert!(reach.target(&url).unwrap_err().contains("no port"), "{url}");
        }
        assert_eq!(reach.target("https://hooks.example.com:65535/x").unwrap().port, 65535);
        assert_eq!(reach.target("https://[2606:2800::1]:8443/x").unwrap().port, 8443);
        assert!(reach.target("https://[2606:2800::1]:/x").is_err());
        // Found by API fuzzing: brackets around what is no IPv6 address.
        for url in ["https://[1.9]/x", "https://[1.2.3.4]/x", "https://[::g]/x"] {
            assert!(reach.target(url).unwrap_err().contains("no IPv6 address"), "{url}");
        }
        let http = Reach { allow_http: true, ..Reach::default() };
        let target = http.target("http://[::1]:8080/hook").unwrap();
        assert_eq!((target.host.as_str(), target.port, target.https), ("::1", 8080, false));
    }
}
