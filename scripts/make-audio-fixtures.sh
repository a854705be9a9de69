#!/usr/bin/env bash
# Makes the tiny audio fixtures under crates/sotto-audio/tests/fixtures (needs sox with
# libsox-fmt-all, opus-tools, twolame, wavpack and ffmpeg: `apt-get install sox
# libsox-fmt-all opus-tools twolame wavpack ffmpeg`). The fixtures are committed; rerun this only to change them. Each is 0.5 s of 22.05 kHz stereo: 440 Hz on the left, a 300 Hz to 3 kHz
# sweep on the right (the sweep makes the alignment of lossy decodes unambiguous).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/crates/sotto-audio/tests/fixtures"
mkdir -p "$out"
cd "$out"
# -D: no dither, so the 16-bit source is the same on every run.
sox -D -n -r 22050 -b 16 -c 2 tones.wav synth 0.5 sine 440 sine 300-3000 gain -6 fade 0.01 0.5 0.01
sox -D tones.wav tones.flac
sox -D tones.wav -C 64 tones.mp3
sox -D tones.wav -C 0 tones.ogg
# Decodes that tests/decode.rs compares with ours are kept as FLAC (the same 16-bit
# samples in a third of the bytes: the fixtures travel with every GPU check).
to_flac() {
    ffmpeg -hide_banner -loglevel error -y -i "$1" -c:a flac -fflags +bitexact "$2"
    rm "$1"
}
# Opus in Ogg, in pages of at most 100 ms (so the end trim is on a page of its own), and
# libopus's own decode of it without dither, which tests/decode.rs compares with ours.
opusenc --quiet --bitrate 48 --max-delay 100 tones.wav tones.opus
opusdec --quiet --no-dither --rate 48000 tones.opus opus.wav
to_flac opus.wav tones.opus.flac
opusdec --quiet --no-dither --rate 16000 tones.opus opus16k.wav
to_flac opus16k.wav tones.opus.16k.flac
# 5.1 Opus (mapping family 1), from the two channels spread over six, and libopus's decode.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s16le \
    -af "pan=5.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1" six.wav
opusenc --quiet --bitrate 96 --max-delay 100 six.wav tones.51.opus
opusdec --quiet --no-dither --rate 48000 tones.51.opus opus51.wav
to_flac opus51.wav tones.51.opus.flac
rm six.wav
# RF64, the WAV past 4 GiB (EBU Tech 3306), as ffmpeg writes it.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s16le -rf64 always \
    -map_metadata -1 -fflags +bitexact tones.rf64.wav
# PCM in Matroska: 16-bit in one block of every frame (ffmpeg's WAV reader hands it all
# at once with -max_size), and 24-bit in ffmpeg's own blocks.
ffmpeg -hide_banner -loglevel error -y -max_size 65536 -i tones.wav -c:a pcm_s16le \
    -fflags +bitexact tones.pcm.mkv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s24le -fflags +bitexact tones.s24.mka
# Sun .au (16-bit big-endian), as Unix and telephony tools write it.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s16be -fflags +bitexact tones.au
# GSM 06.10 (libgsm, as voicemail systems write it): WAV49 and raw frames, 8 kHz mono,
# each with FFmpeg's decode to compare with.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ac 1 -ar 8000 -c:a libgsm_ms \
    -fflags +bitexact tones.gsm.wav
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ac 1 -ar 8000 -c:a libgsm -f gsm tones.gsm
# G.722 (wideband SIP phones' and recorders'): in WAV and raw, 16 kHz mono.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ac 1 -ar 16000 -c:a g722 \
    -fflags +bitexact tones.g722.wav
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ac 1 -ar 16000 -c:a g722 -f g722 tones.g722
# G.726 ADPCM in WAV (voice recorders, IP cameras): 32 kbit/s (4-bit codes) and 40 kbit/s
# (5-bit codes, across bytes).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ac 1 -ar 8000 -c:a g726 -b:a 32k \
    -fflags +bitexact tones.g726.wav
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ac 1 -ar 8000 -c:a g726 -b:a 40k \
    -fflags +bitexact tones.g726-40.wav
for f in tones.gsm.wav tones.gsm tones.g722.wav tones.g722 tones.g726.wav tones.g726-40.wav; do
    ffmpeg -hide_banner -loglevel error -y -i "$f" -c:a flac -fflags +bitexact "$f.flac"
done
# AVI, as older cameras write it (a small MJPEG video beside the audio): PCM, and MP3 with
# its stream copied out (no Xing frame or ID3 tag: the same frames) to compare with.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v mjpeg -c:a pcm_s16le -fflags +bitexact -flags +bitexact tones.avi
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v mjpeg -c:a libmp3lame -b:a 64k -fflags +bitexact -flags +bitexact tones.mp3.avi
ffmpeg -hide_banner -loglevel error -y -i tones.mp3.avi -map 0:a -c:a copy -f mp3 -write_xing 0 \
    -id3v2_version 0 -fflags +bitexact tones.mp3.avi.mp3
# FLV, as OBS Studio records and live streams are captured (a small Sorenson video beside
# the audio): AAC, MP3 and A-law, each with its stream copied out to compare with.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v flv1 -c:a aac -b:a 64k -fflags +bitexact -flags +bitexact tones.flv
ffmpeg -hide_banner -loglevel error -y -i tones.flv -map 0:a -c:a copy -f adts -fflags +bitexact \
    tones.flv.aac
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a libmp3lame -b:a 64k -fflags +bitexact \
    -flags +bitexact tones.mp3.flv
ffmpeg -hide_banner -loglevel error -y -i tones.mp3.flv -c:a copy -f mp3 -write_xing 0 \
    -id3v2_version 0 -fflags +bitexact tones.mp3.flv.mp3
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -ac 1 -c:a pcm_alaw \
    -fflags +bitexact tones.alaw.flv
ffmpeg -hide_banner -loglevel error -y -i tones.alaw.flv -c:a copy -fflags +bitexact \
    tones.alaw.flv.wav
