//! Networking around the data path: the bootstrap connection, the control channel, waits, and
//! route and interface lookup.

pub mod bootstrap;
pub mod control;
pub mod iface;
pub mod route;
pub mod wait;

pub use control::ControlChannel;

#[cfg(test)]
mod tests;
