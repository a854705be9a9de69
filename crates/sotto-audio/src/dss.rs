//! DSS (`.dss`: Olympus's and Philips's dictation recorders, Digital Speech Standard) in
//! its standard-play mode (DSS SP, 11 025 Hz), which FFmpeg decodes and sotto refused as
//! not audio: the file's 512-byte blocks, their 6-byte headers skipped, hold 42-byte
//! frames stored in FFmpeg's swapped order (every other one shortened to 40 bytes, its
//! lost byte carried in the one before); each decodes, in FFmpeg's integer steps
//! (`dss_sp.c`), to 264 samples, handed to symphonia as a 16-bit WAV file as they are
//! read. The long-play mode is G.723.1 at 8 kHz (`crate::g723`), its frames running across
//! the same blocks.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

#[path = "dss_tables.rs"]
mod tables;
use tables::*;

/// Whether a file starting with `head` is a DSS file (versions 2 and 3).
pub(crate) fn is_dss(head: &[u8]) -> bool {
    matches!(head.get(..4), Some([2 | 3, b'd', b's', b's']))
}

const BLOCK: u64 = 512;
const BLOCK_HEADER: u64 = 6;
const FRAME: usize = 42;
const SAMPLES: usize = 264;
/// The header's audio codec byte.
const CODEC_AT: u64 = 0x2a4;

/// Why a DSS file is not decoded.
#[derive(Debug, PartialEq)]
pub(crate) enum DssError {
    Codec(&'static str),
    Io(String),
}

/// FFmpeg's demuxer's walk over the blocks: bytes left in the current block, and whether
/// the next frame is a shortened one.
#[derive(Clone, Copy, Default)]
struct Walk {
    counter: u64,
    swap: bool,
}

impl Walk {
    /// The reads (offset-relative lengths) of the next frame from `pos`: the bytes before
    /// a block header, and those after it; and the position after them.
    fn next(&mut self, mut pos: u64) -> ([(u64, u64); 2], u64) {
        if self.counter == 0 {
            pos += BLOCK_HEADER;
            self.counter += BLOCK - BLOCK_HEADER;
        }
        let read = if self.swap {
            FRAME as u64 - 2
        } else {
            FRAME as u64
        };
        let mut first = (pos, 0);
        let mut offset = 0;
        if self.counter < read {
            first = (pos, self.counter);
            offset = self.counter;
            pos += self.counter + BLOCK_HEADER;
            self.counter += BLOCK - BLOCK_HEADER;
        }
        self.counter -= read;
        let second = (pos, read - offset);
        self.swap = !self.swap;
        ([first, second], pos + read - offset)
    }
}

/// The frames there are in a file of `len` bytes whose audio starts at `start`.
fn frame_count(start: u64, len: u64) -> u64 {
    let (mut walk, mut pos, mut n) = (Walk::default(), start, 0);
    loop {
        let (reads, end) = walk.next(pos);
        if reads.iter().any(|&(at, l)| at + l > len) || end > len {
            return n;
        }
        pos = end;
        n += 1;
    }
}

/// `src`, a DSS file at its start, as a 16-bit WAV file of its samples.
pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Result<Box<dyn Read + Send + Sync>, DssError> {
    let io = |e: std::io::Error| DssError::Io(e.to_string());
    let mut version = [0u8; 1];
    src.seek(SeekFrom::Start(0)).map_err(io)?;
    src.read_exact(&mut version).map_err(io)?;
    let mut codec = [0u8; 1];
    src.seek(SeekFrom::Start(CODEC_AT)).map_err(io)?;
    src.read_exact(&mut codec).map_err(io)?;
    let start = u64::from(version[0]) * BLOCK;
    match codec[0] {
        0 => {}
        2 => {
            // Long play: G.723.1 frames (a few kB a minute), read whole.
            let mut bytes = Vec::new();
            src.seek(SeekFrom::Start(start)).map_err(io)?;
            src.read_to_end(&mut bytes).map_err(io)?;
            let stream = crate::g723::frame_stream(bytes, crate::g723::Framing::Dss);
            return Ok(Box::new(crate::g723::G7231Wav::new(stream)));
        }
        _ => return Err(DssError::Codec("a DSS codec sotto does not know")),
    }
    let len = match src.byte_len() {
        Some(n) => n,
        None => src.seek(SeekFrom::End(0)).map_err(io)?,
    };
    let frames = frame_count(start, len);
    let mut fmt = Vec::with_capacity(16);
    fmt.extend_from_slice(&1u16.to_le_bytes()); // PCM
    fmt.extend_from_slice(&1u16.to_le_bytes());
    fmt.extend_from_slice(&11_025u32.to_le_bytes());
    fmt.extend_from_slice(&22_050u32.to_le_bytes());
    fmt.extend_from_slice(&2u16.to_le_bytes());
    fmt.extend_from_slice(&16u16.to_le_bytes());
    let header = crate::avi::wav_header(&fmt, frames * SAMPLES as u64 * 2);
    Ok(Box::new(DssWav {
        src,
        walk: Walk::default(),
        pos: start,
        frames,
        swap_byte: 0,
        dec: DssSp::default(),
        pending: crate::codec::Pending::new(header),
    }))
}

/// A DSS file's frames, decoded as they are read, as a 16-bit WAV file.
pub(crate) struct DssWav {
    src: Box<dyn MediaSource>,
    walk: Walk,
    pos: u64,
    /// Frames still to read.
    frames: u64,
    /// The byte a full frame lends the shortened one after it.
    swap_byte: u8,
    dec: DssSp,
    pending: crate::codec::Pending,
}

impl DssWav {
    /// The next frame as the decoder takes it (FFmpeg's `dss_sp_read_packet`).
    fn frame(&mut self) -> std::io::Result<[u8; FRAME]> {
        let swap = self.walk.swap;
        let (reads, end) = self.walk.next(self.pos);
        let mut data = [0u8; FRAME + 2];
        let mut at = if swap { 3 } else { 0 };
        for (pos, len) in reads {
            let len = len as usize;
            self.src.seek(SeekFrom::Start(pos))?;
            self.src.read_exact(&mut data[at..at + len])?;
            at += len;
        }
        self.pos = end;
        if swap {
            for i in (0..FRAME - 2).step_by(2) {
                data[i] = data[i + 4];
            }
            data[1] = self.swap_byte;
        } else {
            self.swap_byte = data[FRAME - 2];
        }
        data[FRAME - 2] = 0;
        Ok(data[..FRAME].try_into().expect("a frame's bytes"))
    }
}

impl Read for DssWav {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() {
            if self.frames == 0 {
                return Ok(0);
            }
            self.frames -= 1;
            let frame = self.frame()?;
            let mut out = [0i16; SAMPLES];
            self.dec.decode(&frame, &mut out);
            self.pending.refill(out);
        }
        Ok(self.pending.read(buf))
    }
}

