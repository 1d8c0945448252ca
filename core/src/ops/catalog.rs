//! The op catalog as the crate's public API presents it (and the C ABI
//! passes on): which ops exist, their names and how many values a call
//! returns, without the registry's internals (schemas, lowerings).
//!
//! Thread-safe. Ops are only ever added (by plugins), so an id stays valid
//! and the count only grows.

use std::ffi::CStr;

use super::registry;
use crate::error::{Error, Result};

/// The id of the op called `name`; `aten::relu` also finds an op registered
/// without an overload name. An unknown name is a `NotFound` error that
/// suggests the overloads or a near name.
pub fn op_id(name: &str) -> Result<usize> {
    registry().lookup(name)
}

/// Whether the runtime runs the op that aten declaration `decl` declares
/// (the frontend's own schema, e.g. PyTorch's), with those arguments: an
/// op registered under that name, or an `out=` form (`X.out`, `X.ov_out`)
/// derived from a functional op that takes exactly the declared inputs, by
/// name and type. A declaration the runtime cannot parse is `false`.
pub fn op_declare(decl: &str) -> Result<bool> {
    registry().declare(decl)
}

/// The number of registered ops (built-in and from plugins); ids are
/// `0..op_count()`.
pub fn op_count() -> usize {
    registry().len()
}

/// The full name of op `id`, NUL-terminated for C callers, or `None` past
/// the last op.
pub fn op_c_name(id: usize) -> Option<&'static CStr> {
    let reg = registry();
    (id < reg.len()).then(|| reg.get(id).c_name())
}

/// The aten declaration of op `id` (`aten::add.Tensor(Tensor self, Tensor
/// other, *, Scalar alpha=1) -> Tensor`), NUL-terminated, static.
pub fn op_c_decl(id: usize) -> Option<&'static CStr> {
    let reg = registry();
    (id < reg.len()).then(|| reg.get(id).c_decl())
}

/// How many values a call of the op `name` returns, when its schema fixes
/// that: `None` when a `Tensor[]` return makes it depend on the arguments.
pub fn op_result_count(name: &str) -> Result<Option<usize>> {
    op_result_count_id(op_id(name)?)
}

/// As [`op_result_count`] for the op with id `id`.
pub fn op_result_count_id(id: usize) -> Result<Option<usize>> {
    let reg = registry();
    if id >= reg.len() {
        return Err(Error::InvalidArgument(format!("op id {id} is not below the op count {}", reg.len())));
    }
    let returns = &reg.get(id).schema.returns;
    Ok((!returns.iter().any(|t| t == "Tensor[]")).then_some(returns.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_names_and_counts() {
        let id = op_id("aten::add.Tensor").unwrap();
        assert_eq!(op_c_name(id).unwrap().to_str().unwrap(), "aten::add.Tensor");
        assert!(id < op_count() && op_c_name(op_count()).is_none());
        assert_eq!(op_result_count("aten::add.Tensor").unwrap(), Some(1));
        assert_eq!(op_result_count("aten::sort").unwrap(), Some(2));
        assert_eq!(op_result_count("aten::split.Tensor").unwrap(), None);
        assert_eq!(op_result_count("aten::_amp_foreach_non_finite_check_and_unscale_").unwrap(), Some(0));
        assert_eq!(op_id("aten::no_such_op").unwrap_err().code(), crate::error::Code::NotFound);
    }
}
