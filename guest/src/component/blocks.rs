//! Small blocks kept on free lists, one per size, in front of a general allocator.
//!
//! Most of what the planner allocates is small and short-lived: a string, a map's
//! node, a vector of a few values. A general allocator (talc in the component) finds,
//! splits and merges chunks for each of them, which cost about a fifth of a small
//! plan's instructions. Here a small block is taken from its size's free list, or cut
//! from a slab, and given back to that list: a handful of instructions each way.
//! Larger blocks, and blocks aligned beyond [`GRAIN`], go to the allocator behind.
//!
//! A freed small block is kept for its size only and slabs are never given back, so a
//! call's memory peaks at what it held of each size at once, not of all sizes. The
//! planner frees what it read and builds again in similar sizes, so that costs little;
//! `guest_bytes_per_object` in the benchmark watches it.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ptr::{self, null_mut};

/// Sizes are rounded up to a multiple of this, which is also every small block's
/// alignment.
const GRAIN: usize = 8;
/// The largest small block.
const SMALL: usize = 512;
/// How much a slab takes from the allocator behind at a time.
const SLAB: usize = 16 << 10;
const SIZES: usize = SMALL / GRAIN;

/// An allocator that serves small blocks from free lists and the rest from `A`.
pub(crate) struct Blocks<A> {
    behind: A,
    lists: UnsafeCell<Lists>,
}

/// Raw pointers, so neither `Send` nor `Sync`: only one thread may use them.
struct Lists {
    /// The first free block of each size; each free block's first word points to the
    /// next one of its size.
    free: [*mut u8; SIZES],
    /// The part of the current slab no block was cut from yet.
    slab: *mut u8,
    slab_end: *mut u8,
}

/// Which free list a layout's blocks belong to, if they are small.
fn list_of(layout: Layout) -> Option<usize> {
    (layout.size() <= SMALL && layout.align() <= GRAIN).then(|| layout.size().max(1).div_ceil(GRAIN) - 1)
}

impl<A: GlobalAlloc> Blocks<A> {
    pub(crate) const fn new(behind: A) -> Self {
        Blocks {
            behind,
            lists: UnsafeCell::new(Lists { free: [null_mut(); SIZES], slab: null_mut(), slab_end: null_mut() }),
        }
    }

    /// # Safety
    /// No other call into this allocator is under way (it has one thread).
    unsafe fn take(&self, size: usize) -> *mut u8 {
        // SAFETY: the caller promised that nothing else holds the lists.
        let lists = unsafe { &mut *self.lists.get() };
        let head = lists.free[size];
        if !head.is_null() {
            // SAFETY: a free block's first word holds the next free block of its size.
            lists.free[size] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let bytes = (size + 1) * GRAIN;
        if (lists.slab_end as usize) - (lists.slab as usize) < bytes {
            // SAFETY: `SLAB` is not zero and `GRAIN` is a power of two.
            let slab = unsafe { self.behind.alloc(Layout::from_size_align_unchecked(SLAB, GRAIN)) };
            if slab.is_null() {
                return null_mut();
            }
            // What is left of the old slab is a free block of its size, if any.
            let rest = (lists.slab_end as usize) - (lists.slab as usize);
            if rest >= GRAIN {
                // SAFETY: the rest is a whole number of grains nobody holds.
                unsafe { Self::give(lists, lists.slab, rest / GRAIN - 1) };
            }
            lists.slab = slab;
            lists.slab_end = slab.wrapping_add(SLAB);
        }
        let block = lists.slab;
        lists.slab = block.wrapping_add(bytes);
        block
    }

    /// # Safety
    /// `block` is a block of `size` that nobody holds any more.
    unsafe fn give(lists: &mut Lists, block: *mut u8, size: usize) {
        // SAFETY: every small block is aligned to and holds at least one pointer.
        unsafe { block.cast::<*mut u8>().write(lists.free[size]) };
        lists.free[size] = block;
    }
}

// SAFETY: small blocks are cut from slabs the allocator behind handed out, each held by
// one caller at a time, and are at least as large and as aligned as their layouts; the
// rest is the allocator behind's. One thread at a time: `Blocks` is not `Sync`, so only
// a wrapper that knows its program has one thread may share it.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Blocks<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match list_of(layout) {
            // SAFETY: one thread.
            Some(size) => unsafe { self.take(size) },
            // SAFETY: as our caller promised.
            None => unsafe { self.behind.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match list_of(layout) {
            // SAFETY: one thread; the caller gives the block back with its layout.
            Some(size) => unsafe { Self::give(&mut *self.lists.get(), block, size) },
            // SAFETY: as our caller promised.
            None => unsafe { self.behind.dealloc(block, layout) },
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller promised that the new size, aligned, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (list_of(layout), list_of(new_layout)) {
            (Some(old), Some(new)) if old == new => block,
            // SAFETY: as our caller promised.
            (None, None) => unsafe { self.behind.realloc(block, layout, new_size) },
            _ => {
                // SAFETY: the new layout is valid, as the caller promised.
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    // SAFETY: both blocks hold at least the smaller size and are distinct.
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::System;

    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn a_freed_block_is_the_next_of_its_size_and_no_other() {
        let blocks = Blocks::new(System);
        unsafe {
            let first = blocks.alloc(layout(24, 8));
            blocks.dealloc(first, layout(24, 8));
            let other_size = blocks.alloc(layout(32, 8));
            assert_ne!(other_size, first);
            assert_eq!(blocks.alloc(layout(17, 4)), first, "17 bytes round up to 24");
        }
    }

    #[test]
    fn blocks_are_aligned_apart_and_hold_their_bytes() {
        let blocks = Blocks::new(System);
        let mut held = Vec::new();
        unsafe {
            for round in 0..5_000usize {
                let size = round % (SMALL + 64) + 1;
                let align = 1 << (round % 5);
                let block = blocks.alloc(layout(size, align));
                assert!(!block.is_null());
                assert_eq!(block as usize % align, 0);
                ptr::write_bytes(block, round as u8, size);
                held.push((block, size, align, round as u8));
                if round % 3 == 0 {
                    let (block, size, align, byte) = held.swap_remove(round % held.len());
                    assert!((0..size).all(|at| *block.add(at) == byte), "a block was written by another");
                    blocks.dealloc(block, layout(size, align));
                }
            }
            for (block, size, align, byte) in held {
                assert!((0..size).all(|at| *block.add(at) == byte), "a block was written by another");
                blocks.dealloc(block, layout(size, align));
            }
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_across_sizes_and_allocators() {
        let blocks = Blocks::new(System);
        unsafe {
            let mut block = blocks.alloc(layout(3, 1));
            ptr::copy_nonoverlapping(b"abc".as_ptr(), block, 3);
            let mut size = 3;
            for new_size in [5, 8, 100, 511, 512, 513, 4_000, 600, 40, 2] {
                let grown = blocks.realloc(block, layout(size, 1), new_size);
                assert!(!grown.is_null());
                assert_eq!(std::slice::from_raw_parts(grown, 2), b"ab", "at {new_size} bytes");
                (block, size) = (grown, new_size);
            }
            blocks.dealloc(block, layout(size, 1));
        }
    }

    #[test]
    fn a_block_within_its_size_does_not_move() {
        let blocks = Blocks::new(System);
        unsafe {
            let block = blocks.alloc(layout(9, 8));
            assert_eq!(blocks.realloc(block, layout(9, 8), 16), block);
            blocks.dealloc(block, layout(16, 8));
        }
    }
}
