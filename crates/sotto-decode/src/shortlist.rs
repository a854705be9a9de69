//! A decoder row as a search at temperature 0 reads it: the few logits that can be chosen
//! or masked, and the normalizer of all the others, instead of the whole vocabulary.
//!
//! Greedy and beam search pick among the best few text tokens, the tokens the filters mask
//! one by one (`pinned`), and the special and timestamp tokens (the `tail`, from the first
//! special token on). What they need of every other text token is its share of the
//! softmax's normalizer. A [`Shortlist`] record holds exactly that, ~1 700 words instead of
//! 51 865, so a GPU downloads ~7 KB a row instead of 207 KB and the search reads a
//! thirtieth of the row. Models that write whole rows get the same records from
//! [`Shortlists::reduce`]; the CUDA backend computes them on the device.
//!
//! Record layout (f32 words), `R = 2 + 2·top + pinned.len() + (n_vocab − text_end)`:
//! - `[0]`, `[1]`: the largest logit among the text tokens (below `text_end`) that are not
//!   pinned, and `Σ e^(x − max)` over them (NaN and −inf add nothing; −inf and 0 when
//!   there are none);
//! - `[2, 2 + top)`: the ids (as f32, exact below 2^24) of the `top` best of those, best
//!   first, ties to the lower id, NaN and −inf never chosen; −1 in unused slots;
//! - `[2 + top, 2 + 2·top)`: their logits (−inf in unused slots);
//! - then the pinned tokens' logits, in `pinned` order;
//! - then the logits from `text_end` to `n_vocab`.

use crate::beam::{push_best, Candidate};
use crate::inference::LogitNeed;
use crate::math;

/// What each row's [`Shortlist`] holds. Shape of a record: [`ShortlistSpec::record_len`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShortlistSpec {
    n_vocab: usize,
    text_end: usize,
    top: usize,
    pinned: Vec<u32>,
}

impl ShortlistSpec {
    /// Records of rows of `n_vocab` logits whose text tokens lie below `text_end` (clamped
    /// to `n_vocab`): the `top` best text tokens not in `pinned`, and `pinned` (sorted and
    /// deduplicated here; ids at or past `text_end` dropped, the tail holds them) in full.
    pub fn new(n_vocab: usize, text_end: usize, top: usize, pinned: &[u32]) -> Self {
        let text_end = text_end.min(n_vocab);
        let mut pinned: Vec<u32> = (pinned.iter().copied())
            .filter(|&id| (id as usize) < text_end)
            .collect();
        pinned.sort_unstable();
        pinned.dedup();
        ShortlistSpec {
            n_vocab,
            text_end,
            top,
            pinned,
        }
    }

    /// The records a need of `need` asks for: every text token pinned for
    /// [`LogitNeed::All`] (the record is then the whole row), else `top` best with the
    /// masked tokens pinned. `text_end` is used for `All`, which names none.
    pub fn from_need(n_vocab: usize, text_end: usize, need: &LogitNeed) -> Self {
        match need {
            LogitNeed::All => {
                let all: Vec<u32> = (0..text_end.min(n_vocab) as u32).collect();
                Self::new(n_vocab, text_end, 0, &all)
            }
            LogitNeed::Top {
                top,
                text_end,
                never,
                watch,
            } => Self::new(
                n_vocab,
                *text_end as usize,
                *top,
                &[&never[..], watch].concat(),
            ),
        }
    }

    /// Logits per whole row.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The first special token (`<|endoftext|>`): the text tokens lie below it.
    pub fn text_end(&self) -> usize {
        self.text_end
    }

    /// Best unpinned text tokens kept.
    pub fn top(&self) -> usize {
        self.top
    }

    /// Text tokens kept in full, sorted, distinct: those a filter may mask one by one.
    pub fn pinned(&self) -> &[u32] {
        &self.pinned
    }

    /// Where `id` is among the pinned tokens; at once when every text token is pinned
    /// (`LogitNeed::All`, where filters update thousands a row).
    fn pinned_index(&self, id: u32) -> Option<usize> {
        let i = id as usize;
        if self.pinned.get(i) == Some(&id) {
            return Some(i);
        }
        self.pinned.binary_search(&id).ok()
    }

