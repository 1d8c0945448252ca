//! Gives libtorchtpu.so a SONAME, so that a frontend linked against it (the
//! PyTorch extension) and one that opens it by path (cffi) share one copy of
//! the runtime in a process.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtorchtpu.so");
}
