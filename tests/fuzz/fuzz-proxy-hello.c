/* Fuzz target: the proxy's TLS ClientHello parser and its SNI check
 * (libcommon/proxy-parse.c, the code the proxy runs).  Beyond memory
 * errors it checks what the proxy relies on: a refusal has a reason, a
 * whole hello is "more" at every shorter length (it arrives in pieces),
 * what follows it does not change it, and an SNI naming the target
 * passes the check exactly when it is one valid host name. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy-parse.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct dsec_tls_hello h, p;
  struct dsec_host t;
  const char *why = NULL;
  int rc;

  /* the proxy never holds more than this */
  if (size > DSEC_PROXY_HELLO_MAX)
    return 0;
  rc = dsec_tls_hello_parse(data, size, &h, &why);
  CHECK(rc >= -1 && rc <= 1);
  if (rc < 0)
    CHECK(why && *why);
  if (rc != 1)
    return 0;
  CHECK(h.len >= 5 + 4 + 38 && h.len <= size && h.records >= 1);
  CHECK(memchr(h.sni, '\0', sizeof h.sni));
  CHECK(h.names == 0 || h.sni_len >= 1);
  /* a piece of it is "more"; what follows it changes nothing */
  CHECK(dsec_tls_hello_parse(data, h.len - 1, &p, &why) == 0);
  CHECK(dsec_tls_hello_parse(data, h.len / 2, &p, &why) == 0);
  CHECK(dsec_tls_hello_parse(data, h.len, &p, &why) == 1);
  CHECK(p.len == h.len && p.names == h.names && p.ech == h.ech &&
        p.sni_len == h.sni_len && strcmp(p.sni, h.sni) == 0);
  /* against its own name */
  if (h.names == 1 && h.sni_len < sizeof h.sni &&
      dsec_host_canon(h.sni, h.sni_len, false, &t, &why) == 0 &&
      t.kind == DSEC_HOST_NAME) {
    why = NULL;
    rc = dsec_tls_hello_check(&h, &t, &why);
    CHECK(h.ech ? rc < 0 : rc == 0);
  }
  /* against a name and an address it may not be */
  dsec_host_canon("example.com", 11, false, &t, &why);
  why = NULL;
  if (dsec_tls_hello_check(&h, &t, &why) < 0)
    CHECK(why && *why);
  dsec_host_canon("127.0.0.1", 9, false, &t, &why);
  why = NULL;
  rc = dsec_tls_hello_check(&h, &t, &why);
  CHECK(rc == ((h.names || h.ech) ? -1 : 0));
  return 0;
}