    /// f32 words per record.
    pub fn record_len(&self) -> usize {
        2 + 2 * self.top + self.pinned.len() + (self.n_vocab - self.text_end)
    }
}

/// The records of a decoder call's rows (see the module docs), and the host's reduction
/// of whole rows into them.
#[derive(Clone, Debug)]
pub struct Shortlists {
    spec: ShortlistSpec,
    data: Vec<f32>,
    /// Whole rows, for models that write them ([`Shortlists::full_rows`]).
    full: Vec<f32>,
}

impl Shortlists {
    /// No rows yet.
    pub fn new(spec: ShortlistSpec) -> Self {
        Shortlists {
            spec,
            data: Vec::new(),
            full: Vec::new(),
        }
    }

    pub fn spec(&self) -> &ShortlistSpec {
        &self.spec
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.data.len() / self.spec.record_len()
    }

    /// The records, Shape: [rows, record_len].
    pub fn records(&self) -> &[f32] {
        &self.data
    }

    /// Room for `rows` records, for a model that writes them itself. Shape: [rows, record_len].
    pub fn records_mut(&mut self, rows: usize) -> &mut [f32] {
        self.data.resize(rows * self.spec.record_len(), 0.0);
        &mut self.data
    }

    /// The spec beside room for `rows` records, for a model that reads one as it writes
    /// the other.
    pub fn spec_and_records_mut(&mut self, rows: usize) -> (&ShortlistSpec, &mut [f32]) {
        self.data.resize(rows * self.spec.record_len(), 0.0);
        (&self.spec, &mut self.data)
    }

    /// A buffer for `rows` whole rows (Shape: [rows, n_vocab]) that [`Shortlists::reduce`]
    /// then turns into records; kept between calls.
    pub fn full_rows(&mut self, rows: usize) -> &mut [f32] {
        self.full.resize(rows * self.spec.n_vocab, 0.0);
        &mut self.full
    }

    /// Makes the records of the rows last written into [`Shortlists::full_rows`] (which
    /// this overwrites: the pinned tokens are masked there to leave the rest).
    pub fn reduce(&mut self) {
        let (spec, n) = (&self.spec, self.spec.n_vocab);
        let rows = self.full.len() / n.max(1);
        self.data.resize(rows * spec.record_len(), 0.0);
        for (row, rec) in (self.full.chunks_exact_mut(n.max(1)))
            .zip(self.data.chunks_exact_mut(spec.record_len()))
        {
            reduce_row(spec, row, rec);
        }
    }

    /// Runs `decode` into whole rows and reduces them: what a model without a reduction of
    /// its own does.
    pub fn reduce_from<E>(
        &mut self,
        rows: usize,
        decode: impl FnOnce(&mut [f32]) -> Result<(), E>,
    ) -> Result<(), E> {
        decode(self.full_rows(rows))?;
        self.reduce();
        Ok(())
    }

    /// Keeps only the last row.
    pub(crate) fn keep_last(&mut self) {
        let r = self.spec.record_len();
        let rows = self.rows();
        if rows > 1 {
            self.data.drain(..(rows - 1) * r);
        }
    }

    /// Row `i`.
    pub(crate) fn row(&mut self, i: usize) -> Shortlist<'_> {
        let r = self.spec.record_len();
        Shortlist {
            spec: &self.spec,
            rec: &mut self.data[i * r..(i + 1) * r],
        }
    }

    /// Rows `from..to`.
    pub(crate) fn range(&mut self, from: usize, to: usize) -> ShortlistRows<'_> {
        let r = self.spec.record_len();
        ShortlistRows {
            spec: &self.spec,
            data: &mut self.data[from * r..to * r],
        }
    }
}

/// One record of a whole row: `row` is left with its pinned tokens masked.
fn reduce_row(spec: &ShortlistSpec, row: &mut [f32], rec: &mut [f32]) {
    let (k, te) = (spec.top, spec.text_end);
    let (head, rest) = rec.split_at_mut(2 + 2 * k);
    let (pinned, tail) = rest.split_at_mut(spec.pinned.len());
    tail.copy_from_slice(&row[te..]);
    for (p, &id) in pinned.iter_mut().zip(&spec.pinned) {
        *p = std::mem::replace(&mut row[id as usize], f32::NEG_INFINITY);
    }
    let text = &row[..te];
    let m = math::max(text);
    head[0] = m;
    head[1] = if m == f32::NEG_INFINITY {
        0.0
    } else {
        math::sum_exp_sub(text, m)
    };
    let best = crate::beam::top_k(text, te, &[0.0], k);
    let (ids, logits) = head[2..].split_at_mut(k);
    ids.fill(-1.0);
    logits.fill(f32::NEG_INFINITY);
    for (j, c) in best
        .iter()
        .filter(|c| c.score > f32::NEG_INFINITY)
        .enumerate()
    {
        ids[j] = c.flat as f32;
        logits[j] = c.score;
    }
}

