//! A counting global allocator for the memory benches and the tests that
//! bound allocation: it forwards to the system allocator and keeps the
//! number of live heap bytes and of allocations made.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LARGE: AtomicUsize = AtomicUsize::new(0);

/// The size from which [`large_allocations`] counts an allocation: glibc's
/// allocator serves smaller requests from its per-thread cache, and from
/// this size on takes its large-bin path, which first consolidates every
/// free small chunk (a cost that grows with a fragmented heap).
pub const LARGE_ALLOCATION: usize = 1024;

/// Install with `#[global_allocator] static A: CountingAllocator =
/// CountingAllocator;` and read [`live_bytes`] before and after.
pub struct CountingAllocator;

// SAFETY: forwards to the system allocator and only counts bytes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        if layout.size() >= LARGE_ALLOCATION {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Heap bytes allocated through [`CountingAllocator`] and not yet freed.
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Allocations made through [`CountingAllocator`] so far (a count, not
/// bytes: a growing `Vec`'s occasional doubling counts once, so the number
/// follows work done per item rather than where the doublings fall).
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Allocations of at least [`LARGE_ALLOCATION`] bytes made through
/// [`CountingAllocator`] so far.
pub fn large_allocations() -> usize {
    LARGE.load(Ordering::Relaxed)
}
