//! Safe wrappers over the PJRT C API.
//!
//! A plugin (`xla_cpu_pjrt.so`, `libtpu.so`, the CUDA plugin) is loaded with
//! `libloading`; everything else goes through the function table returned by
//! its `GetPjrtApi`. These wrappers own PJRT objects (clients, buffers,
//! executables, events) and turn every `PJRT_Error` into [`crate::Error::Pjrt`]
//! with PJRT's code and message. They know nothing about tensors or ops.
//!
//! Thread safety: PJRT clients, buffers and executables are thread-safe, so the
//! wrappers are `Send + Sync`. An [`Event`] is consumed by waiting on it.

mod api;
mod buffer;
mod client;
pub mod compile_options;
pub mod discovery;
mod event;
mod executable;
pub mod kv;
pub mod memory;
mod sys;

pub use api::Api;
pub use buffer::{Buffer, ElementType};
pub use client::{closed_error, Client, CreateOption, DeviceInfo};
pub use compile_options::CompileOptions;
pub use event::Event;
pub use executable::Executable;
pub use kv::{DistributedOptions, KeyValueStore, MemoryStore};
pub use memory::{MemorySnapshot, MemoryStats, PjrtMemoryStats};

/// Declares a zeroed PJRT argument struct with `struct_size` filled in. Our
/// header and the plugin's come from the same package, so `size_of` is at
/// least the size the plugin expects.
macro_rules! args {
    ($ty:ident) => {{
        // SAFETY: PJRT argument structs are plain C structs; all-zero is a
        // valid (null/empty) value for every field.
        let mut a: $crate::pjrt::sys::$ty = unsafe { std::mem::zeroed() };
        a.struct_size = std::mem::size_of::<$crate::pjrt::sys::$ty>();
        a
    }};
}
pub(crate) use args;
