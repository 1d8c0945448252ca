//! A PJRT client: devices, host-to-device transfers, compilation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{RwLock, RwLockReadGuard};

use super::api::owned_str;
use super::buffer::{Buffer, ElementType};
use super::executable::Executable;
use super::kv::{self, KeyValueStore};
use super::memory::{MemoryStats, PjrtMemoryStats};
use super::{args, sys, Api, CompileOptions};
use crate::error::{Error, Result};

/// What PJRT reports about one addressable device.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Index in our device list (what users call `tpu:N`).
    pub index: usize,
    /// PJRT's global device id.
    pub id: i32,
    /// e.g. "cpu", "TPU v5 lite".
    pub kind: String,
    pub local_hardware_id: i32,
    pub description: String,
}

/// A PJRT client and its addressable devices.
///
/// Thread-safe: PJRT clients may be used from any thread concurrently.
///
/// [`Client::close`] destroys the PJRT client while buffers and executables
/// made by it may still exist (they hold an `Arc<Client>`). From then on they
/// are inert: every call through them fails with [`closed_error`], and
/// dropping one frees nothing (that needs the client): its plugin object is
/// kept until the process ends, see `ORPHANS`.
pub struct Client {
    api: Arc<Api>,
    raw: *mut sys::PJRT_Client,
    devices: Vec<*mut sys::PJRT_Device>,
    infos: Vec<DeviceInfo>,
    /// Every device of the client, addressable or not: more than `devices`
    /// where the client spans processes (a TPU pod slice).
    global_device_count: usize,
    memory: Vec<MemoryStats>,
    platform_name: String,
    platform_version: String,
    /// Whether `raw` still exists. Every call that reaches the PJRT client
    /// or an object it made holds a read lock ([`Client::enter`]), and
    /// [`Client::close`] takes the write lock, so the client is never
    /// destroyed under a call in progress.
    alive: RwLock<bool>,
    /// The key-value store's callbacks point here; dropped after the client
    /// (fields drop after `Drop::drop` destroys it).
    _kv: Option<Box<kv::Bridge>>,
}

/// Proof that the PJRT client stays alive while it is held (see
/// [`Client::enter`]).
pub(crate) type Live<'a> = RwLockReadGuard<'a, bool>;

/// The plugin's objects (buffers, executables) dropped after their client was
/// closed. Freeing one needs its client, so they are kept, reachable (leak
/// checkers see no leak), until the process ends: closing happens at exit.
static ORPHANS: parking_lot::Mutex<Vec<Orphan>> = parking_lot::Mutex::new(Vec::new());

