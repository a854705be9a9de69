//! Vorbis outside Ogg and Matroska (FFmpeg's AVI, ASF, MP4 and QuickTime files): its three
//! headers come as one Xiph-laced block (a WAVEFORMATEX's extra bytes, an `esds`'s
//! decoder-specific info, a `glbl` atom), and symphonia's decoder takes the identification
//! and setup headers one after the other as its extra data.

/// The WAV format tags FFmpeg writes Vorbis under (`oV`, mode 1, with the headers after
/// the WAVEFORMATEX; the others are old ACM codecs' and hold the same).
pub(crate) const WAV_TAGS: [u16; 7] = [0x566F, 0x674F, 0x6750, 0x6751, 0x676F, 0x6770, 0x6771];

/// The identification and setup headers of a Xiph-laced block of Vorbis's three headers
/// (a count less one, then the first two's sizes in runs of 255, then the headers).
pub(crate) fn config(laced: &[u8]) -> Option<Vec<u8>> {
    let (&count, mut rest) = laced.split_first()?;
    if count != 2 {
        return None;
    }
    let mut sizes = [0usize; 2];
    for size in &mut sizes {
        loop {
            let (&b, r) = rest.split_first()?;
            rest = r;
            *size = size.checked_add(usize::from(b))?;
            if b < 255 {
                break;
            }
        }
    }
    let ident = rest.get(..sizes[0])?;
    let setup = rest.get(sizes[0].checked_add(sizes[1])?..)?;
    if !ident.starts_with(b"\x01vorbis") || !setup.starts_with(b"\x05vorbis") {
        return None;
    }
    Some([ident, setup].concat())
}

/// [`config`] of a WAVEFORMATEX's extra bytes, where its tag is Vorbis's.
pub(crate) fn from_waveformatex(fmt: &[u8]) -> Option<Vec<u8>> {
    let tag = u16::from_le_bytes(fmt.get(..2)?.try_into().ok()?);
    let size = usize::from(u16::from_le_bytes(fmt.get(16..18)?.try_into().ok()?));
    WAV_TAGS.contains(&tag).then_some(())?;
    config(fmt.get(18..18 + size)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laced_headers_give_the_identification_and_setup() {
        let ident = b"\x01vorbis-ident".to_vec();
        let comment = vec![b'c'; 300];
        let setup = b"\x05vorbis-setup".to_vec();
        let mut laced = vec![2, ident.len() as u8, 255, 45];
        laced.extend([&ident[..], &comment, &setup].concat());
        assert_eq!(config(&laced), Some([ident.clone(), setup].concat()));
        // Cut short, or a block that is not Vorbis's.
        assert_eq!(config(&laced[..20]), None);
        laced[4] = b'X';
        assert_eq!(config(&laced), None);
    }
}