# Nellymoser in FLV (Flash Player's microphone, 16 kHz), and FFmpeg's decode of it.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 16000 -ac 1 -c:a nellymoser \
    -fflags +bitexact tones.nelly.flv
ffmpeg -hide_banner -loglevel error -y -i tones.nelly.flv -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.nelly.flv.flac
# Apple's IMA 4:1 ADPCM (iOS apps' recordings in CAF, older Macs' AIFF-C and QuickTime),
# 0.25 s, and FFmpeg's decode of it; Apple Lossless in CAF (FFmpeg's cookie, in `frma`
# and `alac` atoms), 0.1 s.
for c in caf aiff mov; do
    ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.25 -c:a adpcm_ima_qt \
        -fflags +bitexact -flags +bitexact "tones.ima4.$c"
done
ffmpeg -hide_banner -loglevel error -y -i tones.ima4.caf -c:a flac -fflags +bitexact \
    tones.ima4.flac
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -c:a alac -fflags +bitexact \
    tones.alac.caf
# In Matroska and QuickTime (the cookie in a `wave` atom): Apple Lossless (the bare cookie
# as codec private), 0.1 s; MP3 in Matroska, whose last
# block carries DiscardPadding (the encoder's padding after the end, which FFmpeg drops).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -c:a alac -fflags +bitexact \
    -flags +bitexact tones.alac.mkv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -c:a alac -fflags +bitexact \
    -flags +bitexact tones.alac.mov
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a libmp3lame -b:a 64k -fflags +bitexact \
    -flags +bitexact tones.mp3.mkv
# MP3 in WAV (format 0x0055, as broadcast and recorder software write it) and G.711 in
# QuickTime (`ulaw`), each with its stream copied out to compare with.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a libmp3lame -b:a 64k -f wav \
    -fflags +bitexact -flags +bitexact tones.mp3.wav
ffmpeg -hide_banner -loglevel error -y -i tones.mp3.wav -c:a copy -f mp3 -write_xing 0 \
    -id3v2_version 0 -fflags +bitexact tones.mp3.wav.mp3
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -c:a pcm_mulaw -fflags +bitexact \
    -flags +bitexact tones.ulaw.mov
ffmpeg -hide_banner -loglevel error -y -i tones.ulaw.mov -c:a copy -fflags +bitexact \
    tones.ulaw.mov.wav
# Sony Wave64, 0.1 s of the same samples.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -c:a pcm_s16le -f w64 \
    -fflags +bitexact tones.w64
# AAC in an MPEG transport stream (beside a small MPEG-2 video), and its ADTS stream copied
# out to compare with.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v mpeg2video -c:a aac -b:a 64k -fflags +bitexact -flags +bitexact tones.ts
ffmpeg -hide_banner -loglevel error -y -i tones.ts -map 0:a -c:a copy -f adts -fflags +bitexact \
    tones.ts.aac
# DTS in Matroska, and the same frames in MP4, a transport stream and WAV; FFmpeg's decode
# of them (stereo) to compare with.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.2 -c:a dca -strict -2 -b:a 256k \
    -fflags +bitexact -flags +bitexact tones.dts.mkv
for c in mp4 ts wav; do
    ffmpeg -hide_banner -loglevel error -y -i tones.dts.mkv -c:a copy -fflags +bitexact \
        -flags +bitexact "tones.dts.$c"
done
ffmpeg -hide_banner -loglevel error -y -i tones.dts.mkv -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.dts.mkv.flac
# TrueHD (stereo, and 5.1: two substreams) and MLP in Matroska at 44.1 kHz (their
# encoders' least rate), FFmpeg's decodes of the stereo ones as FLAC (24- and 16-bit:
# lossless, to compare bit for bit) and its mono mix of the 5.1.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.15 -ar 44100 -c:a truehd -strict -2 \
    -fflags +bitexact -flags +bitexact tones.thd.mka
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.15 -ar 44100 -c:a mlp -strict -2 \
    -fflags +bitexact -flags +bitexact tones.mlp.mka
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.15 -ar 44100 -c:a pcm_s16le \
    -af "pan=5.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1" six44.wav
ffmpeg -hide_banner -loglevel error -y -i six44.wav -c:a truehd -strict -2 -fflags +bitexact \
    -flags +bitexact tones.51.thd.mka
rm six44.wav
# (FFmpeg's raw muxer warns of timestamps it cannot know for every unit: harmless.)
ffmpeg -hide_banner -loglevel quiet -y -i tones.thd.mka -c copy -strict -2 -fflags +bitexact \
    tones.thd
ffmpeg -hide_banner -loglevel error -y -i tones.thd.mka -c:a flac -sample_fmt s32 \
    -fflags +bitexact tones.thd.mka.flac
ffmpeg -hide_banner -loglevel error -y -i tones.mlp.mka -c:a flac -fflags +bitexact \
    tones.mlp.mka.flac
ffmpeg -hide_banner -loglevel error -y -i tones.51.thd.mka -ac 1 -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.51.thd.mka.mono.flac
# What sotto refuses, by name: WMA in Matroska (a codec it does not decode), and a
# Matroska file with video alone.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.2 -c:a wmav2 -b:a 32k \
    -fflags +bitexact -flags +bitexact tones.wma.mkv
# WavPack in Matroska, as FFmpeg writes it (tests/decode.rs holds the md5 of its decode);
# and a codec sotto does not decode (RealAudio 1.0), in Matroska.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.2 -c:a wavpack \
    -fflags +bitexact -flags +bitexact tones.wv.mkv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.2 -ar 8000 -ac 1 -c:a real_144 \
    -fflags +bitexact -flags +bitexact tones.ra144.mkv
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -t 0.25 -c:v mjpeg \
    -fflags +bitexact -flags +bitexact video.mkv
# 7.1 PCM in Matroska (as Blu-ray remuxes carry LPCM: the count alone, no layout), and
# FFmpeg's mono mix of it (its guess of the layout from the count).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -ar 8000 -c:a pcm_s16le \
    -af "pan=7.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1|SL=0.3*c0|SR=0.6*c1" \
    -fflags +bitexact -flags +bitexact tones.71.mka
