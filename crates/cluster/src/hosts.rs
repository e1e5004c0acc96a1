//! Where the nodes of `atoll cluster --hosts` are: the `--hosts` list parsed (host:port,
//! node ids by position), whether an address is on this machine, and which network
//! interface holds an address (the one a node's UCX workers must use, so the worker
//! addresses it sends its peers name that interface and not loopback alone).

use atoll_runner::config::{ConfigError, NODES_MAX};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// One entry of `--hosts`: as written, and the socket address it resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub given: String,
    pub addr: SocketAddr,
}

impl Host {
    /// Whether the node runs on this machine (a loopback address): only then can shared
    /// memory reach it, and only then does it count against this machine's cores and memory.
    pub fn is_local(&self) -> bool {
        self.addr.ip().is_loopback()
    }
}

/// Parses `--hosts h1:p1,h2:p2,...`: node `i` is the `i`-th entry. Refuses an empty list,
/// an entry that is not `host:port` (port 1..=65535) or does not resolve, an entry given
/// twice, and more than [`NODES_MAX`] entries, naming the entry.
pub fn parse_hosts(list: &str) -> Result<Vec<Host>, ConfigError> {
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    if entries.iter().all(|e| e.is_empty()) {
        return Err(ConfigError(
            "--hosts is empty: expected host:port,host:port,... (one entry per node)".into(),
        ));
    }
    if entries.len() > NODES_MAX as usize {
        return Err(ConfigError(format!(
            "--hosts names {} nodes: expected 1..={NODES_MAX}",
            entries.len()
        )));
    }
    let mut hosts: Vec<Host> = Vec::with_capacity(entries.len());
    for e in entries {
        let addr = parse_host("--hosts entry", e)?;
        if let Some(i) = hosts.iter().position(|h| h.addr == addr) {
            return Err(ConfigError(format!(
                "--hosts entry '{e}' is node {i}'s address too: each node needs its own host:port"
            )));
        }
        hosts.push(Host {
            given: e.to_string(),
            addr,
        });
    }
    Ok(hosts)
}

/// One `host:port` (IPv6 as `[addr]:port`), resolved to its first address; `what` names
/// the value in a refusal (`--hosts entry`, `--listen`).
pub fn parse_host(what: &str, e: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |why: &str| {
        ConfigError(format!(
            "{what} '{e}' is not host:port ({why}): expected e.g. 10.0.0.1:7000 or node1:7000"
        ))
    };
    let Some((host, port)) = e.rsplit_once(':') else {
        return Err(bad("no ':port'"));
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("no host"));
    }
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 => p,
        _ => return Err(bad("the port is not in 1..=65535")),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if host.contains(':') || host.contains(char::is_whitespace) {
        return Err(bad("the host is neither an address nor a name"));
    }
    match (host, port).to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| bad("the name resolves to no address")),
        Err(err) => Err(bad(&format!("the name does not resolve: {err}"))),
    }
}

/// The network interface holding `ip`, as UCX's `NET_DEVICES` names it: the one whose
/// address is `ip`, else the one whose subnet holds it (127.0.0.2 is on `lo`, whose address
/// is 127.0.0.1/8). `None` for an unspecified address (0.0.0.0: every interface) or when
/// no interface holds it.
pub fn interface_of(ip: IpAddr) -> Option<String> {
    if ip.is_unspecified() {
        return None;
    }
    let ifs = interfaces();
    ifs.iter()
        .find(|i| i.addr == ip)
        .or_else(|| ifs.iter().find(|i| same_subnet(i.addr, i.mask, ip)))
        .map(|i| i.name.clone())
}

/// One address of one interface.
#[derive(Clone, Debug)]
struct IfAddr {
    name: String,
    addr: IpAddr,
    mask: IpAddr,
}

fn same_subnet(a: IpAddr, mask: IpAddr, b: IpAddr) -> bool {
    match (a, mask, b) {
        (IpAddr::V4(a), IpAddr::V4(m), IpAddr::V4(b)) => {
            let m = u32::from(m);
            m != 0 && u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(m), IpAddr::V6(b)) => {
            let m = u128::from(m);
            m != 0 && u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// Every IPv4 and IPv6 address of this machine's interfaces (`getifaddrs`).
fn interfaces() -> Vec<IfAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a valid out-pointer; on success the list is freed below, once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: each pointer, when not null, points at a sockaddr (or a NUL-terminated
        // name) owned by the list; the family says which sockaddr type it is.
        let (addr, mask) = unsafe { (sockaddr_ip(ifa.ifa_addr), sockaddr_ip(ifa.ifa_netmask)) };
        if let (Some(addr), Some(mask)) = (addr, mask) {
            if ifa.ifa_name.is_null() {
                continue;
            }
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned();
            out.push(IfAddr { name, addr, mask });
        }
    }
    // SAFETY: head came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The address a `sockaddr` holds, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` is null or points at a valid sockaddr of the family it states.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    match (*sa).sa_family as i32 {
        libc::AF_INET => {
            let v4 = &*(sa as *const libc::sockaddr_in);
            Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            let v6 = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::from(v6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_nodes_in_list_order() {
        let h = parse_hosts("127.0.0.1:7000, 127.0.0.2:7001,[::1]:7002").unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h[1].addr, "127.0.0.2:7001".parse().unwrap());
        assert_eq!(h[2].addr, "[::1]:7002".parse().unwrap());
        assert!(h.iter().all(Host::is_local));
    }

    #[test]
    fn hosts_malformed_entries_are_refused_naming_them() {
        for (list, named) in [
            ("127.0.0.1", "'127.0.0.1'"),
            ("127.0.0.1:0", "'127.0.0.1:0'"),
            ("127.0.0.1:70000", "'127.0.0.1:70000'"),
            (":7000", "':7000'"),
            ("127.0.0.1:7000,,127.0.0.2:7000", "''"),
            ("a b:7000", "'a b:7000'"),
            ("127.0.0.1:7000,127.0.0.1:7000", "node 0's address too"),
            ("", "empty"),
        ] {
            let e = parse_hosts(list).unwrap_err().0;
            assert!(e.contains(named), "{list}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn hosts_loopback_addresses_are_on_the_loopback_interface() {
        let lo = interface_of("127.0.0.1".parse().unwrap());
        // A machine without a loopback interface (a bare container) has no answer to give.
        if let Some(lo) = lo {
            assert_eq!(
                interface_of("127.0.0.3".parse().unwrap()).as_deref(),
                Some(lo.as_str())
            );
        }
        assert_eq!(interface_of("0.0.0.0".parse().unwrap()), None);
        assert_eq!(interface_of("203.0.113.77".parse().unwrap()), None);
    }
}
