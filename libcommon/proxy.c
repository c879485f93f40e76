#include <config.h>

#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "audit.h"
#include "sandbox.h"
#include "utils.h"

#define HEAD_MAX 16384
#define CONNECTIONS_MAX 256
#define IDLE_MS (10 * 60 * 1000)

/* Where finished solutions come from: registries, module proxies, code
 * hosts.  Denied unless an allow entry names them (not through "*"). */
const char *const dsec_proxy_default_deny[] = {
  "proxy.golang.org",   "sum.golang.org",       "goproxy.io",
  "goproxy.cn",         "pypi.org",             "*.pypi.org",
  "files.pythonhosted.org", "pypi.python.org",  "registry.npmjs.org",
  "registry.yarnpkg.com", "*.npmjs.org",        "github.com",
  "*.github.com",       "*.githubusercontent.com", "gitlab.com",
  "*.gitlab.com",       "bitbucket.org",        "crates.io",
  "*.crates.io",        "index.crates.io",      "rubygems.org",
  "repo.maven.apache.org", "repo1.maven.org",   "packagist.org",
  "*.packagist.org",    "pkg.go.dev",           "huggingface.co",
  "*.huggingface.co",   "sourceforge.net",      "*.sourceforge.net",
  NULL,
};

struct dsec_proxy {
  json_t *network;
  dsec_proxy_report_fn report;
  void *ud;
  atomic_int connections;
};

struct dsec_proxy *dsec_proxy_new(json_t *network, dsec_proxy_report_fn report,
                                  void *ud)
{
  struct dsec_proxy *p = xzalloc(sizeof *p);
  p->network = network;
  p->report = report;
  p->ud = ud;
  return p;
}

/* "host", "host:port", "*.example.com", "*" (any host), ":443" forms. */
static bool entry_matches(const char *entry, const char *host, int port,
                          bool *wildcard)
{
  _cleanup_free_ char *h = xstrdup(entry);
  char *colon = strrchr(h, ':');
  int want_port = 0;

  if (colon && !strchr(colon + 1, ']') && strchr(h, ':') == colon) {
    *colon = '\0';
    want_port = atoi(colon + 1);
  }
  if (want_port && want_port != port)
    return false;
  if (!*h || strcmp(h, "*") == 0) {
    *wildcard = true;
    return true;
  }
  if (strchr(h, '*')) {
    *wildcard = true;
    return fnmatch(h, host, FNM_CASEFOLD) == 0;
  }
  *wildcard = false;
  return strcasecmp(h, host) == 0;
}

static bool list_matches(json_t *list, const char *host, int port,
                         bool *wildcard)
{
  json_t *v;
  size_t i;
  json_array_foreach(list, i, v)
  {
    bool w = false;
    if (json_is_string(v) && entry_matches(json_string_value(v), host, port, &w)) {
      *wildcard = w;
      return true;
    }
  }
  return false;
}

const char *dsec_proxy_check(json_t *network, const char *host, int port,
                             bool *wildcard)
{
  bool w = false, dw = false;

  *wildcard = false;
  if (!*host || port <= 0 || port > 65535)
    return "bad destination";
  if (list_matches(json_object_get(network, "deny"), host, port, &dw))
    return "denied by the spec";
  if (!list_matches(json_object_get(network, "allow"), host, port, &w))
    return "not allowed by the spec";
  if (w)
    for (const char *const *d = dsec_proxy_default_deny; *d; d++) {
      bool ignored;
      if (entry_matches(*d, host, port, &ignored))
        return "a package registry or code host (name it in allow)";
    }
  *wildcard = w;
  return NULL;
}

static bool private_address(const struct sockaddr *sa)
{
  if (sa->sa_family == AF_INET) {
    uint32_t a = ntohl(((const struct sockaddr_in *) sa)->sin_addr.s_addr);
    return (a >> 24) == 127 || (a >> 24) == 10 || (a >> 24) == 0 ||
           (a >> 20) == (172 << 4 | 1) || (a >> 16) == (192 << 8 | 168) ||
           (a >> 16) == (169 << 8 | 254) || (a >> 28) >= 14;
  }
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *) sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a) ||
           IN6_IS_ADDR_V4MAPPED(a) || (a->s6_addr[0] & 0xfe) == 0xfc ||
           IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_MULTICAST(a);
  }
  return true;
}

static int write_all(int fd, const void *buf, size_t len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t) n;
  }
  return 0;
}

