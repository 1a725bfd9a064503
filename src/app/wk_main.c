/* wk_main.c: the whole program behind both entry points: reads the configuration,
 * checks it and the Profile, and runs the worker. See wk_main.h. */
#include "app/wk_main.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "app/wk_app.h"
#include "app/wk_config.h"
#include "adapters/wk_malloc_policy.h"
#include "lib/wk_version.h"

/* Writes each line of text to stderr as "PROGRAM: LINE". */
static void print_lines(const char *program, const char *text) {
  while (*text) {
    const char *nl = strchr(text, '\n');
    size_t n = nl ? (size_t)(nl - text) : strlen(text);
    fprintf(stderr, "%s: %.*s\n", program, (int)n, text);
    text += n + (nl ? 1 : 0);
  }
}

int wk_main(const wk_profile *profile, int argc, char **argv) {
  static wk_config_cli cli;
  static wk_config_sources sources;
  static char err[32768];
  static wk_app_config cfg;
  /* the program's name (argv[0] without its directory, as wk_app's messages use it) */
  const char *program = program_invocation_short_name;

  /* Non-dumpable before anything reads a secret: a function running as this user cannot
   * read /proc/<worker>/environ, mem or maps, nor ptrace the worker. Executors are
   * exec'd, so they get their own (dumpable) state back. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    fprintf(stderr, "%s: cannot make the worker non-dumpable: %s\n", program, strerror(errno));
    return 1;
  }

  /* Before any thread allocates: the heap stays warm under load, and the orchestrator
   * gives memory back once a load is over (adapters/wk_malloc_policy.h, lib/wk_trim.h). */
  (void)wk_malloc_keep_warm(WK_MALLOC_MMAP_BYTES, WK_MALLOC_TRIM_BYTES);

  if (wk_profile_validate(profile, err, sizeof err) > 0) {
    print_lines(program, err);
    return 2;
  }
  if (wk_config_parse_cli(argc, argv, &cli, err, sizeof err) > 0) {
    print_lines(program, err);
    fprintf(stderr, "%s: see %s --help\n", program, program);
    return 2;
  }
  if (cli.version) {
    printf("%s %s (commit %s, %s profile)\n", program, wk_version, wk_git_commit,
           wk_deployment_name(profile->deployment));
    return 0;
  }
  if (cli.help) { /* with this program's defaults: no file, environment or flags */
    wk_config_load_tuned(&cfg, NULL, NULL, NULL, wk_profile_tune, profile, err, sizeof err);
    wk_config_print_help(stdout, program, &cfg);
    return 0;
  }
  if (cli.print_config && cli.markdown) {
    wk_config_print_markdown(stdout);
    return 0;
  }
  int problems = wk_config_load_tuned(&cfg, &sources, &cli, environ, wk_profile_tune, profile, err,
                                      sizeof err);
  wk_config_scrub_secret_env(); /* read once: neither children nor /proc see them again */
  wk_config_scrub_secret_args(&cli);
  print_lines(program, err); /* errors, or warnings only */
  if (problems > 0) return 2;

  problems = wk_config_validate_sources(&cfg, &sources, err, sizeof err);
  size_t used = strlen(err);
  problems += wk_profile_check_config(profile, &cfg, err + used, sizeof err - used);
  if (cli.print_config) {
    wk_config_print(stdout, &cfg, &sources, cli.json ? WK_CONFIG_JSON : WK_CONFIG_TEXT);
    fflush(stdout);
  }
  if (problems > 0) {
    fprintf(stderr, "%s: invalid configuration (%d problem%s):\n", program, problems,
            problems == 1 ? "" : "s");
    print_lines(program, err);
    return 2;
  }
  if (cli.print_config) return 0;
  return wk_app_run(&cfg, profile);
}
