//! Running collectives (their meaning and lowering are in
//! [`crate::collective`]).
//!
//! A collective is a flush point: in fused mode the pending graph of every
//! member device is flushed first (reason `collective`), so the collective
//! sees the values the program order says it should. Its program is cached
//! in the two-tier program cache like a fused graph, and launched once, on
//! every member at the same time. Each member's completion event is tracked
//! on that device's current stream: work queued after it on the stream is
//! ordered after it, and running the collective on a side stream lets
//! compute on the default stream overlap with it.

use std::sync::Arc;

use super::{Runtime, Stats};
use crate::cache::{GraphSummary, NodeSummary};
use crate::collective::{program, Collective, ReduceOp};
use crate::error::{Error, Result};
use crate::graph::FlushReason;
use crate::pjrt::{Buffer, CompileOptions};
use crate::shape;
use crate::storage::{Storage, StorageValue};
use crate::tensor::Tensor;

impl Runtime {
    fn check_input_owners(&self, name: &str, inputs: &[Tensor]) -> Result<()> {
        inputs.iter().enumerate().try_for_each(|(r, t)| self.check_owner(&format!("{name}: input {r}"), t))
    }

    /// Runs `c` over the local devices that hold `inputs`: rank `r` is the
    /// device of `inputs[r]`. Returns one output per input, on its device.
    pub fn collective(self: &Arc<Self>, c: &Collective, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_input_owners(c.name(), inputs)?;
        let group: Vec<i64> = inputs.iter().map(|t| self.devices()[t.device()].id as i64).collect();
        self.collective_in_group(c, &group, inputs)
    }

    /// Runs `c` over `group`, PJRT global device ids in rank order. `inputs`
    /// are the members on this client's devices, in rank order; where the
    /// client's devices span processes, the other members' processes make
    /// the same call with theirs.
    pub fn collective_in_group(self: &Arc<Self>, c: &Collective, group: &[i64], inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let name = c.name();
        // Before anything runs: a refused collective leaves no replica waiting.
        self.check_input_owners(name, inputs)?;
        let _span = tracing::debug_span!("collective", op = name, ranks = group.len()).entered();
        let mut _trace = crate::trace::span(crate::trace::Category::Collective, name, None);
        _trace.detail(|| format!("{} ranks", group.len()));
        let devices = self.check_members(name, group, inputs)?;
        let (dtype, sizes) = (inputs[0].dtype(), inputs[0].sizes().to_vec());
        let out_sizes = c.output_sizes(group.len(), dtype, &sizes)?;

        for &d in &devices {
            self.flush_device(d, FlushReason::Collective)?;
        }
        let mut buffers: Vec<Arc<Buffer>> = Vec::with_capacity(inputs.len());
        for t in inputs {
            let dense = if t.is_whole_storage() { t.clone() } else { self.call1("aten::clone", &[t.into()])? };
            buffers.push(self.materialize(dense.storage(), name, FlushReason::Collective)?);
        }

        let text = program(c, group.len(), dtype, &sizes)?;
        let summary = GraphSummary {
            nodes: vec![NodeSummary {
                op: format!("collective::{name}"),
                inputs: vec![(dtype, sizes.clone())],
                attrs: format!("{} group={group:?}", c.attrs()).trim().to_string(),
                views: Vec::new(),
            }],
            outputs: vec![(dtype, out_sizes.clone())],
            strict: false,
        };
        let what = format!("{name} of {dtype}{} over {} devices", shape::fmt(&sizes), group.len());
        let options = CompileOptions::Replicated { device_ids: group.to_vec() };
        let (exe, _) = self.cached_program(&what, &text, &options, &summary)?;

        let args: Vec<[&Buffer; 1]> = buffers.iter().map(|b| [&**b]).collect();
        let arg_lists: Vec<&[&Buffer]> = args.iter().map(|a| &a[..]).collect();
        let (outs, events) = exe.execute_replicated(&arg_lists, &devices).map_err(|e| e.in_op(name))?;
        Stats::bump(&self.stats.executions);
        Stats::bump(&self.stats.collectives);
        for (&d, event) in devices.iter().zip(events) {
            self.track(d, name, event);
        }
        let numel: i64 = out_sizes.iter().product();
        Ok(outs
            .into_iter()
            .zip(&devices)
            .map(|(mut bufs, &d)| {
                let storage = Storage::new(self.id, d, dtype, numel, StorageValue::Buffer(Arc::new(bufs.remove(0))));
                Tensor::from_storage(storage, &out_sizes)
            })
            .collect())
    }

    /// Returns once every device in `devices` has finished the work queued
    /// before the barrier on its current stream (and reports the first error
    /// of that work). The devices meet in a one-element all-reduce first, so
    /// the barrier also proves the collective path works across them.
    pub fn barrier(self: &Arc<Self>, devices: &[usize]) -> Result<()> {
        let mut tokens = Vec::with_capacity(devices.len());
        for &d in devices {
            let d = self.device(d as i64)?;
            tokens.push(self.tensor_from_host(&1i32.to_ne_bytes(), crate::DType::I32, &[], d)?);
        }
        let met = self.collective(&Collective::AllReduce(ReduceOp::Sum), &tokens)?;
        for (t, &d) in met.iter().zip(devices) {
            let bytes = self.tensor_to_host(t)?;
            let n = i32::from_ne_bytes(bytes[..4].try_into().expect("an i32 is 4 bytes"));
            if n != devices.len() as i32 {
                return Err(Error::Internal(format!("barrier: tpu:{d} counted {n} of {} devices", devices.len())));
            }
            self.streams.current(d).synchronize().map_err(|e| e.in_op("barrier"))?;
        }
        Ok(())
    }

    /// Checks that `inputs` are `group`'s local members, in rank order, with
    /// one dtype and shape; returns their local device indices.
    fn check_members(&self, name: &str, group: &[i64], inputs: &[Tensor]) -> Result<Vec<usize>> {
        if inputs.is_empty() {
            return Err(Error::op(name, "no input tensors: each member device contributes one"));
        }
        for (i, id) in group.iter().enumerate() {
            if let Some(j) = group[..i].iter().position(|x| x == id) {
                return Err(Error::op(name, format!("ranks {j} and {i} are the same device (global id {id})")));
            }
        }
        let rank_of = |t: &Tensor| {
            let id = self.devices()[t.device()].id as i64;
            group.iter().position(|&g| g == id).ok_or_else(|| {
                Error::op(name, format!("tpu:{} (global id {id}) is not in the group {group:?}", t.device()))
            })
        };
        let (dtype, sizes) = (inputs[0].dtype(), inputs[0].sizes());
        let mut last_rank = None;
        let mut devices = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let rank = rank_of(t)?;
            if last_rank.is_some_and(|r| rank <= r) {
                return Err(Error::op(
                    name,
                    format!("input {i} (tpu:{}) is rank {rank}: inputs must be on distinct devices, in rank order", t.device()),
                ));
            }
            last_rank = Some(rank);
            if t.dtype() != dtype || t.sizes() != sizes {
                return Err(Error::op(
                    name,
                    format!(
                        "every rank needs the same dtype and shape, but rank {rank} (tpu:{}) has {}{} and rank {} (tpu:{}) has {dtype}{}",
                        t.device(),
                        t.dtype(),
                        shape::fmt(t.sizes()),
                        rank_of(&inputs[0])?,
                        inputs[0].device(),
                        shape::fmt(sizes)
                    ),
                ));
            }
            devices.push(t.device());
        }
        Ok(devices)
    }
}