ffmpeg -hide_banner -loglevel error -y -i tones.71.mka -ac 1 -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.71.mka.mono.flac
# Opus in WebM (as browsers record), AAC in MP4 (as phones do: with an edit list).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a libopus -b:a 48k tones.webm
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a aac -b:a 64k tones.m4a
# Raw AAC in ADTS frames (`.aac`).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a aac -b:a 64k -fflags +bitexact \
    -flags:a +bitexact tones.aac
# AAC past what symphonia's own decoder takes: 5.1 in MP4 (a film's track: the first 0.25 s
# of the six channels above), and HE-AAC v2 (SBR and parametric stereo, in ADTS frames, as
# low-bitrate streams and radio send it; padded with silence, so that all of the tones
# come out past the encoder's delay), each with FFmpeg's decode of it (16-bit FLAC), which
# tests/decode.rs compares with ours. ffmpeg has no HE-AAC encoder, so Fraunhofer's
# (libfdk-aac, through the fdk-aac crate: needs cargo and a C compiler) makes that one.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.25 -c:a pcm_s16le \
    -af "pan=5.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1" six.wav
ffmpeg -hide_banner -loglevel error -y -i six.wav -c:a aac -b:a 96k -fflags +bitexact \
    -flags:a +bitexact tones.51.m4a
rm six.wav
he_aac_encoder() {
    local dir="${TMPDIR:-/tmp}/sotto-he-aac-encoder"
    mkdir -p "$dir/src"
    cat >"$dir/Cargo.toml" <<'TOML'
[package]
name = "he-aac-encoder"
version = "0.1.0"
edition = "2021"
[dependencies]
fdk-aac = "0.8"
TOML
    # Stereo 16-bit PCM at the rate in $1 on stdin, HE-AAC v2 at $2 bit/s in ADTS on stdout.
    cat >"$dir/src/main.rs" <<'RUST'
use fdk_aac::enc::{AudioObjectType, BitRate, ChannelMode, Encoder, EncoderParams, Transport};
use std::io::{Read, Write};
fn main() {
    let arg = |i: usize| std::env::args().nth(i).unwrap().parse::<u32>().unwrap();
    let enc = Encoder::new(EncoderParams {
        bit_rate: BitRate::Cbr(arg(2)),
        sample_rate: arg(1),
        transport: Transport::Adts,
        channels: ChannelMode::Stereo,
        audio_object_type: AudioObjectType::Mpeg4HeAacV2,
    })
    .unwrap();
    let mut raw = Vec::new();
    std::io::stdin().read_to_end(&mut raw).unwrap();
    let pcm: Vec<i16> = raw.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
    let (mut at, mut out) = (0, vec![0u8; 1 << 16]);
    while at < pcm.len() {
        let info = enc.encode(&pcm[at..], &mut out).unwrap();
        at += info.input_consumed;
        std::io::stdout().write_all(&out[..info.output_size]).unwrap();
    }
}
RUST
    cargo build --quiet --release --manifest-path "$dir/Cargo.toml"
    echo "$dir/target/release/he-aac-encoder"
}
ffmpeg -hide_banner -loglevel error -y -i tones.wav -af apad=pad_dur=0.35 -f s16le - |
    "$(he_aac_encoder)" 22050 24000 >tones.he.aac
# AAC in LATM, in a transport stream (as DVB broadcasts it): the AAC-LC and HE-AAC v2
# streams above, their frames copied, to compare with.
ffmpeg -hide_banner -loglevel error -y -i tones.ts.aac -c:a copy -f mpegts -mpegts_flags latm \
    -fflags +bitexact tones.latm.ts
ffmpeg -hide_banner -loglevel error -y -i tones.he.aac -c:a copy -f mpegts -mpegts_flags latm \
    -fflags +bitexact tones.he.latm.ts
# AC-3 (Dolby Digital): a stereo stream (coupling and rematrixing at this rate) as `.ac3`,
# its frames copied into each container that carries AC-3 (Matroska, MP4, a transport
# stream as ATSC and as DVB mark it, AVI), to compare with; and 5.1 (the six channels
# above), with FFmpeg's decode of it.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a ac3 -b:a 96k -fflags +bitexact \
    -flags +bitexact tones.ac3
for c in mkv m4a avi; do
    ffmpeg -hide_banner -loglevel error -y -i tones.ac3 -c:a copy -fflags +bitexact \
        -flags +bitexact "tones.ac3.$c"
done
ffmpeg -hide_banner -loglevel error -y -i tones.ac3 -c:a copy -fflags +bitexact tones.ac3.ts
ffmpeg -hide_banner -loglevel error -y -i tones.ac3 -c:a copy -mpegts_flags system_b \
    -fflags +bitexact tones.dvb.ac3.ts
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.25 -c:a pcm_s16le \
    -af "pan=5.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1" six.wav
ffmpeg -hide_banner -loglevel error -y -i six.wav -c:a ac3 -b:a 256k -fflags +bitexact \
    -flags +bitexact tones.51.ac3
# E-AC-3 (Dolby Digital Plus) of the same six, as frames and in MP4 (`ec-3`) and WAV.
ffmpeg -hide_banner -loglevel error -y -i six.wav -c:a eac3 -b:a 192k -fflags +bitexact \
    -flags +bitexact tones.51.eac3
ffmpeg -hide_banner -loglevel error -y -i tones.51.eac3 -c:a copy -fflags +bitexact \
    -flags +bitexact tones.51.eac3.mp4
# And in WAV, which FFmpeg (in AVI too) marks with the Dolby Digital Plus sub-format GUID.
ffmpeg -hide_banner -loglevel error -y -i tones.51.eac3 -c:a copy -fflags +bitexact \
    -flags +bitexact tones.51.eac3.wav
