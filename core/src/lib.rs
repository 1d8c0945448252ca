//! torchtpu-core: the whole runtime in pure Rust.
//!
//! Layers, top to bottom: [`runtime`] (devices, execution modes, the op cache),
//! [`ops`] (the aten op registry: inference and lowering to StableHLO), the
//! data model ([`dtype`], [`shape`], [`storage`], [`tensor`]), [`hlo`] (the
//! StableHLO text builder), and [`pjrt`] (the device runtime).
//! Nothing here knows about the C ABI or any frontend.

pub mod error;
pub mod pjrt;

pub use error::{Code, Error, Result};
