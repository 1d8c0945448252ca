//! One op call, described without its storages: the layout of each tensor
//! argument, the call's signature, and its lowering into an enclosing
//! [`Cx`]. Strict eager lowers one call per program; fused mode lowers a
//! whole recorded graph of calls into one program through the same code.

use std::fmt::Write;
use std::sync::Arc;

use crate::cache::{NodeSummary, ViewOf};
use crate::dtype::{can_cast, DType};
use crate::error::{Error, Result};
use crate::hlo::{Elem, Ty, V};
use crate::ops::{Args, Check, Cx, IndexCheck, Input, OpDef, ParamSrc, ScalarRef};
use crate::shape::{self, Dims};
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use crate::view::{self, Layout};

/// What one program output of a call is.
#[derive(Debug, Clone)]
pub(crate) enum Out {
    /// A new storage holding a result of this shape and dtype.
    New { sizes: Dims, dtype: DType },
    /// The new value of the call's `slot`-th storage (a write through a view).
    Write { slot: usize },
    /// The program's index checks: (min, max) of each checked index tensor,
    /// in order, as one i64 vector that no storage holds; the runtime keeps
    /// it until the next host read or synchronize ([`super::checks`]).
    Checks(Arc<[IndexCheck]>),
}

/// What one schema return of a call is.
#[derive(Debug, Clone)]
pub(crate) enum Ret {
    /// Output `i`, as a new contiguous tensor.
    Tensor(usize),
    /// The (mutated) tensor argument at this position, returned as is.
    Alias(usize),
    /// A `Tensor[]` return.
    List(Vec<usize>),
    /// An undefined tensor (a gradient `output_mask` did not ask for).
    None,
}

/// The values a call returns, from its results and its arguments.
pub(crate) fn build_returns(op: &str, returns: &[Ret], results: &[Option<Tensor>], bound: &[Value]) -> Result<Vec<Value>> {
    let take = |i: usize| results[i].clone().ok_or_else(|| Error::Internal(format!("{op}: output {i} is a write")));
    returns
        .iter()
        .map(|r| {
            Ok(match r {
                Ret::Tensor(i) => Value::Tensor(take(*i)?),
                Ret::Alias(arg) => bound[*arg].clone(),
                Ret::List(ids) => Value::TensorList(ids.iter().map(|&i| take(i)).collect::<Result<_>>()?),
                Ret::None => Value::None,
            })
        })
        .collect()
}

/// A call's argument with its tensors left out (so a recorded call does not
/// keep storages alive): the lowering only needs where tensors go.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Tensor,
    Tensors(usize),
    OptTensors(Vec<bool>),
    Other(Value),
}

impl Arg {
    pub(crate) fn of(v: &Value) -> Arg {
        match v {
            Value::Tensor(_) => Arg::Tensor,
            Value::TensorList(ts) => Arg::Tensors(ts.len()),
            Value::OptTensorList(ts) => Arg::OptTensors(ts.iter().map(Option::is_some).collect()),
            // The lowering never sees a generator (the runtime draws from
            // it), and a recorded call must not keep it alive.
            Value::Generator(_) => Arg::Other(Value::None),
            other => Arg::Other(other.clone()),
        }
    }
}

/// One tensor argument: which of the call's storages it views, and how.
#[derive(Debug, Clone)]
pub(crate) struct TensorDesc {
    pub slot: usize,
    pub dtype: DType,
    pub storage_numel: i64,
    pub offset: i64,
    pub sizes: Dims,
    pub strides: Dims,
    pub layout: Layout,
}

/// A call's tensors, flattened in argument order, and their distinct storages.
#[derive(Default)]
pub(crate) struct Flat {
    pub tensors: Vec<TensorDesc>,
    pub slots: Vec<Arc<Storage>>,
    /// For each argument, the index of its first tensor.
    pub first_of_arg: Vec<usize>,
}