# DTS of the same six (FFmpeg's encoder: 384 kb/s is its least at 22.05 kHz), and FFmpeg's
# mono mix of its decode.
ffmpeg -hide_banner -loglevel error -y -i six.wav -c:a dca -strict -2 -b:a 384k \
    -fflags +bitexact -flags +bitexact tones.51.dts
ffmpeg -hide_banner -loglevel error -y -i tones.51.dts -ac 1 -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.51.dts.mono.flac
# The same frames rewritten with the coding tools FFmpeg's encoder never uses (Huffman side
# information, VQ, joint intensity, ...), and FFmpeg's mono mix of their decode.
python3 "$root/scripts/dts-tools-fixture.py" tones.51.dts tones.51.tools.dts
ffmpeg -hide_banner -loglevel error -y -i tones.51.tools.dts -ac 1 -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.51.tools.dts.mono.flac
rm six.wav
for f in tones.51.m4a tones.he.aac tones.51.ac3 tones.51.eac3; do
    ffmpeg -hide_banner -loglevel error -y -i "$f" -c:a flac -sample_fmt s16 -fflags +bitexact \
        "$f.flac"
done
# FFmpeg's mix of that 5.1 decode to mono (its resampler's, which faster-whisper's
# decode_audio uses), which tests/decode.rs compares sotto's mix with.
ffmpeg -hide_banner -loglevel error -y -i tones.51.ac3.flac -ac 1 -c:a flac -sample_fmt s16 \
    -fflags +bitexact tones.51.ac3.mono.flac
# AMR-NB (phones' voice and call recorders): 4 s of samples/jfk.wav at 8 kHz through the
# 3GPP reference encoder (opencore-amrnb: `apt-get install libopencore-amrnb-dev`; FFmpeg
# here has no AMR encoder), the mode changing every 6 frames through all eight, with
# discontinuous transmission (a SID frame and no-data frames in a pause); the same frames
# in 3GP. tests/decode.rs holds the md5 of FFmpeg's float decode of it.
cat > amr-enc.c <<'C'
#include <stdio.h>
#include <opencore-amrnb/interf_enc.h>
int main(void) {
    void *enc = Encoder_Interface_init(1);
    short speech[160];
    unsigned char frame[64];
    long n = 0;
    fwrite("#!AMR\n", 1, 6, stdout);
    while (fread(speech, 2, 160, stdin) == 160) {
        int len = Encoder_Interface_Encode(enc, (n++ / 6) % 8, speech, frame, 0);
        fwrite(frame, 1, len, stdout);
    }
    Encoder_Interface_exit(enc);
    return 0;
}
C
gcc -O2 amr-enc.c -o amr-enc -lopencore-amrnb
ffmpeg -hide_banner -loglevel error -i "$root/samples/jfk.wav" -t 4 -ar 8000 -ac 1 -f s16le - |
    ./amr-enc > speech.amr
ffmpeg -hide_banner -loglevel error -y -i speech.amr -c:a copy -fflags +bitexact \
    -flags +bitexact speech.3gp
ffmpeg -hide_banner -loglevel error -i speech.amr -f f32le - | md5sum
rm amr-enc amr-enc.c
# AMR-WB ("HD voice"): the same 4 s at 16 kHz through VisualOn's encoder (`apt-get install
# libvo-amrwbenc-dev`), the mode changing every 6 frames through all nine; then a pause's
# frames put in after frame 100 (a SID frame and two no-data frames) and frame 150 marked
# bad, which FFmpeg mutes; the same frames in 3GP. tests/decode.rs holds the md5 of
# FFmpeg's float decode.
cat > awb-enc.c <<'C'
#include <stdio.h>
#include <vo-amrwbenc/enc_if.h>
int main(void) {
    void *enc = E_IF_init();
    short speech[320];
    unsigned char frame[64];
    long n = 0;
    fwrite("#!AMR-WB\n", 1, 9, stdout);
    while (fread(speech, 2, 320, stdin) == 320) {
        int len = E_IF_encode(enc, (n++ / 6) % 9, speech, frame, 0);
        fwrite(frame, 1, len, stdout);
    }
    E_IF_exit(enc);
    return 0;
}
C
gcc -O2 awb-enc.c -o awb-enc -lvo-amrwbenc
ffmpeg -hide_banner -loglevel error -i "$root/samples/jfk.wav" -t 4 -ar 16000 -ac 1 -f s16le - |
    ./awb-enc > whole.awb
python3 - <<'PY'
data = open("whole.awb", "rb").read()
bits = [132, 177, 253, 285, 317, 365, 397, 461, 477, 40] + [0] * 6
frames, at = [], 9
while at < len(data):
    size = 1 + (bits[(data[at] >> 3) & 15] + 7) // 8
    frames.append(bytearray(data[at:at + size]))
    at += size
frames[150][0] &= ~4
pause = [bytes([9 << 3 | 4]) + bytes(5), bytes([15 << 3 | 4]), bytes([15 << 3 | 4])]
frames[100:100] = pause
open("speech.awb", "wb").write(data[:9] + b"".join(frames))
PY
ffmpeg -hide_banner -loglevel error -y -i speech.awb -c:a copy -fflags +bitexact \
    -flags +bitexact speech.awb.3gp
ffmpeg -hide_banner -loglevel error -i speech.awb -f f32le - | md5sum
rm awb-enc awb-enc.c whole.awb
# Windows Media Audio in ASF: version 2 of the tones, and 4 s of samples/jfk.wav at 16 kHz
# mono in versions 1 and 2 at 24 kb/s (noise mixed into the coefficients); FFmpeg's decodes
# of the three, which tests/decode.rs compares sotto's with.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a wmav2 -b:a 48k \
    -fflags +bitexact -flags +bitexact tones.wma
for v in 1 2; do
    ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 4 -ar 16000 -ac 1 \
        -c:a wmav$v -b:a 24k -fflags +bitexact -flags +bitexact speech.wmav$v.wma
done
for f in tones.wma speech.wmav1.wma speech.wmav2.wma; do
    ffmpeg -hide_banner -loglevel error -y -i "$f" -c:a flac -sample_fmt s16 -fflags +bitexact \
        "$f.flac"
