//! The data path behind one small trait.
//!
//! A transport owns registered memory: `slot_count` slots of `slot_size` bytes, used as
//! receive slots by a receiver and as send staging slots by a sender. It moves one message per
//! `post_send` into the next posted receive slot on the other side, in order, and reports
//! completions through `poll`. Flow control, end of stream and peer loss live above it (see
//! [`crate::session_core`], driven by [`crate::RdmaSink`] and [`crate::RdmaSrc`]); a transport
//! only has to keep the RDMA rules: receives are consumed in the order they were posted, a
//! message larger than the posted slot or arriving with no slot posted is an error, and
//! zero-length messages are ordinary.

use std::net::Ipv4Addr;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use crate::proto::{Role, TransportKind};
use crate::roce::DeviceChoice;
use crate::Result;

// The transport adapters are the only modules allowed `unsafe` (the crate denies it): each
// block there carries a `// SAFETY:` comment.
#[cfg(doca_transport)]
#[allow(unsafe_code)]
pub(crate) mod doca;
#[cfg(feature = "verbs")]
pub(crate) mod signaling;
#[allow(unsafe_code)]
pub(crate) mod slots;
pub(crate) mod tcp;
#[cfg(feature = "verbs")]
#[allow(unsafe_code)]
pub(crate) mod verbs;

/// Which end of the bootstrap connection we are (independent of the data direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BootstrapSide {
    /// We connected.
    Client,
    /// We accepted.
    Server,
}

/// What a transport needs to know to set itself up.
#[derive(Debug, Clone)]
pub(crate) struct SetupParams {
    /// Our end of the bootstrap connection.
    pub side: BootstrapSide,
    /// Whether we send or receive data.
    pub role: Role,
    /// Our source address toward the peer.
    pub local_ip: Ipv4Addr,
    /// The peer's address.
    pub peer_ip: Ipv4Addr,
    /// Number of slots to register.
    pub slots: usize,
    /// Bytes per slot.
    pub slot_size: usize,
    /// The RDMA device chosen by discovery (RDMA transports only).
    pub device: Option<DeviceChoice>,
}

/// One finished work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    /// A message landed in receive slot `slot` with `len` bytes.
    Recv {
        /// The slot index.
        slot: usize,
        /// The message length.
        len: usize,
    },
    /// The send from staging slot `slot` completed; the slot may be reused.
    Send {
        /// The slot index.
        slot: usize,
    },
    /// Sender side, in-band credits only: the receiver released one more message.
    Credit,
}

/// What to wait on when `poll` found nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitHandle<'a> {
    /// A descriptor that becomes ready when `poll` may make progress.
    pub fd: BorrowedFd<'a>,
    /// Also wait for writability (a transport with queued output).
    pub writable: bool,
}

/// A connected (or connecting) data path. Implementations: TCP here; DOCA and verbs plug in
/// behind the same methods.
pub(crate) trait Transport: Send + std::fmt::Debug {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;

    /// Connection data for the peer, carried in our hello (bounded by `MAX_BLOB_LEN`).
    fn local_blob(&self) -> Vec<u8>;

