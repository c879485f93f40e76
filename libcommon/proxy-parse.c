/* The proxy's parsers and rules over bytes (see proxy-parse.h).  What an
 * agent sends is hostile: every length is checked against what is there
 * before it is used, nothing is allocated, and anything that is not
 * plainly well formed is refused rather than guessed at (issue #12). */
#include <config.h>

#include "proxy-parse.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* With AddressSanitizer (the fuzz targets, the replay drivers), the part
 * of the hello's buffer past the message is made unreadable while it is
 * parsed, so that a read past the message is caught, not just one past
 * the buffer. */
#if defined(__SANITIZE_ADDRESS__)
#define DSEC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSEC_ASAN 1
#endif
#endif
#ifdef DSEC_ASAN
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(a, n) ((void) (a), (void) (n))
#define ASAN_UNPOISON_MEMORY_REGION(a, n) ((void) (a), (void) (n))
#endif

/* ---- host names and literals */

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool is_hex(unsigned char c)
{
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static char lower(unsigned char c)
{
  return (char) (c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

/* A label that an IPv4 parser would read as a number: decimal (or octal)
 * digits, or 0x and hex digits. */
static bool numeric_label(const char *l, size_t n)
{
  size_t i = 0;
  if (n >= 2 && l[0] == '0' && l[1] == 'x') {
    for (i = 2; i < n; i++)
      if (!is_hex((unsigned char) l[i]))
        return false;
    return true;
  }
  if (n == 0)
    return false;
  for (i = 0; i < n; i++)
    if (!is_digit((unsigned char) l[i]))
      return false;
  return true;
}

static int set_ipv6(const char *s, size_t len, struct dsec_host *h,
                    const char **why)
{
  char buf[64];

  if (len == 0 || len >= sizeof buf) {
    *why = "malformed IPv6 address";
    return -1;
  }
  memcpy(buf, s, len);
  buf[len] = '\0';
  if (memchr(buf, '%', len)) {
    *why = "an IPv6 address with a zone";
    return -1;
  }
  if (inet_pton(AF_INET6, buf, h->addr) != 1) {
    *why = "malformed IPv6 address";
    return -1;
  }
  h->kind = DSEC_HOST_IPV6;
  if (!inet_ntop(AF_INET6, h->addr, h->name, sizeof h->name)) {
    *why = "malformed IPv6 address";
    return -1;
  }
  return 0;
}

/* Lowercases and checks a name (or, with pattern, a name with '*'s) into
 * out: one trailing dot stripped, no empty label, no label over 63, at
 * most 253 characters, [a-z0-9-_.] only, never a non-ASCII byte. */
static int canon_name(const char *s, size_t len, bool pattern, char *out,
                      const char **why)
{
  size_t i, label = 0;

  for (i = 0; i < len; i++)
    if ((unsigned char) s[i] >= 0x80) {
      /* no IDNA library: refusing is the safe choice, since comparing
       * Unicode forms would need its mapping and normalisation */
      *why = "a non-ASCII host name (IDNA is not supported: use its xn-- form)";
      return -1;
    }
  if (len > 0 && s[len - 1] == '.')
    len--;
  if (len == 0) {
    *why = "an empty host name";
    return -1;
  }
  if (len > DSEC_HOST_NAME_MAX) {
    *why = "a host name longer than 253 characters";
    return -1;
  }
  for (i = 0; i < len; i++) {
    char c = lower((unsigned char) s[i]);
    if (c == '.') {
      if (label == 0) {
        *why = "an empty label in the host name";
        return -1;
      }
      label = 0;
    } else if ((c >= 'a' && c <= 'z') || is_digit((unsigned char) c) ||
               c == '-' || c == '_' || (pattern && c == '*')) {
      if (++label > 63) {
        *why = "a host name label longer than 63 characters";
        return -1;
      }
    } else {
      *why = "a character not allowed in a host name";
      return -1;
    }
    out[i] = c;
  }
  if (label == 0) {
    *why = "an empty label in the host name";
    return -1;
  }
  out[len] = '\0';
  return 0;
}

int dsec_host_canon(const char *s, size_t len, bool bracketed,
                    struct dsec_host *h, const char **why)
{
  struct in_addr a;
  const char *last;
  size_t n;

  memset(h, 0, sizeof *h);
  if (bracketed)
    return set_ipv6(s, len, h, why);
  if (canon_name(s, len, false, h->name, why) < 0)
    return -1;
  /* every form inet_aton reads (127.1, 0x7f.1, 2130706433, 0177.0.0.1) is
   * the address it reads, whatever the resolver would do with it */
  if (inet_aton(h->name, &a)) {
    h->kind = DSEC_HOST_IPV4;
    memcpy(h->addr, &a, 4);
    inet_ntop(AF_INET, h->addr, h->name, sizeof h->name);
    return 0;
  }
  n = strlen(h->name);
  last = strrchr(h->name, '.');
  last = last ? last + 1 : h->name;
  if (numeric_label(last, n - (size_t) (last - h->name))) {
    *why = "a malformed IPv4 address";
    return -1;
  }
  h->kind = DSEC_HOST_NAME;
  return 0;
}

static int parse_port(const char *s, size_t len, int *port, const char **why)
{
  int v = 0;

  if (len == 0 || len > 5) {
    *why = "a malformed port";
    return -1;
  }
  for (size_t i = 0; i < len; i++) {
    if (!is_digit((unsigned char) s[i])) {
      *why = "a malformed port";
      return -1;
    }
    v = v * 10 + (s[i] - '0');
  }
  if (v < 1 || v > 65535) {
    *why = "a port out of range";
    return -1;
  }
  *port = v;
  return 0;
}

int dsec_authority_parse(const char *s, size_t len, int default_port,
                         struct dsec_host *h, int *port, const char **why)
{
  const char *colon;
  int p = default_port;

  if (len == 0) {
    *why = "an empty host";
    return -1;
  }
  if (s[0] == '[') {
    const char *rb = memchr(s, ']', len);
    size_t rest;
    if (!rb) {
      *why = "malformed IPv6 address";
      return -1;
    }
    rest = len - (size_t) (rb + 1 - s);
    if (rest > 0) {
      if (rb[1] != ':') {
        *why = "a malformed host and port";
        return -1;
      }
      if (parse_port(rb + 2, rest - 1, &p, why) < 0)
        return -1;
    }
    if (dsec_host_canon(s + 1, (size_t) (rb - s - 1), true, h, why) < 0)
      return -1;
    *port = p;
    return 0;
  }
  colon = memchr(s, ':', len);
  if (colon) {
    if (memchr(colon + 1, ':', len - (size_t) (colon + 1 - s))) {
      *why = "an IPv6 address without brackets";
      return -1;
    }
    if (parse_port(colon + 1, len - (size_t) (colon + 1 - s), &p, why) < 0)
      return -1;
    len = (size_t) (colon - s);
  }
  if (dsec_host_canon(s, len, false, h, why) < 0)
    return -1;
  *port = p;
  return 0;
}

bool dsec_host_equal(const struct dsec_host *a, const struct dsec_host *b)
{
  return a->kind == b->kind && strcmp(a->name, b->name) == 0;
}

/* ---- special-purpose addresses */

static bool v4_special(const uint8_t *b)
{
  /* RFC 6890 and the IANA IPv4 special-purpose registry */
  static const struct {
    uint32_t net;
    int bits;
  } r[] = {
    { 0x00000000, 8 },  /* 0.0.0.0/8 "this network" */
    { 0x0a000000, 8 },  /* 10/8 private */
    { 0x64400000, 10 }, /* 100.64/10 shared address space (CGN) */
    { 0x7f000000, 8 },  /* 127/8 loopback */
    { 0xa9fe0000, 16 }, /* 169.254/16 link local */
    { 0xac100000, 12 }, /* 172.16/12 private */
    { 0xc0000000, 24 }, /* 192.0.0/24 IETF protocol assignments */
    { 0xc0000200, 24 }, /* 192.0.2/24 TEST-NET-1 */
    { 0xc0586300, 24 }, /* 192.88.99/24 6to4 relay anycast */
    { 0xc0a80000, 16 }, /* 192.168/16 private */
    { 0xc6120000, 15 }, /* 198.18/15 benchmarking */
    { 0xc6336400, 24 }, /* 198.51.100/24 TEST-NET-2 */
    { 0xcb007100, 24 }, /* 203.0.113/24 TEST-NET-3 */
    { 0xe0000000, 4 },  /* 224/4 multicast */
    { 0xf0000000, 4 },  /* 240/4 reserved, and 255.255.255.255 */
  };
  uint32_t a = (uint32_t) b[0] << 24 | (uint32_t) b[1] << 16 |
               (uint32_t) b[2] << 8 | b[3];

  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if ((a >> (32 - r[i].bits)) == (r[i].net >> (32 - r[i].bits)))
      return true;
  return false;
}

static bool v6_prefix(const uint8_t *a, const uint8_t *p, int bits)
{
  int full = bits / 8, rest = bits % 8;
  if (memcmp(a, p, (size_t) full) != 0)
    return false;
  return rest == 0 ||
         ((a[full] ^ p[full]) & (uint8_t) (0xff << (8 - rest))) == 0;
}

static bool v6_special(const uint8_t *a)
{
  static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
  /* the special ranges inside 2000::/3, the global unicast space */
  static const struct {
    uint8_t p[4];
    int bits;
  } r[] = {
    { { 0x20, 0x01, 0x00, 0x00 }, 23 }, /* 2001::/23 IETF protocol
                                           assignments (Teredo, ORCHID,
                                           benchmarking, ...) */
    { { 0x20, 0x01, 0x0d, 0xb8 }, 32 }, /* 2001:db8::/32 documentation */
    { { 0x20, 0x02, 0x00, 0x00 }, 16 }, /* 2002::/16 6to4 */
    { { 0x3f, 0xff, 0x00, 0x00 }, 20 }, /* 3fff::/20 documentation */
  };

  /* ::ffff:0:0/96 reaches the IPv4 address it holds: that one decides */
  if (memcmp(a, mapped, sizeof mapped) == 0)
    return v4_special(a + 12);
  /* Outside 2000::/3 everything is special: ::/96 (unspecified, loopback,
   * IPv4-compatible), ::ffff:0:0:0/96, 64:ff9b::/96 and 64:ff9b:1::/48
   * (NAT64: they reach an IPv4 address through a translator, which the
   * lists cannot see), 100::/64 (discard), 5f00::/16 (SRv6), fc00::/7
   * (unique local), fe80::/10 (link local), fec0::/10 (site local),
   * ff00::/8 (multicast) and the unassigned rest. */
  if ((a[0] & 0xe0) != 0x20)
    return true;
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if (v6_prefix(a, r[i].p, r[i].bits))
      return true;
  return false;
}

bool dsec_addr_special(int family, const uint8_t *addr)
{
  if (family == AF_INET)
    return v4_special(addr);
  if (family == AF_INET6)
    return v6_special(addr);
  return true;
}

/* ---- allow and deny entries */

int dsec_proxy_entry_parse(const char *s, struct dsec_proxy_entry *e,
                           const char **why)
{
  size_t len = strlen(s);
  const char *colon;
  size_t hlen;

  memset(e, 0, sizeof *e);
  if (len == 0 || len > 300) {
    *why = len ? "an entry longer than 300 characters" : "an empty entry";
    return -1;
  }
  if (s[0] == '[')
    return dsec_authority_parse(s, len, 0, &e->host, &e->port, why);
  colon = strchr(s, ':');
  if (colon && strchr(colon + 1, ':')) /* a bare IPv6 address */
    return dsec_host_canon(s, len, true, &e->host, why);
  hlen = colon ? (size_t) (colon - s) : len;
  if (colon && parse_port(colon + 1, len - hlen - 1, &e->port, why) < 0)
    return -1;
  if (hlen == 0 || (hlen == 1 && s[0] == '*')) {
    e->wildcard = true;
    strcpy(e->host.name, "*");
    return 0;
  }
  if (memchr(s, '*', hlen)) {
    e->wildcard = true;
    return canon_name(s, hlen, true, e->host.name, why);
  }
  return dsec_host_canon(s, hlen, false, &e->host, why);
}

/* '*' matches any run of characters, dots included. */
static bool glob_match(const char *p, const char *s)
{
  const char *star = NULL, *back = NULL;

  while (*s) {
    if (*p == '*') {
      star = p++;
      back = s;
    } else if (*p == *s) {
      p++;
      s++;
    } else if (star) {
      p = star + 1;
      s = ++back;
    } else {
      return false;
    }
  }
  while (*p == '*')
    p++;
  return *p == '\0';
}

bool dsec_proxy_entry_match(const struct dsec_proxy_entry *e,
                            const struct dsec_host *h, int port, bool for_deny)
{
  if (e->port && e->port != port)
    return false;
  if (e->wildcard) {
    /* a wildcard never lets an address through, but it denies one */
    if (h->kind != DSEC_HOST_NAME && !for_deny)
      return false;
    return glob_match(e->host.name, h->name);
  }
  return dsec_host_equal(&e->host, h);
}

/* ---- the request head */

static bool tchar(unsigned char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The first bytes of a head: only CRLF line ends, HTAB and no other
 * control character. */
static int head_chars(const char *buf, size_t len, const char **why)
{
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char) buf[i];
    if (c == '\n' && (i == 0 || buf[i - 1] != '\r')) {
      *why = "a bare LF in the request head";
      return -1;
    }
    if (c == '\r' && i + 1 < len && buf[i + 1] != '\n') {
      *why = "a bare CR in the request head";
      return -1;
    }
    if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) {
      *why = "a control character in the request head";
      return -1;
    }
  }
  return 0;
}

static bool name_is(const char *s, size_t n, const char *name)
{
  return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static int parse_target(const char *t, size_t n, struct dsec_http_request *r,
                        const char **why)
{
  const char *a, *end = t + n, *p;

  /* (a non-ASCII host is refused by the canonicaliser, saying why) */
  for (size_t i = 0; i < n; i++)
    if ((unsigned char) t[i] < 0x21 || (unsigned char) t[i] == 0x7f) {
      *why = "a control character in the request target";
      return -1;
    }
  if (r->connect) {
    if (dsec_authority_parse(t, n, 443, &r->host, &r->port, why) < 0)
      return -1;
    return 0;
  }
  if (n < 7 || strncasecmp(t, "http://", 7) != 0) {
    *why = "only absolute http:// URIs and CONNECT";
    return -1;
  }
  if (memchr(t, '#', n)) {
    *why = "a fragment in the URI";
    return -1;
  }
  a = t + 7;
  for (p = a; p < end && *p != '/' && *p != '?'; p++)
    ;
  if (memchr(a, '@', (size_t) (p - a))) {
    *why = "user info in the URI";
    return -1;
  }
  if (dsec_authority_parse(a, (size_t) (p - a), 80, &r->host, &r->port, why) < 0)
    return -1;
  r->path = p;
  r->path_len = (size_t) (end - p);
  return 0;
}

static int parse_header(const char *l, size_t n, struct dsec_http_request *r,
                        bool *host_seen, const char **why)
{
  const char *colon = memchr(l, ':', n), *v, *ve;
  size_t nlen;

  if (n && (l[0] == ' ' || l[0] == '\t')) {
    *why = "obsolete line folding in a header";
    return -1;
  }
  if (!colon || colon == l) {
    *why = "a malformed header";
    return -1;
  }
  nlen = (size_t) (colon - l);
  for (size_t i = 0; i < nlen; i++)
    if (!tchar((unsigned char) l[i])) {
      *why = "a malformed header name";
      return -1;
    }
  v = colon + 1;
  ve = l + n;
  while (v < ve && (*v == ' ' || *v == '\t'))
    v++;
  while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
    ve--;
  if (name_is(l, nlen, "host")) {
    if (*host_seen) {
      *why = "several Host headers";
      return -1;
    }
    *host_seen = true;
    if (dsec_authority_parse(v, (size_t) (ve - v), 0, &r->host_header,
                             &r->host_header_port, why) < 0) {
      *why = "a Host header that is not a valid host";
      return -1;
    }
    r->has_host_header = true;
  } else if (name_is(l, nlen, "content-length")) {
    int64_t cl = 0;
    if (r->content_length >= 0) {
      *why = "several Content-Length headers";
      return -1;
    }
    if (v == ve || ve - v > 15) {
      *why = "a malformed Content-Length";
      return -1;
    }
    for (const char *p = v; p < ve; p++) {
      if (!is_digit((unsigned char) *p)) {
        *why = "a malformed Content-Length";
        return -1;
      }
      cl = cl * 10 + (*p - '0');
    }
    r->content_length = cl;
  } else if (name_is(l, nlen, "transfer-encoding")) {
    r->chunked = true;
  }
  return 0;
}

int dsec_http_request_parse(const char *buf, size_t len,
                            struct dsec_http_request *r, const char **why)
{
  const char *end = memmem(buf, len, "\r\n\r\n", 4);
  const char *line, *eol, *sp1, *sp2, *hend;
  size_t mlen, head_len;
  bool host_seen = false;
  int headers = 0;

  memset(r, 0, sizeof *r);
  r->content_length = -1;
  if (head_chars(buf, end ? (size_t) (end - buf) + 4 : len, why) < 0)
    return -1;
  if (!end)
    return 0;
  head_len = (size_t) (end - buf) + 4;
  hend = buf + head_len - 2; /* the empty line */
  /* the request line: METHOD SP TARGET SP HTTP/1.x */
  eol = memmem(buf, head_len, "\r\n", 2);
  sp1 = memchr(buf, ' ', (size_t) (eol - buf));
  sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t) (eol - sp1 - 1)) : NULL;
  if (!sp1 || !sp2) {
    *why = "a malformed request line";
    return -1;
  }
  mlen = (size_t) (sp1 - buf);
  if (mlen == 0 || mlen >= sizeof r->method) {
    *why = "a malformed method";
    return -1;
  }
  for (size_t i = 0; i < mlen; i++)
    if (!tchar((unsigned char) buf[i])) {
      *why = "a malformed method";
      return -1;
    }
  memcpy(r->method, buf, mlen);
  r->method[mlen] = '\0';
  if (name_is(sp2 + 1, (size_t) (eol - sp2 - 1), "HTTP/1.1") &&
      memcmp(sp2 + 1, "HTTP/1.1", 8) == 0) {
    r->http10 = false;
  } else if (name_is(sp2 + 1, (size_t) (eol - sp2 - 1), "HTTP/1.0") &&
             memcmp(sp2 + 1, "HTTP/1.0", 8) == 0) {
    r->http10 = true;
  } else {
    *why = "not HTTP/1.0 or HTTP/1.1";
    return -1;
  }
  r->connect = strcmp(r->method, "CONNECT") == 0;
  if (parse_target(sp1 + 1, (size_t) (sp2 - sp1 - 1), r, why) < 0)
    return -1;
  /* the headers */
  for (line = eol + 2; line < hend; line = eol + 2) {
    eol = memmem(line, (size_t) (hend + 2 - line), "\r\n", 2);
    if (++headers > 128) {
      *why = "more than 128 headers";
      return -1;
    }
    if (parse_header(line, (size_t) (eol - line), r, &host_seen, why) < 0)
      return -1;
  }
  if (r->chunked && r->content_length >= 0) {
    *why = "both Content-Length and Transfer-Encoding";
    return -1;
  }
  r->head_len = head_len;
  return 1;
}

