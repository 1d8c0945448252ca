//! torchtpu-core: the whole runtime in pure Rust.
//!
//! Layers, top to bottom: [`runtime`] (devices, execution modes, the op cache),
//! [`cache`] (the two-tier compile cache for fused programs), [`collective`]
//! (collectives across devices and their lowering), [`ops`] (the
//! aten op registry: inference and lowering to StableHLO), the data model
//! ([`dtype`], [`shape`], [`storage`], [`tensor`]), [`hlo`] (the StableHLO
//! text builder), [`pjrt`] (the device runtime), and [`plugin`] (the
//! WebAssembly plugin host: custom ops and fusion policies).
//! Nothing here knows about the C ABI or any frontend.

pub mod cache;
pub mod collective;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod hlo;
pub mod ops;
pub mod pjrt;
pub mod plugin;
pub mod rng;
pub mod runtime;
pub mod shape;
pub mod storage;
pub mod tensor;
pub mod view;

pub use dtype::DType;
pub use error::{Code, Error, Result};
pub use ops::{op_c_name, op_count, op_id, op_result_count};
pub use pjrt::{DistributedOptions, KeyValueStore};
pub use rng::Generator;
pub use runtime::{ExecMode, Runtime, RuntimeOptions};
pub use tensor::{Scalar, Tensor, Value};