/// Consecutive rows' records.
pub(crate) struct ShortlistRows<'a> {
    spec: &'a ShortlistSpec,
    data: &'a mut [f32],
}

impl ShortlistRows<'_> {
    pub(crate) fn len(&self) -> usize {
        self.data.len() / self.spec.record_len()
    }

    pub(crate) fn row(&mut self, i: usize) -> Shortlist<'_> {
        let r = self.spec.record_len();
        Shortlist {
            spec: self.spec,
            rec: &mut self.data[i * r..(i + 1) * r],
        }
    }

    pub(crate) fn n_vocab(&self) -> usize {
        self.spec.n_vocab
    }
}

/// One row's record, which the filters mask and the searches read.
pub struct Shortlist<'a> {
    spec: &'a ShortlistSpec,
    rec: &'a mut [f32],
}

impl Shortlist<'_> {
    /// Every (id, logit) this record holds one by one: the top ones (not in id order),
    /// the pinned ones, the tail. Unused top slots are left out.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        let k = self.spec.top;
        let (ids, rest) = self.rec[2..].split_at(k);
        let (top, rest) = rest.split_at(k);
        let (pinned, tail) = rest.split_at(self.spec.pinned.len());
        let te = self.spec.text_end as u32;
        (ids.iter().zip(top))
            .filter(|(&id, _)| id >= 0.0)
            .map(|(&id, &l)| (id as u32, l))
            .chain(self.spec.pinned.iter().copied().zip(pinned.iter().copied()))
            .chain((te..).zip(tail.iter().copied()))
    }

    /// The logit of `id`, where this record holds it.
    pub(crate) fn logit(&self, id: u32) -> Option<f32> {
        self.entries().find(|&(i, _)| i == id).map(|(_, l)| l)
    }

    /// The probability of `id` before any filter (0 where the record does not hold it).
    pub(crate) fn softmax_at(&self, id: u32) -> f64 {
        let lse = self.logsumexp(0, self.spec.n_vocab);
        self.logit(id).map_or(0.0, |l| f64::from((l - lse).exp()))
    }

    /// The text tokens not held one by one: (max, Σ e^(x − max)).
    fn rest(&self) -> (f32, f32) {
        (self.rec[0], self.rec[1])
    }

    /// `shift − logsumexp(row)`, or `shift` where the normalizer is not finite (as
    /// [`math::log_softmax_offset`] of the whole row).
    pub(crate) fn offset(&self, shift: f32) -> f32 {
        let lse = self.logsumexp(0, self.spec.n_vocab);
        if lse.is_finite() {
            shift - lse
        } else {
            shift
        }
    }

    fn mask(&mut self, id: u32) {
        let (k, te) = (self.spec.top, self.spec.text_end);
        let id_us = id as usize;
        if id_us >= self.spec.n_vocab {
            return;
        }
        let tail0 = 2 + 2 * k + self.spec.pinned.len();
        if id_us >= te {
            self.rec[tail0 + id_us - te] = f32::NEG_INFINITY;
        } else if let Some(j) = self.spec.pinned_index(id) {
            self.rec[2 + 2 * k + j] = f32::NEG_INFINITY;
        } else {
            // Not announced by the filter (`TextMasks`): only its own entry can go; the
            // rest's normalizer keeps it.
            for j in 0..k {
                if self.rec[2 + j] == id as f32 {
                    self.rec[2 + k + j] = f32::NEG_INFINITY;
                }
            }
        }
    }

    fn update(&mut self, id: u32, f: impl Fn(f32) -> f32) {
        let (k, te) = (self.spec.top, self.spec.text_end);
        let id_us = id as usize;
        if id_us >= self.spec.n_vocab {
            return;
        }
        let tail0 = 2 + 2 * k + self.spec.pinned.len();
        let slot = if id_us >= te {
            Some(tail0 + id_us - te)
        } else if let Some(j) = self.spec.pinned_index(id) {
            Some(2 + 2 * k + j)
        } else {
            (0..k)
                .find(|&j| self.rec[2 + j] == id as f32)
                .map(|j| 2 + k + j)
        };
        if let Some(i) = slot {
            self.rec[i] = f(self.rec[i]);
        }
    }

    fn mask_range(&mut self, from: usize, to: usize) {
        let (k, te, n) = (self.spec.top, self.spec.text_end, self.spec.n_vocab);
        let to = to.min(n);
        if from >= to {
            return;
        }
        let tail0 = 2 + 2 * k + self.spec.pinned.len();
        if to > te {
            self.rec[tail0 + from.max(te) - te..tail0 + to - te].fill(f32::NEG_INFINITY);
        }
        let (a, b) = (from, to.min(te));
        if a >= b {
            return;
        }
        if a == 0 && b == te {
            self.rec[0] = f32::NEG_INFINITY;
            self.rec[1] = 0.0;
        }
        // A part of the text: the held entries in it (the rest is exact only when all of
        // the text goes, which is all the filters of `TextMasks::Known` do).
        for j in 0..k {
            let id = self.rec[2 + j];
            if id >= 0.0 && (a..b).contains(&(id as usize)) {
                self.rec[2 + k + j] = f32::NEG_INFINITY;
            }
        }
        let lo = self.spec.pinned.partition_point(|&p| (p as usize) < a);
        let hi = self.spec.pinned.partition_point(|&p| (p as usize) < b);
        self.rec[2 + 2 * k + lo..2 + 2 * k + hi].fill(f32::NEG_INFINITY);
    }

    /// The pinned and tail logits of ids in `[from, to)`.
    pub(crate) fn held_in(&self, from: usize, to: usize) -> (&[f32], &[f32]) {
        let (k, te, n) = (self.spec.top, self.spec.text_end, self.spec.n_vocab);
        let to = to.min(n);
        let p0 = 2 + 2 * k;
        let lo = self.spec.pinned.partition_point(|&p| (p as usize) < from);
        let hi = self
            .spec
            .pinned
            .partition_point(|&p| (p as usize) < to.min(te));
        let pinned = &self.rec[p0 + lo..p0 + hi.max(lo)];
        let t0 = p0 + self.spec.pinned.len();
        let tail = match to > te {
            true => &self.rec[t0 + from.clamp(te, to) - te..t0 + to - te],
            false => &[][..],
        };
        (pinned, tail)
    }

    /// Over a range of the text, exact when it is all of the text (the rest's maximum is
    /// then counted) or holds only held entries.
    fn max(&self, from: usize, to: usize) -> f32 {
        let k = self.spec.top;
        let (pinned, tail) = self.held_in(from, to);
        let mut m = math::max(pinned).max(math::max(tail));
        for j in 0..k {
            let (id, l) = (self.rec[2 + j], self.rec[2 + k + j]);
            if id >= 0.0 && (from..to).contains(&(id as usize)) && l > m {
                m = l;
            }
        }
        let rest = self.rest().0;
        if from == 0 && to >= self.spec.text_end && rest > m {
            rest
        } else {
            m
        }
    }

    /// Offers each held entry, its logit plus `d`, to `best` (the `m` best so far, as
    /// [`crate::beam::push_best`] keeps them) as candidate `base + id`. The pinned and tail
    /// logits go a chunk at a time: a chunk with nothing that could enter a full list is
    /// passed over in one branch-free pass.
    pub(crate) fn offer(&self, d: f32, base: usize, m: usize, best: &mut Vec<Candidate>) {
        let k = self.spec.top;
        for j in 0..k {
            let (id, l) = (self.rec[2 + j], self.rec[2 + k + j]);
            if id >= 0.0 {
                push_best(best, m, base + id as usize, l + d);
            }
        }
        let (pinned, tail) = self.held_in(0, self.spec.n_vocab);
        let ids = (self.spec.pinned.iter().map(|&p| p as usize)).chain(self.spec.text_end..);
        let mut ids = ids.map(|id| base + id);
        for chunk in pinned.chunks(OFFER_CHUNK).chain(tail.chunks(OFFER_CHUNK)) {
            if let Some(last) = best.last().filter(|_| best.len() == m) {
                // `>=`: an equal score of a lower id (an earlier row's) still enters.
                let thr = last.score;
                if !chunk.iter().fold(false, |any, &l| any | (l + d >= thr)) {
                    ids.nth(chunk.len() - 1);
                    continue;
                }
            }
            for (&l, id) in chunk.iter().zip(&mut ids) {
                push_best(best, m, id, l + d);
            }
        }
    }

    /// Over a range of the text, exact when it is all of the text (the rest's normalizer
    /// is then added) or holds only pinned tokens.
    fn logsumexp(&self, from: usize, to: usize) -> f32 {
        let (rest_max, rest_sum) = self.rest();
        let whole_text = from == 0 && to >= self.spec.text_end && rest_sum > 0.0;
        let (pinned, tail) = self.held_in(from, to);
        let mut m = math::max(tail).max(math::max(pinned));
        if whole_text && rest_max > m {
            m = rest_max;
        }
        if m == f32::NEG_INFINITY {
            return f32::NEG_INFINITY;
        }
        let mut s = math::sum_exp_sub(tail, m) + math::sum_exp_sub(pinned, m);
        if whole_text {
            s += rest_sum * (rest_max - m).exp();
        }
        m + s.ln()
    }
}