impl Flat {
    pub(crate) fn new(bound: &[Value]) -> Flat {
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
        let mut layout = view::classify(t.storage().numel(), t.offset(), t.sizes(), t.strides());
        // A small strided view of a storage that grows (the last token of
        // the ids `generate()` appends to) has strides that change with the
        // storage: read at runtime strides, it compiles once per bucket. A
        // view that covers most of the tensor changes shape with it anyway,
        // and reads faster as a strided slice.
        if let Some(used) = t.storage().used() {
            let small = t.numel().saturating_mul(2) <= used && t.sizes().iter().any(|&n| n > 1);
            if small && matches!(layout, Layout::Strided(_) | Layout::Gather) {
                layout = Layout::Runtime;
            }
        }
        self.tensors.push(TensorDesc {
            slot,
            dtype: t.dtype(),
            storage_numel: t.storage().numel(),
            offset: t.offset(),
            sizes: t.sizes().into(),
            strides: t.strides().into(),
            layout,
        });
    }
}

/// The cache key of a call. Everything that changes the program is in it
/// (index checks on or off included); offsets, runtime scalar values and
/// generators are not.
pub(crate) fn signature(id: usize, def: &OpDef, bound: &[Value], flat: &Flat, index_checks: bool) -> String {
    let mut k = String::with_capacity(64 + 48 * flat.tensors.len());
    let _ = write!(k, "{id}");
    let mut ti = 0;
    let mut tensor = |k: &mut String| {
        let t = &flat.tensors[ti];
        let layout = match &t.layout {
            Layout::Whole => 'W',
            Layout::Block => 'B',
            Layout::Strided(_) => 'S',
            Layout::Gather => 'G',
            Layout::Runtime => 'R',
        };
        let _ = write!(k, "T{}:{}:{}{}{:?}", t.slot, t.storage_numel, t.dtype.code(), layout, t.sizes);
        // Runtime strides are arguments, not part of the program.
        if t.layout != Layout::Runtime {
            let _ = write!(k, "{:?}", t.strides);
        }
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
            // The program is the same whichever generator a call draws from
            // (or none, the device default): the draw is a runtime argument.
            Value::Generator(_) => k.push_str("None"),
            other => {
                let _ = write!(k, "{other:?}");
            }
        }
    }
    k.push_str(if index_checks { "|i1" } else { "|i0" });
    k
}

/// One call as recompile explanations describe it: the op, the dtype and
/// shape of each tensor input, and the other arguments.
pub(crate) fn node_summary(def: &OpDef, args: &[Arg], tensors: &[TensorDesc]) -> NodeSummary {
    let view = |t: &TensorDesc| {
        (t.layout != Layout::Whole).then(|| ViewOf { storage_numel: t.storage_numel, strides: t.strides.to_vec() })
    };
    let any_view = tensors.iter().any(|t| t.layout != Layout::Whole);
    let views = if any_view { tensors.iter().map(view).collect() } else { Vec::new() };
    NodeSummary {
        op: def.name().to_string(),
        inputs: tensors.iter().map(|t| (t.dtype, t.sizes.to_vec())).collect(),
        attrs: attrs_of(args),
        views,
    }
}

/// The non-tensor arguments, as explanations print them.
fn attrs_of(args: &[Arg]) -> String {
    let parts: Vec<String> = args
        .iter()
        .filter_map(|a| match a {
            Arg::Other(Value::Scalar(s)) => Some(format!("Scalar<{:?}>", s.kind())),
            Arg::Other(Value::None) => None,
            Arg::Other(v) => Some(format!("{v:?}")),
            _ => None,
        })
        .collect();
    parts.join(", ")
}

/// A call lowered into an enclosing function.
pub(crate) struct Lowered {
    /// One rank-1 value per output (results, then storage writes).
    pub outputs: Vec<V>,
    pub specs: Vec<Out>,
    pub returns: Vec<Ret>,
    /// The call's index checks (not among `outputs`: a program returns all
    /// of its checks as one value, [`combine_checks`]).
    pub checks: Vec<Check>,
}

