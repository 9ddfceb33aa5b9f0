//! Link settings of the component build (`wasm32`): a 256 KiB shadow stack instead of
//! the default 1 MiB. The stack comes first in linear memory, so an overflow traps at
//! address zero instead of running into data; the planner's deepest recursion (JSON
//! nested to serde_json's limit of 128) needs a small part of it. A smaller stack is
//! less memory for the host to scan and reset between requests.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-cdylib=-zstack-size=262144");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
