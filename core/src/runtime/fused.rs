//! `DEFER_AND_FUSE`: recording op calls into the device's pending graph and
//! flushing it as one program.
//!
//! Recording an op infers its results (once per signature, without
//! compiling), appends a [`Node`] and returns tensors whose storages hold
//! *pending* values. A flush (host read, synchronize, explicit, the size
//! limit, or the fusion policy) canonicalizes the graph, lowers every live
//! node into one function whose outputs are only the values a live storage
//! still holds, looks the program up in the two-tier cache, runs it, and
//! rebinds the storages to the results.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::call::{build_returns, combine_checks, lower_call, lower_program, node_summary, Arg, Flat, Out, Ret, TensorDesc};
use super::{Runtime, Stats};
use crate::cache::{GraphSummary, Tier};
use crate::error::{Error, Result};
use crate::graph::policy::{Decision, OpInfo};
use crate::graph::shape_watch::Verdict;
use crate::graph::{hash_of, FlushReason, Node, Recording, Src};
use crate::hlo::{Elem, Ty, V};
use crate::ops::{registry, Cx, OpDef, ParamSrc};
use crate::pjrt::{Buffer, CompileOptions};
use crate::shape;
use crate::storage::{Storage, StorageValue};
use crate::tensor::{Scalar, Tensor, Value};
use crate::view::Layout;

/// What recording a signature needs, inferred once by lowering it alone.
pub(crate) struct Inferred {
    pub args: Vec<Arg>,
    pub tensors: Vec<TensorDesc>,
    pub first_of_arg: Vec<usize>,
    pub specs: Vec<Out>,
    pub returns: Vec<Ret>,
    pub rng_params: usize,
    pub signature_hash: u64,
}

/// Signatures seen in fused mode, by key; nodes refer to them by index.
#[derive(Default)]
pub(crate) struct InferTable {
    by_key: rustc_hash::FxHashMap<String, u32>,
    list: Vec<Arc<Inferred>>,
}

/// What the last flush did, for statistics and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushInfo {
    pub reason: FlushReason,
    pub device: usize,
    /// Ops recorded since the previous flush.
    pub recorded: usize,
    /// Ops in the program after merging duplicates and dropping dead ones.
    pub lowered: usize,
    /// Values the program returns (live storages).
    pub outputs: usize,
    /// Where the executable came from (None when nothing was live).
    pub tier: Option<&'static str>,
}

/// One program argument of a flushed graph, fixed when its op was recorded.
enum FusedArg {
    Buffer(u32),
    Scalar(Elem, Scalar),
    Rng([u64; 2]),
    /// A rank-1 i64 vector (a view's runtime strides).
    Ints(Vec<i64>),
}

impl Runtime {
    fn inferred(&self, id: usize, def: &OpDef, bound: &[Value], flat: &Flat, key: &str) -> Result<(u32, Arc<Inferred>)> {
        {
            let t = self.infers.lock();
            if let Some(&i) = t.by_key.get(key) {
                return Ok((i, t.list[i as usize].clone()));
            }
        }
        // Inference needs no checks: a flush lowers the graph's checks itself.
        let (_text, plan, lowered) = lower_program(def, bound, flat, false)?;
        let inf = Arc::new(Inferred {
            args: bound.iter().map(Arg::of).collect(),
            tensors: flat.tensors.clone(),
            first_of_arg: flat.first_of_arg.clone(),
            specs: lowered.specs,
            returns: lowered.returns,
            rng_params: plan.iter().filter(|p| matches!(p, ParamSrc::Rng)).count(),
            signature_hash: hash_of(&(id, key)),
        });
        let mut t = self.infers.lock();
        let i = t.list.len() as u32;
        t.list.push(inf.clone());
        t.by_key.insert(key.to_string(), i);
        Ok((i, inf))
    }

