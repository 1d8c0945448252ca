//! torchtpu-core: the whole runtime in pure Rust.
//!
//! Layers, bottom to top; a module uses only modules of its own layer or
//! below (`tests/layering.rs` checks it):
//!
//! 1. [`error`], and [`trace`] (timed spans of everything below, for
//!    Chrome traces and profilers);
//! 2. [`pjrt`] (the device runtime: safe wrappers over the PJRT C API);
//! 3. [`dtype`], then [`shape`];
//! 4. [`hlo`] (the StableHLO text builder);
//! 5. the data model: [`storage`], [`rng`] (random generators), [`tensor`]
//!    and [`view`] (reading and writing views inside programs);
//! 6. [`graph`] (the pending graph of fused mode, and fusion policies);
//! 7. [`cache`] (the two-tier compile cache);
//! 8. [`ops`] (the aten op registry: inference and lowering to StableHLO;
//!    ops describe what they need and never call the runtime);
//! 9. [`plugin`] (the WebAssembly plugin host: custom ops and fusion
//!    policies);
//! 10. [`collective`] (collectives across devices and their lowering);
//! 11. [`runtime`] (devices, execution modes, the op cache, streams).
//!
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
pub mod trace;
pub mod view;

pub use dtype::DType;
pub use error::{Code, Error, Result};
pub use ops::{op_c_decl, op_c_name, op_count, op_declare, op_id, op_result_count, op_result_count_id};
pub use pjrt::{DistributedOptions, KeyValueStore};
pub use rng::Generator;
pub use runtime::{ExecMode, Runtime, RuntimeOptions};
pub use tensor::{Scalar, Tensor, Value};
