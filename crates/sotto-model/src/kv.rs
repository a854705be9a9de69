//! The decoder's self-attention KV cache for a batch of text sequences.

/// Per layer keys and values of up to `capacity` sequences of up to `n_ctx` positions.
///
/// Sized for one sequence at first; grows (once, keeping its contents) to the largest batch
/// asked for — `beam_size` or `best_of`, 5 with faster-whisper's defaults, i.e. about
/// 5.5 MiB per sequence for tiny and 11 MiB for base — and keeps that size for the
/// session's life. All sequences of a batch share one length.
#[derive(Debug)]
pub(crate) struct KvCache {
    /// Per layer, Shape: [capacity, n_ctx, d]; sequence b's valid rows are `..len`.
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    n_ctx: usize,
    d: usize,
    capacity: usize,
    /// Sequences in the batch.
    batch: usize,
    /// Positions filled in every sequence.
    len: usize,
    /// Positions `..shared` hold the same keys and values in every sequence: they were
    /// filled while the batch was one sequence (the prompt, before it is broadcast to the
    /// beams), and rows below `len` are never written again. Reorders skip them.
    shared: usize,
    /// Rows saved while a reorder overwrites their slots.
    scratch: Vec<f32>,
    /// The sequences whose rows `scratch` holds.
    saved: Vec<usize>,
}

