//! Networking around the data path: the bootstrap connection, the control channel, waits, and
//! route and interface lookup.

pub(crate) mod bootstrap;
pub(crate) mod control;
pub(crate) mod iface;
pub(crate) mod route;
pub(crate) mod wait;

pub(crate) use control::{ControlChannel, Lost, Received, SendFailed};

#[cfg(test)]
mod tests;