int dsec_http_host_check(const struct dsec_http_request *r, const char **why)
{
  int port;

  if (!r->has_host_header) {
    if (r->connect)
      return 0;
    *why = "no Host header";
    return -1;
  }
  if (!dsec_host_equal(&r->host, &r->host_header)) {
    *why = "the Host header names another host than the request";
    return -1;
  }
  port = r->host_header_port ? r->host_header_port : (r->connect ? r->port : 80);
  if (port != r->port) {
    *why = "the Host header names another port than the request";
    return -1;
  }
  return 0;
}

static bool put(char *out, size_t outsize, size_t *n, const char *s, size_t len)
{
  if (*n + len > outsize)
    return false;
  memcpy(out + *n, s, len);
  *n += len;
  return true;
}

size_t dsec_http_forward_head(const char *buf, const struct dsec_http_request *r,
                              char *out, size_t outsize)
{
  static const char *const hop[] = { "connection", "proxy-connection",
                                     "keep-alive", "proxy-authorization" };
  const char *hend = buf + r->head_len - 2, *line, *eol;
  const char *ver = r->http10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
  size_t n = 0;

  if (!put(out, outsize, &n, r->method, strlen(r->method)) ||
      !put(out, outsize, &n, " ", 1))
    return 0;
  if (!r->path_len || r->path[0] != '/')
    if (!put(out, outsize, &n, "/", 1))
      return 0;
  if ((r->path_len && !put(out, outsize, &n, r->path, r->path_len)) ||
      !put(out, outsize, &n, ver, strlen(ver)))
    return 0;
  eol = memmem(buf, r->head_len, "\r\n", 2);
  for (line = eol + 2; line < hend; line = eol + 2) {
    const char *colon;
    bool drop = false;
    eol = memmem(line, (size_t) (hend + 2 - line), "\r\n", 2);
    colon = memchr(line, ':', (size_t) (eol - line));
    for (size_t i = 0; colon && i < sizeof hop / sizeof hop[0]; i++)
      drop = drop || name_is(line, (size_t) (colon - line), hop[i]);
    if (!drop && !put(out, outsize, &n, line, (size_t) (eol + 2 - line)))
      return 0;
  }
  if (!put(out, outsize, &n, "Connection: close\r\n\r\n", 21))
    return 0;
  return n;
}

