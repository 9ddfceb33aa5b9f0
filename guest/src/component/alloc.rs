//! The component's allocator: small blocks from free lists ([`super::blocks`]), the
//! rest from talc over a static arena, then over linear memory grown in steps of
//! [`STEP`].
//!
//! The default allocator of `wasm32-unknown-unknown` (dlmalloc) takes all of its memory
//! with `memory.grow`, 64 KiB at a time. Every instance of the planner is fresh, so
//! each request grew its memory from nothing, and each growth past the memory a pooled
//! slot already exposes costs the host an `mprotect`, and another one to take it back
//! when the slot is reset: a quarter of an almost empty call went to those. The arena
//! lives in `.bss`, so it is part of the memory every instance starts with and small
//! requests never grow; large ones grow a few times instead of once per 64 KiB.

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32::memory_grow;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use talc::base::Talc;
use talc::base::binning::Binning;
use talc::cell::TalcCell;
use talc::source::Source;
use talc::wasm::WasmBinning;

use super::blocks::Blocks;

/// The heap every instance starts with; requests that need more grow memory.
const ARENA: usize = 256 << 10;
/// How much of the arena talc gets at a time: a small request's heap stays in the
/// pages right after the data, which the host keeps resident between requests.
const ARENA_STEP: usize = 64 << 10;
/// How much memory a growth adds at least.
const STEP: usize = 2 << 20;
const PAGE: usize = 64 << 10;
/// More than talc's bookkeeping of a new heap and of one chunk.
const OVERHEAD: usize = 256;

static mut MEMORY: [MaybeUninit<u8>; ARENA] = [MaybeUninit::uninit(); ARENA];

#[global_allocator]
static ALLOCATOR: SingleThreaded<Blocks<TalcCell<ArenaThenGrow, WasmBinning>>> =
    SingleThreaded(Blocks::new(TalcCell::new(ArenaThenGrow { arena_used: 0, end: None })));

/// What a program with one thread may share as if it had many.
struct SingleThreaded<T>(T);

const _: () =
    assert!(cfg!(all(target_family = "wasm", not(target_feature = "atomics"))), "the component has one thread");

// SAFETY: WebAssembly without atomics has one thread (asserted above), so nothing is
// ever used from two threads at once.
unsafe impl<T> Sync for SingleThreaded<T> {}

// SAFETY: `T` is a `GlobalAlloc`; this only lets the one thread reach it.
unsafe impl<T: GlobalAlloc> GlobalAlloc for SingleThreaded<T> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as our caller promised.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: as our caller promised.
        unsafe { self.0.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as our caller promised.
        unsafe { self.0.realloc(block, layout, new_size) }
    }
}

/// Hands talc the arena, a step at a time, then memory grown at the end of linear
/// memory, extending the heap whenever the new memory is contiguous with it.
#[derive(Debug)]
struct ArenaThenGrow {
    /// How much of the arena talc has.
    arena_used: usize,
    /// The end of the heap talc extends next.
    end: Option<NonNull<u8>>,
}

impl ArenaThenGrow {
    /// Gives talc `base..base + bytes`, extending its current heap when that ends at `base`.
    ///
    /// # Safety
    /// The memory must be unused, and nobody else's.
    unsafe fn hand_over<B: Binning>(talc: &mut Talc<Self, B>, base: *mut u8, bytes: usize) -> Result<(), ()> {
        talc.source.end = match talc.source.end.take() {
            // SAFETY: `base..base + bytes` directly follows the heap ending at `end`.
            Some(end) if end.as_ptr() == base => Some(unsafe { talc.extend(end, base.wrapping_add(bytes)) }),
            // SAFETY: as the caller promised.
            _ => unsafe { talc.claim(base, bytes) },
        };
        talc.source.end.map(|_| ()).ok_or(())
    }
}

// SAFETY: `acquire` uses no allocator; it only hands talc memory nothing else uses.
unsafe impl Source for ArenaThenGrow {
    fn acquire<B: Binning>(talc: &mut Talc<Self, B>, layout: Layout) -> Result<(), ()> {
        let needed = layout.size() + layout.align() + OVERHEAD;
        let used = talc.source.arena_used;
        if needed <= ARENA - used {
            let bytes = needed.next_multiple_of(ARENA_STEP).min(ARENA - used);
            talc.source.arena_used += bytes;
            let base = (&raw mut MEMORY).cast::<u8>().wrapping_add(used);
            // SAFETY: this part of the arena was never handed over, and only talc uses it.
            return unsafe { Self::hand_over(talc, base, bytes) };
        }
        let needed = needed.div_ceil(PAGE);
        let (pages, previous) = match memory_grow(0, needed.max(STEP / PAGE)) {
            // Near the memory budget a full step may not fit where the request does.
            usize::MAX => (needed, memory_grow(0, needed)),
            previous => (needed.max(STEP / PAGE), previous),
        };
        if previous == usize::MAX {
            return Err(());
        }
        // SAFETY: the memory was just grown; nothing else knows of it.
        unsafe { Self::hand_over(talc, (previous * PAGE) as *mut u8, pages * PAGE) }
    }
}
