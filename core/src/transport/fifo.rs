//! FIFO bookkeeping shared by the transports' connectors: page-aligned buffers,
//! the stack of free slots, and the step counters of a FIFO of [`NCCL_STEPS`]
//! slots (NCCL's `conn.step`, `head`, `tail` in `src/include/device.h`,
//! `struct ncclConnInfo`).
//!
//! A step is one FIFO message; step counters are 64-bit and only grow. Which
//! slot a step occupies is not fixed to `step % NCCL_STEPS`: a new step takes
//! the slot freed most recently ([`SlotStack`]), so a workload that keeps only a
//! few steps in flight cycles through a cache-hot few slots instead of walking
//! the whole `NCCL_BUFFSIZE` buffer (on loopback, where the kernel's copies
//! dominate, a cold FIFO cost ~30% of mid-size busbw). Per-step bookkeeping
//! (state, slot, size) lives in arrays indexed by [`Steps::index`].

use super::NCCL_STEPS;

/// A host buffer aligned to 4 KiB (page), owned by a connector.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain owned memory; access discipline is that of the
// connector holding it (one thread at a time).
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// Page alignment of every buffer.
    pub(crate) const ALIGN: usize = 4096;

    /// Zeroed buffer of `len` bytes (a zero `len` allocates one byte). Whole
    /// pages are allocated, so that page-locking the buffer for a GPU
    /// ([`AlignedBuf::announce`]) locks no other memory.
    pub(crate) fn new(len: usize) -> AlignedBuf {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1).next_multiple_of(Self::ALIGN), Self::ALIGN)
            .expect("buffer layout")
    }

    /// Start of the buffer.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The buffer as FIFO memory (its whole pages).
    pub(crate) fn fifo_mem(&self) -> super::FifoMem {
        super::FifoMem::Host {
            base: self.ptr as usize,
            len: Self::layout(self.len).size(),
        }
    }

    /// Offers the buffer's pages to be page-locked for a GPU
    /// (`ferroccl_kernels::hostreg`), so device steps reach its slots; undone
    /// when the buffer is dropped.
    pub(crate) fn announce(&self) {
        ferroccl_kernels::hostreg::announce(self.ptr as usize, Self::layout(self.len).size());
    }

    /// Address of FIFO slot `slot` when the buffer is cut in slots of `step_size` bytes.
    pub(crate) fn slot(&self, slot: usize, step_size: usize) -> *mut u8 {
        debug_assert!((slot + 1) * step_size <= self.len);
        // SAFETY: `slot * step_size` is inside the buffer (NCCL_STEPS × step_size bytes).
        unsafe { self.ptr.add(slot * step_size) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // Unregistered (when it was page-locked) before it is freed.
        ferroccl_kernels::hostreg::forget(self.ptr as usize);
        let layout = Self::layout(self.len);
        // SAFETY: allocated in `new` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// The free slots of one connector's FIFO, most recently freed on top.
///
/// The slot numbers are bytes packed in one word (slot `i` of the stack in
/// bits `8i..8i+8`), so that a connector keeping the stack in a `Cell` copies
/// whole words: a byte stored into a copy on the stack and the whole copy
/// loaded back right after is a failed store-to-load forward, which waits for
/// every earlier store to reach the cache (on the send path those are the
/// step's own stores into the peer's memory, cache misses).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotStack {
    idx: u64,
    len: usize,
}

const _: () = assert!(NCCL_STEPS <= 8, "SlotStack packs a slot number per byte of a u64");

impl SlotStack {
    /// All slots free; slot 0 on top.
    pub(crate) fn full() -> SlotStack {
        let mut s = SlotStack { idx: 0, len: 0 };
        for slot in (0..NCCL_STEPS).rev() {
            s.give(slot);
        }
        s
    }

    /// The slot the next step gets, if any is free.
    pub(crate) fn top(&self) -> Option<usize> {
        self.len.checked_sub(1).map(|i| ((self.idx >> (8 * i)) & 0xff) as usize)
    }

    /// The slot `k` places below the top (`nth(0)` is [`top`](Self::top)),
    /// if that many are free: the slot the step `k` after the next one gets,
    /// as long as no slot is given back before those steps take theirs.
    pub(crate) fn nth(&self, k: usize) -> Option<usize> {
        (k < self.len).then(|| ((self.idx >> (8 * (self.len - 1 - k))) & 0xff) as usize)
    }

    /// Takes the top slot.
    pub(crate) fn take(&mut self) -> Option<usize> {
        let t = self.top()?;
        self.len -= 1;
        Some(t)
    }

    /// Returns a slot `depth` places below the top (`put_at(slot, 0)` is
    /// [`give`](Self::give)); the slots above it keep their order.
    pub(crate) fn put_at(&mut self, slot: usize, depth: usize) {
        let depth = depth.min(self.len);
        let mut above = [0usize; NCCL_STEPS];
        for a in above.iter_mut().take(depth) {
            *a = self.take().expect("depth within the stack");
        }
        self.give(slot);
        for &a in above[..depth].iter().rev() {
            self.give(a);
        }
    }

    /// Returns a slot (it becomes the top).
    pub(crate) fn give(&mut self, slot: usize) {
        debug_assert!(self.len < NCCL_STEPS && slot < NCCL_STEPS);
        let shift = 8 * self.len;
        self.idx = (self.idx & !(0xff << shift)) | ((slot as u64 & 0xff) << shift);
        self.len += 1;
    }
}

/// One byte per FIFO step index (e.g. the slot a step occupies), packed in a
/// word for the same reason as [`SlotStack`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StepBytes(u64);

impl StepBytes {
    /// The byte of step index `i` (`i < NCCL_STEPS`).
    pub(crate) fn get(self, i: usize) -> u8 {
        (self.0 >> (8 * i)) as u8
    }

    /// This value with the byte of step index `i` set to `v`.
    pub(crate) fn with(self, i: usize, v: u8) -> StepBytes {
        let shift = 8 * i;
        StepBytes((self.0 & !(0xff << shift)) | (u64::from(v) << shift))
    }
}

/// The step counters of one FIFO side: `head` is the next step the producer
/// starts, `tail` the oldest step not yet retired; steps `tail..head` are in
/// flight (at most [`NCCL_STEPS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Steps {
    /// Next step to start.
    pub head: u64,
    /// Oldest step not retired.
    pub tail: u64,
}

