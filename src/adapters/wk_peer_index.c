/* wk_peer_index.c: see wk_peer_index.h. An open-addressing table (linear probing) of
 * keys and descriptors, at most half full; it is emptied and refiled rather than
 * deleted from, so it needs no tombstones. */
#include "adapters/wk_peer_index.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_hash.h"

/* ---- keys ------------------------------------------------------------------------ */

static void key_v4(const uint8_t v4[4], uint16_t port, wk_peer_key *out) {
  memset(out, 0, sizeof *out);
  out->addr[10] = 0xff;
  out->addr[11] = 0xff;
  memcpy(out->addr + 12, v4, 4);
  out->port = port;
}

bool wk_peer_key_from_sockaddr(const struct sockaddr *sa, socklen_t len, wk_peer_key *out) {
  if (sa == NULL) return false;
  if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    key_v4((const uint8_t *)&in->sin_addr, ntohs(in->sin_port), out);
    return true;
  }
  if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    memset(out, 0, sizeof *out);
    memcpy(out->addr, &in6->sin6_addr, 16);
    out->port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

/* The port after the host: ":" and 1-5 digits up to 65535, then the end. */
static bool parse_port(const char *p, uint16_t *port) {
  if (*p++ != ':') return false;
  unsigned v = 0;
  size_t n = 0;
  for (; p[n] >= '0' && p[n] <= '9'; n++) {
    if (n == 5) return false;
    v = v * 10 + (unsigned)(p[n] - '0');
  }
  if (n == 0 || p[n] != '\0' || v > 65535) return false;
  *port = (uint16_t)v;
  return true;
}

bool wk_peer_key_from_uri(const char *peer, wk_peer_key *out) {
  if (peer == NULL) return false;
  char host[INET6_ADDRSTRLEN + 1];
  if (strncmp(peer, "ipv4:", 5) == 0) {
    const char *colon = strchr(peer + 5, ':');
    size_t n = colon != NULL ? (size_t)(colon - (peer + 5)) : 0;
    if (n == 0 || n >= sizeof host) return false;
    memcpy(host, peer + 5, n);
    host[n] = '\0';
    uint8_t v4[4];
    uint16_t port;
    if (inet_pton(AF_INET, host, v4) != 1 || !parse_port(colon, &port)) return false;
    key_v4(v4, port, out);
    return true;
  }
  if (strncmp(peer, "ipv6:", 5) != 0) return false;
  const char *p = peer + 5;
  const char *close;
  if (*p == '[') {
    p++;
    close = strchr(p, ']');
  } else if (strncmp(p, "%5B", 3) == 0 || strncmp(p, "%5b", 3) == 0) {
    p += 3;
    close = strstr(p, "%5D");
    if (close == NULL) close = strstr(p, "%5d");
  } else {
    return false;
  }
  if (close == NULL) return false;
  const char *after = *close == ']' ? close + 1 : close + 3;
  /* a zone ("fe80::1%25eth0", "%eth0") is not part of the key: the port tells apart */
  const char *end = close;
  for (const char *z = p; z < close; z++) {
    if (*z == '%') {
      end = z;
      break;
    }
  }
  size_t n = (size_t)(end - p);
  if (n == 0 || n >= sizeof host) return false;
  memcpy(host, p, n);
  host[n] = '\0';
  uint16_t port;
  memset(out, 0, sizeof *out);
  if (inet_pton(AF_INET6, host, out->addr) != 1 || !parse_port(after, &port)) return false;
  out->port = port;
  return true;
}

/* ---- the table --------------------------------------------------------------------- */

/* A table up to this many slots (6 KiB) is kept by clear; a bigger one is freed, and
 * refiling grows one to fit what is open now. */
#define CLEAR_KEEPS_SLOTS 256

typedef struct slot {
  wk_peer_key key;
  int fd; /* -1: empty */
} slot;

struct wk_peer_index {
  slot *slots;
  size_t cap; /* a power of two, or 0 */
  size_t count;
};

static size_t home(const wk_peer_key *k, size_t cap) {
  uint64_t h = wk_hash64(k->addr, sizeof k->addr, k->port);
  return (size_t)h & (cap - 1);
}

static bool same(const wk_peer_key *a, const wk_peer_key *b) {
  return a->port == b->port && memcmp(a->addr, b->addr, sizeof a->addr) == 0;
}

static void empty_all(slot *s, size_t cap) {
  for (size_t i = 0; i < cap; i++) s[i].fd = -1;
}

wk_peer_index *wk_peer_index_new(void) { return wk_xcalloc(1, sizeof(wk_peer_index)); }

void wk_peer_index_free(wk_peer_index *ix) {
  if (ix == NULL) return;
  free(ix->slots);
  free(ix);
}

/* Files key -> fd into a table with room (no growth). */
static void place(wk_peer_index *ix, const wk_peer_key *key, int fd) {
  size_t mask = ix->cap - 1;
  for (size_t i = home(key, ix->cap);; i = (i + 1) & mask) {
    slot *s = &ix->slots[i];
    if (s->fd < 0) {
      s->key = *key;
      s->fd = fd;
      ix->count++;
      return;
    }
    if (same(&s->key, key)) {
      s->fd = fd;
      return;
    }
  }
}

static void grow(wk_peer_index *ix) {
  slot *old = ix->slots;
  size_t old_cap = ix->cap;
  ix->cap = old_cap ? old_cap * 2 : 64;
  ix->slots = wk_xmalloc(ix->cap * sizeof *ix->slots);
  empty_all(ix->slots, ix->cap);
  ix->count = 0;
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].fd >= 0) place(ix, &old[i].key, old[i].fd);
  }
  free(old);
}

void wk_peer_index_put(wk_peer_index *ix, const wk_peer_key *key, int fd) {
  if (fd < 0) return;
  if ((ix->count + 1) * 2 > ix->cap) grow(ix);
  place(ix, key, fd);
}

int wk_peer_index_find(const wk_peer_index *ix, const wk_peer_key *key) {
  if (ix->cap == 0) return -1;
  size_t mask = ix->cap - 1;
  for (size_t i = home(key, ix->cap);; i = (i + 1) & mask) {
    const slot *s = &ix->slots[i];
    if (s->fd < 0) return -1; /* at most half full: an empty slot is always reached */
    if (same(&s->key, key)) return s->fd;
  }
}

void wk_peer_index_clear(wk_peer_index *ix) {
  if (ix->cap > CLEAR_KEEPS_SLOTS) { /* once many connections, maybe few now: refit */
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = 0;
  } else if (ix->cap > 0) {
    empty_all(ix->slots, ix->cap);
  }
  ix->count = 0;
}

size_t wk_peer_index_count(const wk_peer_index *ix) { return ix->count; }
