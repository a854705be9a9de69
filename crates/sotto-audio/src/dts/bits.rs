//! DTS's Huffman codebooks, made ready to decode, and their reading.

use std::sync::OnceLock;

use super::tables::{Book, ABITS, SAMPLES, SCALES, TMODE};
use crate::codec::{Bits, Parse};

impl Bits<'_> {
    /// One symbol of `book`, as its index plus `offset`.
    pub(super) fn huffman(&mut self, book: &Lookup, offset: i32) -> Parse<i32> {
        let next = self.peek32();
        let (symbol, len) = book.table[(next >> (32 - LOOKUP_BITS)) as usize];
        if len > 0 {
            self.skip(usize::from(len))?;
            return Ok(i32::from(symbol) + offset);
        }
        for &(len, code, symbol) in &book.long {
            if next >> (32 - u32::from(len)) == u32::from(code) {
                self.skip(usize::from(len))?;
                return Ok(i32::from(symbol) + offset);
            }
        }
        Err("dts: a Huffman code that is in no codebook")
    }
}

/// Bits a codebook's lookup table is indexed by; longer codes are searched for.
const LOOKUP_BITS: u32 = 9;

/// A Huffman codebook made ready to decode: (symbol, length) by the next `LOOKUP_BITS`
/// bits, length 0 where the code is longer; those codes, shortest first.
pub(super) struct Lookup {
    table: Vec<(u16, u8)>,
    long: Vec<(u8, u16, u16)>,
    /// Symbols in the book.
    pub(super) size: usize,
}

impl Lookup {
    fn new(book: &Book) -> Self {
        let mut table = vec![(0, 0); 1 << LOOKUP_BITS];
        let mut long = Vec::new();
        for (i, (&len, &code)) in book.lens.iter().zip(book.codes).enumerate() {
            let l = u32::from(len);
            if l <= LOOKUP_BITS {
                let start = usize::from(code) << (LOOKUP_BITS - l);
                table[start..start + (1 << (LOOKUP_BITS - l))].fill((i as u16, len));
            } else {
                long.push((len, code, i as u16));
            }
        }
        long.sort_unstable();
        Self {
            table,
            long,
            size: book.lens.len(),
        }
    }
}

/// Every codebook of the core, as lookups (in `tables.rs`'s arrays' shapes).
pub(super) struct Books {
    pub(super) tmode: Vec<Lookup>,
    pub(super) abits: Vec<Lookup>,
    pub(super) scales: Vec<Lookup>,
    /// By allocation index 1 to 10, then select.
    pub(super) samples: Vec<Vec<Lookup>>,
}

pub(super) fn books() -> &'static Books {
    static BOOKS: OnceLock<Books> = OnceLock::new();
    BOOKS.get_or_init(|| {
        let all = |books: &[Book]| books.iter().map(Lookup::new).collect();
        Books {
            tmode: all(&TMODE),
            abits: all(&ABITS),
            scales: all(&SCALES),
            samples: SAMPLES.iter().map(|b| all(b)).collect(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huffman_codes_of_every_book_decode_to_their_symbols() {
        let tables = TMODE.iter().chain(&ABITS).chain(&SCALES);
        let tables = tables.chain(SAMPLES.iter().flat_map(|b| b.iter()));
        let b = books();
        let lookups = b.tmode.iter().chain(&b.abits).chain(&b.scales);
        let lookups = lookups.chain(b.samples.iter().flatten());
        let mut count = 0;
        for (book, lookup) in tables.zip(lookups) {
            count += 1;
            for (i, (&len, &code)) in book.lens.iter().zip(book.codes).enumerate() {
                // The code, then ones: another code must not be taken for it.
                let word = (u32::from(code) << (32 - u32::from(len))) | (u32::MAX >> len);
                let bytes = word.to_be_bytes();
                let mut r = Bits::new(&bytes);
                assert_eq!(r.huffman(lookup, 0), Ok(i as i32));
                assert_eq!(r.pos, usize::from(len));
            }
        }
        assert_eq!(count, 4 + 5 + 5 + 1 + 4 * 3 + 5 * 7);
    }
}