/* The SNI of a TLS ClientHello in buf, or NULL (new string). */
static char *tls_sni(const unsigned char *b, size_t n)
{
  size_t i, end;
  if (n < 43 || b[0] != 0x16 || b[5] != 0x01)
    return NULL;
  i = 5 + 4 + 2 + 32; /* record, handshake header, version, random */
  if (i >= n)
    return NULL;
  i += 1 + b[i]; /* session id */
  if (i + 2 > n)
    return NULL;
  i += 2 + ((size_t) b[i] << 8 | b[i + 1]); /* cipher suites */
  if (i + 1 > n)
    return NULL;
  i += 1 + b[i]; /* compression methods */
  if (i + 2 > n)
    return NULL;
  end = i + 2 + ((size_t) b[i] << 8 | b[i + 1]);
  i += 2;
  if (end > n)
    end = n;
  while (i + 4 <= end) {
    size_t type = (size_t) b[i] << 8 | b[i + 1];
    size_t len = (size_t) b[i + 2] << 8 | b[i + 3];
    i += 4;
    if (type == 0 && i + 5 <= end && i + len <= end) {
      size_t nlen = (size_t) b[i + 3] << 8 | b[i + 4];
      if (b[i + 2] == 0 && i + 5 + nlen <= end)
        return xstrndup((const char *) b + i + 5, nlen);
      return NULL;
    }
    i += len;
  }
  return NULL;
}

static void relay(int a, int b)
{
  char buf[65536];
  struct pollfd pf[2] = { { a, POLLIN, 0 }, { b, POLLIN, 0 } };
  for (;;) {
    int r = poll(pf, 2, IDLE_MS);
    if (r <= 0)
      return;
    for (int k = 0; k < 2; k++) {
      ssize_t n;
      if (!pf[k].revents)
        continue;
      n = recv(pf[k].fd, buf, sizeof buf, 0);
      if (n <= 0 || write_all(pf[1 - k].fd, buf, (size_t) n) < 0)
        return;
    }
  }
}

struct conn {
  struct dsec_proxy *p;
  int fd;
};

static void report(struct dsec_proxy *p, const char *method, const char *host,
                   int port, bool allowed, const char *reason)
{
  json_t *ev = json_pack("{s:s, s:s, s:s, s:i, s:b}", "type", "network",
                         "method", method, "host", host, "port", port,
                         "allowed", allowed);
  if (reason)
    json_object_set_new(ev, "reason", json_string(reason));
  p->report(p->ud, ev);
}

static void refuse(int fd, int code, const char *why)
{
  char *r = xasprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                      "Connection: close\r\nContent-Length: %zu\r\n\r\n%s\n",
                      code, code == 403 ? "Forbidden" : "Bad Gateway",
                      strlen(why) + 1, why);
  write_all(fd, r, strlen(r));
  free(r);
}

/* Splits "host:port" (or "[v6]:port"); default port def. */
static int split_hostport(char *s, char **host, int def)
{
  char *colon;
  if (*s == '[') {
    char *rb = strchr(s, ']');
    if (!rb)
      return -1;
    *rb = '\0';
    *host = s + 1;
    return rb[1] == ':' ? atoi(rb + 2) : def;
  }
  colon = strrchr(s, ':');
  *host = s;
  if (!colon)
    return def;
  *colon = '\0';
  return atoi(colon + 1);
}

