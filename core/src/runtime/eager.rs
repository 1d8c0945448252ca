//! Strict eager execution: one cached program per op signature.
//!
//! A call binds its arguments to the op's schema, runs the view kernel if the
//! op has one, and otherwise computes the call's *signature*: the op, the
//! layout of every tensor (storage size, dtype, sizes, strides, aliasing),
//! the kind (not the value) of every runtime scalar, and every other
//! attribute. The signature keys the executable cache; a miss lowers the op
//! to StableHLO and compiles it. Offsets and Python scalars are runtime
//! arguments, so neither `x[i]` for a new `i` nor a new learning rate
//! recompiles.
//!
//! Programs take whole storages as rank-1 parameters, read views inside the
//! program ([`crate::view`]), and return new storages; writes through views
//! return the updated base value, which rebinds the storage cell.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use super::{current_mode, ExecMode, Runtime, Stats};
use crate::dtype::{can_cast, DType};
use crate::error::{Error, Result};
use crate::hlo::{Elem, Ty, V};
use crate::ops::{registry, Args, Cx, Input, OpDef, ParamSrc, ScalarRef};
use crate::pjrt::{Buffer, CompileOptions, Executable};
use crate::shape::{self, Dims};
use crate::storage::{Storage, StorageValue};
use crate::tensor::{Scalar, Tensor, Value};
use crate::view::{self, Layout};

/// A compiled op signature: the executable and how to feed and unpack it.
pub(crate) struct Compiled {
    exe: Executable,
    plan: Vec<ParamSrc>,
    outputs: Vec<Out>,
    returns: Vec<Ret>,
}

/// What one program output is.
enum Out {
    /// A new storage holding a result of this shape and dtype.
    New { sizes: Dims, dtype: DType },
    /// The new value of the call's `slot`-th storage (a write through a view).
    Write { slot: usize },
}

/// What one schema return is.
enum Ret {
    /// Program output `i`, as a new contiguous tensor.
    Tensor(usize),
    /// The (mutated) tensor argument at this position, returned as is.
    Alias(usize),
    /// A `Tensor[]` return.
    List(Vec<usize>),
}

/// A call's tensors, flattened in argument order, and their distinct storages.
#[derive(Default)]
struct Flat {
    tensors: Vec<Tensor>,
    slot_of: Vec<usize>,
    slots: Vec<Arc<Storage>>,
    layouts: Vec<Layout>,
    /// For each argument, the index of its first tensor.
    first_of_arg: Vec<usize>,
}

impl Flat {
    fn new(bound: &[Value]) -> Flat {
        let mut f = Flat::default();
        for v in bound {
            f.first_of_arg.push(f.tensors.len());
            match v {
                Value::Tensor(t) => f.add(t),
                Value::TensorList(ts) => ts.iter().for_each(|t| f.add(t)),
                Value::OptTensorList(ts) => ts.iter().flatten().for_each(|t| f.add(t)),
                _ => {}
            }
        }
        f
    }

    fn add(&mut self, t: &Tensor) {
        let slot = match self.slots.iter().position(|s| Arc::ptr_eq(s, t.storage())) {
            Some(s) => s,
            None => {
                self.slots.push(t.storage().clone());
                self.slots.len() - 1
            }
        };
        self.slot_of.push(slot);
        self.layouts.push(view::classify(t.storage().numel(), t.offset(), t.sizes(), t.strides()));
        self.tensors.push(t.clone());
    }
}