struct Orphan(#[allow(dead_code)] *mut std::ffi::c_void);

// SAFETY: an orphan is never used again; the pointer is only kept.
unsafe impl Send for Orphan {}

/// Keeps `raw`, an object of a closed client, instead of freeing it.
pub(crate) fn orphan<T>(raw: *mut T) {
    ORPHANS.lock().push(Orphan(raw.cast()));
}

/// What any call fails with once [`Client::close`] destroyed the client.
pub fn closed_error() -> Error {
    Error::FailedPrecondition(
        "the runtime was shut down (ttpu_runtime_shutdown; the PyTorch backend does it at interpreter exit): \
         its PJRT client is destroyed and no device work can run"
            .into(),
    )
}

// SAFETY: see the type docs; the raw pointers are owned handles to
// thread-safe PJRT objects.
unsafe impl Send for Client {}
unsafe impl Sync for Client {}

/// A client-creation option (`PJRT_NamedValue`), e.g. `cpu_device_count`.
#[derive(Debug, Clone)]
pub enum CreateOption {
    Int(String, i64),
    Bool(String, bool),
    Str(String, String),
}

impl Client {
    pub fn create(api: Arc<Api>, options: &[CreateOption]) -> Result<Arc<Client>> {
        Client::create_with_store(api, options, None)
    }

    /// As [`Client::create`], giving the plugin `store` for the key-value
    /// callbacks a client that spans processes rendezvouses through.
    pub fn create_with_store(
        api: Arc<Api>,
        options: &[CreateOption],
        store: Option<Arc<dyn KeyValueStore>>,
    ) -> Result<Arc<Client>> {
        let _span = tracing::info_span!("pjrt_client_create").entered();
        let values: Vec<sys::PJRT_NamedValue> = options
            .iter()
            .map(|o| {
                let mut v = args!(PJRT_NamedValue);
                let name = match o {
                    CreateOption::Int(n, x) => {
                        v.type_ = sys::PJRT_NamedValue_kInt64;
                        v.__bindgen_anon_1.int64_value = *x;
                        v.value_size = 1;
                        n
                    }
                    CreateOption::Bool(n, x) => {
                        v.type_ = sys::PJRT_NamedValue_kBool;
                        v.__bindgen_anon_1.bool_value = *x;
                        v.value_size = 1;
                        n
                    }
                    CreateOption::Str(n, s) => {
                        v.type_ = sys::PJRT_NamedValue_kString;
                        v.__bindgen_anon_1.string_value = s.as_ptr() as *const _;
                        v.value_size = s.len();
                        n
                    }
                };
                v.name = name.as_ptr() as *const _;
                v.name_size = name.len();
                v
            })
            .collect();
        let mut a = args!(PJRT_Client_Create_Args);
        a.create_options = values.as_ptr();
        a.num_options = values.len();
        let bridge = store.map(kv::Bridge::new);
        if let Some(b) = &bridge {
            b.install(&mut a);
        }
        api.call("PJRT_Client_Create", api.table().PJRT_Client_Create, &mut a)?;
        // Owned from here on: an error below drops it, which destroys the
        // client before the store its callbacks point at.
        let mut client = Client {
            api,
            raw: a.client,
            devices: Vec::new(),
            infos: Vec::new(),
            global_device_count: 0,
            memory: Vec::new(),
            platform_name: String::new(),
            platform_version: String::new(),
            alive: RwLock::new(true),
            _kv: bridge,
        };
        client.describe()?;
        tracing::info!(
            platform = %client.platform_name,
            version = %client.platform_version,
            devices = client.devices.len(),
            "PJRT client ready"
        );
        Ok(Arc::new(client))
    }

    /// Reads the platform and the devices of a new client.
    fn describe(&mut self) -> Result<()> {
        let (api, raw) = (&self.api, self.raw);
        let t = api.table();
        let mut pn = args!(PJRT_Client_PlatformName_Args);
        pn.client = raw;
        api.call("PJRT_Client_PlatformName", t.PJRT_Client_PlatformName, &mut pn)?;
        let platform_name = owned_str(pn.platform_name, pn.platform_name_size);
        let mut pv = args!(PJRT_Client_PlatformVersion_Args);
        pv.client = raw;
        api.call("PJRT_Client_PlatformVersion", t.PJRT_Client_PlatformVersion, &mut pv)?;
        let platform_version = owned_str(pv.platform_version, pv.platform_version_size);

        let mut ad = args!(PJRT_Client_AddressableDevices_Args);
        ad.client = raw;
        api.call("PJRT_Client_AddressableDevices", t.PJRT_Client_AddressableDevices, &mut ad)?;
        let devices: Vec<*mut sys::PJRT_Device> =
            unsafe { std::slice::from_raw_parts(ad.addressable_devices, ad.num_addressable_devices) }.to_vec();

        let mut infos = Vec::with_capacity(devices.len());
        for (index, &dev) in devices.iter().enumerate() {
            let mut gd = args!(PJRT_Device_GetDescription_Args);
            gd.device = dev;
            api.call("PJRT_Device_GetDescription", t.PJRT_Device_GetDescription, &mut gd)?;
            let desc = gd.device_description;
            let mut id = args!(PJRT_DeviceDescription_Id_Args);
            id.device_description = desc;
            api.call("PJRT_DeviceDescription_Id", t.PJRT_DeviceDescription_Id, &mut id)?;
            let mut kind = args!(PJRT_DeviceDescription_Kind_Args);
            kind.device_description = desc;
            api.call("PJRT_DeviceDescription_Kind", t.PJRT_DeviceDescription_Kind, &mut kind)?;
            let mut ds = args!(PJRT_DeviceDescription_DebugString_Args);
            ds.device_description = desc;
            api.call("PJRT_DeviceDescription_DebugString", t.PJRT_DeviceDescription_DebugString, &mut ds)?;
            let mut hw = args!(PJRT_Device_LocalHardwareId_Args);
            hw.device = dev;
            api.call("PJRT_Device_LocalHardwareId", t.PJRT_Device_LocalHardwareId, &mut hw)?;
            infos.push(DeviceInfo {
                index,
                id: id.id,
                kind: owned_str(kind.device_kind, kind.device_kind_size),
                local_hardware_id: hw.local_hardware_id,
                description: owned_str(ds.debug_string, ds.debug_string_size),
            });
        }
        let mut all = args!(PJRT_Client_Devices_Args);
        all.client = raw;
        api.call("PJRT_Client_Devices", t.PJRT_Client_Devices, &mut all)?;
        self.memory = devices.iter().map(|_| MemoryStats::default()).collect();
        self.global_device_count = all.num_devices;
        self.devices = devices;
        self.infos = infos;
        self.platform_name = platform_name;
        self.platform_version = platform_version;
        Ok(())
    }

    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }
    pub fn platform_name(&self) -> &str {
        &self.platform_name
    }
    pub fn platform_version(&self) -> &str {
        &self.platform_version
    }
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }
    /// Devices of the whole client, including other processes' (see the field).
    pub fn global_device_count(&self) -> usize {
        self.global_device_count
    }
    pub fn memory(&self, device: usize) -> &MemoryStats {
        &self.memory[device]
    }

    /// Counts a RESOURCE_EXHAUSTED `result` of creating buffers or
    /// launching a program on `devices` as an out-of-memory event on each
    /// (PJRT does not say which device of a replicated launch ran out).
    pub(crate) fn count_oom<T>(&self, devices: &[usize], result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            if e.code() == crate::error::Code::ResourceExhausted {
                devices.iter().for_each(|&d| self.memory[d].record_oom());
            }
        }
        result
    }

    /// The plugin's own memory statistics of `device`
    /// (`PJRT_Device_MemoryStats`). UNIMPLEMENTED where the plugin keeps
    /// none; fields it leaves unset are `None`.
    pub fn device_memory_stats(&self, device: usize) -> Result<PjrtMemoryStats> {
        let mut a = args!(PJRT_Device_MemoryStats_Args);
        a.device = self.devices[device];
        self.api.call("PJRT_Device_MemoryStats", self.api.table().PJRT_Device_MemoryStats, &mut a)?;
        let set = |v: i64, is_set: bool| is_set.then_some(v);
        Ok(PjrtMemoryStats {
            bytes_in_use: a.bytes_in_use,
            peak_bytes_in_use: set(a.peak_bytes_in_use, a.peak_bytes_in_use_is_set),
            bytes_limit: set(a.bytes_limit, a.bytes_limit_is_set),
        })
    }

    /// Checks a user-supplied device index.
    pub fn check_device(&self, index: i64) -> Result<usize> {
        if index < 0 || index as usize >= self.devices.len() {
            return Err(Error::DeviceOutOfRange {
                index,
                count: self.devices.len(),
                platform: self.platform_name.clone(),
            });
        }
        Ok(index as usize)
    }

    pub(crate) fn raw_device(&self, index: usize) -> *mut sys::PJRT_Device {
        self.devices[index]
    }

    /// Copies `data` (dense, row-major) to `device`. The host memory may be
    /// reused as soon as this returns.
    pub fn buffer_from_host(
        self: &Arc<Self>,
        data: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: usize,
    ) -> Result<Buffer> {
        let mut _trace = crate::trace::span(crate::trace::Category::Transfer, "host_to_device", Some(device));
        _trace.detail(|| crate::trace::bytes(data.len()));
        let numel: i64 = dims.iter().product();
        let expected = numel as usize * ty.byte_size();
        if data.len() != expected {
            return Err(Error::InvalidArgument(format!(
                "host buffer has {} bytes but {:?} {:?} needs {expected}",
                data.len(),
                ty,
                dims
            )));
        }
        let _span = tracing::trace_span!("h2d", bytes = data.len(), device).entered();
        let _live = self.enter()?;
        let mut a = args!(PJRT_Client_BufferFromHostBuffer_Args);
        a.client = self.raw;
        a.data = data.as_ptr() as *const _;
        a.type_ = ty.raw();
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.host_buffer_semantics = sys::PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
        a.device = self.devices[device];
        let made = self.api.call(
            "PJRT_Client_BufferFromHostBuffer",
            self.api.table().PJRT_Client_BufferFromHostBuffer,
            &mut a,
        );
        self.count_oom(&[device], made)?;
        // With kImmutableOnlyDuringCall the copy is done; the event only
        // signals what we already know.
        if !a.done_with_host_buffer.is_null() {
            drop(super::Event::from_raw(self.api.clone(), a.done_with_host_buffer));
        }
        Ok(Buffer::from_raw(self.clone(), a.buffer, device, expected))
    }

    /// Compiles StableHLO text (MLIR format). `what` names the program in
    /// errors and traces (an op name, "fused graph", ...).
    pub fn compile(self: &Arc<Self>, what: &str, mlir: &str, options: &CompileOptions) -> Result<Executable> {
        let _span = tracing::info_span!("compile", what, bytes = mlir.len()).entered();
        let mut _trace = crate::trace::span(crate::trace::Category::Compile, what, None);
        _trace.detail(|| format!("{} of StableHLO", crate::trace::bytes(mlir.len())));
        let _live = self.enter()?;
        let start = Instant::now();
        let opts = options.encode();
        let format = "mlir";
        let mut program = args!(PJRT_Program);
        program.code = mlir.as_ptr() as *mut _;
        program.code_size = mlir.len();
        program.format = format.as_ptr() as *const _;
        program.format_size = format.len();
        let mut a = args!(PJRT_Client_Compile_Args);
        a.client = self.raw;
        a.program = &program;
        a.compile_options = opts.as_ptr() as *const _;
        a.compile_options_size = opts.len();
        self.api.call("PJRT_Client_Compile", self.api.table().PJRT_Client_Compile, &mut a).map_err(|e| match e {
            Error::Pjrt { message, .. } => {
                Error::compile(what, message, mlir)
            }
            other => other,
        })?;
        let exe = Executable::from_raw(self.clone(), a.executable, what)?;
        tracing::debug!(what, ms = start.elapsed().as_secs_f64() * 1e3, "compiled");
        Ok(exe)
    }

    /// Loads an executable produced by [`Executable::serialize`].
    pub fn deserialize(self: &Arc<Self>, bytes: &[u8]) -> Result<Executable> {
        let _span = tracing::debug_span!("deserialize", bytes = bytes.len()).entered();
        // A disk-cache hit: on the compile row, since it stands in for one.
        let mut _trace = crate::trace::span(crate::trace::Category::Compile, "load a cached program", None);
        _trace.detail(|| crate::trace::bytes(bytes.len()));
        let _live = self.enter()?;
        let mut a = args!(PJRT_Executable_DeserializeAndLoad_Args);
        a.client = self.raw;
        a.serialized_executable = bytes.as_ptr() as *const _;
        a.serialized_executable_size = bytes.len();
        self.api.call("PJRT_Executable_DeserializeAndLoad", self.api.table().PJRT_Executable_DeserializeAndLoad, &mut a)?;
        Executable::from_raw(self.clone(), a.loaded_executable, "cached program")
    }
}

