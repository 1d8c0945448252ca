//! Strict eager execution: one cached program per op signature.
//!
//! A call binds its arguments to the op's schema, runs the view kernel if the
//! op has one, and otherwise computes the call's *signature*: the op, the
//! layout of every tensor (storage size, dtype, sizes, strides, aliasing),
//! the kind (not the value) of every runtime scalar, and every other
//! attribute. The signature keys the executable cache; a miss lowers the op
//! to StableHLO and looks the program up in the runtime's two-tier
//! [`ProgramCache`](crate::cache::ProgramCache), the one fused graphs use: an
//! op is a one-op program there, so a second process loads it from disk
//! instead of compiling, and a miss is explained against the programs seen
//! before (the op and the shape, dtype or attribute that differs). Offsets and
//! Python scalars are runtime arguments, so neither `x[i]` for a new `i` nor a
//! new learning rate recompiles.
//!
//! Programs take whole storages as rank-1 parameters, read views inside the
//! program ([`crate::view`]), and return new storages; writes through views
//! return the updated base value, which rebinds the storage cell.

use std::sync::Arc;

use super::call::{build_returns, lower_program, node_summary, signature, Arg, Flat, Out, Ret};
use super::{current_mode, ExecMode, Runtime, Stats};
use crate::cache::GraphSummary;
use crate::error::{Error, Result};
use crate::graph::FlushReason;
use crate::hlo::Elem;
use crate::ops::{registry, OpDef, ParamSrc, ViewOut};
use crate::pjrt::{Buffer, CompileOptions, Executable};
use crate::shape;
use crate::storage::{Storage, StorageValue};
use crate::tensor::{Scalar, Tensor, Value};
use crate::trace::{self, Category};

/// A compiled op signature: the executable and how to feed and unpack it.
pub(crate) struct Compiled {
    exe: Arc<Executable>,
    plan: Vec<ParamSrc>,
    pub(crate) outputs: Vec<Out>,
    pub(crate) returns: Vec<Ret>,
}

impl Runtime {
    /// Calls an op by its aten name with positional arguments (trailing
    /// defaults may be left out). Returns one value per schema return; a
    /// `Tensor[]` return comes back as one [`Value::TensorList`].
    pub fn call(self: &Arc<Self>, name: &str, args: &[Value]) -> Result<Vec<Value>> {
        // Checked here, not only at the device: a fused or view op would
        // otherwise succeed after the shutdown and fail later, far from it.
        if self.client().is_closed() {
            return Err(crate::pjrt::closed_error().in_op(name));
        }
        self.call_id(registry().lookup(name)?, args)
    }

    /// As [`Runtime::call`] for the op with id `id` ([`crate::op_id`]): a
    /// caller that looked the op up once skips the lookup by name.
    pub fn call_id(self: &Arc<Self>, id: usize, args: &[Value]) -> Result<Vec<Value>> {
        let reg = registry();
        if id >= reg.len() {
            return Err(Error::InvalidArgument(format!("op id {id} is not below the op count {}", reg.len())));
        }
        let def = reg.get(id);
        if self.client().is_closed() {
            return Err(crate::pjrt::closed_error().in_op(def.name()));
        }
        let _span = tracing::debug_span!("op", op = def.name()).entered();
        // The mode is read only while tracing: off, a call pays one atomic load.
        let _trace = trace::enabled().then(|| {
            let category = if current_mode() == ExecMode::DeferAndFuse { Category::Record } else { Category::Op };
            trace::span(category, def.name(), None)
        });
        let bound = def.bind(args)?;
        self.check_owners(def, &bound)?;
        if let Some(kind) = def.composite {
            return self.composite(def, kind, &bound);
        }
        let bound = self.expand_masks(def.name(), bound)?;
        if let Some(view) = &def.view {
            if let Some(out) = view(&bound)? {
                let out = self.make_views(def.name(), out)?;
                Stats::bump(&self.stats.view_ops);
                return self.unaliased(def, &bound, out);
            }
        }
        self.run(id, def, &bound)
    }

