//! Collectives: what they mean, how their arguments are checked, and their
//! lowering to StableHLO ([`lower`]). Running them belongs to the runtime
//! (`runtime/collective.rs`).
//!
//! A collective runs over a *group*: an ordered list of PJRT global device
//! ids. A member's position in the group is its *rank*; roots and
//! send/receive pairs name ranks. Each member contributes one tensor, and
//! every member's tensor has the same dtype and shape (an all-to-all or a
//! reduce-scatter also needs dim 0 divisible by the group size).
//!
//! Every collective is one small program compiled with `num_replicas` = the
//! group size and the group's devices as its device assignment, so replica
//! `r` is rank `r` and `replica_groups` is simply `[[0, .., n-1]]`. Within
//! one process every member is a local device; where a client's devices span
//! processes (libtpu on a pod), each process passes only its own members and
//! PJRT runs the rest elsewhere: the lowering is the same.

mod lower;

pub(crate) use lower::program;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::hlo::Reducer;
use crate::shape;

/// How an all-reduce or a reduce-scatter combines the members' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// The sum divided by the group size (floating-point dtypes only).
    Avg,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }

    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The element-wise combiner for `dtype` (booleans reduce logically).
    fn reducer(self, dtype: DType) -> Reducer {
        match (self, dtype.is_bool()) {
            (ReduceOp::Sum | ReduceOp::Avg, false) => Reducer::Add,
            (ReduceOp::Prod, false) => Reducer::Mul,
            (ReduceOp::Max, false) => Reducer::Max,
            (ReduceOp::Min, false) => Reducer::Min,
            (ReduceOp::Sum | ReduceOp::Max, true) => Reducer::Or,
            (_, true) => Reducer::And,
        }
    }
}

/// One collective, with its attributes. Shapes are PyTorch's
/// (`all_gather_into_tensor`, `reduce_scatter_tensor`, `all_to_all_single`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank gets the reduction of all ranks' tensors.
    AllReduce(ReduceOp),
    /// Every rank gets all ranks' tensors concatenated along dim 0 (a rank-0
    /// tensor counts as shape `[1]`).
    AllGather,
    /// The reduction, split along dim 0: rank `r` gets chunk `r`.
    ReduceScatter(ReduceOp),
    /// Every rank gets the tensor of rank `root`.
    Broadcast { root: usize },
    /// Dim 0 split into one chunk per rank: chunk `j` of rank `i` becomes
    /// chunk `i` of rank `j`.
    AllToAll,
    /// `(source, target)` rank pairs: each target gets its source's tensor
    /// (send/recv); a rank that is no pair's target gets zeros. No rank is
    /// the source, or the target, of two pairs.
    Permute { pairs: Vec<(usize, usize)> },
}

