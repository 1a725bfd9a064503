/* test_peer_index.c: wk_peer_index, the listener's connections by peer address: the
 * keys of gRPC's peer strings meet the keys of getpeername's addresses, in every
 * spelling gRPC uses, and the table files, replaces, finds and forgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "adapters/wk_peer_index.h"

/* The key getpeername's address for addr (IPv4, or IPv6 when it has a ':') gets. */
static wk_peer_key key_of(const char *addr, uint16_t port) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t len;
  if (strchr(addr, ':') != NULL) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    assert_int_equal(inet_pton(AF_INET6, addr, &in6->sin6_addr), 1);
    len = sizeof *in6;
  } else {
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    assert_int_equal(inet_pton(AF_INET, addr, &in->sin_addr), 1);
    len = sizeof *in;
  }
  wk_peer_key k;
  assert_true(wk_peer_key_from_sockaddr((struct sockaddr *)&ss, len, &k));
  return k;
}

static void same_key(const char *uri, wk_peer_key want) {
  wk_peer_key k;
  assert_true(wk_peer_key_from_uri(uri, &k));
  assert_int_equal(k.port, want.port);
  assert_memory_equal(k.addr, want.addr, sizeof k.addr);
}

static void test_peer_strings_meet_socket_addresses(void **state) {
  (void)state;
  same_key("ipv4:127.0.0.1:50123", key_of("127.0.0.1", 50123));
  same_key("ipv6:%5B::1%5D:7070", key_of("::1", 7070)); /* gRPC 1.51's URI form */
  same_key("ipv6:[::1]:7070", key_of("::1", 7070));
  same_key("ipv6:[fe80::1%25eth0]:1", key_of("fe80::1", 1)); /* the zone is dropped */
  /* a dual-stack socket's peer: getpeername gives ::ffff:a.b.c.d, gRPC may say ipv4: */
  same_key("ipv4:10.1.2.3:9", key_of("::ffff:10.1.2.3", 9));
  same_key("ipv6:%5B::ffff:10.1.2.3%5D:9", key_of("10.1.2.3", 9));
  same_key("ipv4:0.0.0.0:65535", key_of("0.0.0.0", 65535));
}

static void test_other_strings_have_no_key(void **state) {
  (void)state;
  static const char *const bad[] = {
      "unix:/tmp/worker.sock",
      "ipv4:localhost:1",
      "ipv4:127.0.0.1",
      "ipv4:127.0.0.1:",
      "ipv4:127.0.0.1:65536",
      "ipv4:127.0.0.1:123456",
      "ipv4:127.0.0.1:1x",
      "ipv4::1",
      "ipv6:::1:7070",
      "ipv6:[::1:7070",
      "ipv6:%5B::1:7070",
      "ipv6:[]:1",
      "ipv6:[::1]7070",
      "ipv6:[not-an-address]:1",
      "fd:17",
      "",
      "ipv4:1.2.3.4.5:1",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    wk_peer_key k;
    if (wk_peer_key_from_uri(bad[i], &k)) fail_msg("took %s", bad[i]);
  }
  wk_peer_key k;
  assert_false(wk_peer_key_from_uri(NULL, &k));
  struct sockaddr sa = {.sa_family = AF_UNIX};
  assert_false(wk_peer_key_from_sockaddr(&sa, sizeof sa, &k));
  struct sockaddr_in in = {.sin_family = AF_INET};
  assert_false(wk_peer_key_from_sockaddr((struct sockaddr *)&in, 4, &k)); /* too short */
}

static void test_the_table_files_replaces_finds_and_forgets(void **state) {
  (void)state;
  wk_peer_index *ix = wk_peer_index_new();
  wk_peer_key a = key_of("127.0.0.1", 1000);
  assert_int_equal(wk_peer_index_find(ix, &a), -1); /* empty, no table yet */
  /* thousands: the table grows, every entry stays found */
  for (uint16_t p = 1000; p < 6000; p++) {
    wk_peer_key k = key_of("127.0.0.1", p);
    wk_peer_index_put(ix, &k, p + 7);
  }
  assert_int_equal(wk_peer_index_count(ix), 5000);
  for (uint16_t p = 1000; p < 6000; p++) {
    wk_peer_key k = key_of("127.0.0.1", p);
    assert_int_equal(wk_peer_index_find(ix, &k), p + 7);
  }
  wk_peer_key other_host = key_of("127.0.0.2", 1000);
  assert_int_equal(wk_peer_index_find(ix, &other_host), -1);
  /* one address names one connection: a new socket from it replaces the old */
  wk_peer_index_put(ix, &a, 3);
  assert_int_equal(wk_peer_index_find(ix, &a), 3);
  assert_int_equal(wk_peer_index_count(ix), 5000);
  wk_peer_index_put(ix, &other_host, -1); /* not a descriptor: not filed */
  assert_int_equal(wk_peer_index_find(ix, &other_host), -1);
  /* cleared (a big table is given back), then refiled */
  wk_peer_index_clear(ix);
  assert_int_equal(wk_peer_index_count(ix), 0);
  assert_int_equal(wk_peer_index_find(ix, &a), -1);
  wk_peer_index_put(ix, &a, 4);
  assert_int_equal(wk_peer_index_find(ix, &a), 4);
  wk_peer_index_clear(ix); /* a small table is kept, emptied */
  assert_int_equal(wk_peer_index_find(ix, &a), -1);
  wk_peer_index_free(ix);
  wk_peer_index_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_peer_strings_meet_socket_addresses),
      cmocka_unit_test(test_other_strings_have_no_key),
      cmocka_unit_test(test_the_table_files_replaces_finds_and_forgets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