/// Lowers a call whose storages have the values `slot_vals` (rank 1): views
/// are read inside the program (offsets become runtime parameters), the op's
/// lowering runs, results are flattened to rank 1, and writes through views
/// become updated storage values.
pub(crate) fn lower_call(
    cx: &mut Cx,
    def: &OpDef,
    args: &[Arg],
    tensors: &[TensorDesc],
    first_of_arg: &[usize],
    slot_vals: &[V],
) -> Result<Lowered> {
    let op = def.name();
    let mut reads = Vec::with_capacity(tensors.len());
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut runtime_strides = Vec::with_capacity(tensors.len());
    for (ti, t) in tensors.iter().enumerate() {
        // A view may be far larger than its storage (expand with stride 0);
        // reading it in a program materializes it.
        shape::checked_numel(&format!("{op}: input tensor {ti}"), &t.sizes, t.dtype.size())?;
        let offset = (t.layout != Layout::Whole).then(|| cx.param(Ty::scalar(Elem::I64), ParamSrc::Offset(ti)));
        let strides = (t.layout == Layout::Runtime)
            .then(|| cx.param(Ty::new(Elem::I64, &[t.sizes.len() as i64]), ParamSrc::Strides(ti)));
        reads.push(match (offset, strides) {
            (Some(o), Some(st)) => view::read_at(&mut cx.f, slot_vals[t.slot], o, st, &t.sizes),
            _ => view::read(&mut cx.f, slot_vals[t.slot], &t.layout, offset, &t.sizes, &t.strides),
        });
        offsets.push(offset);
        runtime_strides.push(strides);
    }

    let inputs = lowering_inputs(def, args, first_of_arg, &reads);
    let outs = (def.lower)(cx, &Args::new(op, &inputs))?;
    let mut checks = cx.take_checks();
    if !checks.is_empty() {
        // A fused graph's Cx is not named after the op; the error must be.
        let name: Arc<str> = op.into();
        checks.iter_mut().for_each(|c| c.info.op = name.clone());
    }

    // Map the lowering's values to outputs and schema returns.
    let schema = &def.schema;
    let mut outputs: Vec<V> = Vec::new();
    let mut specs: Vec<Out> = Vec::new();
    let new_output = |cx: &mut Cx, v: V, outputs: &mut Vec<V>, specs: &mut Vec<Out>| -> Result<usize> {
        let sizes: Dims = cx.dims(v).into();
        let dtype = cx.dtype(v);
        let numel = shape::checked_numel(&format!("{op}: result"), &sizes, dtype.size())?;
        let flat_v = cx.f.reshape(v, &[numel]);
        outputs.push(flat_v);
        specs.push(Out::New { sizes, dtype });
        Ok(outputs.len() - 1)
    };
    let mut slot_new: Vec<Option<V>> = vec![None; slot_vals.len()];
    let mut write = |cx: &mut Cx, ti: usize, v: V| -> Result<()> {
        if cx.is_none(v) {
            // The lowering left this mutated tensor as it was.
            return Ok(());
        }
        let t = &tensors[ti];
        let got = cx.dims(v);
        if got != t.sizes.as_slice() {
            return Err(cx.err(format!(
                "output with shape {} doesn't match the broadcast shape {}",
                shape::fmt(&t.sizes),
                shape::fmt(&got)
            )));
        }
        let from = cx.dtype(v);
        if from != t.dtype && !def.any_cast && !can_cast(from, t.dtype) {
            return Err(cx.err(format!("result type {from} can't be cast to the desired output type {}", t.dtype)));
        }
        if t.sizes.iter().zip(&t.strides).any(|(&n, &s)| n > 1 && s == 0) {
            return Err(cx.err(format!(
                "unsupported operation: more than one element of the written-to tensor (sizes {}, strides {}) \
                 refers to a single memory location. Please clone() the tensor before performing the operation.",
                shape::fmt(&t.sizes),
                shape::fmt(&t.strides)
            )));
        }
        let v = cx.f.convert(v, t.dtype);
        let base = slot_new[t.slot].unwrap_or(slot_vals[t.slot]);
        slot_new[t.slot] = Some(match (offsets[ti], runtime_strides[ti]) {
            (Some(o), Some(st)) => view::write_at(&mut cx.f, base, o, st, &t.sizes, v),
            _ => view::write(&mut cx.f, base, &t.layout, offsets[ti], &t.sizes, &t.strides, v),
        });
        Ok(())
    };

    let mut returns = Vec::new();
    if schema.returns.len() == 1 && schema.returns[0] == "Tensor[]" {
        let ids = outs.iter().map(|&v| new_output(cx, v, &mut outputs, &mut specs)).collect::<Result<_>>()?;
        returns.push(Ret::List(ids));
    } else if schema.returns.is_empty() {
        // Ops returning nothing (`_fused_adam_`) give the new values of
        // their mutated arguments, in order.
        let mutated: Vec<usize> = (0..schema.args.len()).filter(|&i| schema.args[i].mutable).collect();
        let targets = mutated_tensors(args, first_of_arg, &mutated);
        if outs.len() != targets.len() {
            return Err(Error::Internal(format!(
                "{op}: lowering gave {} values for {} mutated tensors",
                outs.len(),
                targets.len()
            )));
        }
        for (&ti, &v) in targets.iter().zip(&outs) {
            write(cx, ti, v)?;
        }
    } else {
        // The returns, then the new values of mutated arguments that no
        // return aliases (batch norm's running statistics). One `Tensor[]`
        // return among others (the functional AMP unscale's `self_out`)
        // takes as many values as the other returns and writes leave.
        let extra = mutated_tensors(args, first_of_arg, &schema.unreturned_mutated_args());
        let list_at = schema.returns.iter().position(|r| r == "Tensor[]");
        let fixed = schema.returns.len() - usize::from(list_at.is_some()) + extra.len();
        if outs.len() < fixed || (list_at.is_none() && outs.len() != fixed) {
            return Err(Error::Internal(format!(
                "{op}: lowering gave {} values for {} returns and {} mutated tensors",
                outs.len(),
                schema.returns.len(),
                extra.len()
            )));
        }
        let list_len = outs.len() - fixed;
        let (ret_vals, extra_vals) = outs.split_at(outs.len() - extra.len());
        let mut ret_vals = ret_vals.iter().copied();
        for r in 0..schema.returns.len() {
            if Some(r) == list_at {
                let ids = ret_vals
                    .by_ref()
                    .take(list_len)
                    .map(|v| new_output(cx, v, &mut outputs, &mut specs))
                    .collect::<Result<_>>()?;
                returns.push(Ret::List(ids));
                continue;
            }
            let v = ret_vals.next().expect("counted above");
            match schema.return_alias[r] {
                Some(arg) if schema.args[arg].mutable => {
                    write(cx, first_of_arg[arg], v)?;
                    returns.push(Ret::Alias(arg));
                }
                _ if cx.is_none(v) => returns.push(Ret::None),
                _ => returns.push(Ret::Tensor(new_output(cx, v, &mut outputs, &mut specs)?)),
            }
        }
        for (&ti, &v) in extra.iter().zip(extra_vals) {
            write(cx, ti, v)?;
        }
    }
    for (slot, v) in slot_new.into_iter().enumerate() {
        if let Some(v) = v {
            outputs.push(v);
            specs.push(Out::Write { slot });
        }
    }
    Ok(Lowered { outputs, specs, returns, checks })
}