impl Collective {
    pub fn name(&self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter(_) => "reduce_scatter",
            Collective::Broadcast { .. } => "broadcast",
            Collective::AllToAll => "all_to_all",
            Collective::Permute { .. } => "collective_permute",
        }
    }

    /// The attributes, as cache summaries and errors print them.
    pub fn attrs(&self) -> String {
        match self {
            Collective::AllReduce(op) | Collective::ReduceScatter(op) => format!("op={}", op.name()),
            Collective::Broadcast { root } => format!("root={root}"),
            Collective::Permute { pairs } => format!("pairs={pairs:?}"),
            Collective::AllGather | Collective::AllToAll => String::new(),
        }
    }

    /// Checks the attributes and the members' common `dtype` and `sizes`
    /// against a group of `n`; returns each rank's output sizes.
    pub fn output_sizes(&self, n: usize, dtype: DType, sizes: &[i64]) -> Result<Vec<i64>> {
        let name = self.name();
        let err = |msg: String| Err(Error::op(name, msg));
        if n == 0 {
            return err("the group is empty".into());
        }
        let divisible = |what: &str| -> Result<()> {
            match sizes.first() {
                Some(d0) if d0 % n as i64 == 0 => Ok(()),
                _ => Err(Error::op(
                    name,
                    format!("{what} needs dim 0 divisible by the group size {n}, but the input is {dtype}{}", shape::fmt(sizes)),
                )),
            }
        };
        match self {
            Collective::AllReduce(op) | Collective::ReduceScatter(op) => {
                if *op == ReduceOp::Avg && !dtype.is_float() {
                    return Err(Error::UnsupportedDType {
                        op: name.into(),
                        dtype: dtype.to_string(),
                        detail: " with op=avg (a floating-point dtype is needed)".into(),
                    });
                }
                if let Collective::ReduceScatter(_) = self {
                    divisible("reduce_scatter")?;
                    let mut out = sizes.to_vec();
                    out[0] /= n as i64;
                    return Ok(out);
                }
                Ok(sizes.to_vec())
            }
            Collective::AllGather => {
                let mut out = if sizes.is_empty() { vec![1] } else { sizes.to_vec() };
                out[0] *= n as i64;
                Ok(out)
            }
            Collective::Broadcast { root } => {
                if *root >= n {
                    return err(format!("root rank {root} is outside the group of {n}"));
                }
                Ok(sizes.to_vec())
            }
            Collective::AllToAll => {
                divisible("all_to_all")?;
                Ok(sizes.to_vec())
            }
            Collective::Permute { pairs } => {
                for (i, &(s, t)) in pairs.iter().enumerate() {
                    if s >= n || t >= n {
                        return err(format!("pair ({s}, {t}) names a rank outside the group of {n}"));
                    }
                    if let Some((s2, t2)) = pairs[..i].iter().find(|(s2, t2)| *s2 == s || *t2 == t) {
                        return err(format!(
                            "pairs ({s2}, {t2}) and ({s}, {t}) share a {}; each rank sends at most once and receives at most once",
                            if *s2 == s { "source" } else { "target" }
                        ));
                    }
                }
                Ok(sizes.to_vec())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_pytorch() {
        let f = DType::F32;
        assert_eq!(Collective::AllGather.output_sizes(4, f, &[2, 3]).unwrap(), vec![8, 3]);
        assert_eq!(Collective::AllGather.output_sizes(4, f, &[]).unwrap(), vec![4]);
        assert_eq!(Collective::ReduceScatter(ReduceOp::Sum).output_sizes(2, f, &[4, 3]).unwrap(), vec![2, 3]);
        assert_eq!(Collective::AllToAll.output_sizes(2, f, &[4]).unwrap(), vec![4]);
        assert_eq!(Collective::AllReduce(ReduceOp::Max).output_sizes(3, f, &[5]).unwrap(), vec![5]);
    }

    #[test]
    fn bad_attributes_name_the_collective() {
        let f = DType::F32;
        let cases: Vec<(Collective, DType, Vec<i64>, &str)> = vec![
            (Collective::ReduceScatter(ReduceOp::Sum), f, vec![3], "divisible by the group size 2"),
            (Collective::AllToAll, f, vec![], "divisible"),
            (Collective::AllReduce(ReduceOp::Avg), DType::I32, vec![2], "op=avg"),
            (Collective::Broadcast { root: 2 }, f, vec![2], "root rank 2 is outside the group of 2"),
            (Collective::Permute { pairs: vec![(0, 1), (0, 0)] }, f, vec![2], "share a source"),
            (Collective::Permute { pairs: vec![(0, 5)] }, f, vec![2], "outside the group"),
        ];
        for (c, dtype, sizes, want) in cases {
            let e = c.output_sizes(2, dtype, &sizes).unwrap_err().to_string();
            assert!(e.contains(c.name()) && e.contains(want), "{c:?}: {e}");
        }
    }

    #[test]
    fn reduce_op_names_round_trip() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_name(op.name()), Some(op));
        }
        assert_eq!(ReduceOp::from_name("mean"), None);
    }
}
