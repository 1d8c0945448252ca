//! Compiles each StableHLO file given on the command line and reports errors.
use torchtpu_core::pjrt::{discovery, Api, Client, CompileOptions};
fn main() {
    let api = Api::load(&discovery::find_plugin(None).unwrap().path).unwrap();
    let client = Client::create(api, &[]).unwrap();
    for f in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&f).unwrap();
        match client.compile(&f, &text, &CompileOptions::Portable) {
            Ok(_) => println!("OK   {f}"),
            Err(e) => println!("FAIL {f}: {}", e.to_string().lines().take(3).collect::<Vec<_>>().join(" | ")),
        }
    }
}
