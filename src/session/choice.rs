//! Which transport a session uses: the device rule and the transport choice, with the
//! fallback `auto` allows, each decision logged.

use crate::config::{Config, TransportChoice};
use crate::net::iface::PathInfo;
use crate::proto::TransportKind;
use crate::roce::{self, DeviceChoice, GidTable};
use crate::transport::{self, RolePath, SetupParams};
use crate::{Error, Result};

/// A data path of the role `P`, its slots, the device each path runs on (RDMA: path 0 first;
/// empty on tcp), and why `auto` fell back to it (see [`super::SessionInfo::fallback`]).
pub(super) type Created<P> = (
    (Box<P>, Vec<<P as RolePath>::Slot>),
    Vec<DeviceChoice>,
    Option<String>,
);

/// Applies the device rule (docs/design.md, "Device and GID choice") and the transport
/// choice, and creates the transport; logs what was decided. With `auto`, an RDMA transport
/// that cannot start here falls back to the next one in [`transport::auto_order`], then to TCP
/// (unless [`Config::require_rdma`]: then the reason is the error). With extra paths
/// (`--paths`, `extra`) each has its own device by the same rule; one that has none is the
/// whole session's fallback (or error), as path 0's would be.
pub(super) fn create_transport<P: RolePath + ?Sized>(
    config: &Config,
    path: &PathInfo,
    extra: &[PathInfo],
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
        P::create(TransportKind::Tcp, params).map(|t| (t, Vec::new(), Some(why)))
    };
    let wanted = match config.transport {
        TransportChoice::Tcp => {
            return P::create(TransportKind::Tcp, &params).map(|t| (t, Vec::new(), None))
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
    // Path 0's selection decides the messages below; an extra path's failure stands in for it.
    let selection = roce::select(
        &table,
        path.source,
        path.interface.as_deref(),
        &config.overrides,
    )
    .and_then(|first| {
        let mut all = vec![first];
        for p in extra {
            all.push(roce::select(
                &table,
                p.source,
                p.interface.as_deref(),
                &config.overrides,
            )?);
        }
        Ok(all)
    });
    if let Some(kind) = wanted {
        let sels = selection?;
        let params = with_devices(params, &sels);
        let devices = sels.into_iter().map(|s| s.choice).collect();
        return Ok((P::create(kind, &params)?, devices, None));
    }
    let rdma_kinds = transport::auto_order(true).filter(|k| *k != TransportKind::Tcp);
    let rdma = rdma_kinds.clone().next();
    match (selection, rdma) {
        (Ok(sels), Some(_)) => {
            let sel = &sels[0];
            let rdma_params = with_devices(params.clone(), &sels);
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
                        let devices = sels.into_iter().map(|s| s.choice).collect();
                        return Ok((t, devices, why));
                    }
                    Err(e) => failed.push(format!("the {kind} transport cannot start: {e}")),
                }
            }
            let why = failed.join("; ");
            fallback(&params, format!("{owner}, but {why}"))
        }
        (Ok(sels), None) => {
            let sel = &sels[0];
            let why = format!(
                "RoCE v2 GID {} on {} port {} owns source {} ({iface}), but this build has no RDMA transport",
                sel.choice.gid_string(),
                sel.choice.device,
                sel.choice.port,
                path.source
            );
            fallback(&params, why)
        }
        (
            Err(Error::NoRoceGid {
                ip,
                netdev,
                hint,
                table,
                ..
            }),
            _,
        ) => {
            let why = format!(
                "no RoCE v2 GID for source {ip} ({}): {hint}",
                netdev.as_deref().unwrap_or(iface)
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

/// `params` with each path's chosen device (path 0 first, then `extra_paths` in order), after
/// logging what the choices want the user to know (only when RDMA will be tried).
fn with_devices(mut params: SetupParams, sels: &[roce::Selection]) -> SetupParams {
    for w in sels.iter().flat_map(|s| &s.warnings) {
        log::warn!("{w}");
    }
    params.device = sels.first().map(|s| s.choice.clone());
    for (ends, sel) in params.extra_paths.iter_mut().zip(sels.iter().skip(1)) {
        ends.device = Some(sel.choice.clone());
    }
    params
}
