//! The JSON messages of a benchmark session: the client's [`Header`] (its first message, saying
//! what to run) and, after a `bw` stream, the server's [`BwMeasured`] reply.

use anyhow::{anyhow, Context, Result};
use rdma_container::{RdmaSink, RdmaSrc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cli::args::BenchMode;

/// The client's first message in each session.
#[derive(Debug, Serialize, Deserialize)]
pub struct Header {
    pub mode: BenchMode,
    pub size: usize,
    pub iters: Option<u64>,
    pub duration_ms: Option<u64>,
    pub last: bool,
    /// bw with -b: the server streams to the client too, the same size and budget, and sends
    /// its figures after its own stream. Its stream's messages are all 0x5a bytes, so its
    /// figures (JSON, starting with `{`) cannot be taken for one of them.
    #[serde(default)]
    pub bidirectional: bool,
    /// The client's busy polling (microseconds; absent: it sleeps at once). The server polls
    /// the same way in this session unless its own `--busy-poll` says otherwise, as perftest's
    /// two ends poll alike: a latency run's echo must not sleep between messages.
    #[serde(default)]
    pub busy_poll_us: Option<u64>,
}

/// What a client's first message on its sending session says it is.
#[derive(Debug)]
pub enum Opening {
    /// A bench client: what to run.
    Run(Header),
    /// `doctor --probe`: one session, a few messages, then Finish.
    Probe,
}

impl Opening {
    /// Reads the client's first message: its header, or the probe's greeting.
    pub fn recv(src: &mut RdmaSrc) -> Result<Self> {
        let raw = src
            .recv()?
            .ok_or_else(|| anyhow!("the client ended before its header"))?;
        if raw.starts_with(crate::cli::probe::FIRST_MESSAGE) {
            return Ok(Opening::Probe);
        }
        serde_json::from_slice(raw)
            .map(Opening::Run)
            .context("the client's header does not parse")
    }
}

/// What the server measured in a bw session.
#[derive(Debug, Serialize, Deserialize)]
pub struct BwMeasured {
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub peak_bytes_per_sec: f64,
    /// Messages after the first within `seconds` (the clock is read every few messages, so
    /// the last few may fall outside); absent from an older server.
    #[serde(default)]
    pub timed_messages: Option<u64>,
}

impl BwMeasured {
    /// Reads the server's figures: its only message.
    pub fn recv(src: &mut RdmaSrc) -> Result<Self> {
        recv(
            src,
            "the server ended without its measurements",
            "the server's measurements do not parse",
        )
    }
}

/// Sends one message as JSON.
pub fn send<T: Serialize>(sink: &mut RdmaSink, message: &T) -> Result<()> {
    sink.send(&serde_json::to_vec(message)?)?;
    Ok(())
}

/// Receives one JSON message; `ended` and `garbled` say what went wrong when the stream ended
/// instead, or the message does not parse.
fn recv<T: DeserializeOwned>(
    src: &mut RdmaSrc,
    ended: &'static str,
    garbled: &'static str,
) -> Result<T> {
    let raw = src.recv()?.ok_or_else(|| anyhow!(ended))?;
    serde_json::from_slice(raw).context(garbled)
}
