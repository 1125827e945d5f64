//! Names for what the observer counts: a process's command name, and a socket descriptor as `ss`
//! writes it (`tcp 127.0.0.1:40612 -> 127.0.0.1:5201`), read from `/proc/<pid>/fd` (the socket's
//! inode) and the process's own network namespace's `/proc/<pid>/net/{tcp,tcp6,udp,udp6}`.

use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// The command name of process `pid` (`/proc/<pid>/comm`), or `?` once it is gone.
pub fn command_name(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".to_string(), |s| s.trim().to_string())
}

/// The socket behind descriptor `fd` of process `pid`: its protocol and addresses when it is a TCP
/// or UDP socket, `socket:[inode]` for other sockets, `fd N` when the descriptor is gone.
pub fn socket_name(pid: u32, fd: i32) -> String {
    let Ok(target) = fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
        return format!("fd {fd}");
    };
    let target = target.to_string_lossy().into_owned();
    let Some(inode) = target
        .strip_prefix("socket:[")
        .and_then(|s| s.strip_suffix(']'))
    else {
        return format!("fd {fd} ({target})");
    };
    for proto in ["tcp", "tcp6", "udp", "udp6"] {
        let table = fs::read_to_string(format!("/proc/{pid}/net/{proto}")).unwrap_or_default();
        if let Some((local, remote)) = find_inode(&table, inode) {
            let name = proto.trim_end_matches('6');
            return match remote {
                Some(remote) => format!("{name} {local} -> {remote}"),
                None => format!("{name} {local}"),
            };
        }
    }
    format!("fd {fd} ({target})")
}

/// The local and (when connected) remote address of the row of a `/proc/net/{tcp,udp}[6]` table
/// whose inode is `inode`.
fn find_inode(table: &str, inode: &str) -> Option<(SocketAddr, Option<SocketAddr>)> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(9) != Some(&inode) {
            return None;
        }
        let local = parse_address(fields.get(1)?)?;
        let remote = parse_address(fields.get(2)?)?;
        let connected = remote.port() != 0;
        Some((local, connected.then_some(remote)))
    })
}

/// An address as the kernel's tables write it: the IP in hex, each 32-bit word in host (little
/// endian) order, then `:` and the port in hex.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words = (0..ip.len() / 8)
        .map(|i| {
            u32::from_str_radix(&ip[8 * i..8 * i + 8], 16)
                .ok()
                .map(u32::from_be)
        })
        .collect::<Option<Vec<u32>>>()?;
    let ip: std::net::IpAddr = match words[..] {
        [a] => Ipv4Addr::from(a.to_be_bytes()).into(),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (chunk, w) in bytes.chunks_exact_mut(4).zip([a, b, c, d]) {
                chunk.copy_from_slice(&w.to_be_bytes());
            }
            Ipv6Addr::from(bytes).into()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_ss_writes_them() {
        assert_eq!(
            parse_address("0100007F:1451").unwrap().to_string(),
            "127.0.0.1:5201"
        );
        assert_eq!(
            parse_address("00000000000000000000000001000000:1F90")
                .unwrap()
                .to_string(),
            "[::1]:8080"
        );
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:1451 0100007F:9E64 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 20 4 30 10 -1\n\
           1: 0100007F:1452 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4243 1 0 20 4 30 10 -1\n";
        let (local, remote) = find_inode(table, "4242").unwrap();
        assert_eq!(local.to_string(), "127.0.0.1:5201");
        assert_eq!(remote.unwrap().to_string(), "127.0.0.1:40548");
        assert_eq!(find_inode(table, "4243").unwrap().1, None);
        assert!(find_inode(table, "1").is_none());
    }
}
