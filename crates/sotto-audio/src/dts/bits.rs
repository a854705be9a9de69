//! A DTS frame's bit reader (most significant bit first) and its Huffman codebooks.

use std::sync::OnceLock;

use super::tables::{Book, ABITS, SAMPLES, SCALES, TMODE};

/// The bit stream ran past its frame, or held a value the syntax does not allow.
pub(super) type Parse<T> = std::result::Result<T, &'static str>;

const OVERRUN: &str = "dts: the frame's fields run past its end";

pub(super) struct Bits<'a> {
    data: &'a [u8],
    /// Bits read.
    pos: usize,
}

impl<'a> Bits<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// The next 32 bits without reading them, zeros past the end.
    #[inline]
    fn peek32(&self) -> u32 {
        let byte = self.pos / 8;
        let word = match self.data.get(byte..byte + 8) {
            Some(eight) => u64::from_be_bytes(eight.try_into().expect("eight bytes")),
            None => {
                let mut word = [0u8; 8];
                let rest = self.data.get(byte..).unwrap_or(&[]);
                word[..rest.len()].copy_from_slice(rest);
                u64::from_be_bytes(word)
            }
        };
        (word << (self.pos % 8) >> 32) as u32
    }

    fn advance(&mut self, n: usize) -> Parse<()> {
        if self.pos + n > self.data.len() * 8 {
            return Err(OVERRUN);
        }
        self.pos += n;
        Ok(())
    }

    /// The next `n` (0 to 32) bits.
    pub(super) fn get(&mut self, n: u32) -> Parse<u32> {
        if n == 0 {
            return Ok(0);
        }
        let v = self.peek32() >> (32 - n);
        self.advance(n as usize)?;
        Ok(v)
    }

    pub(super) fn bit(&mut self) -> Parse<bool> {
        self.get(1).map(|b| b == 1)
    }

    /// The next `n` (1 to 32) bits as a two's complement number.
    pub(super) fn signed(&mut self, n: u32) -> Parse<i32> {
        let v = self.get(n)?;
        Ok(((v << (32 - n)) as i32) >> (32 - n))
    }

    pub(super) fn skip(&mut self, n: usize) -> Parse<()> {
        self.advance(n)
    }

    /// Bits read so far.
    #[cfg(test)]
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    /// One symbol of `book`, as its index plus `offset`.
    pub(super) fn huffman(&mut self, book: &Lookup, offset: i32) -> Parse<i32> {
        let next = self.peek32();
        let (symbol, len) = book.table[(next >> (32 - LOOKUP_BITS)) as usize];
        if len > 0 {
            self.advance(usize::from(len))?;
            return Ok(i32::from(symbol) + offset);
        }
        for &(len, code, symbol) in &book.long {
            if next >> (32 - u32::from(len)) == u32::from(code) {
                self.advance(usize::from(len))?;
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
    fn fields_signs_and_overruns() {
        let mut r = Bits::new(&[0b1011_0011, 0xFF, 0x00, 0x80, 0x01]);
        assert_eq!(r.get(1), Ok(1));
        assert_eq!(r.get(3), Ok(0b011));
        assert_eq!(r.signed(4), Ok(3));
        assert_eq!(r.signed(8), Ok(-1));
        assert_eq!(r.get(23), Ok(0x80 << 7));
        assert_eq!(r.position(), 39);
        assert!(r.get(2).is_err());
        assert_eq!(r.get(1), Ok(1));
    }

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
                assert_eq!(r.position(), usize::from(len));
            }
        }
        assert_eq!(count, 4 + 5 + 5 + 1 + 4 * 3 + 5 * 7);
    }
}