/* ---- the TLS ClientHello */

#define TLS_HANDSHAKE 22
#define TLS_CLIENT_HELLO 1
#define TLS_RECORD_MAX 16384
#define EXT_SERVER_NAME 0x0000
#define EXT_ECH 0xfe0d
#define EXT_ESNI 0xffce

static int hello_body(const uint8_t *p, const uint8_t *e,
                      struct dsec_tls_hello *h, const char **why)
{
  uint8_t seen[65536 / 8];
  size_t l;

  *why = "a malformed ClientHello";
  /* legacy_version, random */
  if (e - p < 34 || p[0] != 3)
    return -1;
  p += 34;
  /* session id <0..32> */
  if (e - p < 1 || p[0] > 32 || (size_t) (e - p - 1) < p[0])
    return -1;
  p += 1 + p[0];
  /* cipher suites <2..2^16-2>, pairs */
  if (e - p < 2)
    return -1;
  l = (size_t) p[0] << 8 | p[1];
  p += 2;
  if (l < 2 || l % 2 || (size_t) (e - p) < l)
    return -1;
  p += l;
  /* compression methods <1..2^8-1> */
  if (e - p < 1 || p[0] < 1 || (size_t) (e - p - 1) < p[0])
    return -1;
  p += 1 + p[0];
  if (p == e)
    return 1; /* no extensions at all */
  if (e - p < 2)
    return -1;
  l = (size_t) p[0] << 8 | p[1];
  p += 2;
  if ((size_t) (e - p) != l)
    return -1;
  memset(seen, 0, sizeof seen);
  while (p < e) {
    unsigned type;
    if (e - p < 4)
      return -1;
    type = (unsigned) p[0] << 8 | p[1];
    l = (size_t) p[2] << 8 | p[3];
    p += 4;
    if ((size_t) (e - p) < l)
      return -1;
    if (seen[type / 8] & (1u << (type % 8))) {
      *why = "a ClientHello with an extension twice";
      return -1;
    }
    seen[type / 8] |= (uint8_t) (1u << (type % 8));
    if (type == EXT_ECH || type == EXT_ESNI)
      h->ech = true;
    if (type == EXT_SERVER_NAME) {
      /* ServerNameList <1..2^16-1> of { name_type, HostName <1..2^16-1> } */
      const uint8_t *q = p, *qe = p + l;
      size_t list;
      if (l < 2)
        return -1;
      list = (size_t) q[0] << 8 | q[1];
      q += 2;
      if (list == 0 || list != l - 2)
        return -1;
      while (q < qe) {
        size_t nl;
        if (qe - q < 3)
          return -1;
        nl = (size_t) q[1] << 8 | q[2];
        if (q[0] != 0) {
          *why = "a TLS server name that is not a host name";
          return -1;
        }
        q += 3;
        if (nl == 0 || (size_t) (qe - q) < nl)
          return -1;
        if (h->names++ == 0) {
          size_t c = nl < sizeof h->sni - 1 ? nl : sizeof h->sni - 1;
          memcpy(h->sni, q, c);
          h->sni[c] = '\0';
          h->sni_len = nl;
        }
        q += nl;
      }
    }
    p += l;
  }
  return 1;
}