done
# What a WAV file may hold, in Matroska (`A_MS/ACM`: G.711 μ-law, as IP cameras send it),
# ASF (Microsoft ADPCM) and QuickTime; tests/decode.rs holds the md5 of FFmpeg's decodes.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -ac 1 -c:a pcm_mulaw \
    -fflags +bitexact -flags +bitexact tones.mulaw.mkv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 11025 -c:a adpcm_ms \
    -fflags +bitexact -flags +bitexact tones.adpcm.asf
# And in QuickTime: Microsoft ADPCM (its WAVEFORMATEX in the entry's `wave` atom) and
# G.726 (none: the entry's own fields).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 11025 -c:a adpcm_ms \
    -fflags +bitexact -flags +bitexact tones.adpcm.mov
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -ac 1 -c:a g726 \
    -fflags +bitexact -flags +bitexact tones.g726.mov
for f in tones.mulaw.mkv tones.adpcm.asf tones.adpcm.mov tones.g726.mov; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f f32le - | md5sum
done
# The tones' WMA superframes copied into WAV and AVI (format tag 0x0161).
for c in wav avi; do
    ffmpeg -hide_banner -loglevel error -y -i tones.wma -c:a copy -f $c -fflags +bitexact \
        tones.wma.$c
done
# Speex in Ogg (libspeex's encoder; tests/decode.rs holds the md5 of FFmpeg's own float
# decoder's output): 4 s of samples/jfk.wav in wideband VBR with DTX, two frames a packet,
# and in narrowband; the tones in ultra-wideband stereo, and in FLV (Flash's wideband).
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 4 -ar 16000 -ac 1 \
    -c:a libspeex -q:a 4 -vad 1 -dtx 1 -frames_per_packet 2 -fflags +bitexact \
    -flags +bitexact speech.spx
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 4 -ar 8000 -ac 1 \
    -c:a libspeex -q:a 2 -fflags +bitexact -flags +bitexact speech.nb.spx
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 32000 -c:a libspeex -cbr_quality 6 \
    -fflags +bitexact -flags +bitexact tones.spx
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 16000 -ac 1 -c:a libspeex \
    -fflags +bitexact -flags +bitexact tones.speex.flv
for f in speech.spx speech.nb.spx tones.spx tones.speex.flv; do
    ffmpeg -hide_banner -loglevel error -c:a speex -i "$f" -f f32le - | md5sum
done
# DSS in standard-play mode: FFmpeg has no DSS encoder, so a header (version 2, codec 0)
# before six 512-byte blocks of random bits, which decode as any bits do; tests/decode.rs
# holds the md5 of FFmpeg's 16-bit decode.
python3 - <<'PY'
import random
random.seed(7)
h = bytearray(1024)
h[0:4] = b'\x02dss'
h[0xc:0xc + 16] = b'sotto test      '
h[0x26:0x26 + 12] = b'260101120000'
h[0x32:0x32 + 12] = b'260101120010'
data = bytearray()
for _ in range(6):
    data += bytearray(random.getrandbits(8) for _ in range(512))
open("noise.dss", "wb").write(h + data)
PY
ffmpeg -hide_banner -loglevel error -i noise.dss -f s16le - | md5sum
# MPEG program streams: the AC-3 in a DVD's VOB, 16- and 24-bit DVD LPCM (and their
# samples as FLAC), and MP2 beside MPEG-1 video (and the MP2 copied out).
ffmpeg -hide_banner -loglevel error -y -i tones.ac3 -c:a copy -f vob -fflags +bitexact \
    tones.ac3.vob
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.25 -ar 48000 -c:a pcm_dvd -f vob \
    -fflags +bitexact tones.lpcm.vob
ffmpeg -hide_banner -loglevel error -y -i tones.lpcm.vob -c:a flac -fflags +bitexact \
    tones.lpcm.vob.flac
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -ar 48000 -c:a pcm_dvd \
    -sample_fmt s32 -f vob -fflags +bitexact tones.lpcm24.vob
ffmpeg -hide_banner -loglevel error -y -i tones.lpcm24.vob -c:a flac -sample_fmt s32 \
    -fflags +bitexact tones.lpcm24.vob.flac
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=black:size=32x32:rate=25 -i tones.wav \
    -t 0.5 -c:v mpeg1video -c:a mp2 -b:a 64k -f mpeg -fflags +bitexact -flags +bitexact tones.mpg
ffmpeg -hide_banner -loglevel error -y -i tones.mpg -map 0:a -c:a copy -f mp2 -fflags +bitexact \
    tones.mpg.mp2
# MPEG audio Layer II: mono at 48 kHz and FFmpeg's default 384 kb/s (a pair the standard
# does not make), 0.2 s, raw and copied into MP4 and QuickTime, with FFmpeg's decode; and
# 0.5 s of samples/jfk.wav panned to stereo, through TwoLAME in joint stereo (intensity
# above subband 4) with CRCs (apt-get install twolame), with FFmpeg's decode.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.2 -ar 48000 -ac 1 -c:a mp2 \
    -fflags +bitexact -flags +bitexact tones.mono.mp2
ffmpeg -hide_banner -loglevel error -y -i tones.mono.mp2 -c:a flac -fflags +bitexact \
    tones.mono.mp2.flac
for c in mp4 mov; do
    ffmpeg -hide_banner -loglevel error -y -i tones.mono.mp2 -c:a copy -fflags +bitexact \
        -flags +bitexact "tones.mp2.$c"
done
ffmpeg -hide_banner -loglevel error -y -ss 1 -t 0.5 -i "$root/samples/jfk.wav" -ar 32000 \
    -af "pan=stereo|c0=c0|c1=0.6*c0" -fflags +bitexact "${TMPDIR:-/tmp}/sotto-joint.wav"
twolame -m j -b 64 -p "${TMPDIR:-/tmp}/sotto-joint.wav" speech.joint.mp2 > /dev/null 2>&1
ffmpeg -hide_banner -loglevel error -y -i speech.joint.mp2 -c:a flac -fflags +bitexact \
    speech.joint.mp2.flac
