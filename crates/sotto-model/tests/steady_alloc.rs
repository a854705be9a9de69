//! The decode loop allocates nothing: once a session has run a few decoder steps of a shape,
//! further steps of that shape (greedy, beams, with and without the screened vocabulary)
//! take no heap memory, on one thread or two. Counted by a global allocator that wraps the
//! system one. With two threads a step's tasks land on either worker, and on the one-thread
//! pool when the governor picks it: the session sizes every worker's own scratch when it
//! starts and when its batch grows, so no worker allocates on its first task of a kind.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use sotto_model::{Session, VocabTop, Whisper};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counter is atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations (on every thread) while `f` runs.
fn allocations(f: impl FnOnce()) -> usize {
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst)
}

fn check(name: &str, opts: sotto_model::LoadOptions, threads: usize) {
    let file = sotto_formats::load(&sotto_testdata::model_dir(name)).unwrap();
    let model = Arc::new(Whisper::from_file_with(&file, opts).unwrap());
    let h = *model.hparams();
    let n = h.n_vocab;
    let eot: u32 = if n > 51864 { 50257 } else { 50256 };
    let mut s = Session::new(model.clone(), threads).unwrap();
    // A tone, so the decoder sees real cross-attention values.
    let mel: Vec<f32> = (0..h.n_mels * 3000)
        .map(|i| ((i % 3000) as f32 * 0.05 + (i / 3000) as f32).sin() * 0.5)
        .collect();
    s.encode(&mel).unwrap();
    // A long-form window's start: a previous-text prompt, then the start sequence.
    let mut prompt: Vec<u32> = vec![eot + 1];
    prompt.extend((0..40u32).map(|i| 262 + 37 * i));
    prompt.push(eot + 1);
    let mut logits = vec![0f32; 5 * n];
    let greedy = |s: &mut Session, steps: usize, logits: &mut [f32]| {
        for i in 0..steps {
            let t = [300 + i as u32];
            s.decode(&t, &[0], &mut logits[..n]).unwrap();
        }
    };
    for top in [Some(VocabTop::new(1, eot as usize, &[])), None] {
        s.reset_text();
        s.set_logit_need(top.clone());
        s.decode(&prompt, &[prompt.len() - 1], &mut logits[..n])
            .unwrap();
        greedy(&mut s, 4, &mut logits);
        let got = allocations(|| greedy(&mut s, 24, &mut logits));
        assert_eq!(
            got,
            0,
            "{name}, {threads} threads, greedy (screened: {}): {got} allocations in 24 steps",
            top.is_some()
        );
    }
    let beams = |s: &mut Session, steps: u32, logits: &mut [f32]| {
        for step in 0..steps {
            let tokens: Vec<u32> = (0..5).map(|b| 262 + 17 * b + step).collect();
            s.decode_batch(&tokens, 5, logits).unwrap();
            s.reorder(&[0, 0, 1, 2, 3]).unwrap();
        }
    };
    for top in [Some(VocabTop::new(10, eot as usize, &[])), None] {
        s.reset_text();
        s.set_logit_need(None);
        s.decode(&prompt, &[prompt.len() - 1], &mut logits[..n])
            .unwrap();
        s.reorder(&[0; 5]).unwrap();
        s.set_logit_need(top.clone());
        beams(&mut s, 4, &mut logits);
        // The token lists above allocate: count the decoder's steps only.
        let tokens: Vec<Vec<u32>> = (0..24u32)
            .map(|step| (0..5).map(|b| 400 + 17 * b + step).collect())
            .collect();
        let got = allocations(|| {
            for t in &tokens {
                s.decode_batch(t, 5, &mut logits).unwrap();
                s.reorder(&[0, 0, 1, 2, 3]).unwrap();
            }
        });
        assert_eq!(
            got,
            0,
            "{name}, {threads} threads, 5 beams (screened: {}): {got} allocations in 24 steps",
            top.is_some()
        );
    }
    // Three windows decoded together (batched transcription): each sequence against its
    // own window's cross-attention, the sequences reordered between steps.
    let shifted = |k: usize| -> Vec<f32> { mel.iter().skip(k).chain(&mel[..k]).copied().collect() };
    let mels = [mel.clone(), shifted(7), shifted(1234)];
    let refs: Vec<&[f32]> = mels.iter().map(|m| &m[..]).collect();
    s.set_logit_need(Some(VocabTop::new(1, eot as usize, &[])));
    s.encode_windows(&refs).unwrap();
    s.decode_batch(&prompt.repeat(3), 3, &mut logits[..3 * n])
        .unwrap();
    let tokens: Vec<Vec<u32>> = (0..28u32)
        .map(|step| (0..3).map(|b| 500 + 11 * b + step).collect())
        .collect();
    for t in &tokens[..4] {
        s.decode_batch(t, 3, &mut logits[..3 * n]).unwrap();
        s.reorder(&[0, 1, 2]).unwrap();
    }
    let got = allocations(|| {
        for t in &tokens[4..] {
            s.decode_batch(t, 3, &mut logits[..3 * n]).unwrap();
            s.reorder(&[0, 1, 2]).unwrap();
        }
    });
    assert_eq!(
        got, 0,
        "{name}, {threads} threads, 3 windows: {got} allocations in 24 steps"
    );
}

/// One test, so that no other test's work runs (and allocates) while this one counts.
#[test]
fn tiny_en_decode_loop_allocates_nothing() {
    for threads in [1, 2] {
        check("tiny.en", Default::default(), threads);
        check("tiny.en", sotto_model::LoadOptions::F32, threads);
    }
}
