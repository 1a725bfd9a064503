/* test_journal.c: the core's input boundary (core/wk_core_tap.h) and the journal's
 * codec, reader and writer (adapters/wk_journal.h, wk_journal_writer.h): every
 * state-changing entry point reaches the tap and read-only ones do not; every input
 * kind survives encode → frame → decode; the reader stops at a bad CRC, a truncated
 * tail and a foreign version, naming the offset; a writer whose buffer is full drops
 * inputs, never blocks, and says LOST where it did. */
#define _GNU_SOURCE

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_fixture.h"
#include "adapters/wk_journal.h"
#include "adapters/wk_journal_writer.h"
#include "core/wk_core_tap.h"

/* ---- the boundary ---------------------------------------------------------------------- */

typedef struct seen {
  int inputs, outputs;
  wk_core_input_kind last;
  wk_err last_err;
} seen;

static void on_in(void *ctx, const wk_core_input *in) {
  seen *s = ctx;
  s->inputs++;
  s->last = in->kind;
}

static void on_out(void *ctx, const wk_core_input *in, const wk_core_output *out) {
  seen *s = ctx;
  assert_int_equal(in->kind, s->last);
  s->outputs++;
  s->last_err = out->err;
}

static void test_every_state_change_passes_the_boundary(void **state) {
  (void)state;
  wk_core_config cfg;
  wk_core_config_default(&cfg);
  wk_core *core = wk_core_create(&cfg);
  seen s = {0};
  wk_core_tap tap = {.input = on_in, .output = on_out, .ctx = &s};
  wk_core_set_tap(core, &tap);
  wk_slot_result sr;
  wk_submit_result sub;
  wk_transition_result tr;
  const wk_task_result *r;
  wk_core_set_ready(core, true);
  assert_int_equal(s.last, WK_INPUT_SET_READY);
  wk_core_handle_request_slot(core, "a", 1, 0, 10, &sr);
  assert_int_equal(s.last, WK_INPUT_REQUEST_SLOT);
  wk_submit_request req = {.task_id = "a", .task_id_len = 1, .slot_id = sr.slot_id};
  wk_core_handle_submit(core, &req, NULL, 11, &sub);
  assert_int_equal(s.last, WK_INPUT_SUBMIT);
  wk_core_handle_activation_prepared(core, "a", 1, sr.slot_id, 1, 12, &tr);
  assert_int_equal(s.last, WK_INPUT_ACTIVATION_PREPARED);
  assert_int_equal(wk_core_handle_watch_attached(core, "a", 1, 12), WK_OK);
  assert_int_equal(s.last, WK_INPUT_WATCH_ATTACHED);
  wk_phase_outcome o = {.ok = true};
  wk_core_handle_phase_finished(core, "a", 1, WK_PHASE_BUILDER, &o, 13, &tr);
  assert_int_equal(s.last, WK_INPUT_PHASE_FINISHED);
  wk_call_stats st = {.calls_total = 1};
  assert_int_equal(wk_core_handle_call_progress(core, "a", 1, &st), WK_OK);
  assert_int_equal(s.last, WK_INPUT_CALL_PROGRESS);
  assert_int_equal(wk_core_handle_watch_disconnected(core, "a", 1, 14), WK_OK);
  assert_int_equal(wk_core_handle_watch_detached(core, "a", 1, 14), WK_OK);
  wk_core_handle_watch_grace_expired(core, "a", 1, 15, &tr);
  assert_int_equal(s.last, WK_INPUT_WATCH_GRACE_EXPIRED);
  assert_int_equal(s.last_err, WK_ERR_STALE);
  wk_core_handle_task_timed_out(core, "a", 1, 16, &tr);
  wk_core_handle_abort(core, "a", 1, WK_FAIL_CANCELLED, "bye", 17, &tr);
  assert_int_equal(s.last, WK_INPUT_ABORT);
  wk_core_handle_activation_failed(core, "a", 1, WK_FAIL_ACTIVATION_FAILED, "x", 18, &tr);
  wk_core_handle_slot_lease_expired(core, sr.slot_id, 19, &tr);
  assert_int_equal(s.last, WK_INPUT_SLOT_LEASE_EXPIRED);
  wk_core_set_draining(core, true);
  wk_core_set_admission_paused(core, "memory");
  (void)wk_core_purge_expired_results(core, 20);
  assert_int_equal(s.last, WK_INPUT_PURGE);
  assert_int_equal(s.inputs, 17);
  assert_int_equal(s.outputs, 17);
  /* reads are not inputs */
  wk_task_id ids[4];
  uint64_t slots[4];
  (void)wk_core_get_result(core, "a", 1, &r);
  (void)wk_core_expired_slots(core, 100000, slots, 4);
  (void)wk_core_timed_out_tasks(core, 100000, ids, 4);
  (void)wk_core_watch_disconnected_tasks(core, 100000, ids, 4);
  (void)wk_core_next_deadline(core);
  (void)wk_core_derive_heartbeat(core, 21);
  assert_int_equal(s.inputs, 17);
  wk_core_set_tap(core, NULL);
  wk_core_set_ready(core, false);
  assert_int_equal(s.inputs, 17);
  wk_core_destroy(core);
}

