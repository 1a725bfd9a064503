/* wk_main.c: the whole program behind both entry points: reads the configuration,
 * checks it and the Profile, and runs the worker. See wk_main.h. */
#include "app/wk_main.h"

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

int wk_main(const wk_profile *profile, int argc, char **argv) {
  static wk_config_cli cli;
  static wk_config_sources sources;
  static char err[32768];
  static wk_app_config cfg;

  if (wk_profile_validate(profile, err, sizeof err) > 0) {
    print_lines(err);
    return 2;
  }
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
  int problems =
      wk_config_load_tuned(&cfg, &sources, &cli, environ, profile->tune_defaults, err, sizeof err);
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
  return wk_app_run(&cfg, profile);
}
