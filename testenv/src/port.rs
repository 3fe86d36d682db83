//! Free loopback ports.

use std::net::{Ipv4Addr, TcpListener};

use crate::Error;

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
