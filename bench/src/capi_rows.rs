//! The C ABI rows: `aten::mul.Tensor` on 1024 f32 through `ttpu_op_call`
//! (by name, a handle per argument and result) and `ttpu_op_call_id` (by op
//! id, arguments as views of their storages, results with their geometry),
//! each against the direct PJRT execute timed in the same run.

use std::ffi::CString;
use std::ptr;
use std::time::Instant;

use torchtpu::op::{ttpu_op_call, ttpu_op_call_id, ttpu_op_lookup, ttpu_result_t, ttpu_value_kind, ttpu_value_t, ttpu_view_t};
use torchtpu::runtime::{ttpu_runtime_create, ttpu_runtime_destroy, ttpu_runtime_synchronize, ttpu_runtime_t};
use torchtpu::tensor::{ttpu_tensor_destroy, ttpu_tensor_from_host, ttpu_tensor_t};

use super::{median, ROUNDS};

fn ok(e: *mut torchtpu::error::ttpu_error_t) {
    if !e.is_null() {
        let msg = unsafe { std::ffi::CStr::from_ptr(torchtpu::error::ttpu_error_message(e)) };
        panic!("C ABI call failed: {}", msg.to_string_lossy());
    }
}

struct C {
    rt: *mut ttpu_runtime_t,
    a: *mut ttpu_tensor_t,
    b: *mut ttpu_tensor_t,
    id: usize,
    name: CString,
}

impl C {
    /// One call by name; returns the result handle.
    fn by_name(&self) -> *mut ttpu_tensor_t {
        let args = [tensor(self.a), tensor(self.b)];
        let mut out = [none(); 1];
        let mut n = 0;
        ok(unsafe { ttpu_op_call(self.rt, self.name.as_ptr(), args.as_ptr(), 2, out.as_mut_ptr(), 1, &mut n) });
        out[0].ptr as *mut ttpu_tensor_t
    }

    /// One call by id with views.
    fn by_id(&self, sizes: &[i64; 1], strides: &[i64; 1]) -> *mut ttpu_tensor_t {
        let va = ttpu_view_t { storage: self.a, sizes: sizes.as_ptr(), strides: strides.as_ptr(), ndim: 1, offset: 0 };
        let vb = ttpu_view_t { storage: self.b, ..va };
        let args = [view(&va), view(&vb)];
        let mut out = [ttpu_result_t {
            tensor: ptr::null_mut(),
            arg: -1,
            dtype: 0,
            device: 0,
            offset: 0,
            ndim: 0,
            sizes: ptr::null(),
            strides: ptr::null(),
            storage_numel: 0,
        }];
        let mut n = 0;
        ok(unsafe { ttpu_op_call_id(self.rt, self.id, args.as_ptr(), 2, out.as_mut_ptr(), std::mem::size_of::<ttpu_result_t>(), 1, &mut n) });
        out[0].tensor
    }

    /// Seconds per op over `iters` calls of `f`, all launched, then
    /// synchronized: the per-op cost a frontend pays when it does not wait
    /// (waiting on each result through the C ABI is a whole-runtime
    /// synchronize, which would measure that instead).
    fn time(&self, iters: usize, f: impl Fn() -> *mut ttpu_tensor_t) -> f64 {
        let t = Instant::now();
        let outs: Vec<_> = (0..iters).map(|_| f()).collect();
        ok(unsafe { ttpu_runtime_synchronize(self.rt) });
        outs.into_iter().for_each(|o| unsafe { ttpu_tensor_destroy(o) });
        t.elapsed().as_secs_f64() / iters as f64
    }
}

fn none() -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::None as i32, i: 0, d: 0.0, ptr: ptr::null(), len: 0 }
}

fn tensor(t: *const ttpu_tensor_t) -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::Tensor as i32, ptr: t.cast(), ..none() }
}

fn view(v: &ttpu_view_t) -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::View as i32, ptr: (v as *const ttpu_view_t).cast(), ..none() }
}

/// Prints the C ABI rows (pipelined); `direct(pipelined, iters)` times the direct PJRT
/// execute of the same program (seconds per op).
pub fn print(ha: &[u8], hb: &[u8], n: usize, direct: impl Fn(bool, usize) -> f64) {
    let mut rt = ptr::null_mut();
    ok(unsafe { ttpu_runtime_create(ptr::null(), &mut rt) });
    let sizes = [n as i64];
    let strides = [1i64];
    let upload = |h: &[u8]| {
        let mut t = ptr::null_mut();
        ok(unsafe { ttpu_tensor_from_host(rt, h.as_ptr().cast(), h.len(), 6, sizes.as_ptr(), 1, 0, &mut t) });
        t
    };
    let name = CString::new("aten::mul.Tensor").unwrap();
    let mut id = 0;
    ok(unsafe { ttpu_op_lookup(name.as_ptr(), &mut id) });
    let c = C { rt, a: upload(ha), b: upload(hb), id, name };
    for _ in 0..3 {
        c.time(1, || c.by_name());
        c.time(1, || c.by_id(&sizes, &strides));
    }
    let iters = 300;
    let (mut named, mut lean, mut pjrt) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        named.push(c.time(iters, || c.by_name()));
        lean.push(c.time(iters, || c.by_id(&sizes, &strides)));
        pjrt.push(direct(true, iters));
    }
    let d = median(pjrt);
    for (label, xs) in [("ttpu_op_call", named), ("ttpu_op_call_id", lean)] {
        let x = median(xs);
        println!("{:<44} {:>12.2} {:>12.2} {:>7.2}x", format!("C {label}, mul pipelined (us/op)"), x * 1e6, d * 1e6, x / d);
    }
    unsafe {
        ttpu_tensor_destroy(c.a);
        ttpu_tensor_destroy(c.b);
        ttpu_runtime_destroy(c.rt);
    }
}
