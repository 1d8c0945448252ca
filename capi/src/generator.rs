//! The generator area: random generators that a caller passes to a random
//! op's `generator` argument (a `TTPU_VALUE_KIND_GENERATOR` value), as
//! `torch.Generator` objects are passed in PyTorch.
//!
//! A generator's state is `(seed, calls)`: the seed last set and the number
//! of random draws since (each random op draws once when it runs in strict
//! mode, or when it is recorded in fused mode). The same seed and the same
//! sequence of random ops give the same numbers in every execution mode.
//!
//! A `ttpu_generator_t` is a handle to a shared generator: two handles may
//! name the same one (`ttpu_runtime_default_generator` twice), draws through
//! either advance it, and destroying one leaves the other, and the
//! generator, valid. Handles are owned by the caller and freed with
//! `ttpu_generator_destroy`. They are thread-safe: each call locks the
//! generator's state for its duration, and a random op's draw is atomic.

use torchtpu_core::Generator;

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, write_out, Handle};
use crate::runtime::ttpu_runtime_t;

/// A generator handle. Owned by the caller; free with `ttpu_generator_destroy`.
pub struct ttpu_generator_t {
    magic: u64,
    pub(crate) g: Generator,
}

impl_handle!(ttpu_generator_t, "ttpu_generator_t", 0x7474_7075_4745_4e52);

impl ttpu_generator_t {
    fn new(g: Generator) -> *mut ttpu_generator_t {
        ttpu_generator_t { magic: Self::MAGIC, g }.into_raw()
    }
}

/// Creates a generator for device `device` of `runtime`, seeded with `seed`
/// and independent of the device's default generator
/// (`torch.Generator(device="tpu:N").manual_seed(seed)`). On success
/// `*out_generator` owns a handle; free it with `ttpu_generator_destroy`. The
/// generator does not borrow the runtime. Fails with OUT_OF_RANGE for a bad
/// device.
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_create(
    runtime: *const ttpu_runtime_t,
    device: i64,
    seed: u64,
    out_generator: *mut *mut ttpu_generator_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_generator_create";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        check_out(out_generator, what)?;
        let g = r.rt.new_generator(r.rt.device(device)?, seed)?;
        write_out(out_generator, what, ttpu_generator_t::new(g))
    })
}

/// Writes a new handle to device `device`'s default generator to
/// `*out_generator`: the one random ops draw from when they are given no
/// generator, and that `ttpu_runtime_manual_seed`, `ttpu_runtime_rng_state`
/// and `ttpu_runtime_set_rng_state` act on (`torch.tpu.default_generators[N]`).
/// The caller owns the handle (free it with `ttpu_generator_destroy`, which
/// leaves the default generator in place); the generator itself lives as
/// long as the runtime or any handle to it. Fails with OUT_OF_RANGE for a bad
/// device.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_default_generator(
    runtime: *const ttpu_runtime_t,
    device: i64,
    out_generator: *mut *mut ttpu_generator_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_runtime_default_generator";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        check_out(out_generator, what)?;
        let g = r.rt.default_generator(r.rt.device(device)?)?;
        write_out(out_generator, what, ttpu_generator_t::new(g))
    })
}

/// Writes a new generator to `*out_generator` on the same device as
/// `generator`, starting from a copy of its state; the two then draw
/// independently (`torch.Generator.clone_state`). The caller owns the new
/// handle; free it with `ttpu_generator_destroy`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_clone_state(
    generator: *const ttpu_generator_t,
    out_generator: *mut *mut ttpu_generator_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_generator_clone_state";
        let h = ttpu_generator_t::borrow(generator, what)?;
        check_out(out_generator, what)?;
        write_out(out_generator, what, ttpu_generator_t::new(h.g.clone_state()))
    })
}

/// Frees a generator handle (the generator lives on while other handles to
/// it, or the runtime for a default generator, hold it). NULL is a no-op.
/// Use after destroy is detected: the handle is marked destroyed and kept in
/// a quarantine of the 65536 most recently destroyed handles (of all kinds),
/// so while it is there any use of it fails with INVALID_ARGUMENT
/// ("ttpu_generator_t was already destroyed"), getters return their
/// invalid-handle value, and destroying it again is a no-op. Beyond that
/// bound a use of the pointer is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_destroy(generator: *mut ttpu_generator_t) {
    crate::ffi::no_panic((), || ttpu_generator_t::destroy(generator));
}

/// Seeds the generator and restarts its draws: `*out_calls` of
/// `ttpu_generator_state` becomes 0 (`torch.Generator.manual_seed`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_manual_seed(generator: *const ttpu_generator_t, seed: u64) -> *mut ttpu_error_t {
    ffi_boundary!({
        ttpu_generator_t::borrow(generator, "ttpu_generator_manual_seed")?.g.manual_seed(seed);
        Ok(())
    })
}

