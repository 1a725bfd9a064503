/* fake_curl.h: a scripted stand-in for the few libcurl calls src/adapters/wk_etcd.c
 * makes, so that fuzz_etcd can feed etcd "answers" from the fuzzer's input through the
 * client's real request and answer-parsing code without a network. fake_curl.c defines
 * curl_easy_* / curl_multi_* / curl_slist_* / curl_global_init; a target that links it
 * must not link libcurl. Single-threaded. */
#ifndef FAKE_CURL_H
#define FAKE_CURL_H

#include <stddef.h>
#include <stdint.h>

enum {
  FAKE_CURL_OK = 0,       /* the transfer completes; http_code is the status */
  FAKE_CURL_CONNECT = 7,  /* CURLE_COULDNT_CONNECT: nothing delivered */
  FAKE_CURL_TIMEOUT = 28, /* CURLE_OPERATION_TIMEDOUT: the body so far, then fail */
};

typedef struct fake_curl_answer {
  int result;     /* FAKE_CURL_* */
  long http_code; /* 0: no status line */
  uint8_t *body;  /* delivered to the write callback (may be NULL when len is 0) */
  size_t len;
} fake_curl_answer;

/** The answers the next transfers get, in order; past the last one a transfer fails
 * with CURLE_COULDNT_CONNECT. Bodies are handed over `chunk` bytes per write callback
 * (0: all at once). The array must outlive the transfers. */
void fake_curl_script(const fake_curl_answer *answers, size_t n, size_t chunk);

/** Transfers started since the last fake_curl_script. */
size_t fake_curl_transfers(void);

/** The body (POSTFIELDS) of the last transfer, NUL-terminated, and its URL. */
const char *fake_curl_last_body(void);
const char *fake_curl_last_url(void);

#endif
