/* Transcribes an audio file through sotto's C interface, printing segments as they are
 * finished, then each segment's words.
 *
 *   cc -I crates/sotto-capi/include bindings/c/transcribe.c -L target/release -lsotto_capi \
 *      -Wl,-rpath,target/release -o transcribe
 *   ./transcribe tiny.en samples/jfk.wav
 */
#include <stdio.h>

#include "sotto.h"

static int print_segment(int index, double start, double end, const char *text, void *user_data)
{
    int *reported = user_data;
    *reported = index + 1;
    printf("[%7.2f --> %7.2f]%s\n", start, end, text);
    return 1; /* go on */
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL AUDIO [LANGUAGE]\n", argv[0]);
        return 2;
    }
    sotto_model *model = sotto_model_load(argv[1], "cpu");
    if (!model) {
        fprintf(stderr, "error: %s\n", sotto_last_error());
        return 1;
    }
    sotto_session *session = sotto_session_new(model, 0);
    sotto_model_free(model); /* the session keeps what it needs */
    if (!session) {
        fprintf(stderr, "error: %s\n", sotto_last_error());
        return 1;
    }

    sotto_params params = sotto_default_params();
    params.language = argc > 3 ? argv[3] : NULL;
    params.word_timestamps = 1;
    int reported = 0;
    params.on_segment = print_segment;
    params.user_data = &reported;

    sotto_transcript *t = sotto_transcribe_file(session, argv[2], &params);
    if (!t) {
        fprintf(stderr, "error: %s\n", sotto_last_error());
        sotto_session_free(session);
        return 1;
    }
    int n = sotto_transcript_n_segments(t);
    printf("language %s, %.2f s, %d segments (%d reported)\n", sotto_transcript_language(t),
           sotto_transcript_duration(t), n, reported);
    for (int s = 0; s < n; s++) {
        int words = sotto_transcript_n_words(t, s);
        for (int w = 0; w < words; w++) {
            printf("  %6.2f %6.2f %.2f%s\n", sotto_transcript_word_start(t, s, w),
                   sotto_transcript_word_end(t, s, w), sotto_transcript_word_probability(t, s, w),
                   sotto_transcript_word_text(t, s, w));
        }
    }
    printf("text: %s\n", sotto_transcript_text(t));

    /* A bad index is an error to read, not a crash. */
    if (sotto_transcript_segment_text(t, n) == NULL) {
        printf("segment %d: %s\n", n, sotto_last_error());
    }
    sotto_transcript_free(t);
    sotto_session_free(session);
    return 0;
}
