/* Unit tests for libcommon/proxy-parse.c and the list check of proxy.c:
 * host name canonicalisation and IP literals, the special-purpose address
 * classifier, allow/deny entries and the default deny list, the request
 * head parser, the Host check and the head sent upstream, and the TLS
 * ClientHello parser and its SNI check (issue #12). */
#include <config.h>

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy-parse.h"
#include "proxy.h"
#include "tap.h"

/* ---- host names */

/* canon(s) is a name or literal of that kind and canonical text */
static void canon_ok(const char *s, enum dsec_host_kind kind, const char *want)
{
  struct dsec_host h;
  const char *why = NULL;
  int rc = dsec_host_canon(s, strlen(s), false, &h, &why);
  is_int(rc, 0, "canon: '%s' is accepted", s);
  if (rc == 0) {
    is_str(h.name, want, "canon: '%s' is '%s'", s, want);
    is_int(h.kind, kind, "canon: '%s' is of kind %d", s, (int) kind);
  } else {
    diag("refused: %s", why);
  }
}

/* canon(s) is refused and the reason has sub in it */
static void canon_bad(const char *s, size_t len, const char *sub,
                      const char *label)
{
  struct dsec_host h;
  const char *why = NULL;
  int rc = dsec_host_canon(s, len, false, &h, &why);
  ok(rc < 0 && why && strstr(why, sub), "canon: %s is refused (%s)", label,
     why ? why : "accepted");
}