/// Logits per pre-checked chunk of [`Shortlist::offer`].
const OFFER_CHUNK: usize = 64;

/// A row as the logit filters see it: whole, or a [`Shortlist`].
pub enum Row<'a, 'b> {
    Full(&'a mut [f32]),
    Short(&'a mut Shortlist<'b>),
}

impl Row<'_, '_> {
    /// Logits in the whole row.
    pub fn n_vocab(&self) -> usize {
        match self {
            Row::Full(l) => l.len(),
            Row::Short(s) => s.spec.n_vocab,
        }
    }

    /// Masks `id` (sets it to −inf); ids past the vocabulary are ignored.
    pub fn mask(&mut self, id: u32) {
        match self {
            Row::Full(l) => {
                if let Some(v) = l.get_mut(id as usize) {
                    *v = f32::NEG_INFINITY;
                }
            }
            Row::Short(s) => s.mask(id),
        }
    }

    /// Replaces the logit of `id` by `f` of it; ids past the vocabulary are ignored. On a
    /// shortlist only a logit the record holds one by one changes: a filter that changes
    /// text tokens it cannot name in advance says [`crate::TextMasks::Unknown`], so that
    /// the record is the whole row.
    pub fn update(&mut self, id: u32, f: impl Fn(f32) -> f32) {
        match self {
            Row::Full(l) => {
                if let Some(v) = l.get_mut(id as usize) {
                    *v = f(*v);
                }
            }
            Row::Short(s) => s.update(id, f),
        }
    }