# DV (MiniDV tapes captured): 2 frames of 525/60 (black) with 67 ms of samples/jfk.wav
# at 48 kHz, raw, and as a "type 1" AVI (one interleaved `iavs` stream, as WinDV and
# Windows' capture write; FFmpeg writes none, so made here), with FFmpeg's decode.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=black:size=720x480:rate=30000/1001 \
    -ss 1 -i "$root/samples/jfk.wav" -frames:v 2 -t 0.0667 -c:v dvvideo -pix_fmt yuv411p \
    -ar 48000 -ac 2 -c:a pcm_s16le -fflags +bitexact -f dv speech.dv
python3 - speech.dv speech.dv.avi <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
size = 120000 if data[3] & 0x80 == 0 else 144000
frames = [data[i:i + size] for i in range(0, len(data) - size + 1, size)]
def chunk(fourcc, body):
    return fourcc + struct.pack('<I', len(body)) + body + (b'\0' if len(body) % 2 else b'')
def lst(kind, items):
    return chunk(b'LIST', kind + b''.join(items))
rate, scale = (30000, 1001) if size == 120000 else (25, 1)
avih = struct.pack('<14I', 33367 if size == 120000 else 40000, size * 30, 0, 0x10, len(frames), 0, 1, size, 720, 480 if size == 120000 else 576, 0, 0, 0, 0)
strh = b'iavs' + b'dvsd' + struct.pack('<IHHIIIIIIIIhhhh', 0, 0, 0, 0, scale, rate, 0, len(frames), size, 0xFFFFFFFF, 0, 0, 0, 0, 0)
strf = struct.pack('<8I', 0, 0, 0, 0, 0, 0, 0, 0)
hdrl = lst(b'hdrl', [chunk(b'avih', avih), lst(b'strl', [chunk(b'strh', strh), chunk(b'strf', strf)])])
movi = lst(b'movi', [chunk(b'00__', f) for f in frames])
body = b'AVI ' + hdrl + movi
open(sys.argv[2], 'wb').write(b'RIFF' + struct.pack('<I', len(body)) + body)
PY
ffmpeg -hide_banner -loglevel error -y -i speech.dv -map 0:a:0 -c:a flac -fflags +bitexact \
    speech.dv.flac
# MP3 with its LAME tag (gapless: FFmpeg's default), and 1 s of samples/jfk.wav as mono
# MP3 at 16 kHz: joined in the tests, as `cat a.mp3 b.mp3` joins files.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a libmp3lame -b:a 64k -fflags +bitexact \
    -flags:a +bitexact tones.lame.mp3
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -ss 1 -t 1 -ac 1 \
    -c:a libmp3lame -b:a 32k -fflags +bitexact -flags:a +bitexact speech.mp3
# G.729 (VoIP call recordings): 3 s of samples/jfk.wav at 8 kHz through Belledonne's
# bcg729 encoder (`apt-get install libbcg729-0`; FFmpeg has no G.729 encoder), four frames
# zeroed as a lost packet's are (FFmpeg conceals them); and Annex D (6.4 kbit/s) in WAV
# (format 0x0083, 8-byte blocks), random frames with every 13th zeroed, since no encoder
# here writes it. tests/decode.rs holds the md5 of FFmpeg's 16-bit decodes.
python3 - "$root/samples/jfk.wav" <<'PY'
import ctypes, ctypes.util, random, struct, subprocess, sys
lib = ctypes.CDLL(ctypes.util.find_library("bcg729") or "libbcg729.so.0")
lib.initBcg729EncoderChannel.restype = ctypes.c_void_p
lib.initBcg729EncoderChannel.argtypes = [ctypes.c_uint8]
lib.bcg729Encoder.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
pcm = subprocess.run(["ffmpeg", "-loglevel", "error", "-i", sys.argv[1], "-t", "3", "-ar", "8000",
                      "-ac", "1", "-f", "s16le", "-"], check=True, capture_output=True).stdout
enc = lib.initBcg729EncoderChannel(0)
frames = bytearray()
bits, n = (ctypes.c_uint8 * 10)(), ctypes.c_uint8()
for at in range(0, len(pcm) - 159, 160):
    speech = (ctypes.c_int16 * 80).from_buffer_copy(pcm[at:at + 160])
    lib.bcg729Encoder(enc, speech, bits, ctypes.byref(n))
    frames += bytes(bits)
for f in range(120, 124):
    frames[f * 10:f * 10 + 10] = bytes(10)
open("speech.g729", "wb").write(frames)
random.seed(29)
d = bytearray(random.getrandbits(8) for _ in range(8 * 100))
for f in range(0, 100, 13):
    d[f * 8:f * 8 + 8] = bytes(8)
fmt = struct.pack("<HHIIHHH", 0x0083, 1, 8000, 800, 8, 0, 0)
body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(d)) + d
open("noise.g729d.wav", "wb").write(b"RIFF" + struct.pack("<I", len(body)) + body)
PY
for f in speech.g729 noise.g729d.wav; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f s16le - | md5sum
done
# G.723.1: 3 s of samples/jfk.wav through FFmpeg's encoder (6.3 kbit/s) as raw frames,
# with a pause of comfort noise (a SID frame, untransmitted frames) and four frames of a
# forbidden pitch lag (concealed, then muted) spliced in; random frames of all four kinds
# (5.3 kbit/s too, which FFmpeg's encoder does not write); and the first file's frames in
# a DSS file in long-play mode, across its block headers, the last block padded with
# 0xFF. tests/decode.rs holds the md5 of FFmpeg's 16-bit decodes.
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 3 -ar 8000 -ac 1 \
    -c:a g723_1 -b:a 6300 -f g723_1 speech.tco
