/* fuzz_journal.c: libFuzzer target for the core journal decoder (src/adapters/wk_journal.c),
 * the bytes `workerctl replay` reads from files an operator copied off a machine.
 *
 * The input is a whole journal file. It is read record by record until the end or the
 * first record the reader refuses. An input of odd length first gets the right CRC in
 * every record its lengths frame, so that mutations reach the payload decoder and the
 * core instead of stopping at the CRC. Properties checked:
 *   - the reader never reads past its input (AddressSanitizer; the input is copied into
 *     an allocation of exactly its size), and an error always names an offset;
 *   - every INPUT re-encodes (wk_journal_encode_input) to a payload that decodes to an
 *     input encoding to the same bytes again (the encoding is stable after one round);
 *   - when the first record is a header with a small configuration, its inputs are fed
 *     to a WorkerCore (wk_core_apply_input) and printed (wk_journal_print) as replay
 *     does, while wk_journal_order_next accepts them (numbered in order, the clock
 *     never going back: what replay checks): whatever the bytes, the core's invariants
 *     hold after every input.
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_journal -max_len=8192 tests/fuzz/corpus/journal
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_journal.h"
#include "core/wk_core_tap.h"

#include "fuzz_check.h"

#define MSG_CAP (WK_CORE_FAILURE_MESSAGE_BYTES + 1)
#define OUTPUTS_REPLAYED_MAX (1u << 20) /* larger outputs are decoded, not replayed */

/* Frames the payload of `in` and decodes it back into `rec2`. */
static void reencode(const wk_core_input *in, uint64_t seq, wk_buf *file, wk_journal_reader *r2,
                     wk_journal_record *rec2) {
  size_t n = wk_journal_input_size(in, MSG_CAP);
  uint8_t *payload = malloc(n);
  CHECK(payload);
  wk_journal_encode_input(payload, in, seq, MSG_CAP);
  wk_buf_clear(file);
  wk_journal_file_header(file);
  wk_journal_frame(file, payload, n);
  free(payload);
  char why[256];
  CHECK(wk_journal_reader_init(r2, file->data, file->len, why, sizeof why));
  CHECK(wk_journal_next(r2, rec2, why, sizeof why) == 1 && rec2->type == WK_JREC_INPUT);
  CHECK(rec2->seq == seq && rec2->input.kind == in->kind && rec2->input.now_ms == in->now_ms);
}

/* Rewrites the CRC of every record the lengths frame. */
static void fix_crcs(uint8_t *p, size_t size) {
  size_t pos = WK_JOURNAL_FILE_HEADER;
  while (pos + WK_JOURNAL_RECORD_HEADER <= size) {
    uint32_t len;
    memcpy(&len, p + pos, 4);
    if (len > size - pos - WK_JOURNAL_RECORD_HEADER) return;
    uint32_t crc = wk_crc32c(0, p + pos + WK_JOURNAL_RECORD_HEADER, len);
    memcpy(p + pos + 4, &crc, 4);
    pos += WK_JOURNAL_RECORD_HEADER + len;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  CHECK(copy);
  if (size) memcpy(copy, data, size);
  if (size % 2) fix_crcs(copy, size);
  wk_journal_reader r;
  wk_journal_record rec;
  char why[512];
  if (!wk_journal_reader_init(&r, copy, size, why, sizeof why)) {
    CHECK(why[0]);
    free(copy);
    return 0;
  }
  wk_core *core = NULL;
  wk_journal_printer pr;
  wk_buf line = {0}, a = {0}, b = {0};
  uint8_t *zeros = NULL;
  size_t zeros_len = 0;
  int rc;
  bool first = true, in_order = true;
  wk_journal_order order;
  while ((rc = wk_journal_next(&r, &rec, why, sizeof why)) == 1) {
    if (first && rec.type == WK_JREC_HEADER && rec.header.core.task_slots <= 64 &&
        rec.header.core.max_retained_results <= 256) {
      wk_core_config cfg = rec.header.core;
      core = wk_core_create(&cfg);
      CHECK(core); /* the reader accepted only a valid configuration */
      wk_journal_printer_init(&pr, &rec.header);
      wk_journal_order_init(&order, &rec.header);
    }
    first = false;
    if (rec.type == WK_JREC_DECISION) CHECK(rec.text_len == 0 || rec.text);
    if (rec.type != WK_JREC_INPUT) continue;
    /* stable after one round: decode(x) -> A -> decode -> B, A == B */
    wk_journal_reader r2, r3;
    wk_journal_record rec2, rec3;
    reencode(&rec.input, rec.seq, &a, &r2, &rec2);
    reencode(&rec2.input, rec2.seq, &b, &r3, &rec3);
    CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    wk_journal_reader_free(&r2);
    wk_journal_reader_free(&r3);
    if (core && in_order && !wk_journal_order_next(&order, &rec, why, sizeof why)) {
      in_order = false;
    }
    if (core && in_order && rec.outcome.data.len <= OUTPUTS_REPLAYED_MAX) {
      wk_journal_prepare_replay(&rec, &zeros, &zeros_len);
      wk_core_applied res;
      wk_core_apply_input(core, &rec.input, NULL, &res);
      (void)wk_journal_concerns(&pr, &rec.input, &res.out, "x");
      wk_buf_clear(&line);
      wk_journal_print(&pr, rec.seq, &rec.input, &res.out, &line);
      CHECK(line.len > 0);
      CHECK(wk_core_check_invariants(core) == NULL);
    }
  }
  if (rc < 0) CHECK(strstr(why, "offset") != NULL);
  if (core) {
    wk_core_destroy(core);
    wk_journal_printer_free(&pr);
  }
  wk_journal_reader_free(&r);
  wk_buf_free(&line);
  wk_buf_free(&a);
  wk_buf_free(&b);
  free(zeros);
  free(copy);
  return 0;
}