const SUBFRAMES: usize = 4;

#[derive(Default, Clone, Copy)]
struct Subframe {
    gain: usize,
    combined_pulse_pos: u32,
    pulse_pos: [usize; 7],
    pulse_val: [usize; 7],
}

/// The DSS SP decoder's state (FFmpeg's `DssSpContext`).
struct DssSp {
    excitation: [i32; 288 + 6],
    history: [i32; 187],
    filter_idx: [usize; 14],
    sf_adaptive_gain: [usize; SUBFRAMES],
    pitch_lag: [i32; SUBFRAMES],
    sf: [Subframe; SUBFRAMES],
    working: [i32; SUBFRAMES * 72],
    audio_buf: [i32; 15],
    err_buf1: [i32; 15],
    lpc_filter: [i32; 14],
    filter: [i32; 15],
    vector_buf: [i32; 72],
    noise_state: i32,
    err_buf2: [i32; 15],
}

impl Default for DssSp {
    fn default() -> Self {
        Self {
            excitation: [0; 294],
            history: [0; 187],
            filter_idx: [0; 14],
            sf_adaptive_gain: [0; SUBFRAMES],
            pitch_lag: [0; SUBFRAMES],
            sf: [Subframe::default(); SUBFRAMES],
            working: [0; SUBFRAMES * 72],
            audio_buf: [0; 15],
            err_buf1: [0; 15],
            lpc_filter: [0; 14],
            filter: [0; 15],
            vector_buf: [0; 72],
            noise_state: 0,
            err_buf2: [0; 15],
        }
    }
}

fn clip16(v: i32) -> i32 {
    v.clamp(-32768, 32767)
}

/// FFmpeg's `DSS_SP_FORMULA`: `(a·2^15 + b·c + 2^14) >> 15`, in its wrapping arithmetic.
fn formula(a: i32, b: i32, c: i32) -> i32 {
    ((a.wrapping_mul(1 << 15) as u32).wrapping_add((b as u32).wrapping_mul(c as u32)) as i32)
        .wrapping_add(0x4000)
        >> 15
}

fn scale_vector(v: &mut [i32], bits: i32) {
    for x in v {
        *x = if bits < 0 {
            *x >> -bits
        } else {
            x.wrapping_mul(1 << bits)
        };
    }
}

