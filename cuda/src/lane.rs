//! [`Lane`]: one logical device's CUDA resources — context, stream, kernels, buffer pool, idle
//! events — and the setup of all lanes of a device map, including peer access between GPUs.

use crate::buffer::DeviceBuffer;
use crate::cache::Pool;
use crate::config::{ContextPolicy, CudaConfig};
use crate::context::{Scoped, create_unpushed};
use crate::error::{CudaError, DriverCode, DriverResultExt, Result};
use crate::kernels::Kernels;
use crate::mapping::DeviceMap;
use crate::topology::{ContextKind, LaneInfo, PeerLink, PeerStatus, Topology};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use ruccl_core::DeviceId;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

/// One logical device: where its work runs.
pub(crate) struct Lane {
    /// The logical device.
    pub(crate) device: DeviceId,
    /// The GPU it runs on.
    pub(crate) ordinal: usize,
    /// Its stream: every collective's work for this device is queued here, in order.
    pub(crate) stream: Scoped<Arc<CudaStream>>,
    /// The kernels, loaded in the stream's context (shared by lanes that share a context).
    pub(crate) kernels: Scoped<Arc<Kernels>>,
    /// Idle device buffers of this device, for later generations (`cache.rs`).
    pub(crate) pool: Arc<Pool>,
    /// Idle ordering events of this device's context, for later generations: a generation takes
    /// two per rank and gives them back once its streams are complete.
    events: Mutex<Vec<Scoped<CudaEvent>>>,
}

impl Lane {
    /// The lane's context.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        self.stream.context()
    }

    /// A buffer of exactly `bytes` bytes owned by this lane's stream, from its pool (cached or
    /// newly allocated); it returns to the pool when released. The caller has saved the thread's
    /// context.
    pub(crate) fn take_buffer(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.pool.take(&self.stream, bytes, self.device)
    }

    /// An ordering event of this lane's context (timing disabled): an idle one, or a new one.
    /// The caller has saved the thread's context.
    pub(crate) fn take_event(&self) -> Result<Scoped<CudaEvent>> {
        let idle = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(event) => Ok(event),
            None => self
                .context()
                .new_event(None)
                .map(Scoped::new)
                .during("cuEventCreate", Some(self.device)),
        }
    }

    /// Give back an event taken with [`Lane::take_event`]. The caller has completed every stream
    /// that recorded or waited on it since it was taken.
    pub(crate) fn give_event(&self, event: Scoped<CudaEvent>) {
        let mut idle = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE_EVENTS {
            idle.push(event);
        }
    }
}

/// The most idle events a lane keeps (a generation takes two per rank; a few generations of
/// several communicators over one executor fit).
const MAX_IDLE_EVENTS: usize = 64;

/// Create a lane per logical device of `map`, load the kernels (`ptx`) into every context, and
/// enable peer access between contexts on different GPUs. The caller has saved the thread's
/// context (every context made here is bound on this thread at some point).
pub(crate) fn build_lanes(
    map: &DeviceMap,
    config: &CudaConfig,
    ptx: &str,
) -> Result<(BTreeMap<DeviceId, Arc<Lane>>, Topology)> {
    let mut lanes = BTreeMap::new();
    let mut topology = Topology::default();
    for ordinal in map.ordinals() {
        let devices = map.devices_on(ordinal);
        let Some(&first) = devices.first() else {
            continue;
        };
        let primary = CudaContext::new(ordinal).during("cuDevicePrimaryCtxRetain", Some(first))?;
        let gpu_name = primary.name().during("cuDeviceGetName", Some(first))?;
        let primary_kernels = Arc::new(Kernels::load(&primary, ptx, first)?);
        for (position, &device) in devices.iter().enumerate() {
            let (context, kind, kernels) = if position == 0 {
                (
                    Arc::clone(&primary),
                    ContextKind::Primary,
                    Arc::clone(&primary_kernels),
                )
            } else if config.contexts == ContextPolicy::SharedPrimary {
                let reason = "the default context policy (one context per GPU)".to_owned();
                (
                    Arc::clone(&primary),
                    ContextKind::SharedPrimary { reason },
                    Arc::clone(&primary_kernels),
                )
            } else {
                match new_context(&primary) {
                    Ok(context) => {
                        let kernels = Arc::new(Kernels::load(&context, ptx, device)?);
                        (context, ContextKind::Separate, kernels)
                    }
                    Err(source) if config.contexts == ContextPolicy::Separate => {
                        return Err(CudaError::ContextRefused {
                            device,
                            ordinal,
                            source,
                        });
                    }
                    Err(code) => {
                        let reason = format!("cuCtxCreate refused: {code}");
                        (
                            Arc::clone(&primary),
                            ContextKind::SharedPrimary { reason },
                            Arc::clone(&primary_kernels),
                        )
                    }
                }
            };
            let stream = context
                .new_stream()
                .during("cuStreamCreate", Some(device))?;
            topology.lanes.push(LaneInfo {
                device,
                ordinal,
                gpu_name: gpu_name.clone(),
                context: kind,
            });
            lanes.insert(
                device,
                Arc::new(Lane {
                    device,
                    ordinal,
                    stream: Scoped::new(stream),
                    kernels: Scoped::new(kernels),
                    pool: Pool::new(config.cache_bytes),
                    events: Mutex::new(Vec::new()),
                }),
            );
        }
    }
    topology.lanes.sort_by_key(|lane| lane.device);
    topology.peers = connect_peers(&lanes, config)?;
    Ok((lanes, topology))
}

