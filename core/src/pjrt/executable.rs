//! Compiled programs: execution and (de)serialization.

use std::sync::Arc;

use super::buffer::{Buffer, ElementType};
use super::client::Live;
use super::{args, sys, Client, Event};
use crate::error::{Error, Result};

/// A loaded executable.
///
/// Thread-safe: one executable may be launched from several threads at once.
/// Once its client is closed ([`Client::close`]) it is inert: calls fail and
/// dropping it frees nothing.
pub struct Executable {
    client: Arc<Client>,
    raw: *mut sys::PJRT_LoadedExecutable,
    /// Byte size of each output, for memory accounting of the buffers it makes.
    output_bytes: Vec<usize>,
    output_types: Vec<ElementType>,
    /// What it was compiled for (an op, "fused graph"): names its runs in traces.
    name: Arc<str>,
}

// SAFETY: PJRT loaded executables are thread-safe.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

/// The `PJRT_Executable` behind a loaded one; destroyed on drop. It keeps the
/// client alive while it exists.
struct Unloaded<'a> {
    client: &'a Client,
    _live: Live<'a>,
    raw: *mut sys::PJRT_Executable,
}

impl Drop for Unloaded<'_> {
    fn drop(&mut self) {
        let api = self.client.api();
        let mut a = args!(PJRT_Executable_Destroy_Args);
        a.executable = self.raw;
        let _ = api.call("PJRT_Executable_Destroy", api.table().PJRT_Executable_Destroy, &mut a);
    }
}

impl Executable {
    pub(crate) fn from_raw(client: Arc<Client>, raw: *mut sys::PJRT_LoadedExecutable, name: &str) -> Result<Executable> {
        let mut exe = Executable { client, raw, output_bytes: Vec::new(), output_types: Vec::new(), name: Arc::from(name) };
        let (output_types, output_bytes) = exe.output_layout()?;
        exe.output_types = output_types;
        exe.output_bytes = output_bytes;
        Ok(exe)
    }

    /// Element type and byte size of each output, queried once at load time.
    fn output_layout(&self) -> Result<(Vec<ElementType>, Vec<usize>)> {
        let unloaded = self.unloaded()?;
        let api = self.client.api();
        let t = api.table();
        let mut n = args!(PJRT_Executable_NumOutputs_Args);
        n.executable = unloaded.raw;
        api.call("PJRT_Executable_NumOutputs", t.PJRT_Executable_NumOutputs, &mut n)?;
        let mut et = args!(PJRT_Executable_OutputElementTypes_Args);
        et.executable = unloaded.raw;
        api.call("PJRT_Executable_OutputElementTypes", t.PJRT_Executable_OutputElementTypes, &mut et)?;
        let raw_types = unsafe { std::slice::from_raw_parts(et.output_types, et.num_output_types) };
        let mut od = args!(PJRT_Executable_OutputDimensions_Args);
        od.executable = unloaded.raw;
        api.call("PJRT_Executable_OutputDimensions", t.PJRT_Executable_OutputDimensions, &mut od)?;
        let dim_sizes = unsafe { std::slice::from_raw_parts(od.dim_sizes, od.num_outputs) };
        let total: usize = dim_sizes.iter().sum();
        let dims = unsafe { std::slice::from_raw_parts(od.dims, total) };
        let (mut types, mut bytes) = (Vec::new(), Vec::new());
        let mut at = 0;
        for (i, &rank) in dim_sizes.iter().enumerate() {
            let ty = ElementType::from_raw(raw_types[i])
                .ok_or_else(|| Error::Internal(format!("output {i} has an unsupported PJRT element type")))?;
            let numel: i64 = dims[at..at + rank].iter().product();
            at += rank;
            types.push(ty);
            bytes.push(numel as usize * ty.byte_size());
        }
        debug_assert_eq!(bytes.len(), n.num_outputs);
        Ok((types, bytes))
    }