    /// Refuses another runtime's tensors, naming the argument.
    fn check_owners(&self, def: &OpDef, bound: &[Value]) -> Result<()> {
        for (arg, v) in def.schema.args.iter().zip(bound) {
            let what = || format!("{}: argument '{}'", def.name(), arg.name);
            match v {
                Value::Tensor(t) => self.check_owner(&what(), t)?,
                Value::TensorList(ts) => ts.iter().try_for_each(|t| self.check_owner(&what(), t))?,
                Value::OptTensorList(ts) => ts.iter().flatten().try_for_each(|t| self.check_owner(&what(), t))?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Makes the results a view kernel described.
    fn make_views(self: &Arc<Self>, op: &str, out: ViewOut) -> Result<Vec<Value>> {
        match out {
            ViewOut::Views(values) => Ok(values),
            ViewOut::NewStorage { numel, dtype, device, sizes, strides } => {
                let base = self.call1(
                    "aten::empty.memory_format",
                    &[Value::IntList(vec![numel]), dtype, Value::None, device],
                )?;
                Ok(vec![Value::Tensor(base.view_of(op, 0, &sizes, &strides)?)])
            }
        }
    }

    /// As [`Runtime::call`] for an op with a single tensor result.
    pub fn call1(self: &Arc<Self>, name: &str, args: &[Value]) -> Result<Tensor> {
        let mut out = self.call(name, args)?;
        if out.len() != 1 {
            return Err(Error::InvalidArgument(format!("{name} returns {} values, not one tensor", out.len())));
        }
        out.remove(0).into_tensor()
    }

    fn run(self: &Arc<Self>, id: usize, def: &OpDef, bound: &[Value]) -> Result<Vec<Value>> {
        let flat = Flat::new(bound);
        let device = self.target_device(def, bound, &flat)?;
        let key = signature(id, def, bound, &flat, self.index_checks.enabled());
        if current_mode() == ExecMode::DeferAndFuse {
            let same_device = flat.slots.iter().all(|s| s.device() == device);
            if def.name() == "aten::cat" {
                self.see_cat(bound);
            }
            if (same_device || !def.cross_device) && !self.runs_alone(id, &flat, device, &key)? {
                if def.plugin.is_some() && !self.signatures.lock().contains(&key) {
                    // A trial compile of the plugin op alone, once per
                    // signature (kept for strict mode): a fragment that does
                    // not compile fails here, naming the plugin and the op,
                    // instead of failing the fused program around it.
                    let c = Arc::new(self.compile(def, bound, &flat)?);
                    self.memo(key.clone(), c);
                }
                return self.record(id, def, bound, &flat, device, &key);
            }
        }

        if def.name() == "aten::cat" {
            if let Some(out) = self.grown_cat(bound, &flat, device)? {
                self.shape_watch.lock().ran_in_bucket(device);
                return Ok(out);
            }
        }
        let cached = self.signatures.lock().get(&key);
        let compiled = match cached {
            Some(c) => {
                Stats::bump(&self.stats.cache_hits);
                c
            }
            None => {
                Stats::bump(&self.stats.cache_misses);
                let c = Arc::new(self.compile(def, bound, &flat)?);
                self.memo(key, c.clone());
                c
            }
        };
        self.execute(def, bound, &flat, device, &compiled)
    }

    /// The device the op runs on, checking that its tensors agree.
    fn target_device(&self, def: &OpDef, bound: &[Value], flat: &Flat) -> Result<usize> {
        let op = def.name();
        let mut requested = None;
        for (arg, v) in def.schema.args.iter().zip(bound) {
            if arg.ty == crate::ops::ArgType::Device {
                requested = requested.or(self.parse_device(op, v)?);
            }
        }
        let device_of = |ti: usize| flat.tensors.get(ti).map(|t| flat.slots[t.slot].device());
        let first = def.schema.mutated_arg().and_then(|m| device_of(flat.first_of_arg[m])).or_else(|| device_of(0));
        let target = requested.or(first).unwrap_or(0);
        if !def.cross_device && requested.is_none() {
            if let Some(other) = flat.slots.iter().find(|s| s.device() != target) {
                return Err(Error::op(
                    op,
                    format!(
                        "expected all tensors to be on the same device, but found tensors on tpu:{target} and tpu:{}",
                        other.device()
                    ),
                ));
            }
        }
        Ok(target)
    }

    /// The StableHLO program a call would run (compiled or not), for
    /// inspection: what a user sees when asking "what does this op do".
    pub fn lowered_text(self: &Arc<Self>, name: &str, args: &[Value]) -> Result<String> {
        let reg = registry();
        let def = reg.get(reg.lookup(name)?);
        let bound = def.bind(args)?;
        Ok(lower_program(def, &bound, &Flat::new(&bound), self.index_checks.enabled())?.0)
    }

    /// Remembers a signature's program, unless the program cache is off
    /// (then every call compiles, as every fused flush does).
    fn memo(&self, key: String, c: Arc<Compiled>) {
        if self.programs.enabled() {
            self.signatures.lock().insert(key, c);
        }
    }

    /// The call's one-op program from the program cache (memory, then disk),
    /// compiled on a miss.
    fn compile(&self, def: &OpDef, bound: &[Value], flat: &Flat) -> Result<Compiled> {
        let op = def.name();
        let (text, plan, lowered) = lower_program(def, bound, flat, self.index_checks.enabled())?;
        let args: Vec<Arg> = bound.iter().map(Arg::of).collect();
        let outputs = lowered.specs.iter().filter_map(|o| match o {
            Out::New { sizes, dtype } => Some((*dtype, sizes.to_vec())),
            Out::Write { slot } => Some((flat.slots[*slot].dtype(), vec![flat.slots[*slot].numel()])),
            Out::Checks(_) => None,
        });
        let summary =
            GraphSummary { nodes: vec![node_summary(def, &args, &flat.tensors)], outputs: outputs.collect(), strict: true };
        let (exe, _) =
            self.cached_program(op, &text, &CompileOptions::Portable, &summary).map_err(|e| match (&def.plugin, e) {
                (Some(plugin), Error::Compile { message, program, saved, .. }) => Error::WasmPlugin {
                    plugin: plugin.to_string(),
                    op: Some(op.to_string()),
                    kind: crate::error::PluginFailure::InvalidStableHlo,
                    message: format!(
                        "its fragment does not compile: {message}\n--- StableHLO ---\n{}",
                        crate::error::program_excerpt(&program, saved.as_deref())
                    ),
                },
                (_, e) => e,
            })?;
        Ok(Compiled { exe, plan, outputs: lowered.specs, returns: lowered.returns })
    }

    /// Runs a strict-mode program: waits for it in launch-blocking mode,
    /// otherwise tracks it on the current stream. Returns its outputs.
    pub(super) fn launch(&self, op: &str, exe: &Executable, args: &[Arc<Buffer>], device: usize) -> Result<Vec<Buffer>> {
        let refs: Vec<&Buffer> = args.iter().map(|b| &**b).collect();
        let (outs, event) = exe.execute(&refs, device).map_err(|e| e.in_op(op))?;
        Stats::bump(&self.stats.executions);
        if current_mode() == ExecMode::DeferNeverAndLaunchBlocking {
            event.wait().map_err(|e| e.in_op(op))?;
        } else {
            self.track(device, op, event);
        }
        Ok(outs)
    }

    fn execute(
        self: &Arc<Self>,
        def: &OpDef,
        bound: &[Value],
        flat: &Flat,
        device: usize,
        c: &Compiled,
    ) -> Result<Vec<Value>> {
        let op = def.name();
        let mut slot_bufs = Vec::with_capacity(flat.slots.len());
        for s in &flat.slots {
            let reason = if s.device() == device { FlushReason::StrictOp } else { FlushReason::CrossDevice };
            let b = self.materialize(s, op, reason)?;
            slot_bufs.push(if b.device() == device { b } else { Arc::new(b.copy_to_device(device).map_err(|e| e.in_op(op))?) });
        }
        let mut args: Vec<Arc<Buffer>> = Vec::with_capacity(c.plan.len());
        for src in &c.plan {
            args.push(match src {
                ParamSrc::Storage(s) => slot_bufs[*s].clone(),
                ParamSrc::Offset(t) => self.scalar_buffer(device, Elem::I64, Scalar::Int(flat.tensors[*t].offset))?,
                ParamSrc::Strides(t) => self.ints_buffer(device, &flat.tensors[*t].strides)?,
                ParamSrc::Scalar { arg, elem } => match &bound[*arg] {
                    Value::Scalar(s) => self.scalar_buffer(device, *elem, *s)?,
                    other => return Err(Error::Internal(format!("{op}: argument {arg} is {}, not a scalar", other.type_name()))),
                },
                ParamSrc::Rng => {
                    let state = self.generator_for(bound, device).next_state();
                    let bytes: Vec<u8> = state.iter().flat_map(|w| w.to_le_bytes()).collect();
                    Arc::new(self.client.buffer_from_host(&bytes, Elem::U64.element_type(), &[2], device)?)
                }
            });
        }
        let mut outs = self.launch(op, &c.exe, &args, device)?;
        let blocking = current_mode() == ExecMode::DeferNeverAndLaunchBlocking;
        // The index checks are the last output. Launch-blocking mode checks
        // them before binding any result, so a bad index leaves the op's
        // in-place targets as they were.
        if let Some(Out::Checks(checks)) = c.outputs.last() {
            let buf = outs.pop().ok_or_else(|| Error::Internal(format!("{op}: the program returned no index checks")))?;
            if blocking {
                super::checks::IndexChecks::check_now(&buf, checks)?;
            } else {
                self.index_checks.defer(Arc::new(buf), checks.clone());
            }
        }

        let mut results: Vec<Option<Tensor>> = Vec::with_capacity(outs.len());
        for (buf, spec) in outs.into_iter().zip(&c.outputs) {
            results.push(match spec {
                Out::New { sizes, dtype } => {
                    let storage = Storage::new(self.id, device, *dtype, shape::numel(sizes), StorageValue::Buffer(Arc::new(buf)));
                    Some(Tensor::from_storage(storage, sizes))
                }
                Out::Write { slot } => {
                    flat.slots[*slot].set(StorageValue::Buffer(Arc::new(buf)));
                    None
                }
                Out::Checks(_) => None,
            });
        }
        build_returns(op, &c.returns, &results, bound)
    }
}