/// Writes the generator's whole state: `*out_seed`, the seed last set
/// (`torch.Generator.initial_seed`), and `*out_calls`, the random draws
/// since. Both pointers must be non-NULL; neither is written on failure.
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_state(
    generator: *const ttpu_generator_t,
    out_seed: *mut u64,
    out_calls: *mut u64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_generator_state";
        let h = ttpu_generator_t::borrow(generator, what)?;
        check_out(out_seed, what)?;
        check_out(out_calls, what)?;
        let (seed, calls) = h.g.state();
        write_out(out_seed, what, seed)?;
        write_out(out_calls, what, calls)
    })
}

/// Restores a state read with `ttpu_generator_state` (from this or any
/// generator): the random ops that follow repeat the ones that followed it.
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_set_state(
    generator: *const ttpu_generator_t,
    seed: u64,
    calls: u64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        ttpu_generator_t::borrow(generator, "ttpu_generator_set_state")?.g.set_state(seed, calls);
        Ok(())
    })
}

/// The device index of the generator, or -1 if `generator` is invalid.
#[no_mangle]
pub unsafe extern "C" fn ttpu_generator_device(generator: *const ttpu_generator_t) -> i64 {
    crate::ffi::no_panic(-1, || {
        ttpu_generator_t::borrow(generator, "ttpu_generator_device").map_or(-1, |h| h.g.device() as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ttpu_error_code, ttpu_error_destroy, ttpu_error_message};
    use crate::runtime::{ttpu_runtime_create, ttpu_runtime_destroy, ttpu_runtime_rng_state};
    use std::ffi::CStr;
    use std::ptr::{null, null_mut};

    unsafe fn code_and_message(e: *mut ttpu_error_t) -> (i32, String) {
        assert!(!e.is_null());
        let r = (ttpu_error_code(e) as i32, CStr::from_ptr(ttpu_error_message(e)).to_string_lossy().into_owned());
        ttpu_error_destroy(e);
        r
    }

    #[test]
    fn handles_share_defaults_and_reject_misuse() {
        unsafe {
            let mut rt = null_mut();
            assert!(ttpu_runtime_create(null(), &mut rt).is_null());
            let (mut d1, mut d2, mut g) = (null_mut(), null_mut(), null_mut());
            assert!(ttpu_runtime_default_generator(rt, 0, &mut d1).is_null());
            assert!(ttpu_runtime_default_generator(rt, 0, &mut d2).is_null());
            assert!(ttpu_generator_create(rt, 1, 42, &mut g).is_null());
            assert_eq!((ttpu_generator_device(d1), ttpu_generator_device(g)), (0, 1));
            // Two handles, one generator, seen by the runtime's own calls.
            assert!(ttpu_generator_set_state(d1, 9, 3).is_null());
            let (mut seed, mut calls) = (0u64, 0u64);
            assert!(ttpu_generator_state(d2, &mut seed, &mut calls).is_null());
            assert_eq!((seed, calls), (9, 3));
            assert!(ttpu_runtime_rng_state(rt, 0, &mut seed, &mut calls).is_null());
            assert_eq!((seed, calls), (9, 3));
            assert!(ttpu_generator_state(g, &mut seed, &mut calls).is_null());
            assert_eq!((seed, calls), (42, 0));
            // Errors: a bad device, NULL outputs, a handle of another type.
            let mut x = null_mut();
            let (code, msg) = code_and_message(ttpu_generator_create(rt, 99, 0, &mut x));
            assert_eq!(code, torchtpu_core::Code::OutOfRange as i32, "{msg}");
            assert!(x.is_null());
            let (code, _) = code_and_message(ttpu_generator_state(g, null_mut(), &mut calls));
            assert_eq!(code, torchtpu_core::Code::InvalidArgument as i32);
            let (code, msg) = code_and_message(ttpu_generator_manual_seed(rt as *const ttpu_generator_t, 1));
            assert!(code == 3 && msg.contains("not a live ttpu_generator_t"), "{msg}");
            // Destroying one handle leaves the other and the default.
            ttpu_generator_destroy(d1);
            ttpu_generator_destroy(d1);
            let (code, msg) = code_and_message(ttpu_generator_manual_seed(d1, 1));
            assert!(code == 3 && msg.contains("ttpu_generator_t was already destroyed"), "{msg}");
            assert_eq!(ttpu_generator_device(d1), -1);
            assert!(ttpu_generator_manual_seed(d2, 5).is_null());
            ttpu_runtime_destroy(rt);
            // A handle outlives its runtime.
            assert!(ttpu_generator_state(d2, &mut seed, &mut calls).is_null());
            assert_eq!((seed, calls), (5, 0));
            ttpu_generator_destroy(d2);
            ttpu_generator_destroy(g);
            ttpu_generator_destroy(null_mut());
        }
    }
}
