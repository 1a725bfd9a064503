/* test_core_types.c: names and predicates of wk_types.h, slot id packing, and the
 * core configuration (defaults, validation, create refusing a bad one). */
#include <stdlib.h>

#include "core_fixture.h"

static void test_err_names(void **state) {
  (void)state;
  assert_string_equal(wk_err_name(WK_OK), "OK");
  assert_string_equal(wk_err_name(WK_ERR_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  assert_string_equal(wk_err_name(WK_ERR_NO_SLOT), "NO_SLOT");
  assert_string_equal(wk_err_name(WK_ERR_UNAVAILABLE), "UNAVAILABLE");
  assert_string_equal(wk_err_name(WK_ERR_INVALID_SLOT), "INVALID_SLOT");
  assert_string_equal(wk_err_name(WK_ERR_NOT_FOUND), "NOT_FOUND");
  assert_string_equal(wk_err_name(WK_ERR_SLOT_UNCERTAIN), "SLOT_UNCERTAIN");
  assert_string_equal(wk_err_name(WK_ERR_CONFLICT), "CONFLICT");
  assert_string_equal(wk_err_name(WK_ERR_STALE), "STALE");
  assert_string_equal(wk_err_name(WK_ERR_PAUSED), "PAUSED");
  assert_string_equal(wk_err_name((wk_err)-10), "UNKNOWN");
  assert_string_equal(wk_err_name((wk_err)1), "UNKNOWN");
  assert_string_equal(wk_err_name((wk_err)-1000), "UNKNOWN");
}

static void test_state_and_phase_names(void **state) {
  (void)state;
  assert_string_equal(wk_slot_state_name(WK_SLOT_FREE), "FREE");
  assert_string_equal(wk_slot_state_name(WK_SLOT_ALLOCATED), "ALLOCATED");
  assert_string_equal(wk_slot_state_name(WK_SLOT_RUNNING), "RUNNING");
  assert_string_equal(wk_task_state_name(WK_TASK_PREPARING), "PREPARING");
  assert_string_equal(wk_task_state_name(WK_TASK_RUNNING), "RUNNING");
  assert_string_equal(wk_task_state_name(WK_TASK_SUCCEEDED), "SUCCEEDED");
  assert_string_equal(wk_task_state_name(WK_TASK_FAILED), "FAILED");
  assert_string_equal(wk_task_state_name(WK_TASK_CANCELLED), "CANCELLED");
  assert_string_equal(wk_phase_name(WK_PHASE_PREPARING), "PREPARING");
  assert_string_equal(wk_phase_name(WK_PHASE_BUILDER), "BUILDER");
  assert_string_equal(wk_phase_name(WK_PHASE_CALLS), "CALLS");
  assert_string_equal(wk_phase_name(WK_PHASE_WRITER), "WRITER");
  assert_string_equal(wk_phase_name(WK_PHASE_DONE), "DONE");
  assert_string_equal(wk_cmd_kind_name(WK_CMD_PREPARE_ACTIVATION), "PREPARE_ACTIVATION");
  assert_string_equal(wk_cmd_kind_name(WK_CMD_START_BUILDER), "START_BUILDER");
  assert_string_equal(wk_cmd_kind_name(WK_CMD_START_CALLS), "START_CALLS");
  assert_string_equal(wk_cmd_kind_name(WK_CMD_START_WRITER), "START_WRITER");
  assert_string_equal(wk_cmd_kind_name(WK_CMD_CANCEL_TASK), "CANCEL_TASK");
  assert_string_equal(wk_cmd_kind_name(WK_CMD_CONVERGE), "CONVERGE");
  /* values from outside the enums still name something */
  assert_non_null(wk_slot_state_name((wk_slot_state)9));
  assert_non_null(wk_task_state_name((wk_task_state)9));
  assert_non_null(wk_phase_name((wk_phase)9));
  assert_non_null(wk_cmd_kind_name((wk_cmd_kind)0));
  assert_non_null(wk_failure_code_name((wk_failure_code)WK_FAIL_COUNT));
}

static void test_terminal_states(void **state) {
  (void)state;
  assert_false(wk_task_state_terminal(WK_TASK_PREPARING));
  assert_false(wk_task_state_terminal(WK_TASK_RUNNING));
  assert_true(wk_task_state_terminal(WK_TASK_SUCCEEDED));
  assert_true(wk_task_state_terminal(WK_TASK_FAILED));
  assert_true(wk_task_state_terminal(WK_TASK_CANCELLED));
}

static void test_failure_codes(void **state) {
  (void)state;
  static const char *const names[WK_FAIL_COUNT] = {
      "NONE",           "ACTIVATION_FAILED", "IO_SCOPE_FAILED",
      "SLOT_LOST",      "BUILDER_NOT_FOUND", "BUILDER_FAILED",
      "CALL_FAILED",    "PLUGIN_NOT_FOUND",  "PLUGIN_FAILED",
      "TASK_TIMEOUT",   "OWNER_LOST",        "CANCELLED",
      "WORKER_SHUTDOWN"};
  for (int c = 0; c < WK_FAIL_COUNT; c++) {
    assert_string_equal(wk_failure_code_name((wk_failure_code)c), names[c]);
  }
  for (int c = 1; c < WK_FAIL_COUNT; c++) assert_true(wk_failure_code_valid(c));
  assert_false(wk_failure_code_valid(-1));
  assert_false(wk_failure_code_valid(WK_FAIL_COUNT));
  assert_false(wk_failure_code_valid(1000));
}

static void test_task_id_valid(void **state) {
  (void)state;
  char id[WK_TASK_ID_MAX + 1];
  memset(id, 'x', sizeof id);
  assert_false(wk_task_id_valid(id, 0));
  assert_true(wk_task_id_valid(id, 1));
  assert_true(wk_task_id_valid(id, WK_TASK_ID_MAX));
  assert_false(wk_task_id_valid(id, WK_TASK_ID_MAX + 1));
  assert_true(wk_task_id_valid("!", 1));  /* 0x21 */
  assert_true(wk_task_id_valid("~", 1));  /* 0x7e */
  assert_false(wk_task_id_valid(" ", 1)); /* 0x20 */
  assert_false(wk_task_id_valid("\x7f", 1));
  assert_false(wk_task_id_valid("\x80", 1));
  assert_false(wk_task_id_valid("\xff", 1));
  assert_false(wk_task_id_valid("ab\ncd", 5));
  assert_false(wk_task_id_valid("ab\0cd", 5));
  assert_true(wk_task_id_valid("task-42/x:y", 11));
  /* one bad byte anywhere spoils it */
  for (size_t i = 0; i < WK_TASK_ID_MAX; i++) {
    id[i] = ' ';
    assert_false(wk_task_id_valid(id, WK_TASK_ID_MAX));
    id[i] = 'x';
  }
}

static void test_slot_id_packing(void **state) {
  (void)state;
  uint64_t id = wk_slot_id_make(5, 7);
  assert_int_equal(id, ((uint64_t)7 << 32) | 5u);
  assert_int_equal(wk_slot_id_index(id), 5);
  assert_int_equal(wk_slot_id_generation(id), 7);
  id = wk_slot_id_make(UINT32_MAX, UINT32_MAX);
  assert_int_equal(id, UINT64_MAX);
  assert_int_equal(wk_slot_id_index(id), UINT32_MAX);
  assert_int_equal(wk_slot_id_generation(id), UINT32_MAX);
  assert_int_equal(wk_slot_id_make(0, 0), 0);
  assert_int_not_equal(wk_slot_id_make(0, 1), 0);
}

static void test_config_default(void **state) {
  (void)state;
  wk_core_config cfg;
  memset(&cfg, 0x5a, sizeof cfg);
  wk_core_config_default(&cfg);
  assert_int_equal(cfg.task_slots, 16);
  assert_int_equal(cfg.default_slot_ttl_ms, 30000);
  assert_int_equal(cfg.max_task_timeout_ms, 3600000);
  assert_int_equal(cfg.watch_disconnect_grace_ms, 10000);
  assert_int_equal(cfg.result_retention_ms, 600000);
  assert_int_equal(cfg.max_retained_results, 10000);
  assert_int_equal(cfg.max_retained_bytes, (uint64_t)256 << 20);
  assert_true(cfg.max_slot_ttl_ms >= cfg.default_slot_ttl_ms);
  assert_true(cfg.default_task_timeout_ms > 0);
  assert_true(cfg.default_task_timeout_ms <= cfg.max_task_timeout_ms);
  assert_true(cfg.max_failure_message_bytes > 0);
  assert_null(cfg.allocator.alloc);
  assert_null(cfg.allocator.free);
  const char *why = "untouched";
  assert_int_equal(wk_core_config_validate(&cfg, &why), WK_OK);

  wk_core *core = wk_core_create(&cfg);
  assert_non_null(core);
  FX_INV(core);
  FX_HB(core, 1, 16, 0, 0, false, false);
  wk_core_destroy(core);
}

static void expect_invalid_cfg_at(const wk_core_config *cfg, FX_LOC) {
  const char *why = NULL;
  fx_err_at(wk_core_config_validate(cfg, &why), WK_ERR_INVALID_ARGUMENT, file, line);
  FX_TRUE(why != NULL);
  FX_TRUE(why[0] != '\0');
  FX_TRUE(wk_core_create(cfg) == NULL);
}
#define EXPECT_INVALID_CFG(cfg) expect_invalid_cfg_at(&(cfg), FX_AT)

static void test_config_validate(void **state) {
  (void)state;
  const wk_core_config base = fx_config(FX_SLOTS);
  const char *why = NULL;
  assert_int_equal(wk_core_config_validate(&base, &why), WK_OK);
  wk_core_config cfg;

  cfg = base;
  cfg.task_slots = 0;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.task_slots = WK_CORE_SLOTS_MAX + 1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.default_slot_ttl_ms = -1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.max_slot_ttl_ms = -1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.default_task_timeout_ms = -1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.max_task_timeout_ms = -1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.watch_disconnect_grace_ms = -1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.result_retention_ms = -1;
  EXPECT_INVALID_CFG(cfg);
  cfg = base;
  cfg.max_retained_results = WK_CORE_RETAINED_MAX + 1;
  EXPECT_INVALID_CFG(cfg);

  /* the limits themselves validate */
  cfg = base;
  cfg.task_slots = 1;
  assert_int_equal(wk_core_config_validate(&cfg, &why), WK_OK);
  cfg.task_slots = WK_CORE_SLOTS_MAX;
  assert_int_equal(wk_core_config_validate(&cfg, &why), WK_OK);
}

/* Counting hooks: every byte the core allocates is freed by destroy. */
typedef struct counting {
  size_t live_bytes, allocs, frees;
} counting;
static void *count_alloc(void *ud, size_t size) {
  counting *c = ud;
  c->live_bytes += size;
  c->allocs++;
  return malloc(size);
}
static void count_free(void *ud, void *ptr, size_t size) {
  counting *c = ud;
  c->live_bytes -= size;
  c->frees++;
  free(ptr);
}

static void test_allocator_hooks_balance(void **state) {
  (void)state;
  static int ctx;
  counting c = {0, 0, 0};
  wk_core_config cfg = fx_config(FX_SLOTS);
  cfg.allocator.alloc = count_alloc;
  cfg.allocator.free = count_free;
  cfg.allocator.ud = &c;
  wk_core *core = wk_core_create(&cfg);
  assert_non_null(core);
  assert_true(c.allocs > 0);
  wk_core_set_ready(core, true);
  /* live, retained and reserved state at destroy time */
  FX_RUN_TO_BUILDER(core, ID("live"), &ctx, 1000);
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("done"), &ctx, 1000);
  FX_BUILDER_OK(core, ID("done"), s, &ctx, NULL, false, 1100);
  FX_CALLS_OK(core, ID("done"), s, &ctx, "outputs", 7, 1200);
  FX_WRITER_OK(core, ID("done"), s, &ctx, "plugin", 6, 1300);
  FX_RESERVE(core, ID("r"), 0, 1400, 2400);
  wk_core_destroy(core);
  assert_int_equal(c.live_bytes, 0);
  assert_int_equal(c.allocs, c.frees);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_err_names),
      cmocka_unit_test(test_state_and_phase_names),
      cmocka_unit_test(test_terminal_states),
      cmocka_unit_test(test_failure_codes),
      cmocka_unit_test(test_task_id_valid),
      cmocka_unit_test(test_slot_id_packing),
      cmocka_unit_test(test_config_default),
      cmocka_unit_test(test_config_validate),
      cmocka_unit_test(test_allocator_hooks_balance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
