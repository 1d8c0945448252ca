//! Shapes, strides, broadcasting and dim arithmetic, with PyTorch's rules and
//! error messages.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// Sizes or strides of a tensor. Six dims live inline.
pub type Dims = SmallVec<[i64; 6]>;

pub fn numel(sizes: &[i64]) -> i64 {
    sizes.iter().product()
}

/// The most bytes one tensor may have: 2^40 (1 TiB). No accelerator holds
/// that much in one memory (an H200 has 141 GB, a TPU v5p 95 GB), so a
/// larger result can only be a bad shape (`aten::full([1 << 40], ...)`, an
/// overflowing product); it is rejected before anything is compiled or
/// allocated. A fixed cap rather than the device's reported memory: PJRT's
/// CPU plugin reports none, and the cap only has to stop absurd shapes.
pub const MAX_TENSOR_BYTES: u64 = 1 << 40;

/// Checks that a tensor of `sizes` and elements of `itemsize` bytes has no
/// negative size and at most [`MAX_TENSOR_BYTES`] bytes (computed without
/// overflow); returns its numel. `what` names the op and the tensor.
pub fn checked_numel(what: &str, sizes: &[i64], itemsize: usize) -> Result<i64> {
    if let Some(bad) = sizes.iter().find(|&&s| s < 0) {
        return Err(Error::InvalidArgument(format!("{what}: negative size {bad} in shape {}", fmt(sizes))));
    }
    if sizes.contains(&0) {
        return Ok(0);
    }
    let numel = sizes.iter().try_fold(1u64, |n, &s| n.checked_mul(s as u64));
    match numel.and_then(|n| n.checked_mul(itemsize as u64).map(|b| (n, b))) {
        Some((n, bytes)) if bytes <= MAX_TENSOR_BYTES => Ok(n as i64),
        _ => Err(Error::ResourceExhausted(format!(
            "{what}: a tensor of shape {} with {itemsize}-byte elements would exceed the {MAX_TENSOR_BYTES}-byte \
             (1 TiB) limit on one tensor",
            fmt(sizes)
        ))),
    }
}

/// Row-major strides for `sizes`.
pub fn contiguous_strides(sizes: &[i64]) -> Dims {
    let mut strides: Dims = smallvec::smallvec![1; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * sizes[i + 1].max(1);
    }
    strides
}

/// Whether `(sizes, strides)` is row-major dense. Strides of size-1 dims do
/// not matter, as in PyTorch's `is_contiguous`.
pub fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    if numel(sizes) == 0 {
        return true;
    }
    let mut expected = 1;
    for i in (0..sizes.len()).rev() {
        if sizes[i] == 1 {
            continue;
        }
        if strides[i] != expected {
            return false;
        }
        expected *= sizes[i];
    }
    true
}

/// `[2, 3]` style, as PyTorch prints shapes in errors.
pub fn fmt(sizes: &[i64]) -> String {
    format!("[{}]", sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
}

/// Wraps a possibly negative `dim` for a tensor of rank `rank`.
/// The bounds of `slice(start, end)` over a dimension of size `n`, clamped
/// like PyTorch: negative bounds count from the end, then both are clamped
/// into `[0, n]` with `end >= start`.
pub fn clamp_slice(n: i64, start: Option<i64>, end: Option<i64>) -> (i64, i64) {
    let (mut start, mut end) = (start.unwrap_or(0), end.unwrap_or(i64::MAX));
    if start < 0 {
        start += n;
    }
    if end < 0 {
        end += n;
    }
    let start = start.clamp(0, n);
    (start, end.clamp(start, n.max(start)))
}

pub fn wrap_dim(op: &str, dim: i64, rank: usize) -> Result<usize> {
    // PyTorch treats a 0-dim tensor as having one dim for dim wrapping.
    let r = rank.max(1) as i64;
    if dim < -r || dim >= r {
        return Err(Error::op(
            op,
            format!("Dimension out of range (expected to be in range of [{}, {}], but got {dim})", -r, r - 1),
        ));
    }
    Ok(if dim < 0 { (dim + r) as usize } else { dim as usize })
}

/// Wraps a list of dims and rejects repeats.
pub fn wrap_dims(op: &str, dims: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let w = wrap_dim(op, d, rank)?;
        if out.contains(&w) {
            return Err(Error::op(op, format!("dim {w} appears multiple times in the list of dims")));
        }
        out.push(w);
    }
    Ok(out)
}