static void *conn_main(void *arg)
{
  struct conn *c = arg;
  struct dsec_proxy *p = c->p;
  int fd = c->fd, up = -1;
  char *head = xmalloc(HEAD_MAX + 1);
  size_t len = 0;
  char method[16] = "", target[2048] = "";
  char *end = NULL, *host = NULL;
  int port;
  bool connect_method, wildcard = false;
  const char *why;

  free(c);
  /* the request head */
  while (len < HEAD_MAX && !(end = memmem(head, len, "\r\n\r\n", 4))) {
    ssize_t n = recv(fd, head + len, HEAD_MAX - len, 0);
    if (n <= 0)
      goto out;
    len += (size_t) n;
  }
  if (!end || sscanf(head, "%15s %2047s", method, target) != 2) {
    refuse(fd, 400, "bad request");
    goto out;
  }
  connect_method = strcmp(method, "CONNECT") == 0;
  if (connect_method)
    port = split_hostport(target, &host, 443);
  else {
    /* absolute-form: GET http://host[:port]/path HTTP/1.1 */
    char *hp, *path, *line_end, *sp;
    _cleanup_free_ char *pathstr = NULL;
    _cleanup_free_ char *version = NULL;
    char *nh;
    size_t restlen, prefix;

    if (strncasecmp(target, "http://", 7) != 0) {
      refuse(fd, 400, "only absolute http:// URIs and CONNECT");
      report(p, method, "", 0, false, "not a proxy request");
      goto out;
    }
    hp = target + 7;
    path = strchr(hp, '/');
    pathstr = xstrdup(path ? path : "/");
    if (path)
      *path = '\0';
    port = split_hostport(hp, &host, 80);
    /* the origin-form request line replaces the absolute one; the rest of
     * what was read (headers, a body's start) follows unchanged */
    line_end = memmem(head, len, "\r\n", 2);
    sp = memrchr(head, ' ', (size_t) (line_end - head));
    version = sp ? xstrndup(sp + 1, (size_t) (line_end - sp - 1))
                 : xstrdup("HTTP/1.1");
    restlen = len - (size_t) (line_end - head);
    nh = xasprintf("%s %s %s", method, pathstr, version);
    prefix = strlen(nh);
    nh = xrealloc(nh, prefix + restlen + 1);
    memcpy(nh + prefix, line_end, restlen);
    free(head);
    head = nh;
    len = prefix + restlen;
  }
  why = dsec_proxy_check(p->network, host, port, &wildcard);
  if (why) {
    refuse(fd, 403, why);
    report(p, method, host, port, false, why);
    goto out;
  }
  {
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0) {
      refuse(fd, 502, "cannot resolve the host");
      report(p, method, host, port, false, "cannot resolve");
      goto out;
    }
    for (ai = res; ai; ai = ai->ai_next) {
      /* a wildcard does not open the host's own and private networks */
      if (wildcard && private_address(ai->ai_addr))
        continue;
      up = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (up >= 0 && connect(up, ai->ai_addr, ai->ai_addrlen) == 0)
        break;
      if (up >= 0)
        close(up);
      up = -1;
    }
    freeaddrinfo(res);
    if (up < 0) {
      refuse(fd, 502, "cannot connect");
      report(p, method, host, port, false,
             wildcard ? "cannot connect (or a private address)" : "cannot connect");
      goto out;
    }
  }
  if (connect_method) {
    unsigned char hello[4096];
    ssize_t n;
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (write_all(fd, ok, sizeof ok - 1) < 0)
      goto out;
    /* TLS: the name the client asks the server for must be the host it
     * asked us for */
    n = recv(fd, hello, sizeof hello, MSG_PEEK);
    if (n > 0 && hello[0] == 0x16) {
      _cleanup_free_ char *sni = tls_sni(hello, (size_t) n);
      if (sni && strcasecmp(sni, host) != 0) {
        report(p, method, host, port, false, "TLS SNI differs from the host");
        goto out;
      }
    }
    report(p, method, host, port, true, NULL);
  } else {
    report(p, method, host, port, true, NULL);
    if (write_all(up, head, len) < 0)
      goto out;
  }
  relay(fd, up);
out:
  free(head);
  if (up >= 0)
    close(up);
  close(fd);
  atomic_fetch_sub(&p->connections, 1);
  return NULL;
}

void dsec_proxy_serve(struct dsec_proxy *p, int fd)
{
  struct conn *c;
  pthread_t t;
  pthread_attr_t attr;

  if (atomic_fetch_add(&p->connections, 1) >= CONNECTIONS_MAX) {
    atomic_fetch_sub(&p->connections, 1);
    close(fd);
    return;
  }
  c = xmalloc(sizeof *c);
  c->p = p;
  c->fd = fd;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  if (pthread_create(&t, &attr, conn_main, c) != 0) {
    atomic_fetch_sub(&p->connections, 1);
    close(fd);
    free(c);
  }
  pthread_attr_destroy(&attr);
}

#define NETWORK_PER_SECOND 100

void dsec_net_events_init(struct dsec_net_events *e, struct dsec_audit *audit)
{
  memset(e, 0, sizeof *e);
  e->audit = audit;
  pthread_mutex_init(&e->lock, NULL);
}

void dsec_net_events_report(void *ud, json_t *ev)
{
  struct dsec_net_events *e = ud;
  double now = dsec_now_ms();
  json_t *summary = NULL;
  const char *host = json_string_value(json_object_get(ev, "host"));
  _cleanup_free_ char *key = NULL;
  bool keep, first = false;

  if (!ev)
    return;
  /* the first refusal of a host is not lost in a flood: it passes the
   * rate limit and has a reserve of the budget */
  if (host && json_is_false(json_object_get(ev, "allowed"))) {
    key = xstrndup(host, DSEC_AUDIT_STRING_MAX);
    for (char *c = key; *c; c++)
      if (*c >= 'A' && *c <= 'Z')
        *c = (char) (*c - 'A' + 'a');
    first = dsec_audit_is_new(e->audit, DSEC_AUDIT_HOST, key, strlen(key));
  }
  pthread_mutex_lock(&e->lock);
  if (now - e->window >= 1000) {
    if (e->suppressed)
      summary = json_pack("{s:s, s:I}", "type", "network_suppressed", "count",
                          (json_int_t) e->suppressed);
    e->window = now;
    e->in_window = 0;
    e->suppressed = 0;
  }
  keep = first || e->in_window++ < NETWORK_PER_SECOND;
  if (!keep)
    e->suppressed++;
  pthread_mutex_unlock(&e->lock);
  if (summary) {
    dsec_audit_append(e->audit, summary, NULL);
    json_decref(summary);
  }
  if (first)
    dsec_audit_append_first(e->audit, ev, DSEC_AUDIT_HOST, key, strlen(key),
                            NULL);
  else if (keep)
    dsec_audit_append(e->audit, ev, NULL);
  json_decref(ev);
}