/// A new (non-primary) context on `primary`'s GPU (`cuCtxCreate_v2`, flags 0). `cuCtxCreate`
/// pushes the new context on the thread's stack; it is popped again at once (see `context.rs`),
/// so the caller's stack is left as it was.
fn new_context(primary: &Arc<CudaContext>) -> std::result::Result<Arc<CudaContext>, DriverCode> {
    let (ordinal, device) = (primary.ordinal(), primary.cu_device());
    // SAFETY: the device handle comes from a live context.
    let raw = unsafe { create_unpushed(device) }.map_err(DriverCode::from)?;
    // SAFETY: `raw` was just created for `device` and is owned by nobody else; the returned
    // `CudaContext` takes ownership and destroys it (`cuCtxDestroy`) when dropped.
    match unsafe { CudaContext::from_raw_context(ordinal, device, raw) } {
        Ok(context) => Ok(context),
        Err(error) => {
            // SAFETY: wrapping failed, so `raw` is still ours alone; destroy it once.
            let _ = unsafe { sys::cuCtxDestroy_v2(raw) };
            Err(DriverCode::from(error))
        }
    }
}

/// Enable peer access for every ordered pair of distinct contexts on different GPUs, where the
/// hardware supports it. Same-GPU pairs need none: the driver copies between contexts on one GPU
/// with its copy engines, and a GPU is not its own peer. A failed enable is
/// [`CudaError::PeerAccessFailed`] unless [`CudaConfig::peer_fallback`] allows staged copies.
fn connect_peers(
    lanes: &BTreeMap<DeviceId, Arc<Lane>>,
    config: &CudaConfig,
) -> Result<Vec<PeerLink>> {
    let mut links = Vec::new();
    let mut done = HashSet::new();
    for from in lanes.values() {
        for to in lanes.values() {
            let (from_context, to_context) = (from.context(), to.context());
            if from.ordinal == to.ordinal
                || !done.insert((from_context.cu_ctx() as usize, to_context.cu_ctx() as usize))
            {
                continue;
            }
            let status = if config.peer_access {
                enable_peer_access(from_context, to_context, from.device)?
            } else {
                PeerStatus::NotAttempted
            };
            if let (PeerStatus::Failed(code), false) = (status, config.peer_fallback) {
                return Err(CudaError::PeerAccessFailed {
                    from: from.device,
                    from_ordinal: from.ordinal,
                    to: to.device,
                    to_ordinal: to.ordinal,
                    source: code,
                });
            }
            links.push(PeerLink {
                from: from.device,
                to: to.device,
                status,
            });
        }
    }
    Ok(links)
}

fn enable_peer_access(
    from: &Arc<CudaContext>,
    to: &Arc<CudaContext>,
    device: DeviceId,
) -> Result<PeerStatus> {
    let mut can_access: std::ffi::c_int = 0;
    // SAFETY: both `CUdevice` handles come from live contexts; the out-pointer is a live local.
    let code =
        unsafe { sys::cuDeviceCanAccessPeer(&mut can_access, from.cu_device(), to.cu_device()) };
    code.result()
        .during("cuDeviceCanAccessPeer", Some(device))?;
    if can_access == 0 {
        return Ok(PeerStatus::Unsupported);
    }
    from.bind_to_thread()
        .during("cuCtxSetCurrent", Some(device))?;
    // SAFETY: `from` is current on this thread (bound above) and `to` is a live context handle
    // (its `Arc` is held by a lane); flags must be 0.
    let code = unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) };
    Ok(match code {
        CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            PeerStatus::Enabled
        }
        other => PeerStatus::Failed(DriverCode(other)),
    })
}

/// Look up the lane of `device`.
pub(crate) fn lane_of(
    lanes: &BTreeMap<DeviceId, Arc<Lane>>,
    device: DeviceId,
) -> Result<&Arc<Lane>> {
    lanes
        .get(&device)
        .ok_or(CudaError::UnknownDevice { device })
}
