//! Free loopback ports.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io;
use std::net::{Ipv4Addr, TcpListener};

use crate::Error;

/// Where a Redis Cluster node's cluster bus listens: its port plus this, Redis's default.
pub(crate) const BUS_PORT_OFFSET: u16 = 10000;

/// The first and last port a cluster node may get. With the bus ports (+10000) this stays below
/// Linux's ephemeral range (32768 and up by default), so an outgoing connection of any process
/// never holds a node's port or bus port when the node is restarted on it.
const CLUSTER_PORTS: (u16, u16) = (10_000, 32_767 - BUS_PORT_OFFSET);

/// Ports tried by [`free_cluster_port`] before it gives up.
const CLUSTER_PORT_TRIES: u32 = 500;

/// Returns a loopback port that was free a moment ago.
///
/// The kernel picks it; we release it at once so the server can bind it. Another process may take it
/// in between, so callers must be ready to retry with a new port.
pub(crate) fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("binding 127.0.0.1:0 to find a free port", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("reading the address of a bound socket", e))?;
    Ok(addr.port())
}

/// Returns a loopback port `p` such that `p` and its cluster bus port `p + 10000` were both free a
/// moment ago (both bound at once, then released).
///
/// As with [`free_port`], another process may take either in between, so callers must be ready to
/// retry with a new port. The candidates start at a random place, so test processes starting
/// clusters at once rarely try the same ones.
pub(crate) fn free_cluster_port() -> Result<u16, Error> {
    let (first, last) = CLUSTER_PORTS;
    let span = u64::from(last - first) + 1;
    let start = RandomState::new().hash_one(std::process::id());
    for i in 0..CLUSTER_PORT_TRIES {
        // A prime step, coprime with the span: the walk visits distinct candidates, spread out.
        let offset = start.wrapping_add(u64::from(i) * 7919) % span;
        let port = first + u16::try_from(offset).unwrap_or(0);
        let Ok(_listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port + BUS_PORT_OFFSET)).is_ok() {
            return Ok(port);
        }
    }
    Err(Error::io(
        format!(
            "finding a free port in {first}..={last} whose port + {BUS_PORT_OFFSET} is free too"
        ),
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{CLUSTER_PORT_TRIES} candidates were taken"),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ports_and_their_bus_ports_stay_below_the_ephemeral_range() {
        let (first, last) = CLUSTER_PORTS;
        assert!(first >= 1024);
        assert!(last + BUS_PORT_OFFSET < 32_768);
        for _ in 0..20 {
            let port = free_cluster_port().unwrap();
            assert!((first..=last).contains(&port), "{port}");
        }
    }
}
