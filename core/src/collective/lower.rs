//! StableHLO for one collective over a group of `n` replicas.
//!
//! The program is written from one replica's point of view: it takes the
//! member's whole storage (rank 1, as every program does), reshapes it to the
//! tensor's sizes, runs the collective, and returns the result flattened.
//! `replica_groups` is always `[[0, .., n-1]]`: the device assignment maps
//! replica `r` to the group's rank `r`.
//!
//! No op carries a `channel_handle`: these programs run in replica mode, and
//! the CPU plugin aborts on a `collective_permute` that has one.

use super::{Collective, ReduceOp};
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};

/// The program text for `c` over `n` ranks whose tensors are `dtype` of
/// shape `sizes`.
pub(crate) fn program(c: &Collective, n: usize, dtype: DType, sizes: &[i64]) -> Result<String> {
    let out_sizes = c.output_sizes(n, dtype, sizes)?;
    let numel: i64 = sizes.iter().product();
    let mut f = Func::new();
    let flat = f.param(Ty::new(dtype, &[numel]));
    // A rank-0 tensor is gathered as shape [1].
    let shaped = if sizes.is_empty() && *c == Collective::AllGather { vec![1] } else { sizes.to_vec() };
    let x = f.reshape(flat, &shaped);
    let groups = replica_groups(n);
    let y = match c {
        Collective::AllReduce(op) => {
            let r = all_reduce(&mut f, x, *op, dtype, &groups);
            average(&mut f, r, *op, n)
        }
        Collective::ReduceScatter(op) => {
            let ty = Ty::new(dtype, &out_sizes);
            let region = reduce_region(&mut f, *op, dtype);
            let attrs = format!("scatter_dimension = 0 : i64, replica_groups = {groups}");
            let r = f.op("stablehlo.reduce_scatter", &[x], &[region], &attrs, &[ty])[0];
            average(&mut f, r, *op, n)
        }
        Collective::AllGather => {
            let attrs = format!("all_gather_dim = 0 : i64, replica_groups = {groups}");
            f.op("stablehlo.all_gather", &[x], &[], &attrs, &[Ty::new(dtype, &out_sizes)])[0]
        }
        Collective::AllToAll => {
            let attrs = format!(
                "split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = {n} : i64, replica_groups = {groups}"
            );
            f.op("stablehlo.all_to_all", &[x], &[], &attrs, &[Ty::new(dtype, &out_sizes)])[0]
        }
        Collective::Permute { pairs } => {
            let list = pairs.iter().map(|(s, t)| format!("[{s}, {t}]")).collect::<Vec<_>>().join(", ");
            let attrs = if pairs.is_empty() {
                "source_target_pairs = dense<> : tensor<0x2xi64>".to_string()
            } else {
                format!("source_target_pairs = dense<[{list}]> : tensor<{}x2xi64>", pairs.len())
            };
            f.op("stablehlo.collective_permute", &[x], &[], &attrs, &[Ty::new(dtype, sizes)])[0]
        }
        Collective::Broadcast { root } => broadcast(&mut f, x, *root, dtype, &groups),
    };
    let out_numel: i64 = out_sizes.iter().product();
    let out = f.reshape(y, &[out_numel]);
    Ok(f.finish_with(&[out], n))
}

/// `dense<[[0, 1, .., n-1]]> : tensor<1xNxi64>`.
fn replica_groups(n: usize) -> String {
    let ids = (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    format!("dense<[[{ids}]]> : tensor<1x{n}xi64>")
}

fn reduce_region(f: &mut Func, op: ReduceOp, dtype: DType) -> String {
    let scalar = Ty::scalar(dtype);
    // A single op: XLA's CPU collectives accept only a plain binary
    // computation (its maximum and minimum propagate NaN already).
    f.region(&[scalar.clone(), scalar], |f, a| vec![f.binary(op.reducer(dtype).op(), a[0], a[1])])
}

fn all_reduce(f: &mut Func, x: V, op: ReduceOp, dtype: DType, groups: &str) -> V {
    let ty = f.ty(x).clone();
    let region = reduce_region(f, op, dtype);
    f.op("stablehlo.all_reduce", &[x], &[region], &format!("replica_groups = {groups}"), &[ty])[0]
}

/// Divides a sum by the group size for `avg`.
fn average(f: &mut Func, sum: V, op: ReduceOp, n: usize) -> V {
    if op != ReduceOp::Avg {
        return sum;
    }
    let ty = f.ty(sum).clone();
    let count = f.splat(&ty, n as f64);
    f.div(sum, count)
}

/// The root's tensor on every rank, bit for bit: the root contributes its
/// bits as an unsigned integer, every other rank zeros, and an integer sum
/// of one value and zeros is that value (NaNs and -0.0 included, which a
/// floating-point sum would not keep).
fn broadcast(f: &mut Func, x: V, root: usize, dtype: DType, groups: &str) -> V {
    let bits = match dtype.size() {
        1 => Elem::U8,
        2 => Elem::I16,
        4 => Elem::U32,
        _ => Elem::U64,
    };
    let raw = if dtype.is_bool() {
        f.convert(x, Elem::U8)
    } else if Elem::from(dtype) == bits {
        x
    } else {
        f.bitcast_convert(x, bits)
    };
    let id = f.op("stablehlo.replica_id", &[], &[], "", &[Ty::scalar(Elem::U32)])[0];
    let root_id = f.splat_int(&Ty::scalar(Elem::U32), root as i64);
    let is_root = f.compare(Cmp::Eq, id, root_id);
    let dims = f.ty(raw).dims.to_vec();
    let mask = f.broadcast_in_dim(is_root, &[], &dims);
    let zeros = f.full_like(raw, 0.0);
    let mine = f.select(mask, raw, zeros);
    let ty = f.ty(mine).clone();
    let region = f.region(&[Ty::scalar(bits), Ty::scalar(bits)], |f, a| vec![f.add(a[0], a[1])]);
    let summed = f.op("stablehlo.all_reduce", &[mine], &[region], &format!("replica_groups = {groups}"), &[ty])[0];
    if dtype.is_bool() {
        let zero = f.full_like(summed, 0.0);
        f.compare(Cmp::Ne, summed, zero)
    } else if Elem::from(dtype) == bits {
        summed
    } else {
        f.bitcast_convert(summed, Elem::from(dtype))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_reduce_program_names_the_replicas() {
        let text = program(&Collective::AllReduce(ReduceOp::Sum), 4, DType::F32, &[2, 3]).unwrap();
        assert!(text.contains("mhlo.num_replicas = 4"), "{text}");
        assert!(text.contains("\"stablehlo.all_reduce\""), "{text}");
        assert!(text.contains("dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>"), "{text}");
        assert!(!text.contains("channel_handle"), "{text}");
    }

    #[test]
    fn gather_and_scatter_change_dim0() {
        let g = program(&Collective::AllGather, 2, DType::BF16, &[3, 5]).unwrap();
        assert!(g.contains("tensor<6x5xbf16>"), "{g}");
        let s = program(&Collective::ReduceScatter(ReduceOp::Avg), 2, DType::F32, &[4]).unwrap();
        assert!(s.contains("-> tensor<2xf32>") && s.contains("stablehlo.divide"), "{s}");
    }
}
