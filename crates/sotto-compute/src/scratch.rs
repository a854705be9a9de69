//! Large buffers that a backend's ops need per call (attention's packed K and V, the bf16
//! GEMM's packed operands: 2–10 MiB per encoder layer), kept between calls. A fresh allocation that size pays its page
//! faults on every call; kept here, it is paid once per session and freed with it.

use std::sync::Mutex;

/// Buffers of one element type; `take` hands out a zeroed one (`take_dirty` one as it was
/// left), `give` returns it.
#[derive(Debug, Default)]
pub(crate) struct Pool<T>(Mutex<Vec<Vec<T>>>);

/// Most buffers a pool keeps (an op holds at most two at once: K and V, or a bf16 GEMM's
/// weight panels and activations).
const KEEP: usize = 2;

impl<T: Copy + Default> Pool<T> {
    /// A buffer of `len` zeros, reusing a kept allocation when there is one.
    pub(crate) fn take(&self, len: usize) -> Vec<T> {
        let mut v = self.pick(Some(len));
        v.clear();
        v.resize(len, T::default());
        v
    }

    /// A kept buffer as it was given back (any length, old contents), or an empty one: for
    /// callers that size it and write every element themselves, so only growth is zeroed.
    /// The largest kept one, as the size is not known here.
    pub(crate) fn take_dirty(&self) -> Vec<T> {
        self.pick(None)
    }

    /// The kept buffer that best fits `len` values (the smallest that holds them, else the
    /// largest), or a new empty one. Ops of one layer want buffers of several sizes
    /// (packed K/V, quantized rows, an MLP's hidden rows): handed the wrong one, a large
    /// op would grow a small buffer on every call, copying it and faulting in new pages.
    fn pick(&self, len: Option<usize>) -> Vec<T> {
        // A poisoned lock only means a panic elsewhere: the buffers are refilled anyway.
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let cap = |i: &usize| kept[*i].capacity();
        let fits = len.and_then(|len| (0..kept.len()).filter(|i| cap(i) >= len).min_by_key(cap));
        match fits.or_else(|| (0..kept.len()).max_by_key(cap)) {
            Some(i) => kept.swap_remove(i),
            None => Vec::new(),
        }
    }

    /// A buffer of `len` elements for a caller that writes every one of them: a kept
    /// allocation keeps its old contents (only growth is zeroed), so no pass clears bytes
    /// that are about to be overwritten.
    pub(crate) fn take_overwritten(&self, len: usize) -> Vec<T> {
        let mut v = self.pick(Some(len));
        v.truncate(len);
        v.resize(len, T::default());
        v
    }

    /// Keeps `v` for a later `take` (dropped when the pool is full or `v` never held
    /// anything).
    pub(crate) fn give(&self, v: Vec<T>) {
        if v.capacity() == 0 {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < KEEP {
            kept.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_zeroed_and_reuse_their_allocation() {
        let pool = Pool::<f32>::default();
        let mut a = pool.take(1000);
        assert!(a.iter().all(|&x| x == 0.0));
        a.fill(3.0);
        let ptr = a.as_ptr();
        pool.give(a);
        let b = pool.take(500);
        assert_eq!((b.len(), b.as_ptr()), (500, ptr));
        assert!(b.iter().all(|&x| x == 0.0));
        for _ in 0..4 {
            pool.give(vec![1.0; 10]);
        }
        assert_eq!(pool.0.lock().unwrap().len(), KEEP);
    }

    #[test]
    fn overwritten_buffers_keep_old_contents_and_zero_growth() {
        let pool = Pool::<u32>::default();
        pool.give(vec![7; 4]);
        assert_eq!(pool.take_overwritten(2), [7, 7]);
        pool.give(vec![7; 2]);
        assert_eq!(pool.take_overwritten(3), [7, 7, 0]);
        assert_eq!(pool.take_overwritten(2), [0, 0]);
    }

    #[test]
    fn takes_pick_the_best_fitting_buffer() {
        let pool = Pool::<u8>::default();
        let (small, large) = (vec![1; 100], vec![1; 1000]);
        let (ps, pl) = (small.as_ptr(), large.as_ptr());
        pool.give(small);
        pool.give(large);
        let a = pool.take(50);
        assert_eq!(a.as_ptr(), ps, "the smallest buffer that holds 50");
        pool.give(a);
        let b = pool.take_overwritten(500);
        assert_eq!(b.as_ptr(), pl, "only the large one holds 500");
        pool.give(b);
        let d = pool.take_dirty();
        assert_eq!(d.as_ptr(), pl, "unknown size: the largest");
        let c = pool.take(5000);
        assert_eq!(c.len(), 5000, "none holds 5000: the largest left grows");
    }
}