python3 - <<'PY'
import random
frames = bytearray(open("speech.tco", "rb").read())
sid = bytes([0x56, 0x12, 0x34, 0x56])
bad = bytes([0, 0, 0, 0xff, 0xff]) + bytes(19)
at = 24 * 40
frames[at:at] = sid + b"\x03" * 10 + sid + b"\x03" * 5
at = 24 * 80 + len(sid) * 2 + 15
frames[at:at] = bad * 4
open("speech.tco", "wb").write(frames)
random.seed(723)
noise = bytearray()
for _ in range(100):
    kind = random.choice([0, 0, 1, 1, 2, 3])
    f = bytearray(random.getrandbits(8) for _ in range([24, 20, 4, 1][kind]))
    f[0] = (f[0] & 0xfc) | kind
    noise += f
open("noise.tco", "wb").write(noise)
h = bytearray(1024)
h[0:4] = b'\x02dss'
h[0xc:0xc + 16] = b'sotto test      '
h[0x26:0x26 + 12] = b'260101120000'
h[0x32:0x32 + 12] = b'260101120010'
h[0x2a4] = 2
data = bytearray()
for at in range(0, len(frames), 506):
    block = bytes(6) + frames[at:at + 506]
    data += block + b"\xff" * (512 - len(block))
open("speech.lp.dss", "wb").write(h + data)
PY
for f in speech.tco noise.tco speech.lp.dss; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f s16le - | md5sum
done
# Flash ADPCM in FLV: FFmpeg's encoding of the tones (4-bit codes, stereo), and random
# packets of 2- to 5-bit codes in mono at 11.025 kHz, which no encoder here writes.
# tests/decode.rs holds the md5 of FFmpeg's 16-bit decodes.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.25 -c:a adpcm_swf -f flv \
    -fflags +bitexact tones.adpcm.flv
python3 - <<'PY'
import random, struct
random.seed(5)
out = bytearray(b"FLV\x01\x04" + struct.pack(">I", 9) + bytes(4))
for k in range(12):
    p = bytearray(random.getrandbits(8) for _ in range(random.choice([5, 60, 400, 1200])))
    p[0] = (p[0] & 0x3f) | (k % 4) << 6
    data = bytes([0x14]) + p
    out += bytes([8]) + struct.pack(">I", len(data))[1:] + struct.pack(">I", 20 * k)[1:]
    out += bytes(4) + data + struct.pack(">I", 11 + len(data))
open("noise.adpcm.flv", "wb").write(out)
PY
for f in tones.adpcm.flv noise.adpcm.flv; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f s16le - | md5sum
done
# Opus in MP4 (`dOps`, an edit list for the pre-skip): the Ogg fixture's packets copied.
ffmpeg -hide_banner -loglevel error -y -i tones.opus -c:a copy -f mp4 -fflags +bitexact \
    tones.opus.mp4
# 0.3 s of speech in Ogg Opus and Vorbis: its audio in one page (a short voice message),
# which symphonia's Ogg reader mishandles (`ogg_mend.rs`).
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 0.3 -c:a libopus -b:a 24k \
    -fflags +bitexact -flags +bitexact speech.short.opus
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 0.3 -c:a libvorbis \
    -fflags +bitexact -flags +bitexact speech.short.ogg
# Opus in MPEG-TS (a registration descriptor, trims in the first and last units' control
# headers): the Ogg fixtures' packets copied.
for f in tones.opus tones.51.opus; do
    ffmpeg -hide_banner -loglevel error -y -i "$f" -c:a copy -f mpegts -fflags +bitexact "$f.ts"
done
# 8-bit PCM where symphonia refuses it: signed in QuickTime (`sowt` of 8 bits) and CAF,
# unsigned in AIFF-C (`raw `) and Matroska (`A_PCM/INT/LIT`); at 8 kHz, in stereo. tests/decode.rs holds the md5 of
# FFmpeg's decodes.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a pcm_s8 \
    -fflags +bitexact -flags +bitexact tones.s8.mov
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a pcm_s8 \
    -fflags +bitexact -flags +bitexact tones.s8.caf
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a pcm_u8 \
    -fflags +bitexact -flags +bitexact tones.u8.aiff
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a pcm_u8 \
    -fflags +bitexact -flags +bitexact tones.u8.mkv
for f in tones.s8.mov tones.s8.caf tones.u8.aiff tones.u8.mkv; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f f32le - | md5sum
done
# WavPack: FFmpeg's lossless 16-bit stereo; the `wavpack` tool's hybrid (lossy, 96 kb/s,
# 2205 samples a block) in .wv and copied into Matroska (`A_WAVPACK4`), its 32-bit float
# at 8 kHz, and 5.1 at 8 kHz (three blocks a frame) with the same samples in FLAC.
# tests/decode.rs holds the md5 of FFmpeg's decodes (wvunpack's samples, for each).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a wavpack -fflags +bitexact \
    -flags +bitexact tones.wv
wavpack -q -y -b96 -hx --blocksize=2205 tones.wav -o tones.hybrid.wv
ffmpeg -hide_banner -loglevel error -y -i tones.hybrid.wv -c:a copy -fflags +bitexact \
    -flags +bitexact tones.hybrid.mkv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a pcm_f32le flt8.wav
wavpack -q -y -h flt8.wav -o tones.flt.wv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.25 -ar 8000 -c:a pcm_s16le \
    -af "pan=5.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1" six8.wav
wavpack -q -y -x six8.wav -o tones.51.wv
ffmpeg -hide_banner -loglevel error -y -i six8.wav -c:a flac -fflags +bitexact tones.51.wv.flac
rm flt8.wav six8.wav
for f in tones.wv tones.hybrid.wv tones.hybrid.mkv tones.flt.wv; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f f32le - | md5sum
done
# TTA (True Audio): 1.5 s of speech at 8 kHz (two frames) in `.tta`, and the tones' 24-bit
# stereo in Matroska (`A_TTA1`); tests/decode.rs holds the md5 of FFmpeg's decodes.
ffmpeg -hide_banner -loglevel error -y -i "$root/samples/jfk.wav" -t 1.5 -ar 8000 -c:a tta \
    -fflags +bitexact -flags +bitexact speech.tta
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a tta -sample_fmt s32 \
    -fflags +bitexact -flags +bitexact tones.tta.mkv
