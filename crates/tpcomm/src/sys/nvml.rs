//! A minimal NVML binding, loaded at run time: only the queries the probe
//! needs. Every `unsafe` line of it is in this file.
//!
//! Why not the nvml-wrapper crate: it would add a second libloading and a
//! dozen dependencies for ten functions, and the probe must treat every
//! missing function as "unknown", not as an error.

use super::cstr_to_string;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};

/// A GPU's PCIe link as NVML reports it: generation and lane count, now and
/// at most (the topology probe turns it into its `PcieLink`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PcieState {
    pub current_gen: u32,
    pub current_width: u32,
    pub max_gen: u32,
    pub max_width: u32,
}

type Ret = c_int;
const NVML_SUCCESS: Ret = 0;
const NVML_ERROR_INVALID_ARGUMENT: Ret = 2;
const NVML_ERROR_NOT_SUPPORTED: Ret = 3;

/// `nvmlDevice_t`, valid while the `Nvml` that returned it is alive.
#[derive(Clone, Copy)]
pub(crate) struct Device(*mut c_void);

/// `nvmlPciInfo_t` as the `_v2`/`_v3` functions fill it (nvml.h).
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// `nvmlGpuP2PCapsIndex_t` values (nvml.h).
#[derive(Clone, Copy)]
pub(crate) enum P2pIndex {
    Read = 0,
    Write = 1,
    NvLink = 2,
    Atomics = 3,
}

type NoArgFn = unsafe extern "C" fn() -> Ret;
type ErrorStringFn = unsafe extern "C" fn(Ret) -> *const c_char;
type DriverVersionFn = unsafe extern "C" fn(*mut c_char, c_uint) -> Ret;
type HandleByBusIdFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> Ret;
type LinkStateFn = unsafe extern "C" fn(*mut c_void, c_uint, *mut c_uint) -> Ret;
type RemotePciFn = unsafe extern "C" fn(*mut c_void, c_uint, *mut PciInfo) -> Ret;
type P2pStatusFn = unsafe extern "C" fn(*mut c_void, *mut c_void, c_uint, *mut c_uint) -> Ret;
type UintFn = unsafe extern "C" fn(*mut c_void, *mut c_uint) -> Ret;
type AncestorFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_uint) -> Ret;

/// An initialised NVML. The function pointers point into `_lib`, kept alive
/// beside them; `nvmlShutdown` runs on drop.
pub(crate) struct Nvml {
    _lib: Library,
    shutdown: NoArgFn,
    error_string: ErrorStringFn,
    driver_version: Option<DriverVersionFn>,
    handle_by_bus_id: HandleByBusIdFn,
    link_state: Option<LinkStateFn>,
    remote_pci: Option<RemotePciFn>,
    p2p_status: Option<P2pStatusFn>,
    curr_gen: Option<UintFn>,
    curr_width: Option<UintFn>,
    max_gen: Option<UintFn>,
    max_width: Option<UintFn>,
    ancestor: Option<AncestorFn>,
}

/// # Safety
/// `T` must be the C signature nvml.h gives `name`.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: `T` is `name`'s C signature (the caller's contract).
    unsafe { lib.get::<T>(name) }.ok().map(|s| *s)
}

