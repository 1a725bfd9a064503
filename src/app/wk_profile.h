/* wk_profile.h: what an entry point declares about its deployment (the seed's
 * Profile): a label, names for observability and registration, the call builders and
 * writer plugins it enables, and how it tunes built-in defaults. An entry point only
 * declares its Profile and calls wk_main (app/wk_main.h). */
#ifndef WK_PROFILE_H
#define WK_PROFILE_H

#include <stddef.h>

#include "app/wk_config.h"

typedef enum wk_deployment {
  WK_DEPLOYMENT_BLOCK = 0,  /* one worker per block of capacity */
  WK_DEPLOYMENT_BUNDLE = 1, /* bundled with its functions */
} wk_deployment;

#define WK_PROFILE_NAMES_MAX 16

typedef struct wk_profile {
  wk_deployment deployment;    /* a label only (logs, registration value) */
  const char *service;         /* service name in logs and the registration value */
  const char *registry_prefix; /* etcd prefix unless registry_prefix is configured */
  const char *usage_service;   /* the service usage is accounted to: in every usage record and
                                worker_info ("" = the service's own name) */
  const char *builders[WK_PROFILE_NAMES_MAX]; /* call builders enabled; NULL-terminated */
  const char *plugins[WK_PROFILE_NAMES_MAX];  /* writer plugins enabled; NULL-terminated */
  void (*tune_defaults)(wk_app_config *cfg);  /* changes built-in defaults only; may be NULL */
} wk_profile;

/** The Profile's defaults, the `tune` of wk_config_load_tuned (`profile` is the
 * wk_profile): registry_prefix becomes the Profile's, then its tune_defaults hook (if
 * any) runs. Cannot fail. */
void wk_profile_tune(const void *profile, wk_app_config *cfg);

/** The value in cfg of the setting that gives writer plugin `writer` its backend
 * ("file": output_dir, "redis": redis_addr, "postgres": postgres_dsn; "" = off), and
 * that setting's name in *setting when setting is not NULL. NULL for a writer
 * without such a setting. Borrows cfg's storage. */
const char *wk_profile_writer_setting(const wk_app_config *cfg, const char *writer,
                                      const char **setting);

/** Checks cfg against the Profile: a writer backend configured (output_dir,
 * redis_addr, postgres_dsn) for a writer the Profile does not enable is a problem,
 * since it would be ignored ("redis_addr is set, but the bundle profile does not enable
 * the redis writer (enabled: file)"). Writes one line per problem into err (emptied
 * first); returns their number. */
int wk_profile_check_config(const wk_profile *p, const wk_app_config *cfg, char *err, size_t len);

/** "block" or "bundle". */
const char *wk_deployment_name(wk_deployment d);

/** Checks the Profile: a known deployment, a service name, a registry prefix that
 * starts and ends with '/', builders and plugins that exist. Writes one line per
 * problem into err; returns their number. */
int wk_profile_validate(const wk_profile *p, char *err, size_t len);

#endif
