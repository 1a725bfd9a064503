/* worker: the Worker daemon (Profile "block"). Reads the configuration (defaults <
 * YAML file < WORKER_<NAME> < --flags, all from the table in app/wk_config.c), checks
 * it, and hands over to wk_app_run, the single wiring and start-up/shutdown sequence.
 * A configuration problem exits 2 with one line per problem on stderr, before anything
 * binds. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "app/wk_app.h"
#include "app/wk_config.h"

/* Writes each line of text to stderr as "worker: LINE". */
static void print_lines(const char *text) {
  while (*text) {
    const char *nl = strchr(text, '\n');
    size_t n = nl ? (size_t)(nl - text) : strlen(text);
    fprintf(stderr, "worker: %.*s\n", (int)n, text);
    text += n + (nl ? 1 : 0);
  }
}

int main(int argc, char **argv) {
  static wk_config_cli cli;
  static wk_config_sources sources;
  static char err[32768];
  static wk_app_config cfg;

  if (wk_config_parse_cli(argc, argv, &cli, err, sizeof err) > 0) {
    print_lines(err);
    fprintf(stderr, "worker: see worker --help\n");
    return 2;
  }
  if (cli.help) {
    wk_config_print_help(stdout);
    return 0;
  }
  if (cli.print_config && cli.markdown) {
    wk_config_print_markdown(stdout);
    return 0;
  }
  int problems = wk_config_load(&cfg, &sources, &cli, environ, err, sizeof err);
  print_lines(err); /* errors, or warnings only */
  if (problems > 0) return 2;

  problems = wk_config_validate_sources(&cfg, &sources, err, sizeof err);
  if (cli.print_config) {
    wk_config_print(stdout, &cfg, &sources, cli.json ? WK_CONFIG_JSON : WK_CONFIG_TEXT);
    fflush(stdout);
  }
  if (problems > 0) {
    fprintf(stderr, "worker: invalid configuration (%d problem%s):\n", problems,
            problems == 1 ? "" : "s");
    print_lines(err);
    return 2;
  }
  if (cli.print_config) return 0;
  return wk_app_run(&cfg);
}
