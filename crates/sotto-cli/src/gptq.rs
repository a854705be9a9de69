//! `sotto quantize --calibrate`: GPTQ factors per weight matrix, one factorisation per
//! distinct input statistics (q, k and v share theirs, and every decoder layer's cross
//! k and v meet the same encoder output).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sotto::model::InputStats;
use sotto_quant::{GptqFactor, QuantType};

pub struct Factors {
    stats: BTreeMap<String, InputStats>,
    /// Factors by a hash of their statistics' bits.
    cache: Mutex<HashMap<u64, Arc<GptqFactor>>>,
    used: AtomicUsize,
    error: Mutex<Option<String>>,
}

impl Factors {
    pub fn new(stats: BTreeMap<String, InputStats>) -> Self {
        Self {
            stats,
            cache: Mutex::default(),
            used: AtomicUsize::new(0),
            error: Mutex::new(None),
        }
    }

    /// Quantizes tensor `name` (Shape: [rows, n]) by GPTQ when there are statistics for
    /// it; false (nothing written) otherwise, or when its factor failed (see [`Self::error`]).
    pub fn quantize(&self, name: &str, t: QuantType, x: &[f32], n: usize, out: &mut [u8]) -> bool {
        let Some(s) = self.stats.get(name) else {
            return false;
        };
        if s.n_in != n {
            self.fail(format!(
                "{name}: statistics for {} inputs, rows of {n}",
                s.n_in
            ));
            return false;
        }
        let mut hasher = DefaultHasher::new();
        s.h.iter().for_each(|v| v.to_bits().hash(&mut hasher));
        let key = hasher.finish();
        let cached = self.lock(&self.cache).get(&key).cloned();
        let factor = match cached {
            Some(f) => f,
            None => match GptqFactor::new(&s.h, n) {
                Ok(f) => {
                    let f = Arc::new(f);
                    self.lock(&self.cache).insert(key, f.clone());
                    f
                }
                Err(e) => {
                    self.fail(format!("{name}: {e}"));
                    return false;
                }
            },
        };
        factor.quantize(t, x, out);
        self.used.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Matrices quantized by GPTQ so far.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The first statistics that could not be used, if any.
    pub fn error(&self) -> Option<String> {
        self.lock(&self.error).clone()
    }

    fn fail(&self, msg: String) {
        self.lock(&self.error).get_or_insert(msg);
    }

    fn lock<'a, T>(&self, m: &'a Mutex<T>) -> std::sync::MutexGuard<'a, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}