/// A program's index checks as one output value: each check's (min, max)
/// concatenated, with what the runtime needs to word an error. One value
/// per program, however many checks it has, keeps the pending list short.
pub(crate) fn combine_checks(cx: &mut Cx, checks: Vec<Check>) -> Option<(V, Arc<[IndexCheck]>)> {
    match checks.len() {
        0 => None,
        1 => Some((checks[0].value, Arc::from([checks[0].info.clone()]))),
        _ => {
            let vals: Vec<V> = checks.iter().map(|c| c.value).collect();
            let v = cx.f.concatenate(&vals, 0);
            Some((v, checks.into_iter().map(|c| c.info).collect()))
        }
    }
}

/// The tensors that the mutated arguments `which` hold, in order: one for a
/// `Tensor(a!)`, every element of a `Tensor(a!)[]`, none for an absent
/// optional tensor. A lowering gives one new value for each.
fn mutated_tensors(args: &[Arg], first_of_arg: &[usize], which: &[usize]) -> Vec<usize> {
    let mut out = Vec::new();
    for &i in which {
        let first = first_of_arg[i];
        match &args[i] {
            Arg::Tensor => out.push(first),
            Arg::Tensors(n) => out.extend(first..first + n),
            Arg::OptTensors(present) => out.extend(first..first + present.iter().filter(|&&p| p).count()),
            Arg::Other(_) => {}
        }
    }
    out
}

