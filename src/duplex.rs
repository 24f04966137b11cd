//! Both directions between the same two ends: one [`RdmaSink`] and one [`RdmaSrc`].
//!
//! A duplex connection is two sessions: the client's sending session first, then its
//! receiving session, to the same server address. The server pairs them with
//! [`crate::Listener::accept_duplex`]. Each direction keeps its own credits and end of
//! stream: finish the sink when you are done sending, and read the src to its end.

use std::net::SocketAddr;

use crate::{Config, RdmaSink, RdmaSrc, Result};

/// Connects both directions to a server that calls [`crate::Listener::accept_duplex`].
///
/// ```no_run
/// # fn main() -> rdma_container::Result<()> {
/// use rdma_container::{duplex, Config};
/// let (mut sink, mut src) = duplex::connect("10.0.0.2:5000".parse().unwrap(), &Config::default())?;
/// sink.send(b"ping")?;
/// let reply = src.recv()?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// Either session failed to set up (the first one is aborted if the second fails).
pub fn connect(addr: SocketAddr, config: &Config) -> Result<(RdmaSink, RdmaSrc)> {
    let sink = RdmaSink::connect(addr, config)?;
    match RdmaSrc::connect(addr, config) {
        Ok(src) => Ok((sink, src)),
        Err(e) => {
            sink.abort("duplex: the receiving session could not be set up");
            Err(e)
        }
    }
}
