//! The C ABI of torchtpu (`libtorchtpu.so`). A thin boundary over
//! `torchtpu-core`: every export converts handles, calls core, and turns the
//! result into an owned error object. No op semantics live here.
//!
//! Conventions (see STYLE.md): functions are `ttpu_<object>_<verb>`; the
//! object comes first, then inputs, then `out_*` results, which are written
//! only on success; a fallible call returns `ttpu_error_t*`, NULL on success.
//! Areas: [`runtime`] (devices, sync, stats), [`mode`] (execution modes of
//! the process and of threads), [`tensor`], [`op`],
//! [`fusion`] (flushes, policies, the program cache, explanations).
//! [`stream`] (streams and events), [`collective`] (collectives across
//! devices), [`kv`] (the key-value store through which a client that spans
//! processes rendezvouses), [`plugin`] (WebAssembly plugins), [`generator`]
//! (random generators for random ops' `generator` argument), [`trace`] (the
//! runtime's timed spans: Chrome traces and profilers).
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

#[macro_use]
mod ffi;
pub mod collective;
pub mod error;
pub mod fusion;
pub mod generator;
pub mod kv;
pub mod mode;
pub mod op;
pub mod plugin;
pub mod runtime;
pub mod stream;
pub mod tensor;
pub mod trace;
pub mod version;