static void test_canon(void)
{
  char buf[400];
  struct dsec_host a, b;
  const char *why;

  canon_ok("example.com", DSEC_HOST_NAME, "example.com");
  canon_ok("GitHub.COM", DSEC_HOST_NAME, "github.com");
  canon_ok("github.com.", DSEC_HOST_NAME, "github.com");
  canon_ok("RAW.githubusercontent.com.", DSEC_HOST_NAME,
           "raw.githubusercontent.com");
  canon_ok("xn--gthub-cta.com", DSEC_HOST_NAME, "xn--gthub-cta.com");
  canon_ok("_srv.my-host.example", DSEC_HOST_NAME, "_srv.my-host.example");
  canon_ok("localhost", DSEC_HOST_NAME, "localhost");
  canon_ok("1e100.net", DSEC_HOST_NAME, "1e100.net");
  canon_ok("0xfoo.com", DSEC_HOST_NAME, "0xfoo.com");

  canon_bad("github.com..", 12, "empty label", "two trailing dots");
  canon_bad(".github.com", 11, "empty label", "a leading dot");
  canon_bad("a..b", 4, "empty label", "an empty label");
  canon_bad("", 0, "empty", "the empty name");
  canon_bad(".", 1, "empty", "a lone dot");
  canon_bad("g\xc3\xafthub.com", 11, "non-ASCII", "a UTF-8 name");
  canon_bad("github\xef\xbc\x8e" "com", 12, "non-ASCII",
            "a fullwidth dot");
  canon_bad("exa mple.com", 12, "character", "a space");
  canon_bad("a/b.com", 7, "character", "a slash");
  canon_bad("a%2eb.com", 9, "character", "a percent");
  canon_bad("a@b.com", 7, "character", "an at sign");
  canon_bad("a:b", 3, "character", "a colon");
  canon_bad("git\0hub.com", 11, "character", "a NUL byte");

  /* label and name lengths */
  memset(buf, 'a', 63);
  strcpy(buf + 63, ".com");
  canon_ok(buf, DSEC_HOST_NAME, buf);
  memset(buf, 'a', 64);
  strcpy(buf + 64, ".com");
  canon_bad(buf, strlen(buf), "63", "a 64-character label");
  /* 4 labels of 63 and a 1-character one: 253 */
  for (int i = 0; i < 4; i++) {
    memset(buf + i * 64, 'b', 63);
    buf[i * 64 + 63] = '.';
  }
  strcpy(buf + 256, "c");
  memmove(buf + 252, buf + 256, 2);
  is_int(strlen(buf), 253, "a 253-character name is built");
  canon_ok(buf, DSEC_HOST_NAME, buf);
  strcat(buf, ".");
  ok(dsec_host_canon(buf, strlen(buf), false, &a, &why) == 0 &&
       strlen(a.name) == 253,
     "canon: a 253-character name with a trailing dot is accepted");
  buf[253] = 'c';
  buf[254] = '\0';
  canon_bad(buf, strlen(buf), "253", "a 254-character name");

  /* IPv4 literals in every form inet_aton reads */
  canon_ok("127.0.0.1", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("127.1", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("0x7f.1", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("0X7F.0.0.1", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("2130706433", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("0177.0.0.1", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("127.0.0.1.", DSEC_HOST_IPV4, "127.0.0.1");
  canon_ok("100.64.1", DSEC_HOST_IPV4, "100.64.0.1");
  canon_bad("1.2.3.4.5", 9, "IPv4", "five numbers");
  canon_bad("256.1.1.1", 9, "IPv4", "a number over 255");
  canon_bad("example.123", 11, "IPv4", "a name ending in a number");
  canon_bad("08.1.1.1", 8, "IPv4", "a bad octal number");
  canon_ok("a.0x7g", DSEC_HOST_NAME, "a.0x7g"); /* not a number */

  /* bracketed IPv6 */
  ok(dsec_host_canon("0:0:0:0:0:0:0:1", 15, true, &a, &why) == 0 &&
       a.kind == DSEC_HOST_IPV6 && strcmp(a.name, "::1") == 0,
     "canon: [0:0:0:0:0:0:0:1] is [::1]");
  ok(dsec_host_canon("::FFFF:127.0.0.1", 16, true, &a, &why) == 0 &&
       strcmp(a.name, "::ffff:127.0.0.1") == 0,
     "canon: a v4-mapped address in capitals is lowercase");
  ok(dsec_host_canon("fe80::1%eth0", 12, true, &a, &why) < 0 &&
       strstr(why, "zone"),
     "canon: an IPv6 zone is refused");
  ok(dsec_host_canon("example.com", 11, true, &a, &why) < 0,
     "canon: a name in brackets is refused");

  /* equality */
  dsec_host_canon("Example.COM.", 12, false, &a, &why);
  dsec_host_canon("example.com", 11, false, &b, &why);
  ok(dsec_host_equal(&a, &b), "equal: Example.COM. is example.com");
  dsec_host_canon("0x7f.1", 6, false, &a, &why);
  dsec_host_canon("127.0.0.1", 9, false, &b, &why);
  ok(dsec_host_equal(&a, &b), "equal: 0x7f.1 is 127.0.0.1");
  dsec_host_canon("127.0.0.1", 9, false, &a, &why);
  dsec_host_canon("localhost", 9, false, &b, &why);
  ok(!dsec_host_equal(&a, &b), "equal: 127.0.0.1 is not localhost");
}

static void test_authority(void)
{
  static const struct {
    const char *s;
    int rc;
    const char *host;
    int port;
  } t[] = {
    { "example.com:8080", 0, "example.com", 8080 },
    { "example.com", 0, "example.com", 99 },
    { "EXAMPLE.com.:443", 0, "example.com", 443 },
    { "[::1]:443", 0, "::1", 443 },
    { "[::1]", 0, "::1", 99 },
    { "127.1:80", 0, "127.0.0.1", 80 },
    { "::1", -1, NULL, 0 },
    { "::1:80", -1, NULL, 0 },
    { "example.com:", -1, NULL, 0 },
    { "example.com:0", -1, NULL, 0 },
    { "example.com:65536", -1, NULL, 0 },
    { "example.com:+80", -1, NULL, 0 },
    { "example.com:80:80", -1, NULL, 0 },
    { "[::1]x", -1, NULL, 0 },
    { "[::1", -1, NULL, 0 },
    { ":80", -1, NULL, 0 },
    { "", -1, NULL, 0 },
  };

  for (size_t i = 0; i < ARRAY_SIZE(t); i++) {
    struct dsec_host h;
    const char *why = NULL;
    int port = 0;
    int rc = dsec_authority_parse(t[i].s, strlen(t[i].s), 99, &h, &port, &why);
    if (t[i].rc == 0)
      ok(rc == 0 && strcmp(h.name, t[i].host) == 0 && port == t[i].port,
         "authority: '%s' is %s port %d", t[i].s, t[i].host, t[i].port);
    else
      ok(rc < 0 && why, "authority: '%s' is refused (%s)", t[i].s,
         why ? why : "accepted");
  }
}

/* ---- special-purpose addresses */

static void test_special(void)
{
  static const struct {
    const char *a;
    bool special;
  } t[] = {
    { "0.0.0.0", true },          { "0.255.255.255", true },
    { "1.0.0.0", false },         { "8.8.8.8", false },
    { "9.255.255.255", false },   { "10.0.0.0", true },
    { "10.255.255.255", true },   { "11.0.0.0", false },
    { "100.63.255.255", false },  { "100.64.0.0", true },
    { "100.100.100.200", true },  { "100.127.255.255", true },
    { "100.128.0.0", false },     { "126.255.255.255", false },
    { "127.0.0.1", true },        { "127.255.255.255", true },
    { "128.0.0.0", false },       { "169.253.255.255", false },
    { "169.254.169.254", true },  { "169.255.0.0", false },
    { "172.15.255.255", false },  { "172.16.0.0", true },
    { "172.31.255.255", true },   { "172.32.0.0", false },
    { "191.255.255.255", false }, { "192.0.0.0", true },
    { "192.0.0.255", true },      { "192.0.1.0", false },
    { "192.0.2.1", true },        { "192.0.3.0", false },
    { "192.88.98.255", false },   { "192.88.99.1", true },
    { "192.88.100.0", false },    { "192.167.255.255", false },
    { "192.168.0.1", true },      { "192.169.0.0", false },
    { "198.17.255.255", false },  { "198.18.0.0", true },
    { "198.19.255.255", true },   { "198.20.0.0", false },
    { "198.51.100.7", true },     { "198.51.101.0", false },
    { "203.0.112.255", false },   { "203.0.113.9", true },
    { "203.0.114.0", false },     { "223.255.255.255", false },
    { "224.0.0.1", true },        { "239.255.255.255", true },
    { "240.0.0.1", true },        { "255.255.255.255", true },
    /* IPv6 */
    { "::", true },               { "::1", true },
    { "::8.8.8.8", true },        { "::ffff:8.8.8.8", false },
    { "::ffff:127.0.0.1", true }, { "::ffff:100.64.0.1", true },
    { "::ffff:10.1.2.3", true },  { "::ffff:0:8.8.8.8", true },
    { "64:ff9b::8.8.8.8", true }, { "64:ff9b::7f00:1", true },
    { "64:ff9b:1::1", true },     { "100::1", true },
    { "2001::1", true },          { "2001:1ff::1", true },
    { "2001:200::1", false },     { "2001:db8::1", true },
    { "2001:4860:4860::8888", false }, { "2002:808:808::1", true },
    { "2002:7f00:1::1", true },   { "2003::1", false },
    { "2606:4700:4700::1111", false }, { "3fff::1", true },
    { "3ffe::1", false },         { "4000::1", true },
    { "5f00::1", true },          { "fc00::1", true },
    { "fd12:3456::1", true },     { "fe80::1", true },
    { "febf::1", true },          { "fec0::1", true },
    { "ff02::1", true },          { "1fff::1", true },
  };

  for (size_t i = 0; i < ARRAY_SIZE(t); i++) {
    uint8_t a[16];
    int family = strchr(t[i].a, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(family, t[i].a, a) != 1)
      bail_out("bad test address %s", t[i].a);
    is_int(dsec_addr_special(family, a), t[i].special, "special: %s is %s",
           t[i].a, t[i].special ? "special" : "ordinary");
  }
  ok(dsec_addr_special(AF_UNIX, (const uint8_t *) "x"),
     "special: another family is special");
}

/* ---- entries and the lists */

static bool entry_matches(const char *entry, const char *host, int port,
                          bool for_deny)
{
  struct dsec_proxy_entry e;
  struct dsec_host h;
  const char *why;
  bool bracket = strchr(host, ':') != NULL;

  if (dsec_proxy_entry_parse(entry, &e, &why) < 0)
    bail_out("entry %s refused: %s", entry, why);
  if (dsec_host_canon(host, strlen(host), bracket, &h, &why) < 0)
    bail_out("host %s refused: %s", host, why);
  return dsec_proxy_entry_match(&e, &h, port, for_deny);
}

static void test_entries(void)
{
  static const char *const bad[] = {
    "", "exa mple.com", "a..b", "g\xc3\xafthub.com", "x.com:99999",
    "x.com:", "*.g\xc3\xafthub.com", "[::1", "1.2.3.4.5", "x.com:80:80",
    "*.a..b",
  };
  struct dsec_proxy_entry e;
  const char *why;
  int n = 0, good = 0;

  ok(entry_matches("*.github.com", "a.github.com", 443, false),
     "entry: *.github.com matches a.github.com");
  ok(entry_matches("*.github.com", "a.b.GitHub.com.", 80, false),
     "entry: *.github.com matches a.b.GitHub.com.");
  ok(!entry_matches("*.github.com", "github.com", 443, false),
     "entry: *.github.com does not match github.com");
  ok(!entry_matches("*.github.com", "evilgithub.com", 443, false),
     "entry: *.github.com does not match evilgithub.com");
  ok(entry_matches("GitHub.com.", "github.com", 443, false),
     "entry: GitHub.com. matches github.com");
  ok(entry_matches("github.com", "GITHUB.COM.", 443, false),
     "entry: github.com matches GITHUB.COM.");
  ok(entry_matches("*", "example.com", 1, false), "entry: * matches a name");
  ok(!entry_matches("*", "127.0.0.1", 80, false),
     "entry: * in allow does not match an IP address");
  ok(entry_matches("*", "127.0.0.1", 80, true),
     "entry: * in deny matches an IP address");
  ok(!entry_matches("*.0.0.1", "127.0.0.1", 80, false),
     "entry: a wildcard in allow never matches an IP address");
  ok(entry_matches("127.0.0.1:8080", "127.0.0.1", 8080, false),
     "entry: 127.0.0.1:8080 matches 127.0.0.1 port 8080");
  ok(!entry_matches("127.0.0.1:8080", "127.0.0.1", 8081, false),
     "entry: 127.0.0.1:8080 does not match port 8081");
  ok(entry_matches("127.1", "2130706433", 80, false),
     "entry: 127.1 matches 2130706433 (both 127.0.0.1)");
  ok(entry_matches(":443", "example.com", 443, false) &&
       !entry_matches(":443", "example.com", 80, false),
     "entry: :443 is any host on port 443");
  ok(!entry_matches(":443", "127.0.0.1", 443, false),
     "entry: :443 does not allow an IP address");
  ok(entry_matches("[::1]:80", "::1", 80, false),
     "entry: [::1]:80 matches [::1] port 80");
  ok(entry_matches("0:0::1", "::1", 80, false),
     "entry: a bare IPv6 address matches any port");
  ok(entry_matches("*github*", "rawgithub.example", 80, false),
     "entry: stars match runs of characters");
  ok(dsec_proxy_entry_parse("*.github.com:443", &e, &why) == 0 && e.wildcard &&
       e.port == 443 && strcmp(e.host.name, "*.github.com") == 0,
     "entry: *.github.com:443 is a wildcard on port 443");
  for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
    ok(dsec_proxy_entry_parse(bad[i], &e, &why) < 0,
       "entry: '%s' is refused (%s)", bad[i], why);
  for (const char *const *d = dsec_proxy_default_deny; *d; d++, n++)
    good += dsec_proxy_entry_parse(*d, &e, &why) == 0 && !e.port;
  ok(n > 100 && good == n, "every default deny entry (%d) is a valid host "
                           "pattern without a port",
     n);
}

/* check(allow, deny, host) through dsec_proxy_check */
static const char *check(const char *net, const char *host, int port,
                         bool *wildcard)
{
  json_t *n = json_loads(net, 0, NULL);
  struct dsec_host h;
  const char *why;

  if (!n)
    bail_out("bad JSON %s", net);
  if (dsec_host_canon(host, strlen(host), false, &h, &why) < 0)
    bail_out("host %s refused: %s", host, why);
  why = dsec_proxy_check(n, &h, port, wildcard);
  json_decref(n);
  return why;
}

static void test_check(void)
{
  static const char *const denied[] = {
    "github.com", "GITHUB.COM.", "raw.githubusercontent.com",
    "codeload.github.com", "objects.githubusercontent.com",
    "gist.github.com", "api.github.com", "someone.github.io", "gitee.com",
    "codeberg.org", "git.sr.ht", "bitbucket.org", "cdn.jsdelivr.net",
    "unpkg.com", "esm.sh", "cdnjs.cloudflare.com", "registry.yarnpkg.com",
    "registry.npmmirror.com", "mirrors.aliyun.com",
    "pypi.tuna.tsinghua.edu.cn", "mirrors.ustc.edu.cn",
    "files.pythonhosted.org", "conda.anaconda.org", "proxy.golang.org",
    "goproxy.cn", "static.crates.io", "index.crates.io",
    "static.rust-lang.org", "registry-1.docker.io", "ghcr.io", "quay.io",
    "web.archive.org", "stackoverflow.com", "math.stackexchange.com",
    "paperswithcode.com", "arxiv.org", "export.arxiv.org", "kaggle.com",
    "leetcode.com", "assets.leetcode.com", "huggingface.co",
    "api.openai.com",
  };
  const char *why;
  bool w;

  for (size_t i = 0; i < ARRAY_SIZE(denied); i++) {
    why = check("{\"allow\":[\"*\"]}", denied[i], 443, &w);
    ok(why && strstr(why, "registry"), "check: %s through * is refused (%s)",
       denied[i], why ? why : "allowed");
  }
  why = check("{\"allow\":[\"*\"]}", "example.com", 443, &w);
  ok(!why && w, "check: example.com through * is allowed, by a wildcard");
  why = check("{\"allow\":[\"*\", \"GitHub.com\"]}", "github.com.", 443, &w);
  ok(!why && !w, "check: an entry naming github.com allows it, with * "
                 "before it");
  why = check("{\"allow\":[\"*\"], \"deny\":[\"GitHub.com\"]}", "GITHUB.com.",
              443, &w);
  ok(why && strstr(why, "denied"), "check: deny GitHub.com refuses GITHUB.com.");
  why = check("{\"allow\":[\"*\"]}", "127.0.0.1", 80, &w);
  ok(why && strstr(why, "IP address"), "check: * does not allow 127.0.0.1 (%s)",
     why ? why : "allowed");
  why = check("{\"allow\":[\"*\"]}", "0x7f.1", 80, &w);
  ok(why && strstr(why, "IP address"), "check: * does not allow 0x7f.1");
  why = check("{\"allow\":[\"127.0.0.1:80\"]}", "127.1", 80, &w);
  ok(!why && !w, "check: an entry naming 127.0.0.1:80 allows 127.1:80");
  why = check("{\"allow\":[\"127.0.0.1\"], \"deny\":[\"*\"]}", "127.0.0.1", 80,
              &w);
  ok(why && strstr(why, "denied"), "check: deny * refuses a named address");
  why = check("{\"allow\":[\"*.example.com\"]}", "a.example.com", 80, &w);
  ok(!why && w, "check: *.example.com allows a.example.com, by a wildcard");
  why = check("{\"allow\":[\"*.example.com\"]}", "example.org", 80, &w);
  ok(why && strstr(why, "not allowed"), "check: what no entry names is refused");
  why = check("{\"allow\":[\"x.com\"], \"deny\":[\"bad entry\"]}", "x.com", 80,
              &w);
  ok(why && strstr(why, "denied"), "check: an unreadable deny entry denies "
                                   "everything");
}

/* ---- the request head */

static int parse(const char *s, struct dsec_http_request *r, const char **why)
{
  *why = NULL;
  return dsec_http_request_parse(s, strlen(s), r, why);
}

static void parse_bad(const char *s, const char *sub, const char *label)
{
  struct dsec_http_request r;
  const char *why;
  int rc = parse(s, &r, &why);
  ok(rc < 0 && why && strstr(why, sub), "request: %s is refused (%s)", label,
     why ? why : "accepted");
}

/* parse(s) is accepted, and the Host check says rc (and why has sub) */
static void host_check(const char *s, int want, const char *sub,
                       const char *label)
{
  struct dsec_http_request r;
  const char *why;
  int rc = parse(s, &r, &why);
  if (rc != 1) {
    ok(0, "request: %s parses (%s)", label, why);
    return;
  }
  why = NULL;
  rc = dsec_http_host_check(&r, &why);
  ok(rc == want && (!sub || (why && strstr(why, sub))), "host check: %s (%s)",
     label, why ? why : "accepted");
}

static void forward(const char *s, const char *want, const char *label)
{
  struct dsec_http_request r;
  const char *why;
  char out[1024];
  size_t n;

  if (parse(s, &r, &why) != 1) {
    ok(0, "forward: %s parses (%s)", label, why);
    return;
  }
  n = dsec_http_forward_head(s, &r, out, sizeof out);
  out[n] = '\0';
  is_str(out, want, "forward: %s", label);
  ok(n <= r.head_len + 32, "forward: %s fits in head_len + 32", label);
}

static void test_request(void)
{
  static const char get[] = "GET http://Example.COM./a/b?c=d HTTP/1.1\r\n"
                            "Host: example.com\r\nAccept: */*\r\n\r\nBODY";
  struct dsec_http_request r;
  const char *why;
  char big[200];

  is_int(parse(get, &r, &why), 1, "request: a GET parses");
  is_str(r.method, "GET", "request: its method");
  is_str(r.host.name, "example.com", "request: its host, canonical");
  is_int(r.port, 80, "request: its port, 80 by default");
  ok(r.path_len == 8 && memcmp(r.path, "/a/b?c=d", 8) == 0,
     "request: its path");
  ok(r.has_host_header && strcmp(r.host_header.name, "example.com") == 0,
     "request: its Host header");
  is_int(r.head_len, strlen(get) - 4, "request: the head ends before BODY");
  ok(!r.connect && !r.http10 && r.content_length == -1 && !r.chunked,
     "request: no CONNECT, HTTP/1.1, no body");
  for (size_t i = 0; i < strlen(get) - 4; i++)
    if (dsec_http_request_parse(get, i, &r, &why) != 0) {
      ok(0, "request: a prefix of %zu bytes is not 'more'", i);
      break;
    } else if (i == strlen(get) - 5) {
      ok(1, "request: every prefix of the head asks for more");
    }

  is_int(parse("CONNECT Example.com:443 HTTP/1.1\r\n\r\n", &r, &why), 1,
         "request: a CONNECT parses");
  ok(r.connect && r.port == 443 && strcmp(r.host.name, "example.com") == 0 &&
       !r.path,
     "request: CONNECT's host and port");
  is_int(parse("CONNECT 0x7f.1:8080 HTTP/1.0\r\n\r\n", &r, &why), 1,
         "request: a CONNECT to an IPv4 literal parses");
  ok(r.host.kind == DSEC_HOST_IPV4 && strcmp(r.host.name, "127.0.0.1") == 0 &&
       r.http10,
     "request: the literal is canonical");
  is_int(parse("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", &r, &why), 1,
         "request: a CONNECT to an IPv6 literal parses");
  is_int(parse("POST http://a.com/ HTTP/1.1\r\nHost: a.com\r\n"
               "Content-Length: 12\r\n\r\n",
               &r, &why),
         1, "request: a POST parses");
  is_int(r.content_length, 12, "request: its Content-Length");
  is_int(parse("POST http://a.com/ HTTP/1.1\r\nHost: a.com\r\n"
               "Transfer-Encoding: chunked\r\n\r\n",
               &r, &why),
         1, "request: a chunked POST parses");
  ok(r.chunked, "request: and says it is chunked");

  parse_bad("GET http://a.com/ HTTP/1.1\nHost: a.com\r\n\r\n", "bare LF",
            "a bare LF");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a.com\n", "bare LF",
            "a bare LF before the head is whole");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nX: a\rHost: b.com\r\n\r\n",
            "bare CR", "a bare CR");
  {
    static const char nul[] = "GET http://a.com/ HTTP/1.1\r\nX: a\0b\r\n\r\n";
    why = NULL;
    ok(dsec_http_request_parse(nul, sizeof nul - 1, &r, &why) < 0 && why &&
         strstr(why, "control"),
       "request: a NUL is refused (%s)", why ? why : "accepted");
  }
  parse_bad("GET http://a.com/ HTTP/1.1\r\nX: a\r\n Host: b.com\r\n\r\n",
            "folding", "obsolete line folding");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n",
            "several Host", "two Host headers");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost : a.com\r\n\r\n",
            "header name", "a space before the colon");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nbroken\r\n\r\n",
            "malformed header", "a header without a colon");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n"
            "Content-Length: 1\r\nContent-Length: 1\r\n\r\n",
            "several Content-Length", "two Content-Lengths");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n"
            "Content-Length: -1\r\n\r\n",
            "Content-Length", "a negative Content-Length");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n"
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "both", "Content-Length and Transfer-Encoding");
  parse_bad("GET http://a.com/ HTTP/1.1\r\nHost: a b\r\n\r\n", "Host header",
            "a Host header that is no host");
  parse_bad("GET http://user@a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "user info", "user info");
  parse_bad("GET http://a.com\\@b.com/ HTTP/1.1\r\nHost: b.com\r\n\r\n",
            "user info", "user info behind a backslash");
  parse_bad("GET http://a.com/#x HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "fragment", "a fragment");
  parse_bad("GET https://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "absolute http", "an https:// URI");
  parse_bad("GET /x HTTP/1.1\r\nHost: a.com\r\n\r\n", "absolute http",
            "an origin-form target");
  parse_bad("GET http://a.com/ HTTP/2.0\r\nHost: a.com\r\n\r\n",
            "HTTP/1", "HTTP/2.0");
  parse_bad("GET http://a.com/ http/1.1\r\nHost: a.com\r\n\r\n",
            "HTTP/1", "a lowercase version");
  parse_bad("GET  http://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "HTTP/1", "two spaces");
  parse_bad("G(T http://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n", "method",
            "a method that is no token");
  parse_bad("\r\n\r\n", "request line", "an empty request line");
  parse_bad("GET http://g\xc3\xafthub.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "non-ASCII", "a non-ASCII host in the URI");
  parse_bad("CONNECT g\xc3\xafthub.com:443 HTTP/1.1\r\n\r\n", "non-ASCII",
            "a non-ASCII CONNECT host");
  parse_bad("GET http://github.com../ HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "empty label", "github.com..");
  parse_bad("CONNECT a.com:99999 HTTP/1.1\r\n\r\n", "port", "a bad port");
  parse_bad("CONNECT ::1:443 HTTP/1.1\r\n\r\n", "brackets",
            "an IPv6 address without brackets");
  snprintf(big, sizeof big, "GET http://a.com/ HTTP/1.1\r\n");
  {
    char *h = malloc(200 * 8 + 100);
    size_t n = (size_t) sprintf(h, "%s", big);
    for (int i = 0; i < 129; i++)
      n += (size_t) sprintf(h + n, "X: %d\r\n", i);
    strcpy(h + n, "\r\n");
    parse_bad(h, "128", "129 headers");
    free(h);
  }

  host_check("GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n", 0, NULL,
             "the same host");
  host_check("GET http://A.com./ HTTP/1.1\r\nHost: a.COM\r\n\r\n", 0, NULL,
             "the same host in other forms");
  host_check("GET http://a.com/ HTTP/1.1\r\nHost: a.com:80\r\n\r\n", 0, NULL,
             "port 80 said in Host only");
  host_check("GET http://a.com:80/ HTTP/1.1\r\nHost: a.com\r\n\r\n", 0, NULL,
             "port 80 said in the URI only");
  host_check("GET http://a.com/ HTTP/1.1\r\n\r\n", -1, "no Host",
             "no Host header");
  host_check("GET http://a.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n", -1,
             "another host", "another host");
  host_check("GET http://a.com/ HTTP/1.1\r\nHost: a.com:8080\r\n\r\n", -1,
             "another port", "another port in Host");
  host_check("GET http://a.com:8080/ HTTP/1.1\r\nHost: a.com\r\n\r\n", -1,
             "another port", "no port in Host for port 8080");
  host_check("GET http://127.0.0.1:8/ HTTP/1.1\r\nHost: 127.1:8\r\n\r\n", 0,
             NULL, "the same address in another form");
  host_check("GET http://127.0.0.1/ HTTP/1.1\r\nHost: localhost\r\n\r\n", -1,
             "another host", "an address and a name");
  host_check("CONNECT a.com:443 HTTP/1.1\r\n\r\n", 0, NULL,
             "a CONNECT without Host");
  host_check("CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n", 0, NULL,
             "a CONNECT with its Host");
  host_check("CONNECT a.com:443 HTTP/1.1\r\nHost: a.com\r\n\r\n", 0, NULL,
             "a CONNECT with its Host without port");
  host_check("CONNECT a.com:443 HTTP/1.1\r\nHost: b.com:443\r\n\r\n", -1,
             "another host", "a CONNECT with another Host");
  host_check("CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:444\r\n\r\n", -1,
             "another port", "a CONNECT with another port in Host");

  forward("GET http://a.com:8080/x?y HTTP/1.1\r\nHost: a.com:8080\r\n"
          "Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\n"
          "Keep-Alive: 300\r\nProxy-Authorization: Basic eA==\r\n"
          "Accept: */*\r\n\r\n",
          "GET /x?y HTTP/1.1\r\nHost: a.com:8080\r\nAccept: */*\r\n"
          "Connection: close\r\n\r\n",
          "hop-by-hop headers go, Connection: close comes");
  forward("HEAD http://a.com?q HTTP/1.0\r\nHost: a.com\r\n\r\n",
          "HEAD /?q HTTP/1.0\r\nHost: a.com\r\nConnection: close\r\n\r\n",
          "a query without a path");
  forward("GET http://a.com HTTP/1.1\r\nHost: a.com\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: a.com\r\nConnection: close\r\n\r\n",
          "no path at all");
  {
    const char *s = "GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n";
    char out[16];
    parse(s, &r, &why);
    is_int(dsec_http_forward_head(s, &r, out, sizeof out), 0,
           "forward: a buffer too small gives 0");
  }
}

/* ---- the TLS ClientHello */

struct hello_opts {
  const char *names[3]; /* SNI names (NULL-terminated) */
  int name_type;
  bool no_extensions;
  bool dup_extension;
  bool ech;
  size_t pad; /* a padding extension of that many bytes */
};

static size_t put16(uint8_t *b, size_t v)
{
  b[0] = (uint8_t) (v >> 8);
  b[1] = (uint8_t) v;
  return 2;
}

/* A ClientHello handshake message (header included) into out. */
static size_t hello_msg(const struct hello_opts *o, uint8_t *out)
{
  uint8_t ext[20000];
  size_t e = 0, n = 4;

  if (o->names[0]) {
    size_t list = 0, at = e;
    e += 4 + 2; /* type, length, list length */
    for (int i = 0; i < 3 && o->names[i]; i++) {
      size_t l = strlen(o->names[i]);
      ext[e++] = (uint8_t) o->name_type;
      e += put16(ext + e, l);
      memcpy(ext + e, o->names[i], l);
      e += l;
      list += 3 + l;
    }
    put16(ext + at, 0);
    put16(ext + at + 2, list + 2);
    put16(ext + at + 4, list);
  }
  if (o->dup_extension || o->ech) {
    e += put16(ext + e, o->ech ? 0xfe0d : 0x000a);
    e += put16(ext + e, 4);
    memcpy(ext + e, "\x00\x02\x00\x1d", 4);
    e += 4;
  }
  if (o->dup_extension) {
    e += put16(ext + e, 0x000a);
    e += put16(ext + e, 4);
    memcpy(ext + e, "\x00\x02\x00\x1d", 4);
    e += 4;
  }
  if (o->pad) {
    e += put16(ext + e, 0x0015);
    e += put16(ext + e, o->pad);
    memset(ext + e, 0, o->pad);
    e += o->pad;
  }
  out[n++] = 3;
  out[n++] = 3;
  memset(out + n, 0x42, 32);
  n += 32;
  out[n++] = 0; /* session id */
  n += put16(out + n, 2);
  out[n++] = 0x13;
  out[n++] = 0x01;
  out[n++] = 1; /* compression: null */
  out[n++] = 0;
  if (!o->no_extensions) {
    n += put16(out + n, e);
    memcpy(out + n, ext, e);
    n += e;
  }
  out[0] = 1;
  out[1] = (uint8_t) ((n - 4) >> 16);
  out[2] = (uint8_t) ((n - 4) >> 8);
  out[3] = (uint8_t) (n - 4);
  return n;
}

/* The message cut into records of at most rec bytes. */
static size_t records(const uint8_t *msg, size_t n, size_t rec, uint8_t *out)
{
  size_t o = 0;
  for (size_t i = 0; i < n; i += rec) {
    size_t l = n - i < rec ? n - i : rec;
    out[o++] = 0x16;
    out[o++] = 3;
    out[o++] = 1;
    o += put16(out + o, l);
    memcpy(out + o, msg + i, l);
    o += l;
  }
  return o;
}

static uint8_t msg[40000], rec[60000];

static int hello(const struct hello_opts *o, size_t recsize,
                 struct dsec_tls_hello *h, const char **why, size_t *len)
{
  size_t n = hello_msg(o, msg);
  *len = records(msg, n, recsize, rec);
  *why = NULL;
  return dsec_tls_hello_parse(rec, *len, h, why);
}

/* The check of a hello with names against target. */
static const char *sni_check(const struct hello_opts *o, const char *target)
{
  struct dsec_tls_hello h;
  struct dsec_host t;
  const char *why;
  size_t len;

  if (hello(o, 16384, &h, &why, &len) != 1)
    return "did not parse";
  if (dsec_host_canon(target, strlen(target), false, &t, &why) < 0)
    bail_out("target %s refused", target);
  why = NULL;
  dsec_tls_hello_check(&h, &t, &why);
  return why;
}

static void test_hello(void)
{
  struct hello_opts o = { .names = { "example.com" } };
  struct dsec_tls_hello h;
  const char *why, *w;
  size_t len, prefix_ok = 0;
  int rc;

  rc = hello(&o, 16384, &h, &why, &len);
  ok(rc == 1 && h.names == 1 && strcmp(h.sni, "example.com") == 0 &&
       h.records == 1 && h.len == len,
     "hello: one record with an SNI");
  for (size_t i = 0; i < len; i++)
    prefix_ok += dsec_tls_hello_parse(rec, i, &h, &why) == 0;
  is_int(prefix_ok, len, "hello: every prefix of it asks for more");

  rc = hello(&o, 7, &h, &why, &len);
  ok(rc == 1 && h.records > 5 && strcmp(h.sni, "example.com") == 0,
     "hello: cut into 7-byte records (%d), the SNI is read", h.records);
  prefix_ok = 0;
  for (size_t i = 0; i < len; i++)
    prefix_ok += dsec_tls_hello_parse(rec, i, &h, &why) == 0;
  is_int(prefix_ok, len, "hello: every prefix of the records asks for more");

  /* bytes after the hello's records are not its business */
  hello(&o, 16384, &h, &why, &len);
  memcpy(rec + len, "\x17\x03\x03\x00\x01x", 6);
  rc = dsec_tls_hello_parse(rec, len + 6, &h, &why);
  ok(rc == 1 && h.len == len, "hello: what follows its records is left");

  /* a large hello (a post-quantum key share, a big ticket) across reads */
  o.pad = 9000;
  rc = hello(&o, 16384, &h, &why, &len);
  ok(rc == 1 && strcmp(h.sni, "example.com") == 0 && len > 9000,
     "hello: a 9 KB hello is read whole");
  o.pad = 16400;
  rc = hello(&o, 16384, &h, &why, &len);
  ok(rc < 0 && strstr(why, "16 KiB"), "hello: one over 16 KiB is refused");
  o.pad = 0;

  /* malformed */
  o.name_type = 1;
  ok(hello(&o, 16384, &h, &why, &len) < 0 && strstr(why, "not a host name"),
     "hello: a server name of another type is refused");
  o.name_type = 0;
  o.dup_extension = true;
  ok(hello(&o, 16384, &h, &why, &len) < 0 && strstr(why, "twice"),
     "hello: an extension twice is refused");
  o.dup_extension = false;
  hello(&o, 16384, &h, &why, &len);
  is_int(rec[len - 15], 14, "hello: the SNI list length is where expected");
  rec[len - 15] ^= 0x40;
  ok(dsec_tls_hello_parse(rec, len, &h, &why) < 0,
     "hello: a wrong server name list length is refused");
  ok(dsec_tls_hello_parse((const uint8_t *) "GET / HTTP/1.1\r\n", 16, &h,
                          &why) < 0 &&
       strstr(why, "not TLS"),
     "hello: HTTP is not TLS");
  ok(dsec_tls_hello_parse((const uint8_t *) "S", 1, &h, &why) < 0,
     "hello: one byte that is not a handshake is enough to refuse");
  ok(dsec_tls_hello_parse((const uint8_t *) "\x16\x03\x01\x00\x00", 5, &h,
                          &why) < 0,
     "hello: an empty record is refused");
  ok(dsec_tls_hello_parse((const uint8_t *) "\x16\x03\x01\x40\x01", 5, &h,
                          &why) < 0,
     "hello: a record over 16384 bytes is refused");
  ok(dsec_tls_hello_parse((const uint8_t *) "\x16\x03\x01\x00\x04\x02\x00\x00"
                                            "\x00",
                          9, &h, &why) < 0 &&
       strstr(why, "not a ClientHello"),
     "hello: a ServerHello is refused");
  ok(dsec_tls_hello_parse((const uint8_t *) "\x16\x03\x01\x00\x04\x01\xff\x00"
                                            "\x00",
                          9, &h, &why) < 0 &&
       strstr(why, "16 KiB"),
     "hello: a handshake length over 16 KiB is refused at once");
  ok(dsec_tls_hello_parse((const uint8_t *) "\x16\x03\x01\x00\x05\x01\x00\x00"
                                            "\x00\x00",
                          10, &h, &why) < 0 &&
       strstr(why, "more than"),
     "hello: a record carrying more than the hello is refused");
  ok(dsec_tls_hello_parse((const uint8_t *) "\x16\x03\x01\x00\x04\x01\x00\x00"
                                            "\x00",
                          9, &h, &why) < 0,
     "hello: an empty ClientHello body is refused");
  hello(&o, 5, &h, &why, &len);
  rec[10] = 0x17; /* the second record: application data */
  ok(dsec_tls_hello_parse(rec, len, &h, &why) < 0 &&
       strstr(why, "other than a handshake"),
     "hello: another record type inside the hello is refused");

  /* the SNI check */
  ok(!sni_check(&o, "example.com"), "sni: the CONNECT host is accepted");
  ok(!sni_check(&o, "EXAMPLE.com."), "sni: in another form too");
  w = sni_check(&o, "other.example");
  ok(w && strstr(w, "another host"), "sni: another host is refused (%s)", w);
  w = sni_check(&o, "127.0.0.1");
  ok(w && strstr(w, "IP address"), "sni: a name on a CONNECT to an address "
                                   "is refused (%s)",
     w);
  o.names[0] = "Example.COM.";
  ok(!sni_check(&o, "example.com"), "sni: an SNI in capitals with a dot");
  o.names[0] = "example.com";
  o.names[1] = "other.example";
  w = sni_check(&o, "example.com");
  ok(w && strstr(w, "several"), "sni: two names are refused (%s)", w);
  o.names[1] = NULL;
  o.ech = true;
  w = sni_check(&o, "example.com");
  ok(w && strstr(w, "ECH"), "sni: an encrypted ClientHello is refused (%s)", w);
  o.ech = false;
  o.names[0] = "g\xc3\xafthub.com";
  w = sni_check(&o, "xn--gthub-cta.com");
  ok(w && strstr(w, "valid"), "sni: a non-ASCII SNI is refused (%s)", w);
  o.names[0] = "127.0.0.1";
  w = sni_check(&o, "localhost");
  ok(w, "sni: an address as SNI is refused (%s)", w);
  o.names[0] = NULL;
  w = sni_check(&o, "example.com");
  ok(w && strstr(w, "without SNI"), "sni: no SNI is refused (%s)", w);
  ok(!sni_check(&o, "127.0.0.1"), "sni: no SNI on a CONNECT to an address");
  o.no_extensions = true;
  w = sni_check(&o, "example.com");
  ok(w && strstr(w, "without SNI"), "sni: no extensions is refused (%s)", w);
}

/* dsec-run(1) lists the whole default deny list */
static void test_man_lists_default_deny(void)
{
  const char *src = getenv("DSEC_SRCDIR");
  char *path = NULL, *text = NULL, *w, *save = NULL;
  size_t len = 0, n = 0;
  const char **words = NULL;
  FILE *f;
  int missing = 0;

  if (asprintf(&path, "%s/man/dsec-run.1", src ? src : ".") < 0 ||
      !(f = fopen(path, "re")))
    bail_out("cannot read %s", path ? path : "dsec-run.1");
  if (getdelim(&text, &len, '\0', f) < 0)
    bail_out("cannot read %s", path);
  fclose(f);
  /* roff: \- is a hyphen, \& nothing */
  for (char *r = text, *o = text;; r++) {
    if (r[0] == '\\' && (r[1] == '-' || r[1] == '&')) {
      if (r[1] == '-')
        *o++ = '-';
      r++;
      continue;
    }
    if (!(*o++ = *r))
      break;
  }
  for (w = strtok_r(text, " \t\n(", &save); w; w = strtok_r(NULL, " \t\n(", &save)) {
    size_t l = strlen(w);
    if (l && (w[l - 1] == ',' || w[l - 1] == '.'))
      w[l - 1] = '\0';
    words = realloc(words, (n + 1) * sizeof *words);
    words[n++] = w;
  }
  for (const char *const *d = dsec_proxy_default_deny; *d; d++) {
    size_t i;
    for (i = 0; i < n && strcmp(words[i], *d) != 0; i++)
      ;
    if (i == n) {
      diag("dsec-run(1) does not list %s", *d);
      missing++;
    }
  }
  is_int(missing, 0, "dsec-run(1) lists every default deny entry");
  free(words);
  free(text);
  free(path);
}

static void test_printable(void)
{
  char out[16], big[32];

  dsec_printable("a\x01\xff\\b", 5, big, sizeof big);
  is_str(big, "a\\x01\\xff\\x5cb", "printable: control, high and backslash");
  dsec_printable("abcdefghijklmnopqrstuvwxyz", 26, out, sizeof out);
  is_str(out, "abcdefghijkl...", "printable: a long string is cut");
  dsec_printable("abc", 3, out, 1);
  is_str(out, "", "printable: a one-byte buffer holds the NUL");
}

int main(void)
{
  test_canon();
  test_authority();
  test_special();
  test_entries();
  test_check();
  test_request();
  test_hello();
  test_printable();
  test_man_lists_default_deny();
  return done_testing();
}
