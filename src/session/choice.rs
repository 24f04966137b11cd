//! Which transport a session uses: the device rule and the transport choice, with the
//! fallback `auto` allows, each decision logged.

use crate::config::{Config, TransportChoice};
use crate::net::iface::PathInfo;
use crate::proto::TransportKind;
use crate::roce::{self, DeviceChoice, GidTable};
use crate::transport::{self, RolePath, SetupParams};
use crate::{Error, Result};

/// A data path of the role `P`, its slots, the device it runs on (RDMA), and why `auto`
/// fell back to it (see [`super::SessionInfo::fallback`]).
pub(super) type Created<P> = (
    (Box<P>, Vec<<P as RolePath>::Slot>),
    Option<DeviceChoice>,
    Option<String>,
);

/// Applies the device rule (docs/design.md, "Device and GID choice") and the transport
/// choice, and creates the transport; logs what was decided. With `auto`, an RDMA transport
/// that cannot start here falls back to the next one in [`transport::auto_order`], then to TCP
/// (unless [`Config::require_rdma`]: then the reason is the error).
pub(super) fn create_transport<P: RolePath + ?Sized>(
    config: &Config,
    path: &PathInfo,
    params: SetupParams,
) -> Result<Created<P>> {
    let iface = path.interface.as_deref().unwrap_or("unknown interface");
    // RDMA is required by --require-rdma, and asked for by an explicit device, port or GID
    // index: either way `auto` never falls back to TCP then.
    let required = if config.require_rdma {
        Some("--require-rdma".to_owned())
    } else {
        config.overrides.requested()
    };
    // The TCP fallback, `why` it is taken (a warning); refused when RDMA is required.
    let fallback = |params: &SetupParams, why: String| -> Result<Created<P>> {
        if let Some(asked) = &required {
            return Err(Error::RdmaRequired {
                asked: asked.clone(),
                reason: why,
            });
        }
        log::warn!("{why}; using the TCP transport");
        P::create(TransportKind::Tcp, params).map(|t| (t, None, Some(why)))
    };
    let wanted = match config.transport {
        TransportChoice::Tcp => {
            return P::create(TransportKind::Tcp, &params).map(|t| (t, None, None))
        }
        TransportChoice::Doca => Some(TransportKind::Doca),
        TransportChoice::Verbs => Some(TransportKind::Verbs),
        TransportChoice::Auto => None,
    };
    if let Some(kind) = wanted {
        if !transport::compiled_in().contains(&kind) {
            return Err(Error::unavailable(
                kind.name(),
                "not compiled into this build; use --transport tcp or auto".to_owned(),
            ));
        }
    }
    let table = GidTable::read(&config.sysfs_root).unwrap_or_else(|e| {
        log::warn!("cannot read the RDMA GID table: {e}");
        GidTable::default()
    });
    // In a pod: only the devices a device plugin gave it (an ambiguous resource is an error
    // with every transport choice, never a guess).
    let view = roce::pod::PodSources::from_env(&config.sysfs_root).view();
    let (table, narrowed) = roce::pod::restrict(table, &view, config.overrides.device.as_deref())?;
    if let Some(why) = narrowed {
        log::info!("RDMA devices considered: {why}");
    }
    let selection = roce::select(
        &table,
        path.source,
        path.interface.as_deref(),
        &config.overrides,
    );
    if let Some(kind) = wanted {
        let sel = selection?;
        log_warnings(&sel);
        let params = SetupParams {
            device: Some(sel.choice.clone()),
            ..params
        };
        return Ok((P::create(kind, &params)?, Some(sel.choice), None));
    }
    let rdma_kinds = transport::auto_order(true).filter(|k| *k != TransportKind::Tcp);
    let rdma = rdma_kinds.clone().next();
    match (selection, rdma) {
        (Ok(sel), Some(_)) => {
            log_warnings(&sel);
            let rdma_params = SetupParams {
                device: Some(sel.choice.clone()),
                ..params.clone()
            };
            // Every RDMA transport compiled in, in order (doca, then verbs): the first that
            // sets up wins; one line says which could not start and why; else TCP.
            let mut failed: Vec<String> = Vec::new();
            let owner = format!(
                "RoCE v2 GID {} on {} port {} owns source {} ({iface})",
                sel.choice.gid_string(),
                sel.choice.device,
                sel.choice.port,
                path.source
            );
            for kind in rdma_kinds {
                match P::create(kind, &rdma_params) {
                    Ok(t) => {
                        let why = (!failed.is_empty()).then(|| failed.join("; "));
                        if let Some(why) = &why {
                            log::warn!("{owner}, but {why}; using the {kind} transport");
                        }
                        return Ok((t, Some(sel.choice), why));
                    }
                    Err(e) => failed.push(format!("the {kind} transport cannot start: {e}")),
                }
            }
            let why = failed.join("; ");
            fallback(&params, format!("{owner}, but {why}"))
        }
        (Ok(sel), None) => {
            let why = format!(
                "RoCE v2 GID {} on {} port {} owns source {} ({iface}), but this build has no RDMA transport",
                sel.choice.gid_string(),
                sel.choice.device,
                sel.choice.port,
                path.source
            );
            fallback(&params, why)
        }
        (Err(Error::NoRoceGid { hint, table, .. }), _) => {
            let why = format!(
                "no RoCE v2 GID for source {} ({iface}): {hint}",
                path.source
            );
            log::debug!("GID table:\n{table}");
            fallback(&params, why)
        }
        (Err(e), _) => {
            let why = format!(
                "RDMA device selection failed for source {} ({iface}): {e}",
                path.source
            );
            fallback(&params, why)
        }
    }
}

/// Logs what the device choice wants the user to know (used only when RDMA will be tried).
fn log_warnings(sel: &roce::Selection) {
    for w in &sel.warnings {
        log::warn!("{w}");
    }
}
