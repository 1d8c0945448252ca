//! The collective area: all-reduce, all-gather, reduce-scatter, broadcast,
//! all-to-all, send/recv (a permute) and barrier across the devices of one
//! runtime. Each collective is one program compiled for the group (cached),
//! a flush point in fused mode, and tracked on each device's current stream.
//! Semantics live in core (`torchtpu_core::collective`).

use torchtpu_core::collective::{Collective, ReduceOp};
use torchtpu_core::{Error, Result, Tensor};

use crate::error::ttpu_error_t;
use crate::ffi::{check_struct_size, slice_arg, Handle};
use crate::runtime::ttpu_runtime_t;
use crate::tensor::ttpu_tensor_t;

/// How an all-reduce or a reduce-scatter combines values.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_reduce_op {
    Sum = 0,
    /// The sum divided by the group size (floating-point dtypes only).
    Avg = 1,
    Max = 2,
    Min = 3,
    Prod = 4,
}

/// Which collective a `ttpu_collective_t` describes. Shapes follow PyTorch:
/// ALL_GATHER concatenates along dim 0, REDUCE_SCATTER and ALL_TO_ALL split
/// dim 0 into one chunk per rank.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_collective_kind {
    AllReduce = 0,
    AllGather = 1,
    ReduceScatter = 2,
    /// Every rank gets rank `root`'s tensor.
    Broadcast = 3,
    AllToAll = 4,
    /// Send/recv: each (source, target) pair of `pairs` moves the source
    /// rank's tensor to the target rank; ranks that receive nothing get zeros.
    Permute = 5,
}

/// A collective and its attributes. Set `struct_size` to
/// `sizeof(ttpu_collective_t)`; fields a kind does not use are ignored.
#[repr(C)]
pub struct ttpu_collective_t {
    pub struct_size: usize,
    /// A `ttpu_collective_kind`.
    pub kind: i32,
    /// A `ttpu_reduce_op` (ALL_REDUCE, REDUCE_SCATTER).
    pub reduce_op: i32,
    /// The source rank (BROADCAST).
    pub root: i64,
    /// `2 * num_pairs` ranks: source, target, source, target... (PERMUTE).
    pub pairs: *const i64,
    pub num_pairs: usize,
}

unsafe fn collective_arg(c: *const ttpu_collective_t, what: &str) -> Result<Collective> {
    if c.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: collective is NULL")));
    }
    let c = &*c;
    check_struct_size(c.struct_size, std::mem::size_of::<ttpu_collective_t>(), &format!("{what}: ttpu_collective_t"))?;
    let reduce = || -> Result<ReduceOp> {
        Ok(match c.reduce_op {
            0 => ReduceOp::Sum,
            1 => ReduceOp::Avg,
            2 => ReduceOp::Max,
            3 => ReduceOp::Min,
            4 => ReduceOp::Prod,
            k => return Err(Error::InvalidArgument(format!("{what}: unknown reduce_op {k} (expected 0..=4)"))),
        })
    };
    let rank = |v: i64| -> Result<usize> {
        usize::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what}: rank {v} is negative")))
    };
    Ok(match c.kind {
        0 => Collective::AllReduce(reduce()?),
        1 => Collective::AllGather,
        2 => Collective::ReduceScatter(reduce()?),
        3 => Collective::Broadcast { root: rank(c.root)? },
        4 => Collective::AllToAll,
        5 => {
            let flat = slice_arg(c.pairs, 2 * c.num_pairs, &format!("{what}: pairs"))?;
            let pairs = flat.chunks(2).map(|p| Ok((rank(p[0])?, rank(p[1])?))).collect::<Result<_>>()?;
            Collective::Permute { pairs }
        }
        k => return Err(Error::InvalidArgument(format!("{what}: unknown collective kind {k} (expected 0..=5)"))),
    })
}

unsafe fn tensors_arg(inputs: *const *const ttpu_tensor_t, n: usize, what: &str) -> Result<Vec<Tensor>> {
    slice_arg(inputs, n, &format!("{what}: inputs"))?
        .iter()
        .map(|&p| ttpu_tensor_t::borrow(p, what).map(|h| h.t.clone()))
        .collect()
}

unsafe fn write_outputs(outputs: *mut *mut ttpu_tensor_t, results: Vec<Tensor>, what: &str) -> Result<()> {
    if outputs.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: outputs is NULL")));
    }
    for (i, t) in results.into_iter().enumerate() {
        outputs.add(i).write(ttpu_tensor_t::new(t));
    }
    Ok(())
}

/// Runs collective `c` across the devices of `inputs[0..n]`: rank `r` is the
/// device of `inputs[r]` (distinct devices, one dtype and shape). On success
/// `outputs[0..n]` receive new tensor handles, output `r` on rank `r`'s
/// device, which the caller frees with `ttpu_tensor_destroy`; on error
/// nothing is written. Inputs are borrowed for the call.
#[no_mangle]
pub unsafe extern "C" fn ttpu_collective_run(
    runtime: *const ttpu_runtime_t,
    c: *const ttpu_collective_t,
    inputs: *const *const ttpu_tensor_t,
    n: usize,
    outputs: *mut *mut ttpu_tensor_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_collective_run";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        let coll = collective_arg(c, what)?;
        let xs = tensors_arg(inputs, n, what)?;
        let out = r.rt.collective(&coll, &xs)?;
        write_outputs(outputs, out, what)
    })
}

/// As `ttpu_collective_run` over an explicit group: `group[0..group_size]`
/// are PJRT global device ids (`ttpu_device_id`) in rank order, and `inputs[0..n]` are the
/// members on this runtime's devices, in rank order. Where the client's
/// devices span processes (a TPU pod), every process calls this with its own
/// members. `outputs[0..n]` receive one new handle per input.
#[no_mangle]
pub unsafe extern "C" fn ttpu_collective_run_in_group(
    runtime: *const ttpu_runtime_t,
    c: *const ttpu_collective_t,
    group: *const i64,
    group_size: usize,
    inputs: *const *const ttpu_tensor_t,
    n: usize,
    outputs: *mut *mut ttpu_tensor_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_collective_run_in_group";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        let coll = collective_arg(c, what)?;
        let group = slice_arg(group, group_size, &format!("{what}: group"))?;
        let xs = tensors_arg(inputs, n, what)?;
        let out = r.rt.collective_in_group(&coll, group, &xs)?;
        write_outputs(outputs, out, what)
    })
}

/// Returns once every device of `devices[0..n]` has finished the work queued
/// before it on its current stream, reporting that work's first error.
#[no_mangle]
pub unsafe extern "C" fn ttpu_collective_barrier(runtime: *const ttpu_runtime_t, devices: *const i64, n: usize) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_collective_barrier";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        let devices = slice_arg(devices, n, &format!("{what}: devices"))?
            .iter()
            .map(|&d| r.rt.device(d))
            .collect::<Result<Vec<usize>>>()?;
        r.rt.barrier(&devices)
    })
}