    /// Connects to the peer described by its blob, finishing before `deadline`.
    fn connect(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<()>;

    /// Like [`Transport::connect`], and gives up at once when `watch` (the control
    /// connection) becomes readable, since that means the peer vanished or spoke out of turn
    /// during the setup. Transports whose connect waits for the peer override it; the default
    /// just connects.
    fn connect_watching(
        &mut self,
        peer_blob: &[u8],
        deadline: Instant,
        watch: BorrowedFd<'_>,
    ) -> Result<()> {
        let _ = watch;
        self.connect(peer_blob, deadline)
    }

    /// The data path's MTU in bytes after `connect`, when the transport has one.
    fn path_mtu(&self) -> Option<u32> {
        None
    }

    /// Number of registered slots.
    fn slot_count(&self) -> usize;

    /// Bytes per slot.
    fn slot_size(&self) -> usize;

    /// Posts receive slot `slot` (the receiver posts every slot before Ready).
    fn post_recv(&mut self, slot: usize) -> Result<()>;

    /// The first `len` bytes of receive slot `slot`.
    fn recv_buf(&self, slot: usize, len: usize) -> &[u8];

    /// Send staging slot `slot`, to be filled before `post_send`.
    fn send_buf(&mut self, slot: usize) -> &mut [u8];

    /// Sends the first `len` bytes of staging slot `slot` as one message.
    fn post_send(&mut self, slot: usize, len: usize) -> Result<()>;

    /// Makes sure every send posted so far will report its completion through `poll`. A
    /// transport that signals only some sends posts a signaled request behind the last one
    /// when that one went out unsignaled. The sender's `finish` calls it before waiting for
    /// its staging slots; calling it again while that request is outstanding does nothing.
    fn flush_sends(&mut self) -> Result<()> {
        Ok(())
    }

    /// Makes progress without blocking and appends completions to `out`. It always leaves its
    /// notification armed, so that [`Transport::wait_handle`] becomes ready as soon as more
    /// progress is possible: the caller may sleep after any poll, also one that returned
    /// completions that were not the ones it waits for (no lost wake-ups).
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()>;

    /// The descriptor to sleep on after an empty `poll` (`None` before connect).
    fn wait_handle(&self) -> Option<WaitHandle<'_>>;

    /// A wait reported the [`Transport::wait_handle`] descriptor ready. A transport may skip,
    /// in `poll`, checks that can only find something after such a wake-up (the tcp sender's
    /// look for a closed data connection), and must make the next `poll` do them.
    fn on_wakeup(&mut self) {}

    /// Tears the data path down; safe to call more than once and after errors.
    fn close(&mut self);

    /// Whether credits travel on this transport's own data path (a zero-length message from
    /// receiver to sender per released slot, reported to the sender as [`Completion::Credit`])
    /// instead of `Credit` messages on the control channel. RDMA transports do this: a credit
    /// then costs one RDMA round trip instead of a TCP one.
    fn inband_credits(&self) -> bool {
        false
    }

    /// Receiver side, in-band credits only: return `count` credits to the sender. The default
    /// posts them one by one; a transport that can post them together (one doorbell) does.
    fn post_credits(&mut self, count: usize) -> Result<()> {
        for _ in 0..count {
            self.post_credit()?;
        }
        Ok(())
    }

    /// Receiver side, in-band credits only: return one credit to the sender.
    fn post_credit(&mut self) -> Result<()> {
        Err(crate::Error::TransportProtocol {
            transport: "?",
            detail: "this transport has no in-band credits".to_owned(),
        })
    }
}

/// Builds the transport of the given kind (only those compiled in).
pub(crate) fn create(kind: TransportKind, params: &SetupParams) -> Result<Box<dyn Transport>> {
    match kind {
        TransportKind::Tcp => Ok(Box::new(tcp::TcpTransport::new(params)?)),
        #[cfg(doca_transport)]
        TransportKind::Doca => Ok(Box::new(doca::DocaTransport::new(params)?)),
        #[cfg(feature = "verbs")]
        TransportKind::Verbs => Ok(Box::new(verbs::VerbsTransport::new(params)?)),
        #[allow(unreachable_patterns)]
        other => Err(crate::Error::unavailable(
            other.name(),
            "not compiled into this build".to_owned(),
        )),
    }
}

/// The transports compiled into this build, in the order `auto` prefers them.
pub(crate) fn compiled_in() -> &'static [TransportKind] {
    &[
        #[cfg(doca_transport)]
        TransportKind::Doca,
        #[cfg(feature = "verbs")]
        TransportKind::Verbs,
        TransportKind::Tcp,
    ]
}

/// The transports `--transport auto` tries, in order, for a path whose source address does
/// (`roce_gid_found`) or does not own a RoCE v2 GID: every RDMA transport compiled in (DOCA
/// first), then TCP. The session and `doctor` both use this one rule.
pub fn auto_order(roce_gid_found: bool) -> impl Iterator<Item = TransportKind> + Clone {
    compiled_in()
        .iter()
        .copied()
        .filter(move |k| roce_gid_found || *k == TransportKind::Tcp)
}
