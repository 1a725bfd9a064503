/* fake_curl.c: scripted libcurl for fuzz_etcd (see fake_curl.h). Implements exactly the
 * calls src/adapters/wk_etcd.c makes; each multi transfer completes in its first
 * curl_multi_perform with the next scripted answer. */
#define CURL_DISABLE_TYPECHECK 1 /* define curl_easy_setopt/getinfo, not their macros */
#include "fake_curl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

typedef size_t (*write_fn)(char *ptr, size_t size, size_t nmemb, void *ud);

static struct {
  const fake_curl_answer *answers;
  size_t n, next, chunk, transfers;
  /* the easy handle's options */
  write_fn write;
  void *write_data;
  char *errbuf;
  const char *postfields;
  long post_len;
  char url[600];
  char body[4096];
  long http_code;
  bool running;
  CURLMsg msg;
  bool msg_pending;
} fk;

static int easy_token, multi_token; /* the handles are just distinct addresses */

void fake_curl_script(const fake_curl_answer *answers, size_t n, size_t chunk) {
  fk.answers = answers;
  fk.n = n;
  fk.next = 0;
  fk.chunk = chunk;
  fk.transfers = 0;
}

size_t fake_curl_transfers(void) { return fk.transfers; }
const char *fake_curl_last_body(void) { return fk.body; }
const char *fake_curl_last_url(void) { return fk.url; }

CURLcode curl_global_init(long flags) {
  (void)flags;
  return CURLE_OK;
}

const char *curl_easy_strerror(CURLcode code) {
  if (code == CURLE_COULDNT_CONNECT) return "Couldn't connect to server (fake)";
  if (code == CURLE_OPERATION_TIMEDOUT) return "Timeout was reached (fake)";
  if (code == CURLE_WRITE_ERROR) return "Failed writing received data (fake)";
  return "fake curl error";
}

CURL *curl_easy_init(void) { return &easy_token; }
void curl_easy_cleanup(CURL *e) { (void)e; }
CURLM *curl_multi_init(void) { return &multi_token; }
CURLMcode curl_multi_cleanup(CURLM *m) {
  (void)m;
  return CURLM_OK;
}

struct curl_slist *curl_slist_append(struct curl_slist *list, const char *s) {
  struct curl_slist *item = calloc(1, sizeof *item);
  if (!item) return NULL;
  item->data = strdup(s);
  if (!item->data) {
    free(item);
    return NULL;
  }
  if (!list) return item;
  struct curl_slist *last = list;
  while (last->next) last = last->next;
  last->next = item;
  return list;
}

void curl_slist_free_all(struct curl_slist *list) {
  while (list) {
    struct curl_slist *next = list->next;
    free(list->data);
    free(list);
    list = next;
  }
}

void curl_easy_reset(CURL *e) {
  (void)e;
  fk.write = NULL;
  fk.write_data = NULL;
  fk.errbuf = NULL;
  fk.postfields = NULL;
  fk.post_len = -1;
  fk.url[0] = '\0';
}

CURLcode curl_easy_setopt(CURL *e, CURLoption option, ...) {
  (void)e;
  va_list ap;
  va_start(ap, option);
  /* the other options do not matter here */
  if (option == CURLOPT_WRITEFUNCTION) {
    fk.write = va_arg(ap, write_fn);
  } else if (option == CURLOPT_WRITEDATA) {
    fk.write_data = va_arg(ap, void *);
  } else if (option == CURLOPT_ERRORBUFFER) {
    fk.errbuf = va_arg(ap, char *);
  } else if (option == CURLOPT_POSTFIELDS) {
    fk.postfields = va_arg(ap, const char *);
  } else if (option == CURLOPT_POSTFIELDSIZE_LARGE) {
    fk.post_len = (long)va_arg(ap, curl_off_t);
  } else if (option == CURLOPT_URL) {
    (void)snprintf(fk.url, sizeof fk.url, "%s", va_arg(ap, const char *));
  }
  va_end(ap);
  return CURLE_OK;
}

CURLcode curl_easy_getinfo(CURL *e, CURLINFO info, ...) {
  (void)e;
  va_list ap;
  va_start(ap, info);
  if (info == CURLINFO_RESPONSE_CODE) *va_arg(ap, long *) = fk.http_code;
  va_end(ap);
  return CURLE_OK;
}

CURLMcode curl_multi_add_handle(CURLM *m, CURL *e) {
  (void)m;
  (void)e;
  if (fk.running) return CURLM_ADDED_ALREADY;
  fk.running = true;
  fk.msg_pending = false;
  fk.http_code = 0;
  fk.transfers++;
  size_t n = fk.postfields && fk.post_len >= 0 ? (size_t)fk.post_len : 0;
  if (n >= sizeof fk.body) n = sizeof fk.body - 1;
  if (n) memcpy(fk.body, fk.postfields, n);
  fk.body[n] = '\0';
  return CURLM_OK;
}

CURLMcode curl_multi_remove_handle(CURLM *m, CURL *e) {
  (void)m;
  (void)e;
  fk.running = false;
  fk.msg_pending = false;
  return CURLM_OK;
}

static CURLcode deliver(const fake_curl_answer *a) {
  size_t off = 0;
  while (off < a->len) {
    size_t n = a->len - off;
    if (fk.chunk && n > fk.chunk) n = fk.chunk;
    if (!fk.write || fk.write((char *)a->body + off, 1, n, fk.write_data) != n) {
      return CURLE_WRITE_ERROR;
    }
    off += n;
  }
  return CURLE_OK;
}

CURLMcode curl_multi_perform(CURLM *m, int *running) {
  (void)m;
  *running = 0;
  if (!fk.running || fk.msg_pending) return CURLM_OK;
  CURLcode result;
  if (fk.next >= fk.n) {
    result = CURLE_COULDNT_CONNECT;
    if (fk.errbuf) (void)snprintf(fk.errbuf, CURL_ERROR_SIZE, "fake: no answer scripted");
  } else {
    const fake_curl_answer *a = &fk.answers[fk.next++];
    if (a->result == FAKE_CURL_CONNECT) {
      result = CURLE_COULDNT_CONNECT;
      if (fk.errbuf) (void)snprintf(fk.errbuf, CURL_ERROR_SIZE, "fake: connection refused");
    } else {
      fk.http_code = a->http_code;
      result = deliver(a);
      if (result == CURLE_OK && a->result == FAKE_CURL_TIMEOUT) {
        result = CURLE_OPERATION_TIMEDOUT;
        if (fk.errbuf) (void)snprintf(fk.errbuf, CURL_ERROR_SIZE, "fake: timed out");
      }
    }
  }
  fk.msg.msg = CURLMSG_DONE;
  fk.msg.easy_handle = &easy_token;
  fk.msg.data.result = result;
  fk.msg_pending = true;
  return CURLM_OK;
}

CURLMsg *curl_multi_info_read(CURLM *m, int *queued) {
  (void)m;
  *queued = 0;
  if (!fk.msg_pending) return NULL;
  fk.msg_pending = false;
  return &fk.msg;
}

CURLMcode curl_multi_poll(CURLM *m, struct curl_waitfd extra_fds[], unsigned int extra_nfds,
                          int timeout_ms, int *ret) {
  (void)m;
  (void)extra_fds;
  (void)extra_nfds;
  (void)timeout_ms;
  if (ret) *ret = 0;
  return CURLM_OK;
}
