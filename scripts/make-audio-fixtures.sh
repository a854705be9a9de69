#!/usr/bin/env bash
# Makes the tiny audio fixtures under crates/sotto-audio/tests/fixtures (needs sox with
# libsox-fmt-all, opus-tools and ffmpeg: `apt-get install sox libsox-fmt-all opus-tools
# ffmpeg`). The fixtures are committed; rerun this only to change them. Each is 0.5 s of 22.05 kHz stereo: 440 Hz on the left, a 300 Hz to 3 kHz
# sweep on the right (the sweep makes the alignment of lossy decodes unambiguous).
set -euo pipefail
out="$(cd "$(dirname "$0")/.." && pwd)/crates/sotto-audio/tests/fixtures"
mkdir -p "$out"
cd "$out"
# -D: no dither, so the 16-bit source is the same on every run.
sox -D -n -r 22050 -b 16 -c 2 tones.wav synth 0.5 sine 440 sine 300-3000 gain -6 fade 0.01 0.5 0.01
sox -D tones.wav tones.flac
sox -D tones.wav -C 64 tones.mp3
sox -D tones.wav -C 0 tones.ogg
# Opus in Ogg, in pages of at most 100 ms (so the end trim is on a page of its own), and
# libopus's own decode of it without dither, which tests/decode.rs compares with ours.
opusenc --quiet --bitrate 48 --max-delay 100 tones.wav tones.opus
opusdec --quiet --no-dither --rate 48000 tones.opus tones.opus.wav
opusdec --quiet --no-dither --rate 16000 tones.opus tones.opus.16k.wav
# 5.1 Opus (mapping family 1), from the two channels spread over six, and libopus's decode.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s16le \
    -af "pan=5.1|FL=c0|FR=c1|FC=0.5*c0+0.5*c1|LFE=0.2*c0|BL=0.7*c0|BR=0.7*c1" six.wav
opusenc --quiet --bitrate 96 --max-delay 100 six.wav tones.51.opus
opusdec --quiet --no-dither --rate 48000 tones.51.opus tones.51.opus.wav
rm six.wav
# RF64, the WAV past 4 GiB (EBU Tech 3306), as ffmpeg writes it.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s16le -rf64 always \
    -map_metadata -1 -fflags +bitexact tones.rf64.wav
# PCM in Matroska: 16-bit in one block of every frame (ffmpeg's WAV reader hands it all
# at once with -max_size), and 24-bit in ffmpeg's own blocks.
ffmpeg -hide_banner -loglevel error -y -max_size 65536 -i tones.wav -c:a pcm_s16le \
    -fflags +bitexact tones.pcm.mkv
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a pcm_s24le -fflags +bitexact tones.s24.mka
# AVI, as older cameras write it (a small MJPEG video beside the audio): PCM, and MP3 with
# its stream copied out (no Xing frame or ID3 tag: the same frames) to compare with.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v mjpeg -c:a pcm_s16le -fflags +bitexact -flags +bitexact tones.avi
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v mjpeg -c:a libmp3lame -b:a 64k -fflags +bitexact -flags +bitexact tones.mp3.avi
ffmpeg -hide_banner -loglevel error -y -i tones.mp3.avi -map 0:a -c:a copy -f mp3 -write_xing 0 \
    -id3v2_version 0 -fflags +bitexact tones.mp3.avi.mp3
# AAC in an MPEG transport stream (beside a small MPEG-2 video), and its ADTS stream copied
# out to compare with.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -i tones.wav \
    -shortest -c:v mpeg2video -c:a aac -b:a 64k -fflags +bitexact -flags +bitexact tones.ts
ffmpeg -hide_banner -loglevel error -y -i tones.ts -map 0:a -c:a copy -f adts -fflags +bitexact \
    tones.ts.aac
# What sotto refuses, by name: AC-3 in Matroska (a codec it does not decode), and a
# Matroska file with video alone.
ffmpeg -hide_banner -loglevel error -y -i tones.wav -t 0.2 -c:a ac3 -b:a 96k -fflags +bitexact \
    -flags +bitexact tones.ac3.mkv
ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=gray:size=16x16:rate=4 -t 0.25 -c:v mjpeg \
    -fflags +bitexact -flags +bitexact video.mkv
# Opus in WebM (as browsers record), AAC in MP4 (as phones do: with an edit list).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a libopus -b:a 48k tones.webm
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a aac -b:a 64k tones.m4a
# Raw AAC in ADTS frames (`.aac`).
ffmpeg -hide_banner -loglevel error -y -i tones.wav -c:a aac -b:a 64k -fflags +bitexact \
    -flags:a +bitexact tones.aac
ls -l tones.*