int dsec_tls_hello_parse(const uint8_t *b, size_t n, struct dsec_tls_hello *h,
                         const char **why)
{
  uint8_t hs[DSEC_PROXY_HELLO_MAX];
  size_t hs_len = 0, need = 0, off = 0;
  int rc;

  memset(h, 0, sizeof *h);
  for (;;) {
    size_t rlen, avail;
    /* the record header, checked as far as it has come */
    if (n > off && b[off] != TLS_HANDSHAKE) {
      *why = off == 0 ? "not TLS" : "a TLS record other than a handshake in "
                                    "the ClientHello";
      return -1;
    }
    if (n > off + 1 && b[off + 1] != 3) {
      *why = "not TLS";
      return -1;
    }
    if (n > off + 2 && b[off + 2] > 4) {
      *why = "not TLS";
      return -1;
    }
    if (n < off + 5) {
      if (off + 5 > DSEC_PROXY_HELLO_MAX) {
        *why = "a ClientHello larger than 16 KiB";
        return -1;
      }
      return 0;
    }
    rlen = (size_t) b[off + 3] << 8 | b[off + 4];
    if (rlen == 0 || rlen > TLS_RECORD_MAX) {
      *why = "a malformed TLS record";
      return -1;
    }
    if (off + 5 + rlen > DSEC_PROXY_HELLO_MAX) {
      *why = "a ClientHello larger than 16 KiB";
      return -1;
    }
    avail = n - off - 5 < rlen ? n - off - 5 : rlen;
    /* hs_len <= off, and off + 5 + rlen fits: so does this */
    memcpy(hs + hs_len, b + off + 5, avail);
    hs_len += avail;
    if (hs_len > 0 && hs[0] != TLS_CLIENT_HELLO) {
      *why = "a TLS handshake that is not a ClientHello";
      return -1;
    }
    if (!need && hs_len >= 4) {
      need = 4 + ((size_t) hs[1] << 16 | (size_t) hs[2] << 8 | hs[3]);
      if (need > DSEC_PROXY_HELLO_MAX - 5) {
        *why = "a ClientHello larger than 16 KiB";
        return -1;
      }
    }
    if (need && hs_len > need) {
      *why = "a TLS record with more than the ClientHello";
      return -1;
    }
    if (avail < rlen)
      return 0;
    off += 5 + rlen;
    h->records++;
    if (need && hs_len == need)
      break;
  }
  h->len = off;
  ASAN_POISON_MEMORY_REGION(hs + need, sizeof hs - need);
  rc = hello_body(hs + 4, hs + need, h, why);
  ASAN_UNPOISON_MEMORY_REGION(hs + need, sizeof hs - need);
  return rc < 0 ? -1 : 1;
}

