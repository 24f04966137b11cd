//! Networking around the data path: route and interface lookup.

pub mod iface;
pub mod route;
