//! The WebAssembly component's plumbing, apart from the pure planner: the wit-bindgen
//! glue (`glue.rs`), the allocator (`alloc.rs`, over the free lists of `blocks.rs`) and
//! `memcmp` (`memcmp.rs`). Only the component uses them: natively, `memcmp.rs` and (in
//! tests) `blocks.rs` compile so that their tests run.

#[cfg(all(target_arch = "wasm32", feature = "component"))]
#[expect(unsafe_code, reason = "the canonical ABI glue that wit-bindgen generates")]
mod glue;

#[cfg(all(target_arch = "wasm32", feature = "component"))]
#[expect(unsafe_code, reason = "an allocator hands out raw memory")]
mod alloc;
#[cfg(any(test, all(target_arch = "wasm32", feature = "component")))]
#[expect(unsafe_code, reason = "an allocator hands out raw memory")]
mod blocks;

#[cfg_attr(
    all(target_arch = "wasm32", feature = "component"),
    expect(unsafe_code, reason = "C's memcmp reads raw memory")
)]
#[cfg_attr(
    not(all(target_arch = "wasm32", feature = "component")),
    allow(dead_code, reason = "only the component links it; tests check it")
)]
mod memcmp;