impl Nvml {
    /// Opens `libnvidia-ml.so.1` (the name the driver installs) and
    /// initialises it. The error says why, for the probe's warnings.
    pub(crate) fn open() -> Result<Nvml, String> {
        let mut last = String::new();
        for name in ["libnvidia-ml.so.1", "libnvidia-ml.so"] {
            // SAFETY: NVML's initialisers only set up its own state.
            match unsafe { Library::new(name) } {
                Ok(lib) => return Nvml::init(lib),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!(
            "NVML (libnvidia-ml.so.1) could not be loaded: {last}"
        ))
    }

    fn init(lib: Library) -> Result<Nvml, String> {
        // SAFETY: each symbol gets the signature nvml.h declares for it.
        let (init, shutdown, error_string, handle_by_bus_id) = unsafe {
            (
                sym::<NoArgFn>(&lib, "nvmlInit_v2"),
                sym::<NoArgFn>(&lib, "nvmlShutdown"),
                sym::<ErrorStringFn>(&lib, "nvmlErrorString"),
                sym::<HandleByBusIdFn>(&lib, "nvmlDeviceGetHandleByPciBusId_v2"),
            )
        };
        let (Some(init), Some(shutdown), Some(error_string), Some(handle_by_bus_id)) =
            (init, shutdown, error_string, handle_by_bus_id)
        else {
            return Err("libnvidia-ml.so.1 lacks nvmlInit_v2 or other basic functions".into());
        };
        // SAFETY: nvmlInit_v2 takes no arguments and may be called any time.
        let ret = unsafe { init() };
        if ret != NVML_SUCCESS {
            // SAFETY: returns a static string for any code (see `describe`).
            let why = unsafe { cstr_to_string(error_string(ret)) };
            return Err(format!("nvmlInit failed: {why}"));
        }
        // SAFETY: as above, signatures from nvml.h.
        unsafe {
            Ok(Nvml {
                driver_version: sym(&lib, "nvmlSystemGetDriverVersion"),
                link_state: sym(&lib, "nvmlDeviceGetNvLinkState"),
                remote_pci: sym(&lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"),
                p2p_status: sym(&lib, "nvmlDeviceGetP2PStatus"),
                curr_gen: sym(&lib, "nvmlDeviceGetCurrPcieLinkGeneration"),
                curr_width: sym(&lib, "nvmlDeviceGetCurrPcieLinkWidth"),
                max_gen: sym(&lib, "nvmlDeviceGetMaxPcieLinkGeneration"),
                max_width: sym(&lib, "nvmlDeviceGetMaxPcieLinkWidth"),
                ancestor: sym(&lib, "nvmlDeviceGetTopologyCommonAncestor"),
                shutdown,
                error_string,
                handle_by_bus_id,
                _lib: lib,
            })
        }
    }

    fn describe(&self, ret: Ret) -> String {
        // SAFETY: nvmlErrorString returns a pointer to a static string.
        let s = unsafe { cstr_to_string((self.error_string)(ret)) };
        if s.is_empty() {
            format!("NVML error {ret}")
        } else {
            s
        }
    }

    pub(crate) fn driver_version(&self) -> Option<String> {
        let f = self.driver_version?;
        let mut buf = [0 as c_char; 96];
        // SAFETY: NVML writes at most `len` bytes, NUL included, into `buf`.
        let ret = unsafe { f(buf.as_mut_ptr(), buf.len() as c_uint) };
        // SAFETY: on success `buf` holds a NUL-terminated string; the last
        // byte is never written past the given length, so it stays NUL.
        (ret == NVML_SUCCESS).then(|| unsafe { cstr_to_string(buf.as_ptr()) })
    }

    pub(crate) fn device(&self, bus_id: &str) -> Result<Device, String> {
        let c = CString::new(bus_id).map_err(|_| format!("bad bus id {bus_id:?}"))?;
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string in, a handle written through a
        // pointer to a live local out.
        let ret = unsafe { (self.handle_by_bus_id)(c.as_ptr(), &mut handle) };
        if ret != NVML_SUCCESS || handle.is_null() {
            return Err(format!(
                "NVML does not know GPU {bus_id}: {}",
                self.describe(ret)
            ));
        }
        Ok(Device(handle))
    }

    /// The PCI bus ids at the far end of each active NVLink of `dev`.
    pub(crate) fn nvlink_remotes(&self, dev: Device) -> Vec<String> {
        let (Some(state), Some(remote)) = (self.link_state, self.remote_pci) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        // NVML_NVLINK_MAX_LINKS has grown over releases (4, 6, 12, 18); ask
        // until NVML says the link number is out of range.
        for link in 0..64 {
            let mut active: c_uint = 0;
            // SAFETY: a live handle and a pointer to a live local.
            let ret = unsafe { state(dev.0, link, &mut active) };
            if ret == NVML_ERROR_INVALID_ARGUMENT || ret == NVML_ERROR_NOT_SUPPORTED {
                break;
            }
            if ret != NVML_SUCCESS || active == 0 {
                continue;
            }
            // SAFETY: all-zero bytes are a valid PciInfo; NVML fills it.
            let mut info: PciInfo = unsafe { std::mem::zeroed() };
            // SAFETY: a live handle, an active link and a pointer to `info`.
            if unsafe { remote(dev.0, link, &mut info) } == NVML_SUCCESS {
                info.bus_id[31] = 0;
                // SAFETY: NUL-terminated by the line above.
                out.push(unsafe { cstr_to_string(info.bus_id.as_ptr()) });
            }
        }
        out
    }

    /// `nvmlDeviceGetP2PStatus`: `Ok(0)` is NVML_P2P_STATUS_OK.
    pub(crate) fn p2p_status(&self, a: Device, b: Device, index: P2pIndex) -> Option<u32> {
        let f = self.p2p_status?;
        let mut status: c_uint = 0;
        // SAFETY: live handles and a pointer to a live local.
        let ret = unsafe { f(a.0, b.0, index as c_uint, &mut status) };
        (ret == NVML_SUCCESS).then_some(status)
    }

    pub(crate) fn pcie(&self, dev: Device) -> Option<PcieState> {
        let get = |f: Option<UintFn>| -> Option<u32> {
            let f = f?;
            let mut v: c_uint = 0;
            // SAFETY: a live handle and a pointer to a live local.
            (unsafe { f(dev.0, &mut v) } == NVML_SUCCESS).then_some(v)
        };
        Some(PcieState {
            current_gen: get(self.curr_gen)?,
            current_width: get(self.curr_width)?,
            max_gen: get(self.max_gen)?,
            max_width: get(self.max_width)?,
        })
    }

    /// `nvmlDeviceGetTopologyCommonAncestor` as the raw level (0..50).
    pub(crate) fn common_ancestor(&self, a: Device, b: Device) -> Option<u32> {
        let f = self.ancestor?;
        let mut level: c_uint = 0;
        // SAFETY: live handles and a pointer to a live local.
        (unsafe { f(a.0, b.0, &mut level) } == NVML_SUCCESS).then_some(level)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the successful nvmlInit_v2 of `init`; no `Device`
        // outlives the probe that owns this `Nvml`.
        let _ = unsafe { (self.shutdown)() };
    }
}

/// NVML's P2P status codes in words.
pub(crate) fn p2p_status_name(status: u32) -> &'static str {
    match status {
        0 => "OK",
        1 => "chipset not supported",
        2 => "GPU not supported",
        3 => "IOH topology not supported",
        4 => "disabled by registry key",
        5 => "not supported",
        _ => "unknown",
    }
}
