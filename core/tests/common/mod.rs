//! Helpers shared by the integration tests: a runtime on the default plugin
//! every execution mode, and host <-> device copies of f32/i64 data.
#![allow(dead_code)]

use std::sync::Arc;

use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{DType, ExecMode, Runtime, RuntimeOptions, Tensor};

/// Every execution mode, in the order the tests run them.
pub const MODES: [ExecMode; 3] = [ExecMode::DeferNever, ExecMode::DeferNeverAndLaunchBlocking, ExecMode::DeferAndFuse];

pub fn rt() -> Arc<Runtime> {
    Runtime::new(RuntimeOptions::default()).expect("runtime (run scripts/setup.sh to install the CPU plugin)")
}

/// Runs `body` once per execution mode, on one runtime (the mode is per
/// thread, so the modes cannot leak into each other).
pub fn each_mode(mut body: impl FnMut(&Arc<Runtime>, ExecMode)) {
    let rt = rt();
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        body(&rt, mode);
        set_thread_mode(None).unwrap();
    }
}

pub fn f32s(rt: &Arc<Runtime>, data: &[f32], sizes: &[i64]) -> Tensor {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::F32, sizes, 0).unwrap()
}

pub fn i64s(rt: &Arc<Runtime>, data: &[i64], sizes: &[i64]) -> Tensor {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::I64, sizes, 0).unwrap()
}

pub fn host_f32(rt: &Arc<Runtime>, t: &Tensor) -> Vec<f32> {
    rt.tensor_to_host(t).unwrap().chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect()
}

pub fn host_i64(rt: &Arc<Runtime>, t: &Tensor) -> Vec<i64> {
    rt.tensor_to_host(t).unwrap().chunks(8).map(|c| i64::from_ne_bytes(c.try_into().unwrap())).collect()
}