fn shift_sq_sub(filter: &[i32; 15], err: &mut [i32; 15], dst: &mut [i32]) {
    for d in dst.iter_mut().take(72) {
        let mut tmp = d.wrapping_mul(filter[0]) as u32;
        for i in (1..15).rev() {
            tmp = tmp.wrapping_sub((err[i] as u32).wrapping_mul(filter[i] as u32));
        }
        err.copy_within(0..14, 1);
        let t = (tmp.wrapping_add(4096) as i32) >> 13;
        err[1] = t;
        *d = clip16(t);
    }
}

fn shift_sq_add(filter: &[i32; 15], audio: &mut [i32; 15], dst: &mut [i32]) {
    for d in dst.iter_mut().take(72) {
        audio[0] = *d;
        let mut tmp = 0i32;
        for i in (0..15).rev() {
            tmp = tmp.wrapping_add(audio[i].wrapping_mul(filter[i]));
        }
        audio.copy_within(0..14, 1);
        *d = clip16(tmp.wrapping_add(4096) >> 13);
    }
}

fn vec_mult(src: &[i32; 15], mult: &[i32; 15]) -> [i32; 15] {
    let mut dst = [0i32; 15];
    dst[0] = src[0];
    for i in 1..15 {
        dst[i] = src[i].wrapping_mul(mult[i]).wrapping_add(0x4000) >> 15;
    }
    dst
}

impl DssSp {
    /// One 42-byte frame (its bytes in swapped pairs) into 264 samples.
    fn decode(&mut self, src: &[u8; FRAME], out: &mut [i16; SAMPLES]) {
        self.unpack(src);
        for i in 0..14 {
            self.lpc_filter[i] = FILTER_CB[i][self.filter_idx[i]];
        }
        self.convert_coeffs();
        for j in 0..SUBFRAMES {
            self.gen_exc(self.pitch_lag[j], ADAPTIVE_GAIN[self.sf_adaptive_gain[j]]);
            let sf = self.sf[j];
            for i in 0..7 {
                let add = FIXED_CB_GAIN[sf.gain]
                    .wrapping_mul(PULSE_VAL[sf.pulse_val[i]])
                    .wrapping_add(0x4000)
                    >> 15;
                let v = &mut self.vector_buf[sf.pulse_pos[i]];
                *v = v.wrapping_add(add);
            }
            // The history shifts by a subframe; the new excitation goes in reversed.
            self.history.copy_within(1..115, 73);
            for i in 0..72 {
                self.history[72 - i] = self.vector_buf[i];
            }
            for i in 0..72 {
                self.vector_buf[i] = self.history[72 - i];
            }
            shift_sq_sub(&self.filter, &mut self.err_buf2, &mut self.vector_buf);
            self.synthesis(self.lpc_filter[0], j);
        }
        self.update_state();
        for (o, &w) in out.iter_mut().zip(&self.working) {
            *o = clip16(w) as i16;
        }
    }

    fn unpack(&mut self, src: &[u8; FRAME]) {
        let mut bits = [0u8; FRAME];
        for i in (0..FRAME).step_by(2) {
            bits[i] = src[i + 1];
            bits[i + 1] = src[i];
        }
        let mut r = crate::codec::Bits::new(&bits);
        let mut get = |n: u32| r.get(n).unwrap_or(0);
        for i in 0..14 {
            self.filter_idx[i] = get(match i {
                0..2 => 5,
                2..8 => 4,
                _ => 3,
            }) as usize;
        }
        for j in 0..SUBFRAMES {
            self.sf_adaptive_gain[j] = get(5) as usize;
            self.sf[j].combined_pulse_pos = get(31);
            self.sf[j].gain = get(6) as usize;
            for i in 0..7 {
                self.sf[j].pulse_val[i] = get(3) as usize;
            }
        }
        for sf in &mut self.sf {
            // A 31-bit position is always under C(72, 7): the combinatorial decoding.
            let mut combined = sf.combined_pulse_pos;
            let (mut pulse, mut idx) = (7usize, 71usize);
            for i in 0..7 {
                while combined < COMBINATORIAL[pulse][idx] {
                    idx -= 1;
                }
                combined -= COMBINATORIAL[pulse][idx];
                pulse -= 1;
                sf.pulse_pos[i] = idx;
            }
        }
        let mut combined_pitch = get(24);
        self.pitch_lag[0] = (combined_pitch % 151) as i32 + 36;
        combined_pitch /= 151;
        for i in 1..SUBFRAMES - 1 {
            self.pitch_lag[i] = (combined_pitch % 48) as i32;
            combined_pitch /= 48;
        }
        if combined_pitch > 47 {
            combined_pitch = 0;
        }
        self.pitch_lag[SUBFRAMES - 1] = combined_pitch as i32;
        let mut lag = self.pitch_lag[0];
        for i in 1..SUBFRAMES {
            if lag > 162 {
                self.pitch_lag[i] += 162 - 23;
            } else {
                self.pitch_lag[i] += (lag - 23).max(36);
            }
            lag = self.pitch_lag[i];
        }
    }

