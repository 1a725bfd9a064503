/* wk_etcd_int.h: internal to the etcd module (wk_etcd.c, wk_etcd_registry.c). */
#ifndef WK_ETCD_INT_H
#define WK_ETCD_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

/* An int64 field, given by the gateway as a decimal string (or a number). Absent
 * fields are zero (proto3 omits zero values). False when present and malformed. */
bool wk_etcd__json_i64_field(const json_t *obj, const char *name, int64_t *out);

#endif