impl KvCache {
    pub fn new(n_layer: usize, n_ctx: usize, d: usize) -> Self {
        let layer = || (0..n_layer).map(|_| vec![0.0f32; n_ctx * d]).collect();
        KvCache {
            k: layer(),
            v: layer(),
            n_ctx,
            d,
            capacity: 1,
            batch: 1,
            len: 0,
            shared: 0,
            scratch: Vec::new(),
            saved: Vec::new(),
        }
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Positions `..shared()` hold the same keys and values in every sequence.
    pub fn shared(&self) -> usize {
        self.shared
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// One empty sequence.
    pub fn clear(&mut self) {
        self.batch = 1;
        self.len = 0;
        self.shared = 0;
    }

    /// Marks `n` more positions filled in every sequence.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Floats per sequence per layer: `n_ctx · d`.
    pub fn stride(&self) -> usize {
        self.n_ctx * self.d
    }

    /// Makes room for `batch` sequences, keeping the current ones.
    fn reserve(&mut self, batch: usize) {
        if batch <= self.capacity {
            return;
        }
        let (stride, used) = (self.stride(), self.batch * self.stride());
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            let mut grown = vec![0.0f32; batch * stride];
            grown[..used].copy_from_slice(&layer[..used]);
            *layer = grown;
        }
        self.capacity = batch;
    }

    /// New sequence `i` becomes old sequence `src[i]`; only the filled rows are copied, and
    /// only for slots whose source differs. `src` entries must be below `batch()`.
    ///
    /// While the batch does not grow, rows `..shared` are the same in every slot, so only
    /// the rows decoded since the prompt move: a few dozen instead of hundreds per step.
    pub fn reorder(&mut self, src: &[usize]) {
        debug_assert!(src.iter().all(|&s| s < self.batch));
        if self.batch == 1 {
            self.shared = self.len;
        }
        let grows = src.len() > self.batch;
        self.reserve(src.len());
        let (stride, d) = (self.stride(), self.d);
        // Slots past the old batch hold stale rows: a growing batch copies everything.
        let rows = if grows { 0 } else { self.shared * d }..self.len * d;
        let n = rows.len();
        let moved = |i: usize| src.get(i).is_some_and(|&s| s != i);
        // Sources whose own slot is about to be overwritten are saved first.
        // Sorted and unique, in a kept buffer (the decode loop allocates nothing).
        let mut saved = std::mem::take(&mut self.saved);
        saved.clear();
        saved.extend(src.iter().copied().filter(|&s| moved(s)));
        saved.sort_unstable();
        saved.dedup();
        if self.scratch.capacity() < saved.len() * n {
            // Once, at the most a reorder can save (every sequence's rows of one layer):
            // address space only, as pages are touched as rows are saved, and the buffer
            // then never grows while a text gets longer.
            let most = self.capacity * self.n_ctx * d;
            self.scratch.reserve_exact(most - self.scratch.len());
        }
        self.scratch.resize(saved.len() * n, 0.0);
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            for (j, &s) in saved.iter().enumerate() {
                let at = s * stride + rows.start;
                self.scratch[j * n..(j + 1) * n].copy_from_slice(&layer[at..at + n]);
            }
            for (i, &s) in src.iter().enumerate() {
                if s == i {
                    continue;
                }
                let dst = i * stride + rows.start;
                match saved.binary_search(&s) {
                    Ok(j) => layer[dst..dst + n].copy_from_slice(&self.scratch[j * n..(j + 1) * n]),
                    Err(_) => {
                        let from = s * stride + rows.start;
                        layer.copy_within(from..from + n, dst)
                    }
                }
            }
        }
        self.batch = src.len();
        self.saved = saved;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills sequence b, position p, layer l with `100 b + p + 1000 l` (keys) and its negation
    /// (values).
    fn filled(batch: usize, len: usize) -> KvCache {
        let mut c = KvCache::new(2, 4, 3);
        c.reorder(&vec![0; batch]);
        let stride = c.stride();
        for (l, (k, v)) in c.k.iter_mut().zip(c.v.iter_mut()).enumerate() {
            for b in 0..batch {
                for p in 0..len {
                    let x = (100 * b + p + 1000 * l) as f32;
                    k[b * stride + p * 3..][..3].fill(x);
                    v[b * stride + p * 3..][..3].fill(-x);
                }
            }
        }
        c.advance(len);
        c
    }

    fn first(c: &KvCache, l: usize, b: usize, p: usize) -> (f32, f32) {
        let i = b * c.stride() + p * 3;
        (c.k[l][i], c.v[l][i])
    }

    #[test]
    fn reorder_gathers_permutes_and_shrinks() {
        let mut c = filled(3, 2);
        // Permutation with a repeat: slots 0 and 1 swap sources, 2 copies 0.
        c.reorder(&[1, 0, 0]);
        for l in 0..2 {
            for p in 0..2 {
                let at = |b: usize| (100 * b + p + 1000 * l) as f32;
                assert_eq!(first(&c, l, 0, p), (at(1), -at(1)));
                assert_eq!(first(&c, l, 1, p), (at(0), -at(0)));
                assert_eq!(first(&c, l, 2, p), (at(0), -at(0)));
            }
        }
        // Shrinking keeps what is asked for.
        c.reorder(&[2]);
        assert_eq!(c.batch(), 1);
        assert_eq!(first(&c, 1, 0, 1), (1001.0, -1001.0));
    }

    #[test]
    fn reorder_after_broadcast_moves_only_rows_past_the_prompt() {
        // A 2-position prompt in one sequence, broadcast to 3, then one row per sequence.
        let mut c = filled(1, 2);
        c.reorder(&[0; 3]);
        let stride = c.stride();
        for l in 0..2 {
            for b in 0..3 {
                let x = (100 * b + 2 + 1000 * l) as f32;
                c.k[l][b * stride + 2 * 3..][..3].fill(x);
                c.v[l][b * stride + 2 * 3..][..3].fill(-x);
            }
        }
        c.advance(1);
        c.reorder(&[2, 2, 0]);
        let at = |b: usize, p: usize, l: usize| {
            let x = (100 * b + p + 1000 * l) as f32;
            (x, -x)
        };
        for l in 0..2 {
            for (slot, from) in [(0, 2), (1, 2), (2, 0)] {
                assert_eq!(first(&c, l, slot, 0), at(0, 0, l));
                assert_eq!(first(&c, l, slot, 1), at(0, 1, l));
                assert_eq!(first(&c, l, slot, 2), at(from, 2, l));
            }
        }
        // Growing again copies whole sequences into the new slots.
        c.reorder(&[1, 0, 2, 2]);
        for l in 0..2 {
            assert_eq!(first(&c, l, 3, 1), at(0, 1, l));
            assert_eq!(first(&c, l, 3, 2), at(0, 2, l));
        }
    }

    #[test]
    fn growing_keeps_contents_and_capacity() {
        let mut c = filled(1, 3);
        assert_eq!(c.capacity(), 1);
        c.reorder(&[0; 5]);
        assert_eq!((c.batch(), c.capacity(), c.len()), (5, 5, 3));
        assert_eq!(first(&c, 1, 4, 2), (1002.0, -1002.0));
        c.clear();
        assert_eq!((c.batch(), c.capacity(), c.len()), (1, 5, 0));
    }
}
