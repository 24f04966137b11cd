//! Keyword arguments to [`rdma_container::Config`]: one name per `Config` field.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdma_container::{Checksum, Config, TransportChoice};

/// Seconds as a float (finite, not negative) to a duration.
pub(crate) fn seconds(value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|e| PyValueError::new_err(format!("bad duration {value} s: {e}")))
}

fn optional_seconds(value: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
    value.extract::<Option<f64>>()?.map(seconds).transpose()
}

fn transport(name: &str) -> PyResult<TransportChoice> {
    match name {
        "auto" => Ok(TransportChoice::Auto),
        "tcp" => Ok(TransportChoice::Tcp),
        "verbs" => Ok(TransportChoice::Verbs),
        "doca" => Ok(TransportChoice::Doca),
        other => Err(PyValueError::new_err(format!(
            "transport must be auto, tcp, verbs or doca, not {other:?}"
        ))),
    }
}

fn checksum(name: &str) -> PyResult<Checksum> {
    match name {
        "none" => Ok(Checksum::None),
        "crc32c" => Ok(Checksum::Crc32c),
        other => Err(PyValueError::new_err(format!(
            "checksum must be none or crc32c, not {other:?}"
        ))),
    }
}

/// `paths=["10.0.1.2", ...]`: IPv4 addresses, each refused by name when it is not one.
fn addresses(texts: &[String]) -> PyResult<Vec<std::net::Ipv4Addr>> {
    texts
        .iter()
        .map(|t| {
            t.parse()
                .map_err(|_| PyValueError::new_err(format!("paths: {t:?} is not an IPv4 address")))
        })
        .collect()
}

/// The session configuration from `connect(..., **options)`; unknown names are a TypeError.
pub(crate) fn config(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    // The interrupt and sysfs_root hooks are the library's hidden ones (not its stable API).
    let mut config = Config::default().with_interrupt(Some(crate::interrupt::check()));
    for (key, value) in options.into_iter().flat_map(|d| d.iter()) {
        let key: String = key.extract()?;
        match key.as_str() {
            "transport" => config.transport = transport(&value.extract::<String>()?)?,
            "credits" => config.credits = value.extract()?,
            "qps" => config.qps = value.extract()?,
            "paths" => config.paths = addresses(&value.extract::<Vec<String>>()?)?,
            "max_msg_size" => config.max_msg_size = value.extract()?,
            "device" => config.overrides.device = value.extract()?,
            "ib_port" => config.overrides.port = value.extract()?,
            "gid_index" => config.overrides.gid_index = value.extract()?,
            "sysfs_root" => config = config.with_sysfs_root(value.extract::<String>()?),
            "connect_timeout" => config.connect_timeout = seconds(value.extract()?)?,
            "handshake_timeout" => config.handshake_timeout = seconds(value.extract()?)?,
            "idle_timeout" => config.idle_timeout = optional_seconds(&value)?,
            "busy_poll" => config.busy_poll = optional_seconds(&value)?,
            "checksum" => config.checksum = checksum(&value.extract::<String>()?)?,
            "resume_timeout" => config.resume_timeout = seconds(value.extract()?)?,
            "require_rdma" => config.require_rdma = value.extract()?,
            // The queue pair's settings (docs/lossless-roce.md); range checks are the library's.
            "traffic_class" => config.traffic_class = value.extract()?,
            "service_level" => config.service_level = value.extract()?,
            "mtu" => config.mtu = value.extract()?,
            "ack_timeout" => config.ack_timeout = value.extract()?,
            "retry_count" => config.retry_count = value.extract()?,
            "auth_key_file" => {
                let path = value.extract::<Option<std::path::PathBuf>>()?;
                config.auth_key = path
                    .as_deref()
                    .map(rdma_container::AuthKey::from_file)
                    .transpose()
                    .map_err(|e| crate::errors::raise(py, e))?;
            }
            other => {
                return Err(PyTypeError::new_err(format!(
                    "unexpected keyword argument {other:?} (known: transport, credits, \
                     qps, paths, max_msg_size, device, ib_port, gid_index, sysfs_root, connect_timeout, \
                     handshake_timeout, idle_timeout, busy_poll, auth_key_file, checksum, \
                     resume_timeout, require_rdma, traffic_class, service_level, mtu, \
                     ack_timeout, retry_count)"
                )))
            }
        }
    }
    config.validate().map_err(|e| crate::errors::raise(py, e))?;
    Ok(config)
}
