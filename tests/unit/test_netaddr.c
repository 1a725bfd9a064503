/* test_netaddr.c: wk_netaddr_split, the one host:port splitter of the listener, the
 * metrics server and the gRPC client's direct connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "adapters/wk_netaddr.h"

static void accepts(const char *addr, const char *want_host, const char *want_port) {
  char host[64], port[16];
  assert_true(wk_netaddr_split(addr, host, sizeof host, port, sizeof port));
  assert_string_equal(host, want_host);
  assert_string_equal(port, want_port);
}

static void refuses(const char *addr) {
  char host[64], port[16];
  assert_false(wk_netaddr_split(addr, host, sizeof host, port, sizeof port));
}

static void test_the_forms_it_takes(void **state) {
  (void)state;
  accepts("127.0.0.1:7070", "127.0.0.1", "7070");
  accepts("localhost:1", "localhost", "1");
  accepts("[::1]:7070", "::1", "7070");
  accepts(":9464", "", "9464");
  accepts("[::]:65535", "::", "65535");
}

static void test_the_forms_it_refuses(void **state) {
  (void)state;
  refuses("localhost");           /* no port */
  refuses("localhost:");          /* empty port */
  refuses("localhost:7o70");      /* not a number */
  refuses("localhost:65536");     /* out of range */
  refuses("localhost:000007070"); /* longer than a port */
  refuses("::1:7070");            /* a bare IPv6 address */
  refuses("[::1]7070");           /* no ':' after the bracket */
  refuses("[::1:7070");           /* no closing bracket */
  refuses("dns:///localhost:1");  /* a URI */
  char longhost[100];
  memset(longhost, 'a', sizeof longhost);
  memcpy(longhost + sizeof longhost - 6, ":7070", 6); /* 93 bytes of host: too long for 64 */
  refuses(longhost);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_forms_it_takes),
      cmocka_unit_test(test_the_forms_it_refuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