/// NumPy/PyTorch broadcasting of two shapes.
pub fn broadcast(op: &str, a: &[i64], b: &[i64]) -> Result<Dims> {
    let n = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::op(
                op,
                format!(
                    "The size of tensor a ({da}) must match the size of tensor b ({db}) at non-singleton dimension {i} \
                     (shapes {} and {})",
                    fmt(a),
                    fmt(b)
                ),
            ));
        };
    }
    Ok(out)
}

/// Broadcasts several shapes together.
pub fn broadcast_all(op: &str, shapes: &[&[i64]]) -> Result<Dims> {
    let mut out: Dims = Dims::new();
    for s in shapes {
        out = broadcast(op, &out, s)?;
    }
    Ok(out)
}

/// Resolves a single `-1` in a requested shape against `numel` elements.
pub fn infer_size(op: &str, shape: &[i64], numel: i64) -> Result<Dims> {
    let mut out: Dims = shape.into();
    let mut infer = None;
    let mut known = 1i64;
    for (i, &s) in shape.iter().enumerate() {
        if s == -1 {
            if infer.is_some() {
                return Err(Error::op(op, "only one dimension can be inferred"));
            }
            infer = Some(i);
        } else if s < 0 {
            return Err(Error::op(op, format!("invalid shape dimension {s}")));
        } else {
            known *= s;
        }
    }
    match infer {
        Some(i) if known != 0 && numel % known == 0 => out[i] = numel / known,
        None if known == numel => {}
        _ => {
            return Err(Error::op(op, format!("shape '{}' is invalid for input of size {numel}", fmt(shape))));
        }
    }
    Ok(out)
}