    /// Masks `[from, to)`, clamped to the vocabulary.
    pub fn mask_range(&mut self, from: usize, to: usize) {
        match self {
            Row::Full(l) => {
                let to = to.min(l.len());
                if from < to {
                    l[from..to].fill(f32::NEG_INFINITY);
                }
            }
            Row::Short(s) => s.mask_range(from, to),
        }
    }

    /// The largest logit in `[from, to)` (NaN skipped; −inf if none). On a shortlist,
    /// exact for ranges of the tail, and of the text as a whole.
    pub fn max(&self, from: usize, to: usize) -> f32 {
        match self {
            Row::Full(l) => {
                let to = to.min(l.len());
                math::max(&l[from.min(to)..to])
            }
            Row::Short(s) => s.max(from, to),
        }
    }

    /// `log Σ e^x` over `[from, to)`; on a shortlist exact for ranges of the tail, and
    /// of the text as a whole.
    pub fn logsumexp(&self, from: usize, to: usize) -> f32 {
        match self {
            Row::Full(l) => {
                let to = to.min(l.len());
                math::logsumexp(&l[from.min(to)..to])
            }
            Row::Short(s) => s.logsumexp(from, to),
        }
    }
}

#[cfg(test)]
#[path = "shortlist_tests.rs"]
pub(crate) mod tests;