    fn unloaded(&self) -> Result<Unloaded<'_>> {
        let live = self.client.enter()?;
        let api = self.client.api();
        let mut a = args!(PJRT_LoadedExecutable_GetExecutable_Args);
        a.loaded_executable = self.raw;
        api.call("PJRT_LoadedExecutable_GetExecutable", api.table().PJRT_LoadedExecutable_GetExecutable, &mut a)?;
        Ok(Unloaded { client: &self.client, _live: live, raw: a.executable })
    }

    pub fn num_outputs(&self) -> usize {
        self.output_bytes.len()
    }

    pub fn output_types(&self) -> &[ElementType] {
        &self.output_types
    }

    /// Launches a portable executable on `device`. Returns the outputs at
    /// once (PJRT tracks their readiness) and the completion event.
    pub fn execute(&self, args: &[&Buffer], device: usize) -> Result<(Vec<Buffer>, Event)> {
        let (mut outs, mut events) = self.launch(&[args], Some(device), &[device])?;
        Ok((outs.pop().unwrap(), events.pop().unwrap()))
    }

    /// Launches a replicated executable: one argument list per replica, in
    /// the order of `devices`, the devices it was compiled for.
    pub fn execute_replicated(&self, args: &[&[&Buffer]], devices: &[usize]) -> Result<(Vec<Vec<Buffer>>, Vec<Event>)> {
        self.launch(args, None, devices)
    }

    fn launch(
        &self,
        args: &[&[&Buffer]],
        device: Option<usize>,
        replica_devices: &[usize],
    ) -> Result<(Vec<Vec<Buffer>>, Vec<Event>)> {
        let _span = tracing::trace_span!("execute", replicas = args.len()).entered();
        let _live = self.client.enter()?;
        let api = self.client.api();
        let num_args = args.first().map_or(0, |a| a.len());
        if args.len() != replica_devices.len() || args.iter().any(|a| a.len() != num_args) {
            return Err(Error::Internal("replicas have different argument counts".into()));
        }
        let raw_args: Vec<Vec<*mut sys::PJRT_Buffer>> =
            args.iter().map(|list| list.iter().map(|b| b.raw()).collect()).collect();
        let arg_ptrs: Vec<*const *mut sys::PJRT_Buffer> = raw_args.iter().map(|v| v.as_ptr()).collect();
        let n = self.num_outputs();
        let mut out_raw: Vec<Vec<*mut sys::PJRT_Buffer>> = args.iter().map(|_| vec![std::ptr::null_mut(); n]).collect();
        let out_ptrs: Vec<*mut *mut sys::PJRT_Buffer> = out_raw.iter_mut().map(|v| v.as_mut_ptr()).collect();
        let mut events: Vec<*mut sys::PJRT_Event> = vec![std::ptr::null_mut(); args.len()];

        let mut options = args!(PJRT_ExecuteOptions);
        options.launch_id = 0;
        let mut a = args!(PJRT_LoadedExecutable_Execute_Args);
        a.executable = self.raw;
        a.options = &mut options;
        a.argument_lists = arg_ptrs.as_ptr() as *const *const *mut sys::PJRT_Buffer;
        a.num_devices = args.len();
        a.num_args = num_args;
        a.output_lists = out_ptrs.as_ptr();
        a.device_complete_events = events.as_mut_ptr();
        a.execute_device = match device {
            Some(d) => self.client.raw_device(d),
            None => std::ptr::null_mut(),
        };
        let launched = api.call("PJRT_LoadedExecutable_Execute", api.table().PJRT_LoadedExecutable_Execute, &mut a);
        // The outputs are allocated at launch.
        self.client.count_oom(replica_devices, launched)?;
        let outs = out_raw
            .into_iter()
            .enumerate()
            .map(|(r, list)| {
                list.into_iter()
                    .zip(&self.output_bytes)
                    .map(|(raw, &bytes)| Buffer::from_raw(self.client.clone(), raw, replica_devices[r], bytes))
                    .collect()
            })
            .collect();
        let events: Vec<Event> = events.into_iter().map(|e| Event::from_raw(api.clone(), e)).collect();
        if crate::trace::enabled() {
            // Device time: from the launch to the completion of each replica.
            let launched = std::time::Instant::now();
            for (e, &d) in events.iter().zip(replica_devices) {
                let name = self.name.clone();
                e.on_ready(move || {
                    crate::trace::record(crate::trace::Category::Execute, name, launched, std::time::Instant::now(), Some(d), String::new())
                });
            }
        }
        Ok((outs, events))
    }

    /// Serializes the executable so a later process can load it without
    /// compiling ([`Client::deserialize`]).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let unloaded = self.unloaded()?;
        let api = self.client.api();
        let mut a = args!(PJRT_Executable_Serialize_Args);
        a.executable = unloaded.raw;
        api.call("PJRT_Executable_Serialize", api.table().PJRT_Executable_Serialize, &mut a)?;
        let bytes = unsafe { std::slice::from_raw_parts(a.serialized_bytes as *const u8, a.serialized_bytes_size) }.to_vec();
        if let Some(deleter) = a.serialized_executable_deleter {
            unsafe { deleter(a.serialized_executable) };
        }
        Ok(bytes)
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        // Destroying it needs its client; a closed one cannot.
        let Ok(_live) = self.client.enter() else { return super::client::orphan(self.raw) };
        let api = self.client.api();
        let mut a = args!(PJRT_LoadedExecutable_Destroy_Args);
        a.executable = self.raw;
        if let Err(e) = api.call("PJRT_LoadedExecutable_Destroy", api.table().PJRT_LoadedExecutable_Destroy, &mut a) {
            tracing::warn!("{e}");
        }
    }
}
