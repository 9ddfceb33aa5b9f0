//! Where a webhook may send (SPEC §18): `https` (or `http` when the deployment allows
//! it), to a host none of whose addresses is loopback, private, link-local,
//! unique-local, metadata or otherwise not public, unless the deployment admits it
//! (`serve --webhook-allow CIDR`). Checked at `put` on every address the name resolves
//! to, and again on the address each delivery connects to, so a name that resolves
//! elsewhere later (DNS rebinding) reaches nothing.

use std::net::{IpAddr, SocketAddr};

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
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        if host.is_empty() {
            return Err("must name a host".to_owned());
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Target { uri, https, host, port })
    }

    /// Whether a delivery may connect to `address`.
    pub fn admits(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        is_public(address) || self.allow.iter().any(|network| network.contains(&address))
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

/// An IPv4 address mapped into IPv6 is that IPv4 address.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `address` is on the public Internet: not loopback, private, link-local
/// (which holds the clouds' metadata address, 169.254.169.254), unique-local, shared
/// (CGNAT), unspecified, multicast, broadcast, documentation or benchmarking.
fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8
                || first == 0x0064 && v6.segments()[1] == 0xff9b)
        }
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
        let http = Reach { allow_http: true, ..Reach::default() };
        let target = http.target("http://[::1]:8080/hook").unwrap();
        assert_eq!((target.host.as_str(), target.port, target.https), ("::1", 8080, false));
    }
}
