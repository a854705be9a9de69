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
        // A poisoned lock only means a panic elsewhere: the buffers are refilled anyway.
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut v = kept.unwrap_or_default();
        v.clear();
        v.resize(len, T::default());
        v
    }

    /// A kept buffer as it was given back (any length, old contents), or an empty one: for
    /// callers that size it and write every element themselves, so only growth is zeroed.
    pub(crate) fn take_dirty(&self) -> Vec<T> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        kept.unwrap_or_default()
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
}
