#include <config.h>

#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "audit.h"
#include "proxy-parse.h"
#include "sandbox.h"
#include "utils.h"

#define CONNECTIONS_MAX 256
#define IDLE_MS (10 * 60 * 1000)
/* a request head must come whole within HEAD_MS, a tunnel's ClientHello
 * within HELLO_MS */
#define HEAD_MS (30 * 1000)
#define HELLO_MS (10 * 1000)

/* Where finished solutions come from: code hosts and their mirrors,
 * raw-content hosts and code CDNs, package registries, module proxies and
 * their mirrors, container registries, web archives, Q&A, contest and
 * paper sites, and other models' APIs.  Denied unless an allow entry names
 * them (not through a wildcard).  man/dsec-run.1 lists them all. */
const char *const dsec_proxy_default_deny[] = {
  /* code hosts */
  "github.com", "*.github.com", "github.io", "*.github.io",
  "githubusercontent.com", "*.githubusercontent.com", "ghcr.io",
  "gitlab.com", "*.gitlab.com", "*.gitlab.io", "bitbucket.org",
  "*.bitbucket.org", "*.bitbucket.io", "gitee.com", "*.gitee.com",
  "*.gitee.io", "codeberg.org", "*.codeberg.org", "*.codeberg.page",
  "sr.ht", "*.sr.ht", "sourceforge.net", "*.sourceforge.net",
  "*.sourceforge.io", "launchpad.net", "*.launchpad.net",
  "*.googlesource.com", "git.kernel.org", "opendev.org", "salsa.debian.org",
  "gitlab.gnome.org", "gitlab.freedesktop.org", "invent.kde.org",
  "pagure.io", "gitea.com", "notabug.org", "framagit.org", "repo.or.cz",
  "git.savannah.gnu.org", "archive.softwareheritage.org",
  /* GitHub mirrors and proxies, raw-content hosts, code CDNs */
  "ghproxy.com", "*.ghproxy.com", "ghproxy.net", "gh-proxy.com",
  "fastgit.org", "*.fastgit.org", "kgithub.com", "kkgithub.com",
  "gitclone.com", "githack.com", "*.githack.com", "rawgit.com",
  "*.rawgit.com", "statically.io", "*.statically.io", "jsdelivr.net",
  "*.jsdelivr.net", "unpkg.com", "*.unpkg.com", "esm.sh", "*.esm.sh",
  "esm.run", "cdnjs.cloudflare.com", "cdn.skypack.dev", "*.jspm.io",
  "pastebin.com", "grep.app", "sourcegraph.com", "*.sourcegraph.com",
  "searchcode.com",
  /* package registries, module proxies and their mirrors */
  "pypi.org", "*.pypi.org", "pypi.python.org", "pythonhosted.org",
  "*.pythonhosted.org", "registry.npmjs.org", "*.npmjs.org", "npmjs.com",
  "*.npmjs.com", "registry.yarnpkg.com", "*.yarnpkg.com", "npmmirror.com",
  "*.npmmirror.com", "registry.npm.taobao.org", "proxy.golang.org",
  "sum.golang.org", "goproxy.io", "*.goproxy.io", "goproxy.cn",
  "pkg.go.dev", "crates.io", "*.crates.io", "static.rust-lang.org",
  "docs.rs", "rsproxy.cn", "rubygems.org", "*.rubygems.org",
  "gems.ruby-china.com", "repo.maven.apache.org", "repo1.maven.org",
  "*.maven.org", "central.sonatype.com", "plugins.gradle.org", "jitpack.io",
  "maven.aliyun.com", "packagist.org", "*.packagist.org", "nuget.org",
  "*.nuget.org", "hackage.haskell.org", "cpan.org", "*.cpan.org",
  "metacpan.org", "*.metacpan.org", "cran.r-project.org",
  "cloud.r-project.org", "pub.dev", "hex.pm", "*.hex.pm",
  "pkg.julialang.org", "swiftpackageindex.com", "conda.anaconda.org",
  "repo.anaconda.com", "anaconda.org", "*.anaconda.org", "prefix.dev",
  "*.prefix.dev", "mirrors.aliyun.com", "mirrors.tuna.tsinghua.edu.cn",
  "pypi.tuna.tsinghua.edu.cn", "mirrors.ustc.edu.cn", "mirrors.bfsu.edu.cn",
  "mirror.sjtu.edu.cn", "mirrors.sjtug.sjtu.edu.cn", "mirrors.nju.edu.cn",
  "mirrors.cloud.tencent.com", "mirrors.huaweicloud.com",
  "repo.huaweicloud.com", "mirrors.163.com", "pypi.douban.com",
  /* container registries */
  "docker.io", "*.docker.io", "hub.docker.com", "quay.io", "*.quay.io",
  "gcr.io", "*.gcr.io", "registry.k8s.io", "public.ecr.aws",
  "mcr.microsoft.com",
  /* models and data sets */
  "huggingface.co", "*.huggingface.co", "hf.co", "*.hf.co", "hf-mirror.com",
  "*.hf-mirror.com", "modelscope.cn", "*.modelscope.cn", "kaggle.com",
  "*.kaggle.com", "*.kaggleusercontent.com",
  /* web archives and caches */
  "archive.org", "*.archive.org", "archive.ph", "archive.today",
  "archive.is", "webcache.googleusercontent.com",
  /* questions and answers, contests, papers */
  "stackoverflow.com", "*.stackoverflow.com", "stackexchange.com",
  "*.stackexchange.com", "superuser.com", "serverfault.com",
  "askubuntu.com", "mathoverflow.net", "leetcode.com", "*.leetcode.com",
  "leetcode.cn", "*.leetcode.cn", "codeforces.com", "*.codeforces.com",
  "atcoder.jp", "*.atcoder.jp", "hackerrank.com", "*.hackerrank.com",
  "codewars.com", "*.codewars.com", "*.kattis.com", "luogu.com.cn",
  "*.luogu.com.cn", "geeksforgeeks.org", "*.geeksforgeeks.org",
  "rosettacode.org", "projecteuler.net", "exercism.org",
  "paperswithcode.com", "*.paperswithcode.com", "arxiv.org", "*.arxiv.org",
  /* other models */
  "openai.com", "*.openai.com", "chatgpt.com", "*.chatgpt.com",
  "anthropic.com", "*.anthropic.com", "claude.ai", "*.claude.ai",
  "deepseek.com", "*.deepseek.com", "generativelanguage.googleapis.com",
  "api.mistral.ai", "api.groq.com", "api.together.xyz", "openrouter.ai",
  "*.openrouter.ai", "dashscope.aliyuncs.com", "api.moonshot.cn",
  "open.bigmodel.cn",
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

/* Whether an entry of list matches; *wildcard tells whether every entry
 * that does is a wildcard (an entry naming the host exactly wins). */
static bool list_matches(json_t *list, const struct dsec_host *h, int port,
                         bool for_deny, bool *wildcard)
{
  bool any = false, exact = false;
  json_t *v;
  size_t i;

  json_array_foreach(list, i, v)
  {
    struct dsec_proxy_entry e;
    const char *why;
    if (!json_is_string(v))
      continue;
    if (dsec_proxy_entry_parse(json_string_value(v), &e, &why) < 0) {
      /* the spec's check refuses such entries; one that got here all the
       * same denies everything rather than nothing */
      if (for_deny) {
        any = true;
        break;
      }
      continue;
    }
    if (dsec_proxy_entry_match(&e, h, port, for_deny)) {
      any = true;
      exact = exact || !e.wildcard;
    }
  }
  *wildcard = any && !exact;
  return any;
}

static bool default_denied(const struct dsec_host *h, int port)
{
  for (const char *const *d = dsec_proxy_default_deny; *d; d++) {
    struct dsec_proxy_entry e;
    const char *why;
    if (dsec_proxy_entry_parse(*d, &e, &why) == 0 &&
        dsec_proxy_entry_match(&e, h, port, true))
      return true;
  }
  return false;
}

const char *dsec_proxy_check(json_t *network, const struct dsec_host *h,
                             int port, bool *wildcard)
{
  bool w = false, dw = false;

  *wildcard = false;
  if (port <= 0 || port > 65535)
    return "bad destination";
  if (list_matches(json_object_get(network, "deny"), h, port, true, &dw))
    return "denied by the spec";
  if (!list_matches(json_object_get(network, "allow"), h, port, false, &w))
    return h->kind == DSEC_HOST_NAME
             ? "not allowed by the spec"
             : "not allowed by the spec (an IP address needs an allow entry "
               "naming it)";
  if (w && default_denied(h, port))
    return "a package registry, mirror or code host (name it in allow)";
  *wildcard = w;
  return NULL;
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

/* Relays between the client c and upstream u until both directions have
 * ended (a half-close is passed on) or nothing moved for IDLE_MS.  limit:
 * how many more bytes go from c to u (a request body), -1 for a tunnel. */
static void relay(int c, int u, int64_t limit)
{
  char buf[65536];
  bool c_open = limit != 0, u_open = true;

  while (c_open || u_open) {
    struct pollfd pf[2] = { { c, c_open ? POLLIN : 0, 0 },
                            { u, u_open ? POLLIN : 0, 0 } };
    int r = poll(pf, 2, IDLE_MS);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return;
    if (c_open && pf[0].revents) {
      size_t want = sizeof buf;
      ssize_t n;
      if (limit >= 0 && (uint64_t) limit < want)
        want = (size_t) limit;
      n = recv(c, buf, want, 0);
      if (n < 0)
        return;
      if (n == 0) {
        c_open = false;
        shutdown(u, SHUT_WR);
      } else {
        if (write_all(u, buf, (size_t) n) < 0)
          return;
        if (limit > 0 && (limit -= n) == 0)
          c_open = false; /* the request is whole: nothing more goes up */
      }
    }
    if (u_open && pf[1].revents) {
      ssize_t n = recv(u, buf, sizeof buf, 0);
      if (n < 0)
        return;
      if (n == 0) {
        u_open = false;
        shutdown(c, SHUT_WR);
        if (limit >= 0)
          return; /* the response is whole */
      } else if (write_all(c, buf, (size_t) n) < 0) {
        return;
      }
    }
  }
}

struct conn {
  struct dsec_proxy *p;
  int fd;
};

/* One attempt's record; extra (stolen, may be NULL) adds fields. */
static void report(struct dsec_proxy *p, const char *method, const char *host,
                   int port, bool allowed, const char *reason, json_t *extra)
{
  /* method and host may be bytes of a request that could not be read:
   * never a reason for the record to be lost (invalid UTF-8 is replaced) */
  json_t *ev = json_pack("{s:s, s:o, s:o, s:i, s:b}", "type", "network",
                         "method", dsec_json_utf8(method, strlen(method)),
                         "host", dsec_json_utf8(host, strlen(host)), "port",
                         port, "allowed", allowed);
  if (reason)
    json_object_set_new(ev, "reason", json_string(reason));
  if (extra) {
    json_object_update(ev, extra);
    json_decref(extra);
  }
  p->report(p->ud, ev);
}

static void refuse(int fd, int code, const char *why)
{
  const char *text = code == 400   ? "Bad Request"
                     : code == 403 ? "Forbidden"
                     : code == 411 ? "Length Required"
                                   : "Bad Gateway";
  char *r = xasprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                      "Connection: close\r\nContent-Length: %zu\r\n\r\n%s\n",
                      code, text, strlen(why) + 1, why);
  write_all(fd, r, strlen(r));
  free(r);
}

/* The request line's target as printable text, for the record of a
 * request that could not be read. */
static json_t *raw_target(const char *buf, size_t len)
{
  const char *eol = memchr(buf, '\r', len), *sp, *sp2;
  char out[300];

  if (!eol)
    eol = buf + len;
  sp = memchr(buf, ' ', (size_t) (eol - buf));
  if (!sp)
    return NULL;
  sp2 = memchr(sp + 1, ' ', (size_t) (eol - sp - 1));
  dsec_printable(sp + 1, (size_t) ((sp2 ? sp2 : eol) - sp - 1), out, sizeof out);
  return json_pack("{s:s}", "target", out);
}

/* Waits until fd (or u, when u >= 0) has something to read, at most until
 * deadline_ms (dsec_now_ms's clock): 0 for fd, 1 for u, -1 for a timeout
 * or an error. */
static int wait_readable(int fd, int u, double deadline_ms)
{
  for (;;) {
    struct pollfd pf[2] = { { fd, POLLIN, 0 }, { u, POLLIN, 0 } };
    double left = deadline_ms - dsec_now_ms();
    int r;
    if (left <= 0)
      return -1;
    r = poll(pf, u >= 0 ? 2 : 1, (int) left + 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    return pf[0].revents ? 0 : 1;
  }
}

/* Connects to the target: an IP literal as it is, a name through the
 * resolver, and then only when no address it resolves to is special
 * (*status 403, *address says which; else 502). */
static int connect_upstream(const struct dsec_http_request *r, int *status,
                            char address[INET6_ADDRSTRLEN], const char **why)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
  char ps[16];
  int up = -1;

  *status = 502;
  if (r->host.kind != DSEC_HOST_NAME) {
    struct sockaddr_storage ss = { 0 };
    socklen_t sl;
    if (r->host.kind == DSEC_HOST_IPV4) {
      struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;
      s4->sin_family = AF_INET;
      s4->sin_port = htons((uint16_t) r->port);
      memcpy(&s4->sin_addr, r->host.addr, 4);
      sl = sizeof *s4;
    } else {
      struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons((uint16_t) r->port);
      memcpy(&s6->sin6_addr, r->host.addr, 16);
      sl = sizeof *s6;
    }
    up = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (up >= 0 && connect(up, (struct sockaddr *) &ss, sl) == 0)
      return up;
    if (up >= 0)
      close(up);
    *why = "cannot connect";
    return -1;
  }
  snprintf(ps, sizeof ps, "%d", r->port);
  if (getaddrinfo(r->host.name, ps, &hints, &res) != 0) {
    *why = "cannot resolve the host";
    return -1;
  }
  /* every address must be an ordinary one: a name that also resolves to a
   * special address (rebinding, a split answer) is refused whole */
  for (ai = res; ai; ai = ai->ai_next) {
    const void *a = NULL;
    if (ai->ai_family == AF_INET)
      a = &((struct sockaddr_in *) ai->ai_addr)->sin_addr;
    else if (ai->ai_family == AF_INET6)
      a = &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr;
    if (!a || dsec_addr_special(ai->ai_family, a)) {
      if (!a || !inet_ntop(ai->ai_family, a, address, INET6_ADDRSTRLEN))
        strcpy(address, "?");
      freeaddrinfo(res);
      *status = 403;
      *why = "a name that resolves to a private or special-purpose address";
      return -1;
    }
  }
  for (ai = res; ai; ai = ai->ai_next) {
    up = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (up >= 0 && connect(up, ai->ai_addr, ai->ai_addrlen) == 0)
      break;
    if (up >= 0)
      close(up);
    up = -1;
  }
  freeaddrinfo(res);
  if (up < 0)
    *why = "cannot connect";
  return up;
}

/* A CONNECT tunnel's first bytes, after the 200: a TLS ClientHello, read
 * whole (however it is cut into records and reads) and checked against
 * the target; or, where that is allowed, anything else, unread.  data
 * holds what came after the request head; on return it holds what is to
 * be sent upstream first.  Returns 0 to relay, -1 to cut (*why; with no
 * *why the client went away). */
static int tunnel_check(int fd, int up, const struct dsec_http_request *r,
                        bool tls_required, uint8_t *data, size_t *len,
                        json_t *extra, const char **why)
{
  double deadline = dsec_now_ms() + (tls_required ? HELLO_MS : IDLE_MS);
  bool tls = false;

  *why = NULL;
  for (;;) {
    int w;
    if (*len > 0 && data[0] == 0x16) {
      struct dsec_tls_hello h;
      int rc = dsec_tls_hello_parse(data, *len, &h, why);
      if (!tls) {
        tls = true;
        deadline = dsec_now_ms() + HELLO_MS;
      }
      if (rc > 0) {
        if (h.names) {
          char sni[300];
          dsec_printable(h.sni, h.sni_len < sizeof h.sni ? h.sni_len : sizeof h.sni - 1,
                         sni, sizeof sni);
          json_object_set_new(extra, "sni", json_string(sni));
        }
        json_object_set_new(extra, "tls", json_true());
        return dsec_tls_hello_check(&h, &r->host, why);
      }
      if (rc < 0)
        return -1;
      if (*len == DSEC_PROXY_HELLO_MAX) {
        *why = "a ClientHello larger than 16 KiB";
        return -1;
      }
    } else if (*len > 0) {
      if (tls_required) {
        *why = r->port == 443 ? "not TLS on a tunnel to port 443"
                              : "not TLS on a tunnel a wildcard allowed";
        return -1;
      }
      json_object_set_new(extra, "tls", json_false());
      return 0;
    }
    /* the client speaks first in TLS; a server-first protocol (SSH, SMTP)
     * is a plain tunnel, where one is allowed */
    w = wait_readable(fd, tls || tls_required ? -1 : up, deadline);
    if (w < 0) {
      *why = tls ? "no whole TLS ClientHello within 10 s"
                 : tls_required ? "no TLS ClientHello within 10 s"
                                : "nothing sent on the tunnel";
      return -1;
    }
    if (w == 1) {
      json_object_set_new(extra, "tls", json_false());
      return 0;
    }
    {
      ssize_t n = recv(fd, data + *len, DSEC_PROXY_HELLO_MAX - *len, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return -1;
      *len += (size_t) n;
    }
  }
}

static void *conn_main(void *arg)
{
  struct conn *c = arg;
  struct dsec_proxy *p = c->p;
  int fd = c->fd, up = -1, status;
  char *head = xmalloc(DSEC_PROXY_HEAD_MAX);
  uint8_t *data = NULL;
  size_t len = 0, rest;
  struct dsec_http_request r;
  const char *why = NULL;
  const char *method = "";
  bool wildcard = false;
  char address[INET6_ADDRSTRLEN] = "";
  double deadline = dsec_now_ms() + HEAD_MS;
  json_t *extra = NULL;
  int rc;

  free(c);
  /* the request head */
  for (;;) {
    ssize_t n;
    rc = dsec_http_request_parse(head, len, &r, &why);
    if (rc != 0)
      break;
    if (len == DSEC_PROXY_HEAD_MAX) {
      rc = -1;
      why = "a request head larger than 16 KiB";
      break;
    }
    if (wait_readable(fd, -1, deadline) < 0) {
      if (len == 0)
        goto out; /* an idle connection asks for nothing */
      rc = -1;
      why = "no whole request head within 30 s";
      break;
    }
    n = recv(fd, head + len, DSEC_PROXY_HEAD_MAX - len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      goto out; /* gone before asking anything */
    len += (size_t) n;
  }
  method = r.method;
  if (rc < 0) {
    refuse(fd, 400, why);
    report(p, method, "", 0, false, why, raw_target(head, len));
    goto out;
  }
  if (!r.connect && r.chunked) {
    why = "a chunked request body (send Content-Length)";
    refuse(fd, 411, why);
    report(p, method, r.host.name, r.port, false, why, NULL);
    goto out;
  }
  if (dsec_http_host_check(&r, &why) < 0) {
    refuse(fd, 403, why);
    report(p, method, r.host.name, r.port, false, why,
           r.has_host_header
             ? json_pack("{s:s, s:i}", "host_header", r.host_header.name,
                         "host_header_port", r.host_header_port)
             : NULL);
    goto out;
  }
  why = dsec_proxy_check(p->network, &r.host, r.port, &wildcard);
  if (why) {
    refuse(fd, 403, why);
    report(p, method, r.host.name, r.port, false, why, NULL);
    goto out;
  }
  up = connect_upstream(&r, &status, address, &why);
  if (up < 0) {
    refuse(fd, status, why);
    report(p, method, r.host.name, r.port, false, why,
           *address ? json_pack("{s:s}", "address", address) : NULL);
    goto out;
  }
  rest = len - r.head_len;
  if (r.connect) {
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (write_all(fd, ok, sizeof ok - 1) < 0)
      goto out;
    /* whatever followed the head is the tunnel's start */
    data = xmalloc(DSEC_PROXY_HELLO_MAX);
    memcpy(data, head + r.head_len, rest);
    len = rest;
    extra = json_object();
    /* TLS, with its server name checked, on port 443 and wherever a
     * wildcard allowed the host; a plain tunnel only to a host:port that
     * an entry names */
    if (tunnel_check(fd, up, &r, r.port == 443 || wildcard, data, &len,
                     extra, &why) < 0) {
      if (why)
        report(p, method, r.host.name, r.port, false, why,
               steal_pointer(&extra));
      goto out;
    }
    report(p, method, r.host.name, r.port, true, NULL, steal_pointer(&extra));
    if (len && write_all(up, data, len) < 0)
      goto out;
    relay(fd, up, -1);
  } else {
    size_t flen, body = 0;
    _cleanup_free_ char *fwd = xmalloc(r.head_len + 32);
    int64_t left = r.content_length > 0 ? r.content_length : 0;

    flen = dsec_http_forward_head(head, &r, fwd, r.head_len + 32);
    if (flen == 0) { /* cannot happen: head_len + 32 always suffices */
      refuse(fd, 400, "bad request");
      goto out;
    }
    report(p, method, r.host.name, r.port, true, NULL, NULL);
    /* the body's start came with the head; anything past the body (a
     * second request) goes nowhere */
    body = (uint64_t) left < rest ? (size_t) left : rest;
    if (write_all(up, fwd, flen) < 0 ||
        (body && write_all(up, head + r.head_len, body) < 0))
      goto out;
    relay(fd, up, left - (int64_t) body);
  }
out:
  json_decref(extra);
  free(data);
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
    report(p, "", "", 0, false, "more than 256 connections at once", NULL);
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
    report(p, "", "", 0, false, "cannot serve the connection", NULL);
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