/// Strides for viewing `(old_sizes, old_strides)` as `new_sizes` without a
/// copy, or `None` when the memory layout does not allow it. This is
/// PyTorch's `computeStride`: dims are grouped into chunks that are
/// contiguous in memory, and a view may only split or merge within a chunk.
pub fn view_strides(old_sizes: &[i64], old_strides: &[i64], new_sizes: &[i64]) -> Option<Dims> {
    let mut new_strides: Dims = smallvec::smallvec![0; new_sizes.len()];
    if old_sizes.is_empty() {
        return Some(smallvec::smallvec![1; new_sizes.len()]);
    }
    let n = numel(old_sizes);
    if n == 0 && old_sizes == new_sizes {
        return Some(old_strides.into());
    }
    if n == 0 {
        return Some(contiguous_strides(new_sizes));
    }
    let mut view_d = new_sizes.len() as i64 - 1;
    let mut chunk_base_stride = *old_strides.last().unwrap();
    let mut tensor_numel = 1;
    let mut view_numel = 1;
    for tensor_d in (0..old_sizes.len()).rev() {
        tensor_numel *= old_sizes[tensor_d];
        let boundary = tensor_d == 0
            || (old_sizes[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
        if boundary {
            while view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= new_sizes[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

/// The elements a storage needs to hold a view of `size` with `stride`
/// (both non-negative) at offset 0: `1 + sum((n - 1) * s)`, or 0 for an
/// empty view. Overflow is an invalid argument, not a wrap.
pub fn strided_extent(op: &str, size: &[i64], stride: &[i64]) -> Result<i64> {
    if size.contains(&0) {
        return Ok(0);
    }
    size.iter()
        .zip(stride)
        .try_fold(1i64, |acc, (&n, &s)| (n - 1).checked_mul(s).and_then(|x| acc.checked_add(x)))
        .ok_or_else(|| {
            let (size, stride) = (fmt(size), fmt(stride));
            Error::op(op, format!("size {size} with stride {stride} needs a storage of more than 2^63 - 1 elements"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_extent_is_checked() {
        let op = "aten::empty_strided";
        assert_eq!(strided_extent(op, &[2, 3], &[1, 2]).unwrap(), 6);
        assert_eq!(strided_extent(op, &[], &[]).unwrap(), 1);
        assert_eq!(strided_extent(op, &[4, 5], &[0, 0]).unwrap(), 1);
        // Empty whatever the strides, even where the product of sizes wraps.
        assert_eq!(strided_extent(op, &[0, 1 << 62], &[1 << 62, 1 << 62]).unwrap(), 0);
        // The largest extent there is, then one past it.
        assert_eq!(strided_extent(op, &[1 << 62, 1 << 62], &[1, 1]).unwrap(), i64::MAX);
        for (size, stride) in [(&[1 << 62, 1 << 62, 2][..], &[1, 1, 1][..]), (&[1 << 32, 1 << 32], &[1 << 32, 1])] {
            let e = strided_extent(op, size, stride).unwrap_err();
            assert_eq!(e.code(), crate::error::Code::InvalidArgument);
            let msg = e.to_string();
            assert!(msg.contains(op) && msg.contains(&fmt(size)) && msg.contains(&fmt(stride)), "{msg}");
        }
    }

    #[test]
    fn checked_numel_caps_and_overflow() {
        assert_eq!(checked_numel("t", &[2, 3], 4).unwrap(), 6);
        assert_eq!(checked_numel("t", &[0, 1 << 62], 8).unwrap(), 0);
        assert_eq!(checked_numel("t", &[], 4).unwrap(), 1);
        assert_eq!(checked_numel("t", &[1 << 38], 4).unwrap(), 1 << 38); // exactly 1 TiB
        for sizes in [&[1i64 << 40][..], &[1 << 38, 5], &[1 << 32, 1 << 32], &[i64::MAX, i64::MAX, 2]] {
            let e = checked_numel("aten::full: result", sizes, 4).unwrap_err();
            assert_eq!(e.code(), crate::error::Code::ResourceExhausted, "{e}");
            assert!(e.to_string().contains("aten::full") && e.to_string().contains(&fmt(sizes)), "{e}");
        }
        let e = checked_numel("from_host", &[2, -1], 4).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("negative size -1"), "{e}");
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast("t", &[3, 1], &[4]).unwrap().as_slice(), &[3, 4]);
        assert_eq!(broadcast("t", &[], &[2, 2]).unwrap().as_slice(), &[2, 2]);
        let e = broadcast("aten::add.Tensor", &[3, 2], &[4]).unwrap_err().to_string();
        assert!(e.contains("aten::add.Tensor") && e.contains("[3, 2]") && e.contains("[4]"), "{e}");
    }

    #[test]
    fn dims() {
        assert_eq!(wrap_dim("t", -1, 3).unwrap(), 2);
        assert_eq!(wrap_dim("t", 0, 0).unwrap(), 0);
        assert!(wrap_dim("t", 3, 3).is_err());
        assert!(wrap_dims("t", &[0, -3], 3).is_err());
    }

    #[test]
    fn strides() {
        assert_eq!(contiguous_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
        assert!(is_contiguous(&[2, 1, 3], &[3, 99, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
        assert_eq!(infer_size("t", &[-1, 4], 12).unwrap().as_slice(), &[3, 4]);
        assert!(infer_size("t", &[5, -1], 12).is_err());
    }

    #[test]
    fn view_stride_rules() {
        // A contiguous tensor can be viewed as anything.
        assert_eq!(view_strides(&[2, 3, 4], &[12, 4, 1], &[6, 4]).unwrap().as_slice(), &[4, 1]);
        // A transposed matrix cannot be flattened ...
        assert!(view_strides(&[3, 2], &[1, 3], &[6]).is_none());
        // ... but its dims can be split.
        assert_eq!(view_strides(&[4, 2], &[1, 4], &[2, 2, 2]).unwrap().as_slice(), &[2, 1, 4]);
        // A column slice keeps rows separate: [4, 2] out of [4, 8].
        assert_eq!(view_strides(&[4, 2], &[8, 1], &[4, 2, 1]).unwrap().as_slice(), &[8, 1, 1]);
        assert!(view_strides(&[4, 2], &[8, 1], &[8]).is_none());
    }
}
