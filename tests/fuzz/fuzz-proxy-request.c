/* Fuzz target: the proxy's request head parser, the Host check and the
 * head it sends upstream, and with them the host canonicaliser, the
 * authority and allow/deny entry parsers and the special-address
 * classifier (libcommon/proxy-parse.c, the code the proxy runs).  Beyond
 * memory errors it checks what the proxy relies on: a refusal has a
 * reason, a valid head is "more" at every shorter length (the proxy reads
 * it piece by piece), and canonical forms are stable. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy-parse.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

/* canonicalising a canonical host changes nothing */
static void stable(const struct dsec_host *h)
{
  struct dsec_host again;
  const char *why = NULL;

  CHECK(strlen(h->name) < sizeof h->name);
  CHECK(dsec_host_canon(h->name, strlen(h->name), h->kind == DSEC_HOST_IPV6,
                        &again, &why) == 0);
  CHECK(dsec_host_equal(h, &again));
  CHECK(memcmp(h->addr, again.addr, sizeof h->addr) == 0);
}

static void request(const char *buf, size_t size)
{
  struct dsec_http_request r, p;
  const char *why = NULL;
  int rc = dsec_http_request_parse(buf, size, &r, &why);

  CHECK(rc >= -1 && rc <= 1);
  if (rc < 0)
    CHECK(why && *why);
  if (rc != 1)
    return;
  CHECK(r.head_len >= 4 && r.head_len <= size);
  CHECK(memcmp(buf + r.head_len - 4, "\r\n\r\n", 4) == 0);
  CHECK(r.port >= 1 && r.port <= 65535);
  CHECK(r.method[0] && strlen(r.method) < sizeof r.method);
  stable(&r.host);
  if (r.has_host_header)
    stable(&r.host_header);
  if (!r.connect)
    CHECK(r.path >= buf && r.path + r.path_len <= buf + r.head_len);
  /* read piece by piece, a valid head is never refused early */
  CHECK(dsec_http_request_parse(buf, r.head_len - 1, &p, &why) == 0);
  CHECK(dsec_http_request_parse(buf, r.head_len / 2, &p, &why) == 0);
  why = NULL;
  if (dsec_http_host_check(&r, &why) < 0)
    CHECK(why && *why);
  if (!r.connect) {
    size_t outsize = r.head_len + 32, n;
    char *out = malloc(outsize);
    CHECK(out);
    n = dsec_http_forward_head(buf, &r, out, outsize);
    CHECK(n > 0 && n <= outsize);
    CHECK(memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
    CHECK(memchr(out, '/', n) && memmem(out, n, "Connection: close\r\n\r\n", 21));
    /* nothing in it ends a line but CRLF */
    for (size_t i = 0; i < n; i++)
      CHECK(out[i] != '\n' || (i > 0 && out[i - 1] == '\r'));
    free(out);
  }
}

/* the first line as a host, an authority and an entry */
static void names(const char *buf, size_t size)
{
  const char *nl = memchr(buf, '\n', size);
  size_t n = nl ? (size_t) (nl - buf) : size;
  struct dsec_host h, h2;
  struct dsec_proxy_entry e;
  const char *why = NULL;
  int port = 0;
  char *s;

  for (int bracketed = 0; bracketed < 2; bracketed++)
    if (dsec_host_canon(buf, n, bracketed, &h, &why) == 0)
      stable(&h);
    else
      CHECK(why && *why);
  if (dsec_authority_parse(buf, n, 0, &h, &port, &why) == 0) {
    stable(&h);
    CHECK(port >= 0 && port <= 65535);
  }
  if (n > 400)
    return;
  s = malloc(n + 1);
  CHECK(s);
  memcpy(s, buf, n);
  s[n] = '\0';
  if (dsec_proxy_entry_parse(s, &e, &why) == 0) {
    CHECK(e.port >= 0 && e.port <= 65535);
    /* an entry naming a host exactly matches that host */
    if (!e.wildcard) {
      h2 = e.host;
      CHECK(dsec_proxy_entry_match(&e, &h2, e.port ? e.port : 80, false));
    } else {
      /* a wildcard in allow never matches an address */
      dsec_host_canon("127.0.0.1", 9, false, &h2, &why);
      CHECK(!dsec_proxy_entry_match(&e, &h2, e.port ? e.port : 80, false));
    }
  }
  free(s);
}

/* an IPv4-mapped IPv6 address is special exactly when its IPv4 one is */
static void addresses(const uint8_t *data, size_t size)
{
  uint8_t a6[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

  if (size < 16)
    return;
  memcpy(a6 + 12, data, 4);
  CHECK(dsec_addr_special(AF_INET6, a6) == dsec_addr_special(AF_INET, data));
  dsec_addr_special(AF_INET6, data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  /* the proxy never parses more than this */
  if (size > DSEC_PROXY_HEAD_MAX)
    return 0;
  request((const char *) data, size);
  names((const char *) data, size);
  addresses(data, size);
  return 0;
}