impl Client {
    /// Holds the client alive for a call through it or an object it made;
    /// fails with [`closed_error`] once it is closed. The lock is taken
    /// recursively, so a nested call never waits behind a pending close.
    pub(crate) fn enter(&self) -> Result<Live<'_>> {
        let live = self.alive.read_recursive();
        if *live {
            Ok(live)
        } else {
            Err(closed_error())
        }
    }

    /// Whether [`Client::close`] destroyed the PJRT client.
    pub fn is_closed(&self) -> bool {
        !*self.alive.read_recursive()
    }

    /// Destroys the PJRT client now, before the last `Arc` to it goes, so
    /// that its threads stop at a point of the caller's choosing (at process
    /// exit: before static destructors run under them). Buffers and
    /// executables still referring to it become inert (see the type docs).
    ///
    /// Waits up to `timeout` for calls in progress on other threads (a
    /// compile, a transfer); if they are still running then, the client is
    /// left alive and this returns false. Closing twice is a no-op. Must not
    /// be called while the calling thread is inside [`Client::enter`].
    pub fn close(&self, timeout: Duration) -> bool {
        let Some(mut alive) = self.alive.try_write_for(timeout) else { return false };
        if std::mem::replace(&mut *alive, false) {
            self.destroy();
        }
        true
    }

    fn destroy(&self) {
        let _span = tracing::debug_span!("pjrt_client_destroy").entered();
        let mut a = args!(PJRT_Client_Destroy_Args);
        a.client = self.raw;
        if let Err(e) = self.api.call("PJRT_Client_Destroy", self.api.table().PJRT_Client_Destroy, &mut a) {
            tracing::warn!("{e}");
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if *self.alive.get_mut() {
            self.destroy();
        }
    }
}
