//! DTS's Huffman codebooks, made ready to decode, and their reading.

use std::sync::OnceLock;

use super::tables::{Book, ABITS, SAMPLES, SCALES, TMODE};
use crate::codec::{Bits, Huffman, Parse};

impl Bits<'_> {
    /// One symbol of `book`, as its index plus `offset`.
    pub(super) fn huffman_at(&mut self, book: &Huffman, offset: i32) -> Parse<i32> {
        self.huffman(book)
            .map(|symbol| i32::from(symbol) + offset)
            .map_err(|_| "dts: a Huffman code that is in no codebook")
    }
}

/// Every codebook of the core, as lookups (in `tables.rs`'s arrays' shapes).
pub(super) struct Books {
    pub(super) tmode: Vec<Huffman>,
    pub(super) abits: Vec<Huffman>,
    pub(super) scales: Vec<Huffman>,
    /// By allocation index 1 to 10, then select.
    pub(super) samples: Vec<Vec<Huffman>>,
}

pub(super) fn books() -> &'static Books {
    static BOOKS: OnceLock<Books> = OnceLock::new();
    BOOKS.get_or_init(|| {
        let all = |books: &[Book]| {
            books
                .iter()
                .map(|b| Huffman::new(b.lens, b.codes.iter().map(|&c| u32::from(c))))
                .collect()
        };
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
                assert_eq!(r.huffman_at(lookup, 0), Ok(i as i32));
                assert_eq!(r.pos, usize::from(len));
            }
        }
        assert_eq!(count, 4 + 5 + 5 + 1 + 4 * 3 + 5 * 7);
    }
}