int dsec_tls_hello_check(const struct dsec_tls_hello *h,
                         const struct dsec_host *target, const char **why)
{
  struct dsec_host sni;
  const char *ignored;

  if (h->ech) {
    *why = "an encrypted ClientHello (ECH): its server name cannot be checked";
    return -1;
  }
  if (h->names > 1) {
    *why = "a TLS SNI with several names";
    return -1;
  }
  if (target->kind != DSEC_HOST_NAME) {
    if (h->names) {
      *why = "a TLS SNI naming a host on a CONNECT to an IP address";
      return -1;
    }
    return 0;
  }
  if (h->names == 0) {
    *why = "a TLS ClientHello without SNI";
    return -1;
  }
  if (h->sni_len >= sizeof h->sni ||
      dsec_host_canon(h->sni, h->sni_len, false, &sni, &ignored) < 0) {
    *why = "a TLS SNI that is not a valid host name";
    return -1;
  }
  if (!dsec_host_equal(&sni, target)) {
    *why = "a TLS SNI that names another host than the CONNECT";
    return -1;
  }
  return 0;
}

void dsec_printable(const char *s, size_t len, char *out, size_t outsize)
{
  size_t n = 0;

  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char) s[i];
    char tmp[5];
    size_t k;
    if (c >= 0x20 && c <= 0x7e && c != '\\') {
      tmp[0] = (char) c;
      k = 1;
    } else {
      snprintf(tmp, sizeof tmp, "\\x%02x", c);
      k = 4;
    }
    if (n + k + 4 > outsize) { /* room for "..." and the NUL */
      if (outsize >= 4) {
        memcpy(out + n, "...", 3);
        n += 3;
      }
      break;
    }
    memcpy(out + n, tmp, k);
    n += k;
  }
  out[n] = '\0';
}