/* ---- the codec --------------------------------------------------------------------------- */

/* Encodes `in`, frames it into a file, reads it back into `rec`. */
static void roundtrip(const wk_core_input *in, uint64_t seq, wk_buf *file, wk_journal_reader *r,
                      wk_journal_record *rec) {
  size_t n = wk_journal_input_size(in, 4097);
  uint8_t *payload = malloc(n);
  wk_journal_encode_input(payload, in, seq, 4097);
  wk_buf_clear(file);
  wk_journal_file_header(file);
  wk_journal_frame(file, payload, n);
  free(payload);
  char why[256];
  assert_true(wk_journal_reader_init(r, file->data, file->len, why, sizeof why));
  assert_int_equal(wk_journal_next(r, rec, why, sizeof why), 1);
  assert_int_equal(rec->type, WK_JREC_INPUT);
  assert_int_equal(rec->seq, seq);
  assert_int_equal(rec->input.kind, in->kind);
  assert_int_equal(rec->input.now_ms, in->now_ms);
  if (in->task_id) {
    assert_int_equal(rec->input.task_id_len, in->task_id_len);
    assert_memory_equal(rec->input.task_id, in->task_id, in->task_id_len);
  }
}

static void test_every_input_kind_roundtrips(void **state) {
  (void)state;
  wk_buf file = {0};
  wk_journal_reader r;
  wk_journal_record rec;
  wk_submit_request req = {.task_id = "task-7",
                           .task_id_len = 6,
                           .slot_id = 0x300000002ull,
                           .request_digest = 0xfeedull,
                           .requested_epoch = 4,
                           .timeout_ms = 1234,
                           .call_failure_policy = WK_CALL_CONTINUE,
                           .max_failed_calls = 3,
                           .retry = {5, 100, 1000, 2000, true}};
  wk_core_input in = {
      .kind = WK_INPUT_SUBMIT, .now_ms = 99, .task_id = "task-7", .task_id_len = 6, .submit = &req};
  roundtrip(&in, 7, &file, &r, &rec);
  assert_non_null(rec.input.submit);
  assert_int_equal(rec.submit.slot_id, req.slot_id);
  assert_int_equal(rec.submit.request_digest, req.request_digest);
  assert_int_equal(rec.submit.requested_epoch, 4);
  assert_int_equal(rec.submit.timeout_ms, 1234);
  assert_int_equal(rec.submit.call_failure_policy, WK_CALL_CONTINUE);
  assert_int_equal(rec.submit.max_failed_calls, 3);
  assert_memory_equal(&rec.submit.retry, &req.retry, sizeof req.retry);
  assert_ptr_equal(rec.submit.task_id, rec.input.task_id);
  wk_journal_reader_free(&r);

  uint8_t data[40] = {1};
  char longmsg[6000];
  memset(longmsg, 'm', sizeof longmsg - 1);
  longmsg[sizeof longmsg - 1] = '\0';
  wk_phase_outcome o = {.ok = false,
                        .failure_code = WK_FAIL_CALL_FAILED,
                        .message = longmsg,
                        .streaming = true,
                        .data = {data, sizeof data},
                        .stats = {1, 2, 3, 4, 5, 6, 7, 8},
                        .ran_from_ms = 5,
                        .ran_to_ms = 6};
  in = (wk_core_input){.kind = WK_INPUT_PHASE_FINISHED,
                       .now_ms = 100,
                       .task_id = "t",
                       .task_id_len = 1,
                       .phase = WK_PHASE_CALLS,
                       .outcome = &o};
  roundtrip(&in, 8, &file, &r, &rec);
  assert_int_equal(rec.input.phase, WK_PHASE_CALLS);
  assert_false(rec.outcome.ok);
  assert_true(rec.outcome.streaming);
  assert_int_equal(rec.outcome.failure_code, WK_FAIL_CALL_FAILED);
  assert_null(rec.outcome.data.data); /* outputs are not recorded, their length is */
  assert_int_equal(rec.outcome.data.len, sizeof data);
  assert_memory_equal(&rec.outcome.stats, &o.stats, sizeof o.stats);
  assert_int_equal(rec.outcome.ran_to_ms, 6);
  assert_int_equal(strlen(rec.outcome.message), 4097); /* cut at the cap */
  uint8_t *zeros = NULL;
  size_t zeros_len = 0;
  wk_journal_prepare_replay(&rec, &zeros, &zeros_len);
  assert_non_null(rec.outcome.data.data);
  free(zeros);
  wk_journal_reader_free(&r);

  /* a missing outcome stays missing: the core answers INVALID_ARGUMENT again */
  in.outcome = NULL;
  roundtrip(&in, 9, &file, &r, &rec);
  assert_null(rec.input.outcome);
  wk_journal_reader_free(&r);

  wk_call_stats st = {9, 8, 1, 0, 0, 0, 0, 0};
  in = (wk_core_input){
      .kind = WK_INPUT_CALL_PROGRESS, .task_id = "t", .task_id_len = 1, .stats = &st};
  roundtrip(&in, 10, &file, &r, &rec);
  assert_memory_equal(rec.input.stats, &st, sizeof st);
  wk_journal_reader_free(&r);

  in = (wk_core_input){.kind = WK_INPUT_ABORT,
                       .now_ms = 5,
                       .task_id = "t",
                       .task_id_len = 1,
                       .code = WK_FAIL_CANCELLED,
                       .message = "by hand"};
  roundtrip(&in, 11, &file, &r, &rec);
  assert_int_equal(rec.input.code, WK_FAIL_CANCELLED);
  assert_string_equal(rec.input.message, "by hand");
  wk_journal_reader_free(&r);

  in = (wk_core_input){.kind = WK_INPUT_ACTIVATION_PREPARED,
                       .now_ms = 5,
                       .task_id = "t",
                       .task_id_len = 1,
                       .slot_id = 77,
                       .code_epoch = 3};
  roundtrip(&in, 12, &file, &r, &rec);
  assert_int_equal(rec.input.slot_id, 77);
  assert_int_equal(rec.input.code_epoch, 3);
  wk_journal_reader_free(&r);

  in = (wk_core_input){.kind = WK_INPUT_SET_DRAINING, .flag = true};
  roundtrip(&in, 13, &file, &r, &rec);
  assert_true(rec.input.flag);
  assert_null(rec.input.task_id);
  wk_journal_reader_free(&r);

  /* an id longer than any valid one is kept invalid, at 129 bytes */
  char longid[300];
  memset(longid, 'i', sizeof longid);
  in = (wk_core_input){.kind = WK_INPUT_REQUEST_SLOT,
                       .now_ms = 1,
                       .task_id = longid,
                       .task_id_len = sizeof longid,
                       .ttl_ms = 3};
  size_t n = wk_journal_input_size(&in, 16);
  uint8_t *payload = malloc(n);
  wk_journal_encode_input(payload, &in, 1, 16);
  wk_buf_clear(&file);
  wk_journal_file_header(&file);
  wk_journal_frame(&file, payload, n);
  free(payload);
  char why[256];
  assert_true(wk_journal_reader_init(&r, file.data, file.len, why, sizeof why));
  assert_int_equal(wk_journal_next(&r, &rec, why, sizeof why), 1);
  assert_int_equal(rec.input.task_id_len, WK_TASK_ID_MAX + 1);
  assert_int_equal(rec.input.ttl_ms, 3);
  wk_journal_reader_free(&r);
  wk_buf_free(&file);
}

