//! Write torchtpu plugins in Rust.
//!
//! A plugin is a `cdylib` built for `wasm32-unknown-unknown`; this crate
//! hides the ABI (plugins/ABI.md): one [`plugin!`] invocation declares the
//! manifest (written into the module's custom section at compile time) and
//! exports the entry points, which decode requests, dispatch to your
//! functions, and encode their answers.
//!
//! ```ignore
//! use torchtpu_plugin_sdk::{hlo::Fragment, plugin, LowerRequest, Lowering};
//!
//! fn lower_double(req: &LowerRequest) -> Result<Lowering, String> {
//!     let (mut f, x) = Fragment::new("double", &req.inputs)?;
//!     let two = f.splat(2.0, &x[0].ty);
//!     let y = f.binary("stablehlo.multiply", &x[0], &two);
//!     Ok(f.finish(&[y]))
//! }
//!
//! plugin! {
//!     name: "demo",
//!     version: "0.1.0",
//!     ops: [{ schema: "demo::double(Tensor x) -> Tensor", lower: lower_double }],
//!     policies: [],
//! }
//! ```
//!
//! Build: `cargo build --release --target wasm32-unknown-unknown`, then
//! drop the `.wasm` into a directory of `$TORCHTPU_PLUGIN_PATH`.

pub mod hlo;
pub mod log;
pub mod manifest;
#[doc(hidden)]
pub mod rt;

pub use torchtpu_plugin_abi::*;

/// A lowering: the request in, the output types and the fragment out.
pub type LowerFn = fn(&LowerRequest) -> Result<Lowering, String>;
/// A fusion policy's decision.
pub type DecideFn = fn(&PolicyRequest) -> Result<PolicyResponse, String>;

/// Declares the plugin: its manifest and entry points. Use it once, at the
/// crate root.
///
/// ```ignore
/// plugin! {
///     name: "swiglu",
///     version: "0.1.0",
///     ops: [
///         { schema: "swiglu::swiglu(Tensor a, Tensor b) -> Tensor", backward: "swiglu::swiglu_backward", lower: lower_fwd },
///         { schema: "swiglu::swiglu_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)", lower: lower_bwd },
///         // An op whose fragment loops may raise the host's loop bound.
///         { schema: "swiglu::iterate(Tensor a) -> Tensor", max_loop_iterations: 4096, lower: lower_it },
///     ],
///     policies: [{ name: "swiglu::never", decide: decide_fn }],
/// }
/// ```
#[macro_export]
macro_rules! plugin {
    (
        name: $name:literal,
        version: $version:literal,
        ops: [ $( { schema: $schema:literal $(, backward: $bw:literal)? $(, max_loop_iterations: $loops:literal)? , lower: $lower:path $(,)? } ),* $(,)? ],
        policies: [ $( { name: $policy:literal, decide: $decide:path $(,)? } ),* $(,)? ] $(,)?
    ) => {
        const __TTPU_OPS: &[$crate::manifest::OpSpec] =
            &[ $( $crate::manifest::OpSpec {
                schema: $schema,
                backward: $crate::__optional!($($bw)?),
                max_loop_iterations: $crate::__optional!($($loops)?),
            } ),* ];
        const __TTPU_POLICIES: &[&str] = &[ $( $policy ),* ];
        const __TTPU_MANIFEST_LEN: usize =
            $crate::manifest::encode::<0>($name, $version, __TTPU_OPS, __TTPU_POLICIES).len;

        // The manifest, read by the host without running the module.
        #[used]
        #[link_section = "torchtpu.manifest"]
        static __TTPU_MANIFEST: [u8; __TTPU_MANIFEST_LEN] =
            $crate::manifest::encode::<__TTPU_MANIFEST_LEN>($name, $version, __TTPU_OPS, __TTPU_POLICIES).buf;

        #[export_name = "ttpu_alloc"]
        pub extern "C" fn __ttpu_alloc(len: i32) -> i32 {
            $crate::rt::alloc(len)
        }

        #[export_name = "ttpu_dealloc"]
        pub extern "C" fn __ttpu_dealloc(ptr: i32, len: i32) {
            $crate::rt::dealloc(ptr, len)
        }

        #[export_name = "ttpu_lower"]
        pub extern "C" fn __ttpu_lower(ptr: i32, len: i32) -> i64 {
            const TABLE: &[(&str, $crate::LowerFn)] = &[ $( ($schema, $lower) ),* ];
            $crate::rt::lower(ptr, len, TABLE)
        }

        #[export_name = "ttpu_policy"]
        pub extern "C" fn __ttpu_policy(ptr: i32, len: i32) -> i64 {
            const TABLE: &[(&str, $crate::DecideFn)] = &[ $( ($policy, $decide) ),* ];
            $crate::rt::policy(ptr, len, TABLE)
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __optional {
    () => {
        None
    };
    ($v:literal) => {
        Some($v)
    };
}