    /// Records a call into the device's pending graph.
    pub(super) fn record(
        self: &Arc<Self>,
        id: usize,
        def: &OpDef,
        bound: &[Value],
        flat: &Flat,
        device: usize,
        key: &str,
    ) -> Result<Vec<Value>> {
        let op = def.name();
        // Values pending in another device's graph are computed first.
        for s in &flat.slots {
            if let StorageValue::Pending { .. } = s.value() {
                if s.device() != device {
                    self.materialize(s, op, FlushReason::CrossDevice)?;
                }
            }
        }
        let (infer, inf) = self.inferred(id, def, bound, flat, key)?;
        let policy = self.fusion.lock().policy.clone();
        let max_ops = self.fusion.lock().max_ops;

        let mut rec = self.recordings[device].lock();
        let mut srcs = Vec::with_capacity(flat.slots.len());
        for s in &flat.slots {
            srcs.push(match s.value() {
                StorageValue::Buffer(b) => {
                    let b = if b.device() == device { b } else { Arc::new(b.copy_to_device(device).map_err(|e| e.in_op(op))?) };
                    Src::Param(rec.param(&b, s.dtype(), s.numel()))
                }
                StorageValue::Pending { recording, node, out } if recording == rec.id => Src::Node { node, out },
                StorageValue::Pending { recording, .. } => {
                    // Only a failed flush leaves values pending in a finished
                    // recording: report its error, as a host read would.
                    let msg = self.failed.lock().get(&recording).cloned().unwrap_or_else(|| "unknown error".into());
                    return Err(Error::op(
                        op,
                        format!("an input was never computed: the fused program that computes it failed: {msg}"),
                    ));
                }
            });
        }
        let mut hash = inf.signature_hash;
        for &s in &srcs {
            hash = hash_of(&(hash, rec.src_hash(s)));
        }
        let offsets: Vec<i64> = flat.tensors.iter().map(|t| t.offset).collect();
        let strides: Vec<i64> = flat
            .tensors
            .iter()
            .filter(|t| t.layout == Layout::Runtime)
            .flat_map(|t| t.strides.iter().copied())
            .collect();
        let scalars: Vec<(u32, Scalar)> = if def.static_scalars {
            Vec::new()
        } else {
            bound.iter().enumerate().filter_map(|(i, v)| if let Value::Scalar(s) = v { Some((i as u32, *s)) } else { None }).collect()
        };
        let rng: Vec<[u64; 2]> = (0..inf.rng_params).map(|_| self.generator_for(bound, device).next_state()).collect();
        let node = Node {
            op: id as u32,
            key: rec.alloc_str(key),
            hash,
            slots: rec.alloc(&srcs),
            offsets: rec.alloc(&offsets),
            strides: rec.alloc(&strides),
            infer,
            scalars: rec.alloc(&scalars),
            rng: rec.alloc(&rng),
            outputs: inf.specs.len() as u32,
        };
        let ni = rec.push(node);
        let rid = rec.id;

        let mut results: Vec<Option<Tensor>> = Vec::with_capacity(inf.specs.len());
        let mut bytes = 0u64;
        let mut metas: smallvec::SmallVec<[(crate::DType, &'static [i64]); 4]> = smallvec::SmallVec::new();
        for (i, spec) in inf.specs.iter().enumerate() {
            let pending = StorageValue::Pending { recording: rid, node: ni, out: i as u32 };
            results.push(match spec {
                Out::New { sizes, dtype } => {
                    let numel = shape::numel(sizes);
                    bytes += (numel as usize * dtype.size()) as u64;
                    metas.push((*dtype, rec.alloc(sizes)));
                    let storage = Storage::new(self.id, device, *dtype, numel, pending);
                    rec.storages.push(Arc::downgrade(&storage));
                    Some(Tensor::from_storage(storage, sizes))
                }
                Out::Write { slot } => {
                    let s = &flat.slots[*slot];
                    bytes += s.nbytes() as u64;
                    metas.push((s.dtype(), rec.alloc(&[s.numel()])));
                    s.set(pending);
                    rec.storages.push(Arc::downgrade(s));
                    None
                }
                // Inferred without checks (see `inferred`).
                Out::Checks(_) => None,
            });
        }
        rec.bytes += bytes;
        let metas = rec.alloc(&metas);
        rec.ops.push(OpInfo { name: registry().get(id).name(), signature: inf.signature_hash, bytes, results: metas });
        Stats::bump(&self.stats.recorded_ops);

        let flush = if rec.len() >= max_ops {
            Some(FlushReason::GraphSizeLimit)
        } else if policy.after_record(&rec.view()) == Decision::Flush {
            Some(FlushReason::Policy)
        } else {
            None
        };
        drop(rec);
        let values = build_returns(op, &inf.returns, &results, bound)?;
        if let Some(reason) = flush {
            self.flush_device(device, reason)?;
        }
        Ok(values)
    }

    /// Flushes the pending graph of every device.
    pub fn flush(self: &Arc<Self>, reason: FlushReason) -> Result<()> {
        let mut first = None;
        for d in 0..self.device_count() {
            if let Err(e) = self.flush_device(d, reason) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Flushes one device's pending graph (a no-op when it is empty).
    pub fn flush_device(self: &Arc<Self>, device: usize, reason: FlushReason) -> Result<()> {
        self.flush_device_as(device, reason, false)
    }

    /// In fused mode, whether an op whose shapes change between steps
    /// (graph/shape_watch.rs) should run alone, as a strict op, so the rest
    /// of the step stays one cached program. Its pending inputs are computed
    /// first, by a flush that does not end the step the watch follows.
    pub(super) fn runs_alone(self: &Arc<Self>, id: usize, flat: &Flat, device: usize, key: &str) -> Result<bool> {
        let kind = flat.tensors.iter().fold(id as u64, |h, t| hash_of(&(h, t.dtype)));
        if self.shape_watch.lock().observe(device, kind, hash_of(&key)) == Verdict::Fuse {
            return Ok(false);
        }
        if flat.slots.iter().any(|s| matches!(s.value(), StorageValue::Pending { .. })) {
            self.flush_device_as(device, FlushReason::Policy, true)?;
        }
        Ok(true)
    }

    /// Flushes one device's pending graph; `isolating` marks the flush made
    /// for an op that runs alone, which does not end the step the shape
    /// watch follows.
    fn flush_device_as(self: &Arc<Self>, device: usize, reason: FlushReason, isolating: bool) -> Result<()> {
        // The lock is held for the whole flush, so a value pending in this
        // recording is either still pending here or computed when a waiter
        // gets the lock.
        let mut guard = self.recordings[device].lock();
        self.shape_watch.lock().flushed(device, isolating);
        if guard.is_empty() {
            return Ok(());
        }
        let next = self.next_recording.fetch_add(1, Ordering::Relaxed);
        let rec = std::mem::replace(&mut *guard, Recording::new(next, device));
        let policy = self.fusion.lock().policy.clone();
        policy.flushed(&rec.view());
        let _span = tracing::debug_span!("flush", reason = reason.name(), ops = rec.len(), device).entered();
        let result = self.run_recording(&rec, reason);
        if let Err(e) = &result {
            self.failed.lock().insert(rec.id, e.to_string());
        }
        result
    }

    fn run_recording(&self, rec: &Recording, reason: FlushReason) -> Result<()> {
        let device = rec.device;
        let mut _trace = crate::trace::span(crate::trace::Category::Flush, "flush", Some(device));
        _trace.detail(|| format!("{} ops, {}", rec.len(), reason.name()));
        // The live outputs: pending values some storage still holds.
        let mut wanted: Vec<(u32, u32, Arc<Storage>)> = Vec::new();
        for w in &rec.storages {
            if let Some(s) = w.upgrade() {
                if let StorageValue::Pending { recording, node, out } = s.value() {
                    if recording == rec.id && !wanted.iter().any(|(_, _, t)| Arc::ptr_eq(t, &s)) {
                        wanted.push((node, out, s));
                    }
                }
            }
        }
        Stats::bump(&self.stats.flushes[reason as usize]);
        let mut info =
            FlushInfo { reason, device, recorded: rec.len(), lowered: 0, outputs: 0, tier: None };
        if wanted.is_empty() {
            *self.last_flush.lock() = Some(info);
            return Ok(());
        }
        let pairs: Vec<(u32, u32)> = wanted.iter().map(|(n, o, _)| (*n, *o)).collect();
        let canon = rec.canonicalize(&pairs);
        let reg = registry();
        let infers: Vec<Arc<Inferred>> = {
            let t = self.infers.lock();
            rec.nodes().iter().map(|n| t.list[n.infer as usize].clone()).collect()
        };

        // Lower the live nodes, in canonical order, into one function.
        let mut cx = Cx::new("fused graph");
        cx.set_index_checks(self.index_checks.enabled());
        let mut checks = Vec::new();
        let mut param_vals: Vec<Option<V>> = vec![None; rec.params.len()];
        let mut node_vals: Vec<Vec<V>> = vec![Vec::new(); rec.len()];
        let mut args: Vec<FusedArg> = Vec::new();
        let mut summary = GraphSummary::default();
        for &i in &canon.order {
            let node = &rec.nodes()[i as usize];
            let inf = &infers[i as usize];
            let def = reg.get(node.op as usize);
            let plan_start = cx.plan().len();
            let mut slot_vals = Vec::with_capacity(node.slots.len());
            for &s in node.slots {
                slot_vals.push(match canon.src(s) {
                    Src::Param(p) => *param_vals[p as usize].get_or_insert_with(|| {
                        let prm = &rec.params[p as usize];
                        cx.param(Ty::new(prm.dtype, &[prm.numel]), ParamSrc::Storage(p as usize))
                    }),
                    Src::Node { node: n, out } => node_vals[n as usize][out as usize],
                });
            }
            let mut tensors = inf.tensors.clone();
            let mut runtime_strides = node.strides;
            for (t, &off) in tensors.iter_mut().zip(node.offsets) {
                t.offset = off;
                if t.layout == Layout::Runtime {
                    let (these, rest) = runtime_strides.split_at(t.sizes.len().min(runtime_strides.len()));
                    t.strides = these.into();
                    runtime_strides = rest;
                }
            }
            cx.reset_scalars();
            let lowered = lower_call(&mut cx, def, &inf.args, &tensors, &inf.first_of_arg, &slot_vals)?;
            node_vals[i as usize] = lowered.outputs;
            checks.extend(lowered.checks);
            let mut rng = node.rng.iter();
            for src in &cx.plan()[plan_start..] {
                args.push(match src {
                    ParamSrc::Storage(p) => FusedArg::Buffer(*p as u32),
                    ParamSrc::Offset(t) => FusedArg::Scalar(Elem::I64, Scalar::Int(node.offsets[*t])),
                    ParamSrc::Strides(t) => FusedArg::Ints(tensors[*t].strides.to_vec()),
                    ParamSrc::Scalar { arg, elem } => {
                        let v = node.scalars.iter().find(|(a, _)| *a as usize == *arg).map(|(_, v)| *v).ok_or_else(|| {
                            Error::Internal(format!("{}: scalar argument {arg} was not recorded", def.name()))
                        })?;
                        FusedArg::Scalar(*elem, v)
                    }
                    ParamSrc::Rng => FusedArg::Rng(*rng.next().ok_or_else(|| {
                        Error::Internal(format!("{}: more random draws than recorded", def.name()))
                    })?),
                });
            }
            summary.nodes.push(node_summary(def, &inf.args, &tensors));
        }

        // Outputs in canonical order; storages that share a value share it.
        let mut order: Vec<(u32, u32)> = canon.outputs.clone();
        order.sort_by_key(|&(n, o)| (canon.position[n as usize], o));
        order.dedup();
        let mut out_vals: Vec<V> = order.iter().map(|&(n, o)| node_vals[n as usize][o as usize]).collect();
        // The live nodes' index checks: one more output, last, that no
        // storage holds; the runtime keeps it until the next host read.
        let checks = combine_checks(&mut cx, checks).map(|(v, infos)| {
            out_vals.push(v);
            infos
        });
        for &v in &out_vals {
            summary.outputs.push((cx.dtype(v), cx.dims(v)));
        }
        // Donation: a parameter buffer that nothing but this recording holds
        // any more (its storage was overwritten, e.g. by an in-place update)
        // lends its memory to an output of the same type.
        let mut donations: Vec<(V, usize)> = Vec::new();
        for (p, v) in param_vals.iter().enumerate() {
            let Some(v) = *v else { continue };
            if Arc::strong_count(&rec.params[p].buffer) != 1 {
                continue;
            }
            let ty = cx.ty(v).clone();
            if let Some(k) = (0..out_vals.len()).find(|&k| *cx.ty(out_vals[k]) == ty && !donations.iter().any(|d| d.1 == k)) {
                donations.push((v, k));
            }
        }
        let text = cx.f.finish_donating(&out_vals, &donations);
        tracing::trace!(program = %text, "fused program");

        let what = format!("fused graph ({} ops)", canon.order.len());
        let (exe, tier) = self.cached_program(&what, &text, &CompileOptions::Portable, &summary)?;

        let mut bufs: Vec<Arc<Buffer>> = Vec::with_capacity(args.len());
        for a in &args {
            bufs.push(match a {
                FusedArg::Buffer(p) => rec.params[*p as usize].buffer.clone(),
                FusedArg::Scalar(elem, v) => self.scalar_buffer(device, *elem, *v)?,
                FusedArg::Ints(values) => self.ints_buffer(device, values)?,
                FusedArg::Rng(state) => {
                    let bytes: Vec<u8> = state.iter().flat_map(|w| w.to_le_bytes()).collect();
                    Arc::new(self.client.buffer_from_host(&bytes, Elem::U64.element_type(), &[2], device)?)
                }
            });
        }
        // A donated buffer's memory becomes the output's: stop counting it
        // before the outputs are counted (recounted if PJRT declined).
        let donated: Vec<&Arc<Buffer>> = param_vals
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_some_and(|v| donations.iter().any(|d| d.0 == v)))
            .map(|(p, _)| &rec.params[p].buffer)
            .collect();
        donated.iter().for_each(|b| b.set_donated(true));
        let refs: Vec<&Buffer> = bufs.iter().map(|b| &**b).collect();
        let launched = exe.execute(&refs, device).map_err(|e| e.in_op(&what));
        for b in &donated {
            if launched.is_err() || !b.is_deleted() {
                b.set_donated(false);
            }
        }
        let (outs, event) = launched?;
        Stats::bump(&self.stats.executions);
        Stats::bump(&self.stats.fused_programs);
        self.track(device, &what, event);

        let mut outs: Vec<Arc<Buffer>> = outs.into_iter().map(Arc::new).collect();
        if let Some(infos) = checks {
            let buf = outs.pop().ok_or_else(|| Error::Internal(format!("{what}: the program returned no index checks")))?;
            self.index_checks.defer(buf, infos);
        }
        for (node, out, storage) in &wanted {
            let rep = (canon.rep[*node as usize], *out);
            let k = order.iter().position(|&p| p == rep).expect("every wanted value is an output");
            storage.resolve(rec.id, *node, *out, StorageValue::Buffer(outs[k].clone()));
        }
        info.lowered = canon.order.len();
        info.outputs = order.len();
        info.tier = Some(match tier {
            Tier::Memory => "memory",
            Tier::Disk => "disk",
            Tier::Compiled => "compiled",
        });
        *self.last_flush.lock() = Some(info);
        Ok(())
    }
}