static void test_reader_stops_at_damage_and_names_the_offset(void **state) {
  (void)state;
  wk_buf file = {0};
  wk_journal_file_header(&file);
  wk_core_input in = {.kind = WK_INPUT_PURGE, .now_ms = 5};
  uint8_t payload[64];
  size_t n = wk_journal_input_size(&in, 16);
  wk_journal_encode_input(payload, &in, 0, 16);
  wk_journal_frame(&file, payload, n);
  size_t second = file.len;
  wk_journal_encode_input(payload, &in, 1, 16);
  wk_journal_frame(&file, payload, n);
  wk_journal_reader r;
  wk_journal_record rec;
  char why[256];

  /* truncated tail: the second record lacks its last byte */
  assert_true(wk_journal_reader_init(&r, file.data, file.len - 1, why, sizeof why));
  assert_int_equal(wk_journal_next(&r, &rec, why, sizeof why), 1);
  assert_int_equal(wk_journal_next(&r, &rec, why, sizeof why), -1);
  assert_non_null(strstr(why, "truncated record at offset"));
  char expect[32];
  snprintf(expect, sizeof expect, "offset %zu", second);
  assert_non_null(strstr(why, expect));

  /* one flipped bit in the second payload */
  file.data[second + WK_JOURNAL_RECORD_HEADER + 20] ^= 0x10;
  assert_true(wk_journal_reader_init(&r, file.data, file.len, why, sizeof why));
  assert_int_equal(wk_journal_next(&r, &rec, why, sizeof why), 1);
  assert_int_equal(wk_journal_next(&r, &rec, why, sizeof why), -1);
  assert_non_null(strstr(why, "fails its CRC"));

  /* a later format */
  file.data[8] = 2;
  assert_false(wk_journal_reader_init(&r, file.data, file.len, why, sizeof why));
  assert_non_null(strstr(why, "version 2"));
  wk_buf_free(&file);
}