    fn convert_coeffs(&mut self) {
        let (lpc, c) = (&self.lpc_filter, &mut self.filter);
        c[0] = 0x2000;
        for (a, &l) in lpc.iter().enumerate() {
            let ap = a + 1;
            c[ap] = l >> 2;
            for i in 1..=ap / 2 {
                let (c1, c2) = (c[i], c[ap - i]);
                c[i] = clip16(formula(c1, l, c2));
                c[ap - i] = clip16(formula(c2, l, c1));
            }
        }
    }

    fn gen_exc(&mut self, pitch_lag: i32, gain: i32) {
        let lag = pitch_lag as usize;
        for i in 0..72 {
            let at = if lag < 72 { lag - i % lag } else { lag - i };
            self.vector_buf[i] = self.history[at];
        }
        for v in &mut self.vector_buf {
            *v = clip16(gain.wrapping_mul(*v) >> 11);
        }
    }

    fn vector_sum(&self) -> i32 {
        self.vector_buf
            .iter()
            .fold(0i32, |s, &v| s.wrapping_add(v.wrapping_abs()))
    }

    /// A subframe's synthesis into `working[j]` (FFmpeg's `dss_sp_sf_synthesis`).
    fn synthesis(&mut self, lpc_filter: i32, j: usize) {
        let size = 72;
        let vsum_1 = self.vector_sum().min(0xFFFFF);
        let mut val = 1u32;
        for &v in &self.vector_buf {
            val |= v.wrapping_abs() as u32;
        }
        let mut normalize_bits = 0;
        while val <= 0x4000 {
            val *= 2;
            normalize_bits += 1;
        }
        scale_vector(&mut self.vector_buf, normalize_bits - 3);
        scale_vector(&mut self.audio_buf, normalize_bits);
        scale_vector(&mut self.err_buf1, normalize_bits);
        let v36 = self.err_buf1[1];
        let tmp_buf = vec_mult(&self.filter, &BINARY_DECREASING);
        shift_sq_add(&tmp_buf, &mut self.audio_buf, &mut self.vector_buf);
        let tmp_buf = vec_mult(&self.filter, &UNC_DECREASING);
        shift_sq_sub(&tmp_buf, &mut self.err_buf1, &mut self.vector_buf);
        let lpc = (lpc_filter >> 1).min(0);
        for i in (1..size).rev() {
            self.vector_buf[i] = clip16(formula(self.vector_buf[i], lpc, self.vector_buf[i - 1]));
        }
        self.vector_buf[0] = clip16(formula(self.vector_buf[0], lpc, v36));
        scale_vector(&mut self.vector_buf, -normalize_bits);
        scale_vector(&mut self.audio_buf, -normalize_bits);
        scale_vector(&mut self.err_buf1, -normalize_bits);
        let vsum_2 = self.vector_sum();
        let tmp = if vsum_2 >= 0x40 {
            vsum_1.wrapping_shl(11) / vsum_2
        } else {
            1
        };
        let bias = 409i32.wrapping_mul(tmp) >> 15 << 15;
        let mut noise = [0i32; 72];
        noise[0] = clip16(bias.wrapping_add(32358i32.wrapping_mul(self.noise_state)) >> 15);
        for i in 1..size {
            noise[i] = clip16(bias.wrapping_add(32358 * noise[i - 1]) >> 15);
        }
        self.noise_state = noise[size - 1];
        let dst = &mut self.working[j * 72..(j + 1) * 72];
        for i in 0..size {
            dst[i] = clip16(self.vector_buf[i].wrapping_mul(noise[i]) >> 11);
        }
    }

    /// The frame's 288 samples at 12 kHz resampled to 264 at 11 025 Hz, into `working`.
    fn update_state(&mut self) {
        self.excitation.copy_within(288..294, 0);
        self.excitation[6..].copy_from_slice(&self.working);
        let (mut offset, mut counter, mut a) = (6usize, 0usize, 0usize);
        loop {
            let mut tmp = 0i32;
            for i in 0..6 {
                tmp = tmp.wrapping_add(self.excitation[offset].wrapping_mul(SINC[a + i * 11]));
                offset = offset.wrapping_sub(1);
            }
            offset = offset.wrapping_add(7);
            self.working[counter] = clip16(tmp >> 15);
            counter += 1;
            a = (a + 1) % 11;
            if a == 0 {
                offset += 1;
            }
            if offset >= self.excitation.len() {
                break;
            }
        }
    }
}