/// The arguments as the lowering sees them: tensors become the values read
/// from their views, runtime scalars become [`ScalarRef`]s.
fn lowering_inputs(def: &OpDef, args: &[Arg], first_of_arg: &[usize], reads: &[V]) -> Vec<Input> {
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            let first = first_of_arg[i];
            match a {
                Arg::Tensor => Input::Tensor(reads[first]),
                Arg::Tensors(n) => Input::Tensors(reads[first..first + n].to_vec()),
                Arg::OptTensors(present) => {
                    let mut next = first;
                    Input::OptTensors(
                        present
                            .iter()
                            .map(|&p| {
                                p.then(|| {
                                    next += 1;
                                    reads[next - 1]
                                })
                            })
                            .collect(),
                    )
                }
                Arg::Other(v) => match v {
                    Value::Int(x) => Input::Int(*x),
                    Value::Double(x) => Input::Float(*x),
                    Value::Bool(x) => Input::Bool(*x),
                    Value::Str(s) => Input::Str(s.clone()),
                    Value::IntList(xs) => Input::Ints(xs.clone()),
                    Value::FloatList(xs) => Input::Floats(xs.clone()),
                    Value::DType(d) => Input::DType(*d),
                    Value::Scalar(s) if def.static_scalars => Input::StaticScalar(*s),
                    Value::Scalar(s) => Input::Scalar(ScalarRef { index: i, kind: s.kind() }),
                    _ => Input::None,
                },
            }
        })
        .collect()
}

/// Lowers a call as a program of its own: each storage is a rank-1 parameter.
/// Returns the program text and the parameter plan. With `index_checks`, a
/// checked op's program has one more output, last: [`Out::Checks`].
pub(crate) fn lower_program(
    def: &OpDef,
    bound: &[Value],
    flat: &Flat,
    index_checks: bool,
) -> Result<(String, Vec<ParamSrc>, Lowered)> {
    let mut cx = Cx::new(def.name());
    cx.set_index_checks(index_checks);
    let slot_vals: Vec<V> = flat
        .slots
        .iter()
        .enumerate()
        .map(|(s, st)| cx.param(Ty::new(st.dtype(), &[st.numel()]), ParamSrc::Storage(s)))
        .collect();
    let args: Vec<Arg> = bound.iter().map(Arg::of).collect();
    let mut lowered = lower_call(&mut cx, def, &args, &flat.tensors, &flat.first_of_arg, &slot_vals)?;
    if let Some((v, infos)) = combine_checks(&mut cx, std::mem::take(&mut lowered.checks)) {
        lowered.outputs.push(v);
        lowered.specs.push(Out::Checks(infos));
    }
    let text = cx.f.finish(&lowered.outputs);
    tracing::trace!(op = def.name(), program = %text, "lowered");
    Ok((text, cx.plan().to_vec(), lowered))
}
