//! A global allocator that counts the heap allocations of one thread while asked to, for the
//! allocation tests and the server benchmark's CPU rows.
//!
//! An allocation is a call to `alloc`, `alloc_zeroed` or `realloc`: each is a trip into the
//! allocator. Counting is per thread because test harnesses and runtimes allocate on their own
//! threads meanwhile. A binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: idem_tests::allocations::CountingAllocator =
//!     idem_tests::allocations::CountingAllocator;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

/// The system allocator, counting the allocations of the thread that asked for counting.
pub struct CountingAllocator;

thread_local! {
    // `const` thread-locals without a destructor never allocate on first access, so the
    // allocator can read them without recursing into itself.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: the thread may be tearing its locals down; such allocations are not ours.
    let _ = COUNTING.try_with(|counting| {
        if counting.get() {
            ALLOCATIONS.with(|count| count.set(count.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to `System`; counting touches only thread-locals
// that do not allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` was allocated by this allocator, that is by `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator, that is by `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` and returns its result with the allocations it made on this thread.
///
/// # Panics
///
/// If [`CountingAllocator`] is not the binary's global allocator: every count would be 0.
pub fn allocations_in<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let counting = Counting::start();
    let result = f();
    (result, counting.stop())
}

/// Counts this thread's allocations from [`Counting::start`] to [`Counting::stop`]: for code
/// that awaits, which a closure given to [`allocations_in`] cannot hold, run where every poll
/// happens on this thread (a runtime's `block_on`).
#[must_use = "the count is read with `stop`"]
pub struct Counting(());

impl Counting {
    /// Starts counting on this thread, from zero.
    ///
    /// # Panics
    ///
    /// If [`CountingAllocator`] is not the binary's global allocator: every count would be 0.
    pub fn start() -> Counting {
        COUNTING.with(|counting| counting.set(true));
        ALLOCATIONS.with(|count| count.set(0));
        drop(black_box(Box::new(0_u8)));
        let installed = ALLOCATIONS.with(Cell::get) == 1;
        ALLOCATIONS.with(|count| count.set(0));
        if !installed {
            COUNTING.with(|counting| counting.set(false));
            panic!(
                "allocations are not counted: install CountingAllocator as the #[global_allocator]"
            );
        }
        Counting(())
    }

    /// Stops counting and returns the allocations made on this thread since the start.
    pub fn stop(self) -> usize {
        COUNTING.with(|counting| counting.set(false));
        ALLOCATIONS.with(Cell::get)
    }
}
