//! The one data-path connect loop, for a session's first connection and for every resume: the
//! transport's `connect` steps until it is done, and between the steps the loop sleeps on the
//! transport's set-up descriptors and the control connection, handing what the control
//! connection says to the handshake that runs it ([`Connecting`]). The handshakes' rules stay in
//! their cores; this module only waits.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use super::WAIT_SLICE;
use crate::net::wait::{remaining, wait_readable};
use crate::net::ControlChannel;
use crate::transport::{RolePath, SetupStep};
use crate::Error;

/// What the connect loop asks of the handshake it runs for.
pub(crate) trait Connecting {
    /// How the loop fails.
    type Failure;
    /// The transport's connect step (or the wait) failed with `e`.
    fn setup_failed(&mut self, e: Error) -> Self::Failure;
    /// Whether the control connection is watched now (once the peer's Ready came, what
    /// follows there is the session's and stays unread).
    fn watch_control(&self) -> bool;
    /// The control connection may be readable.
    fn on_control(&mut self, control: &mut ControlChannel) -> Result<(), Self::Failure>;
    /// A slice passed with no word on the control connection: check the deadline and the
    /// stop flag.
    fn on_quiet(
        &mut self,
        control: &mut ControlChannel,
        deadline: Instant,
    ) -> Result<(), Self::Failure>;
    /// The data path is connected; `early_data`: whether data may arrive before Ready.
    fn on_connected(&mut self, early_data: bool) -> Result<(), Self::Failure>;
}

/// Connects `transport` to the peer's `peer_blob` by `deadline`, watching `control` between
/// the steps as `handshake` asks.
pub(crate) fn connect_data_path<P: RolePath + ?Sized, C: Connecting>(
    transport: &mut P,
    peer_blob: &[u8],
    deadline: Instant,
    control: &mut ControlChannel,
    handshake: &mut C,
) -> Result<(), C::Failure> {
    loop {
        match transport.connect(peer_blob, deadline) {
            Ok(SetupStep::Done) => return handshake.on_connected(transport.early_data()),
            Ok(SetupStep::Waiting) => {}
            Err(e) => return Err(handshake.setup_failed(e)),
        }
        let slice = remaining(deadline).map_or(Duration::ZERO, |left| left.min(WAIT_SLICE));
        let watched = handshake.watch_control().then(|| control.fd());
        let mut setup = Vec::with_capacity(4);
        transport.setup_fds(&mut setup);
        match wait_for_setup(watched, &setup, slice) {
            Ok(Setup::ControlReadable) => handshake.on_control(control)?,
            Ok(Setup::Quiet) => handshake.on_quiet(control, deadline)?,
            Err(e) => return Err(handshake.setup_failed(e)),
        }
    }
}

/// What a wait between connect steps found.
enum Setup {
    /// The control connection may be readable.
    ControlReadable,
    /// Nothing on the control connection (the transport's descriptors may have news).
    Quiet,
}

fn wait_for_setup(
    control: Option<BorrowedFd<'_>>,
    setup: &[BorrowedFd<'_>],
    slice: Duration,
) -> crate::Result<Setup> {
    let mut fds = Vec::with_capacity(setup.len() + 1);
    fds.extend(control);
    fds.extend_from_slice(setup);
    let ready = wait_readable(&fds, slice)?;
    Ok(match control {
        Some(_) if ready.first() == Some(&true) => Setup::ControlReadable,
        _ => Setup::Quiet,
    })
}