/* ---- the writer ------------------------------------------------------------------------ */

static void read_dir_file(const char *dir, uint8_t **data, size_t *len, int *files) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  *files = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[512], why[256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    assert_true(wk_journal_read_file(path, data, len, why, sizeof why));
    unlink(path);
    (*files)++;
  }
  closedir(d);
}

static void test_a_full_buffer_drops_and_says_lost(void **state) {
  (void)state;
  char dir[] = "/tmp/test_journal.XXXXXX";
  assert_non_null(mkdtemp(dir));
  wk_core_config cfg;
  wk_core_config_default(&cfg);
  wk_core *core = wk_core_create(&cfg);
  char err[256];
  /* a 4 KiB ring the thread empties once a minute: the core fills it at once */
  wk_journal_writer_config jc = {
      .dir = dir, .max_bytes = 1 << 20, .files = 2, .ring_bytes = 4096, .flush_ms = 60000};
  wk_journal_writer *w = wk_journal_writer_open(&jc, core, 0, 0, err, sizeof err);
  assert_non_null(w);
  for (int i = 0; i < 500; i++) (void)wk_core_purge_expired_results(core, i);
  wk_journal_stats st = wk_journal_writer_stats(w);
  assert_true(st.dropped > 0);
  assert_int_equal(st.inputs + st.dropped, 500);
  wk_journal_writer_sync(w); /* what the ring held reaches the file */
  for (int i = 500; i < 510; i++) (void)wk_core_purge_expired_results(core, i);
  wk_journal_writer_close(w);
  wk_core_destroy(core);

  uint8_t *data;
  size_t len;
  int files;
  read_dir_file(dir, &data, &len, &files);
  rmdir(dir);
  assert_int_equal(files, 1);
  wk_journal_reader r;
  wk_journal_record rec;
  char why[256];
  assert_true(wk_journal_reader_init(&r, data, len, why, sizeof why));
  assert_int_equal(wk_journal_next(&r, &rec, why, sizeof why), 1);
  assert_int_equal(rec.type, WK_JREC_HEADER);
  uint64_t inputs = 0, lost_at = 0, lost = 0;
  int rc;
  while ((rc = wk_journal_next(&r, &rec, why, sizeof why)) == 1) {
    if (rec.type == WK_JREC_INPUT) {
      if (!lost) assert_int_equal(rec.seq, inputs); /* in order up to the loss */
      inputs++;
    } else if (rec.type == WK_JREC_LOST) {
      assert_int_equal(lost, 0);
      lost_at = rec.seq;
      lost = rec.lost;
    }
  }
  assert_int_equal(rc, 0);
  assert_int_equal(lost, st.dropped);
  assert_int_equal(lost_at, st.inputs);
  assert_int_equal(inputs, st.inputs + 10);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_state_change_passes_the_boundary),
      cmocka_unit_test(test_every_input_kind_roundtrips),
      cmocka_unit_test(test_reader_stops_at_damage_and_names_the_offset),
      cmocka_unit_test(test_a_full_buffer_drops_and_says_lost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