for f in speech.tta tones.tta.mkv; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f f32le - | md5sum
done
# FLAC in WAV and AVI (format tag 0xF1AC, the STREAMINFO after the WAVEFORMATEX), as
# FFmpeg writes them; tests/decode.rs holds the md5 of FFmpeg's decode.
for c in wav avi; do
    ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a flac -fflags +bitexact \
        -flags +bitexact tones.flac.$c
done
ffmpeg -hide_banner -loglevel error -i tones.flac.wav -f f32le - | md5sum
# What CAF and QuickTime hold that symphonia's readers refuse: AC-3 and GSM 06.10 (`agsm`)
# copied from the raw fixtures, and IMA and Microsoft ADPCM in CAF (`ms` and the WAVE
# format tag, as FFmpeg writes them); tests/decode.rs holds the md5 of FFmpeg's decodes of
# the last two.
ffmpeg -hide_banner -loglevel error -y -i tones.ac3 -c:a copy -fflags +bitexact \
    -flags +bitexact tones.ac3.caf
for c in caf mov; do
    ffmpeg -hide_banner -loglevel error -y -i tones.gsm -c:a copy -fflags +bitexact \
        -flags +bitexact tones.gsm.$c
done
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a adpcm_ima_wav \
    -fflags +bitexact -flags +bitexact tones.ima.caf
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a adpcm_ms -fflags +bitexact \
    -flags +bitexact tones.adpcm.caf
for f in tones.ima.caf tones.adpcm.caf; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f f32le - | md5sum
done
# Flash ADPCM in WAV (format 0x5346: each block an FLV tag's packet) and in QuickTime (`ms`
# and the tag, no WAVEFORMATEX), as FFmpeg writes them; tests/decode.rs holds the md5.
for c in wav mov; do
    ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 11025 -c:a adpcm_swf \
        -fflags +bitexact -flags +bitexact tones.swf.$c
done
ffmpeg -hide_banner -loglevel error -i tones.swf.wav -f f32le - | md5sum
# The Nellymoser fixture's packets in QuickTime (`nmos`).
ffmpeg -hide_banner -loglevel error -y -i tones.nelly.flv -c:a copy -fflags +bitexact \
    -flags +bitexact tones.nelly.mov
# Yamaha's ADPCM (format 0x0020) in WAV and QuickTime, stereo, as FFmpeg writes it.
for c in wav mov; do
    ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 11025 -c:a adpcm_yamaha \
        -fflags +bitexact -flags +bitexact tones.yamaha.$c
done
ffmpeg -hide_banner -loglevel error -i tones.yamaha.wav -f f32le - | md5sum
# Vorbis outside Ogg (FFmpeg's AVI and ASF, format 0x566F, and MP4 and QuickTime: object
# type 0xDD, `msVo`), the same packets in each, and in Ogg, which tests/decode.rs compares.
for c in ogg avi asf mp4 mov; do
    ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 11025 -c:a libvorbis -q:a 0 \
        -strict -2 -fflags +bitexact -flags +bitexact tones.vorbis.$c
done
# Speex outside Ogg and FLV, as FFmpeg writes it (format 0xA109 with the Speex header after
# the WAVEFORMATEX; QuickTime's `spex`): speech.spx's packets copied into Matroska, ASF and
# QuickTime, and the tones in AVI (its copy pads the gaps DTX leaves with empty chunks);
# tests/decode.rs holds the md5 of FFmpeg's decode of the last.
for c in mkv asf mov; do
    ffmpeg -hide_banner -loglevel error -y -i speech.spx -c:a copy -fflags +bitexact \
        -flags +bitexact speech.spx.$c
done
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 16000 -ac 1 -c:a libspeex \
    -fflags +bitexact -flags +bitexact tones.speex.avi
ffmpeg -hide_banner -loglevel error -i tones.speex.avi -f f32le - | md5sum
# G.722 and G.726 in `.au` (encodings 24 and 23, the latter's codes least significant bit
# first) and FLAC in CAF without a magic cookie, as FFmpeg writes them; tests/decode.rs
# holds the md5 of FFmpeg's decodes.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 16000 -ac 1 -c:a g722 \
    -fflags +bitexact -flags +bitexact tones.g722.au
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -c:a flac -fflags +bitexact \
    -flags +bitexact tones.flac.caf
ffmpeg -hide_banner -loglevel error -y -i tones.wav -ar 8000 -ac 1 -c:a g726le \
    -fflags +bitexact -flags +bitexact tones.g726.au
for f in tones.g722.au tones.g726.au tones.flac.caf; do
    ffmpeg -hide_banner -loglevel error -i "$f" -f f32le - | md5sum
done
# Blu-ray LPCM in `.m2ts` (stream type 0x80), 0.1 s of the tones at 48 kHz; tests/decode.rs
# holds the md5 of FFmpeg's decode.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.1 -ar 48000 -c:a pcm_bluray \
    -fflags +bitexact -flags +bitexact tones.bd.m2ts
ffmpeg -hide_banner -loglevel error -i tones.bd.m2ts -f f32le - | md5sum
# SMPTE 302M (AES3 in a transport stream, as contribution feeds carry it), 0.05 s.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.05 -ar 48000 -c:a s302m -strict -2 \
    -fflags +bitexact -flags +bitexact tones.s302m.ts
ffmpeg -hide_banner -loglevel error -i tones.s302m.ts -f f32le - | md5sum
# FFmpeg's resampling to 16 kHz (libswresample's defaults, as faster-whisper's and the
# ffmpeg CLI's): 8 kHz G.729 speech up, 22.05 kHz stereo tones down; tests/decode.rs
# compares sotto's with them.
ffmpeg -hide_banner -loglevel error -y -i speech.g729 -ar 16000 -c:a flac -fflags +bitexact \
    speech.g729.16k.flac
ffmpeg -hide_banner -loglevel error -y -i tones.flac -ar 16000 -c:a flac -fflags +bitexact \
    tones.16k.flac
ls -l tones.* speech.*