impl Runtime {
    /// Calls an op by its aten name with positional arguments (trailing
    /// defaults may be left out). Returns one value per schema return; a
    /// `Tensor[]` return comes back as one [`Value::TensorList`].
    pub fn call(self: &Arc<Self>, name: &str, args: &[Value]) -> Result<Vec<Value>> {
        let reg = registry();
        let id = reg.lookup(name)?;
        let def = reg.get(id);
        let _span = tracing::debug_span!("op", op = def.name()).entered();
        let bound = def.schema.bind(args)?;
        if let Some(view) = &def.view {
            if let Some(out) = view(self, &bound)? {
                Stats::bump(&self.stats.view_ops);
                return Ok(out);
            }
        }
        self.run(id, def, &bound)
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
        let key = signature(id, def, bound, &flat);

        let cached = self.cache.lock().get(&key).cloned();
        let compiled = match cached {
            Some(c) => {
                Stats::bump(&self.stats.cache_hits);
                c
            }
            None => {
                Stats::bump(&self.stats.cache_misses);
                let c = Arc::new(self.compile(def, bound, &flat)?);
                self.cache.lock().insert(key, c.clone());
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
        let first = match def.schema.mutated_arg() {
            Some(m) => flat.tensors.get(flat.first_of_arg[m]).map(Tensor::device),
            None => None,
        }
        .or_else(|| flat.tensors.first().map(Tensor::device));
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
        let bound = def.schema.bind(args)?;
        Ok(lower(def, &bound, &Flat::new(&bound))?.text)
    }

    fn compile(&self, def: &OpDef, bound: &[Value], flat: &Flat) -> Result<Compiled> {
        let op = def.name();
        let Lowered { text, plan, outputs, returns } = lower(def, bound, flat)?;
        let start = Instant::now();
        let exe = self.client.compile(op, &text, &CompileOptions::Portable)?;
        let ns = start.elapsed().as_nanos() as u64;
        self.stats.compile_ns.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
        Stats::bump(&self.stats.compiles);
        Ok(Compiled { exe, plan, outputs, returns })
    }


    fn execute(
        &self,
        def: &OpDef,
        bound: &[Value],
        flat: &Flat,
        device: usize,
        c: &Compiled,
    ) -> Result<Vec<Value>> {
        let op = def.name();
        let mut slot_bufs = Vec::with_capacity(flat.slots.len());
        for s in &flat.slots {
            let b = s.buffer();
            slot_bufs.push(if b.device() == device { b } else { Arc::new(b.copy_to_device(device).map_err(|e| e.in_op(op))?) });
        }
        let mut args: Vec<Arc<Buffer>> = Vec::with_capacity(c.plan.len());
        for src in &c.plan {
            args.push(match src {
                ParamSrc::Storage(s) => slot_bufs[*s].clone(),
                ParamSrc::Offset(t) => self.scalar_buffer(device, Elem::I64, Scalar::Int(flat.tensors[*t].offset()))?,
                ParamSrc::Scalar { arg, elem } => match &bound[*arg] {
                    Value::Scalar(s) => self.scalar_buffer(device, *elem, *s)?,
                    other => return Err(Error::Internal(format!("{op}: argument {arg} is {}, not a scalar", other.type_name()))),
                },
                ParamSrc::Rng => {
                    let state = self.generators[device].lock().next_state();
                    let bytes: Vec<u8> = state.iter().flat_map(|w| w.to_le_bytes()).collect();
                    Arc::new(self.client.buffer_from_host(&bytes, Elem::U64.element_type(), &[2], device)?)
                }
            });
        }
        let refs: Vec<&Buffer> = args.iter().map(|b| &**b).collect();
        let (outs, event) = c.exe.execute(&refs, device).map_err(|e| e.in_op(op))?;
        Stats::bump(&self.stats.executions);
        if current_mode() == ExecMode::DeferNeverAndLaunchBlocking {
            event.wait().map_err(|e| e.in_op(op))?;
        } else {
            self.track(event);
        }

        let mut results: Vec<Option<Tensor>> = Vec::with_capacity(outs.len());
        for (buf, spec) in outs.into_iter().zip(&c.outputs) {
            results.push(match spec {
                Out::New { sizes, dtype } => {
                    let storage = Storage::new(device, *dtype, shape::numel(sizes), StorageValue::Buffer(Arc::new(buf)));
                    Some(Tensor::from_storage(storage, sizes))
                }
                Out::Write { slot } => {
                    flat.slots[*slot].set(StorageValue::Buffer(Arc::new(buf)));
                    None
                }
            });
        }
        let take = |i: usize| results[i].clone().ok_or_else(|| Error::Internal(format!("{op}: output {i} is a write")));
        c.returns
            .iter()
            .map(|r| {
                Ok(match r {
                    Ret::Tensor(i) => Value::Tensor(take(*i)?),
                    Ret::Alias(arg) => bound[*arg].clone(),
                    Ret::List(ids) => Value::TensorList(ids.iter().map(|&i| take(i)).collect::<Result<_>>()?),
                })
            })
            .collect()
    }
}

/// A lowered call: the program text and how to feed and unpack it.
struct Lowered {
    text: String,
    plan: Vec<ParamSrc>,
    outputs: Vec<Out>,
    returns: Vec<Ret>,
}

/// Lowers a bound call: storages become rank-1 parameters, views are read
/// inside the program, the op's lowering runs, and writes through views
/// become updated storage values.
fn lower(def: &OpDef, bound: &[Value], flat: &Flat) -> Result<Lowered> {
    let op = def.name();
    let mut cx = Cx::new(op);
    let slot_vals: Vec<V> = flat
        .slots
        .iter()
        .enumerate()
        .map(|(s, st)| cx.param(Ty::new(st.dtype(), &[st.numel()]), ParamSrc::Storage(s)))
        .collect();
    let mut reads = Vec::with_capacity(flat.tensors.len());
    let mut offsets = Vec::with_capacity(flat.tensors.len());
    for (ti, t) in flat.tensors.iter().enumerate() {
        let layout = &flat.layouts[ti];
        let offset = (*layout != Layout::Whole).then(|| cx.param(Ty::scalar(Elem::I64), ParamSrc::Offset(ti)));
        reads.push(view::read(&mut cx.f, slot_vals[flat.slot_of[ti]], layout, offset, t.sizes(), t.strides()));
        offsets.push(offset);
    }

    let inputs = lowering_inputs(def, bound, &flat.first_of_arg, &reads);
    let outs = (def.lower)(&mut cx, &Args::new(op, &inputs))?;

    // Map the lowering's values to program outputs and schema returns.
    let schema = &def.schema;
    let mut outputs: Vec<V> = Vec::new();
    let mut specs: Vec<Out> = Vec::new();
    let new_output = |cx: &mut Cx, v: V, outputs: &mut Vec<V>, specs: &mut Vec<Out>| {
        let sizes: Dims = cx.dims(v).into();
        let dtype = cx.dtype(v);
        let flat_v = cx.f.reshape(v, &[shape::numel(&sizes)]);
        outputs.push(flat_v);
        specs.push(Out::New { sizes, dtype });
        outputs.len() - 1
    };
    let mut slot_new: Vec<Option<V>> = vec![None; flat.slots.len()];
    let mut write = |cx: &mut Cx, arg: usize, v: V| -> Result<()> {
        let ti = flat.first_of_arg[arg];
        let t = &flat.tensors[ti];
        let got = cx.dims(v);
        if got != t.sizes() {
            return Err(cx.err(format!(
                "output with shape {} doesn't match the broadcast shape {}",
                shape::fmt(t.sizes()),
                shape::fmt(&got)
            )));
        }
        let from = cx.dtype(v);
        if from != t.dtype() && !def.any_cast && !can_cast(from, t.dtype()) {
            return Err(cx.err(format!("result type {from} can't be cast to the desired output type {}", t.dtype())));
        }
        if t.sizes().iter().zip(t.strides()).any(|(&n, &s)| n > 1 && s == 0) {
            return Err(cx.err(format!(
                "unsupported operation: more than one element of the written-to tensor (sizes {}, strides {}) \
                 refers to a single memory location. Please clone() the tensor before performing the operation.",
                shape::fmt(t.sizes()),
                shape::fmt(t.strides())
            )));
        }
        let v = cx.f.convert(v, t.dtype());
        let slot = flat.slot_of[ti];
        let base = slot_new[slot].unwrap_or(slot_vals[slot]);
        slot_new[slot] = Some(view::write(&mut cx.f, base, &flat.layouts[ti], offsets[ti], t.sizes(), t.strides(), v));
        Ok(())
    };

    let mut returns = Vec::new();
    if schema.returns.len() == 1 && schema.returns[0] == "Tensor[]" {
        let ids = outs.iter().map(|&v| new_output(&mut cx, v, &mut outputs, &mut specs)).collect();
        returns.push(Ret::List(ids));
    } else if schema.returns.is_empty() {
        // Ops returning nothing (`_foreach_add_`) give the new values of
        // their mutated arguments, in order.
        let mutated: Vec<usize> = (0..schema.args.len()).filter(|&i| schema.args[i].mutable).collect();
        if outs.len() != mutated.len() {
            return Err(Error::Internal(format!("{op}: lowering gave {} values for {} mutated arguments", outs.len(), mutated.len())));
        }
        for (&arg, &v) in mutated.iter().zip(&outs) {
            write(&mut cx, arg, v)?;
        }
    } else {
        if outs.len() != schema.returns.len() {
            return Err(Error::Internal(format!("{op}: lowering gave {} values for {} returns", outs.len(), schema.returns.len())));
        }
        for (r, &v) in outs.iter().enumerate() {
            match schema.return_alias[r] {
                Some(arg) if schema.args[arg].mutable => {
                    write(&mut cx, arg, v)?;
                    returns.push(Ret::Alias(arg));
                }
                _ => returns.push(Ret::Tensor(new_output(&mut cx, v, &mut outputs, &mut specs))),
            }
        }
    }
    for (slot, v) in slot_new.into_iter().enumerate() {
        if let Some(v) = v {
            outputs.push(v);
            specs.push(Out::Write { slot });
        }
    }

    let text = cx.f.finish(&outputs);
    tracing::trace!(op, program = %text, "lowered");
    Ok(Lowered { text, plan: cx.plan().to_vec(), outputs: specs, returns })
}

/// The cache key of a call. Everything that changes the program is in it;
/// offsets and runtime scalar values are not.
fn signature(id: usize, def: &OpDef, bound: &[Value], flat: &Flat) -> String {
    let mut k = String::with_capacity(64 + 48 * flat.tensors.len());
    let _ = write!(k, "{id}");
    let mut ti = 0;
    let mut tensor = |k: &mut String| {
        let t = &flat.tensors[ti];
        let layout = match &flat.layouts[ti] {
            Layout::Whole => 'W',
            Layout::Block => 'B',
            Layout::Strided(_) => 'S',
            Layout::Gather => 'G',
        };
        let _ = write!(
            k,
            "T{}:{}:{}{}{:?}{:?}",
            flat.slot_of[ti],
            t.storage().numel(),
            t.dtype().code(),
            layout,
            t.sizes(),
            t.strides()
        );
        ti += 1;
    };
    for v in bound {
        k.push('|');
        match v {
            Value::Tensor(_) => tensor(&mut k),
            Value::TensorList(ts) => ts.iter().for_each(|_| tensor(&mut k)),
            Value::OptTensorList(ts) => ts.iter().for_each(|t| match t {
                Some(_) => tensor(&mut k),
                None => k.push('-'),
            }),
            Value::Scalar(s) if def.static_scalars => {
                let _ = write!(k, "{:?}", s.bits());
            }
            Value::Scalar(s) => {
                let _ = write!(k, "s{:?}", s.kind());
            }
            other => {
                let _ = write!(k, "{other:?}");
            }
        }
    }
    k
}

/// The arguments as the lowering sees them: tensors become the values read
/// from their views, runtime scalars become [`ScalarRef`]s.
fn lowering_inputs(def: &OpDef, bound: &[Value], first_of_arg: &[usize], reads: &[V]) -> Vec<Input> {
    bound
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let first = first_of_arg[i];
            match v {
                Value::None => Input::None,
                Value::Tensor(_) => Input::Tensor(reads[first]),
                Value::TensorList(ts) => Input::Tensors(reads[first..first + ts.len()].to_vec()),
                Value::OptTensorList(ts) => {
                    let mut next = first;
                    Input::OptTensors(
                        ts.iter()
                            .map(|t| {
                                t.as_ref().map(|_| {
                                    next += 1;
                                    reads[next - 1]
                                })
                            })
                            .collect(),
                    )
                }
                Value::Int(x) => Input::Int(*x),
                Value::Double(x) => Input::Float(*x),
                Value::Bool(x) => Input::Bool(*x),
                Value::Str(s) => Input::Str(s.clone()),
                Value::IntList(xs) => Input::Ints(xs.clone()),
                Value::DType(d) => Input::DType(*d),
                Value::Scalar(s) if def.static_scalars => Input::StaticScalar(*s),
                Value::Scalar(s) => Input::Scalar(ScalarRef { index: i, kind: s.kind() }),
            }
        })
        .collect()
}
