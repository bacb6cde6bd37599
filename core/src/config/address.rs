//! Who a client is: the address a limit counts it by, and, behind a trusted
//! proxy, the one `X-Forwarded-For` names.

use std::net::{IpAddr, SocketAddr};

/// The address limits count a client by: an IPv6 client by its /64, which
/// one subscriber usually holds whole; an IPv4-mapped one as IPv4.
/// One rule for connections, rejections and sign-ins.
pub fn bucket(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

/// The client behind `peer`: when `peer` is a trusted proxy, the right-most
/// address of `X-Forwarded-For` (all its values in order) that is not one,
/// since every proxy appends the address it heard from and only the
/// trusted ones can be believed; else `peer` itself. An entry that is not
/// an address ends the walk at the last trusted hop.
pub fn client<S: AsRef<str>>(
    peer: IpAddr,
    forwarded_for: impl IntoIterator<Item = S>,
    trusted: impl Fn(IpAddr) -> bool,
) -> IpAddr {
    let mut client = peer.to_canonical();
    if !trusted(client) {
        return client;
    }
    let values: Vec<S> = forwarded_for.into_iter().collect();
    let hops: Vec<&str> = values
        .iter()
        .flat_map(|value| value.as_ref().split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        let Some(address) = parse_hop(hop) else {
            break;
        };
        client = address;
        if !trusted(address) {
            break;
        }
    }
    client
}

/// An address as proxies write it: bare, or with a port (`[v6]:p`, `v4:p`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(|address| address.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            bucket(ip("2001:db8:1:2:aaaa::1")),
            bucket(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(bucket(ip("2001:db8:1:2::1")), bucket(ip("2001:db8:1:3::1")));
        assert_eq!(bucket(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_hops() {
        let trusted = |a: IpAddr| a.is_loopback() || a.to_string().starts_with("10.");
        // Straight from a stranger: its own header is ignored.
        assert_eq!(
            client(ip("192.0.2.9"), ["203.0.113.1"], trusted),
            ip("192.0.2.9")
        );
        // Through our proxy: the address it heard from.
        assert_eq!(
            client(ip("127.0.0.1"), ["203.0.113.1"], trusted),
            ip("203.0.113.1")
        );
        // A client's forged entries to the left of the real one are skipped.
        assert_eq!(
            client(
                ip("127.0.0.1"),
                ["198.51.100.1, 203.0.113.1", "10.0.0.2"],
                trusted
            ),
            ip("203.0.113.1")
        );
        // Ports and brackets as some proxies write them.
        assert_eq!(
            client(ip("127.0.0.1"), ["[2001:db8::5]:443"], trusted),
            ip("2001:db8::5")
        );
        assert_eq!(
            client(ip("127.0.0.1"), ["203.0.113.4:5555"], trusted),
            ip("203.0.113.4")
        );
        // Garbage ends the walk at the last trusted hop.
        assert_eq!(
            client(ip("127.0.0.1"), ["203.0.113.1, nonsense"], trusted),
            ip("127.0.0.1")
        );
        // No header: the proxy itself.
        assert_eq!(
            client(ip("127.0.0.1"), Vec::<&str>::new(), trusted),
            ip("127.0.0.1")
        );
        // Only trusted hops: the left-most of them.
        assert_eq!(
            client(ip("127.0.0.1"), ["10.0.0.3, 10.0.0.2"], trusted),
            ip("10.0.0.3")
        );
    }
}