impl Steps {
    /// Counters starting at `step` (nothing in flight).
    #[cfg(test)]
    pub(crate) fn at(step: u64) -> Steps {
        Steps { head: step, tail: step }
    }

    /// Steps in flight.
    pub(crate) fn in_flight(&self) -> u64 {
        self.head - self.tail
    }

    /// Whether another step may start (fewer than `NCCL_STEPS` in flight).
    pub(crate) fn has_room(&self) -> bool {
        self.in_flight() < NCCL_STEPS as u64
    }

    /// Whether nothing is in flight.
    pub(crate) fn is_idle(&self) -> bool {
        self.head == self.tail
    }

    /// Index of `step` in per-step arrays of [`NCCL_STEPS`] entries.
    pub(crate) fn index(step: u64) -> usize {
        (step % NCCL_STEPS as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_stack_reuses_the_most_recently_freed_slot() {
        let mut s = SlotStack::full();
        assert_eq!(s.take(), Some(0));
        assert_eq!(s.take(), Some(1));
        s.give(0);
        assert_eq!(s.top(), Some(0));
        assert_eq!(s.take(), Some(0));
        for _ in 0..NCCL_STEPS - 2 {
            assert!(s.take().is_some());
        }
        assert_eq!(s.take(), None);
    }

    #[test]
    fn slot_stack_nth_names_the_slots_later_takes_get() {
        let mut s = SlotStack::full();
        s.take();
        let one = s.take().unwrap();
        s.give(0);
        let ahead: Vec<_> = (0..4).map(|k| s.nth(k).unwrap()).collect();
        assert_eq!(s.nth(0), s.top());
        for want in ahead {
            assert_eq!(s.take(), Some(want));
        }
        assert_eq!(s.nth(s.len), None);
        let (a, b) = (s.nth(0).unwrap(), s.nth(1).unwrap());
        s.put_at(one, 1);
        assert_eq!((s.nth(0), s.nth(1), s.nth(2)), (Some(a), Some(one), Some(b)));
    }

    #[test]
    fn steps_bound_the_steps_in_flight() {
        let mut s = Steps::at(u64::from(u32::MAX) - 3);
        for _ in 0..NCCL_STEPS {
            assert!(s.has_room());
            s.head += 1;
        }
        assert!(!s.has_room() && !s.is_idle());
        assert_eq!(Steps::index(s.head), Steps::index(s.tail));
        s.tail = s.head;
        assert!(s.is_idle());
    }
}
