#include <config.h>

#include "registry.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "digest.h"
#include "error.h"
#include "log.h"
#include "utils.h"

#define MANIFEST_MAX (4u << 20)
#define TOKEN_BODY_MAX (1u << 20)
/* Error bodies are only read for their message; the rest is dropped. */
#define ERROR_BODY_MAX (64u << 10)
#define AUTH_HEADER_MAX (64u << 10)
#define MAX_REDIRECTS 5
/* The distribution token spec's default lifetime when expires_in is
 * missing. */
#define TOKEN_DEFAULT_LIFETIME_S 60
#define USER_AGENT "dsec/" PACKAGE_VERSION

static const char manifest_accept[] =
  "Accept: application/vnd.oci.image.index.v1+json, "
  "application/vnd.oci.image.manifest.v1+json, "
  "application/vnd.docker.distribution.manifest.list.v2+json, "
  "application/vnd.docker.distribution.manifest.v2+json";

struct dsec_registry {
  char *name;       /* "REGISTRY/REPOSITORY", for messages */
  char *repository;
  char *base;       /* "https://host[:port]" */
  /* The registry's origin: credentials go to it and nowhere else. */
  char *scheme;
  char *host;
  long port;
  bool insecure;
  char *user;       /* DSEC_REGISTRY_USER, or NULL */
  char *password;
  bool basic;       /* the registry asked for Basic auth */
  char *token;      /* cached bearer token, or NULL */
  double token_expires_ms;
  CURL *easy;       /* manifests, one at a time */
  CURLM *multi;     /* blobs */
  CURLSH *share;    /* DNS and TLS sessions across all handles */
};

enum xfer_kind {
  XFER_MANIFEST,
  XFER_BLOB,
  XFER_TOKEN,
};

enum xfer_next {
  XFER_DONE,
  XFER_RETRY,
  XFER_FAILED,
};

/* One request, possibly over several attempts (redirects, auth). */
struct xfer {
  struct dsec_registry *r;
  enum xfer_kind kind;
  const char *ref;  /* tag or digest, borrowed */
  CURL *curl;
  bool own_curl;
  bool in_multi;
  char *url;
  bool same_origin; /* url is on the registry's origin */
  struct curl_slist *headers;
  char errbuf[CURL_ERROR_SIZE];
  /* The current response. */
  bool code_known;
  bool body_ok;
  char *buf;
  size_t len;
  size_t cap;
  size_t max;       /* cap on a successful in-memory body */
  char *content_type;
  char *www_auth;
  /* What the current attempt sent. */
  char *sent_token;
  bool sent_basic;
  int redirects;
  int auth_rounds;
  /* Blobs. */
  struct dsec_fetch *fetch;
  uint64_t received;
  bool finished;
  struct dsec_error *err;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
  curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void free_secret(char *s)
{
  if (s) {
    explicit_bzero(s, strlen(s));
    free(s);
  }
}

/* Text from a server, fit for one line of an error message: control
 * characters (terminal escapes) become '?', and it is cut short. */
static char *sanitize(const char *s)
{
  size_t n = strnlen(s, 300);
  char *out = xstrndup(s, n);

  for (char *p = out; *p; p++)
    if ((unsigned char) *p < 0x20 || *p == 0x7f)
      *p = '?';
  return out;
}

/* ---- URLs and origins ---- */

static int url_origin(const char *url, char **scheme, char **host, long *port)
{
  CURLU *u = curl_url();
  char *s = NULL, *h = NULL, *p = NULL;
  int ret = -1;

  if (!u)
    return -1;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
    goto out;
  if (curl_url_get(u, CURLUPART_SCHEME, &s, 0) != CURLUE_OK)
    goto out;
  if (curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK)
    goto out;
  if (curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT) != CURLUE_OK)
    goto out;
  *scheme = xstrdup(s);
  *host = xstrdup(h);
  *port = strtol(p, NULL, 10);
  ret = 0;
out:
  curl_free(s);
  curl_free(h);
  curl_free(p);
  curl_url_cleanup(u);
  return ret;
}

/* True when url is on the registry's own origin (scheme, host, port). */
static bool same_origin(struct dsec_registry *r, const char *url)
{
  _cleanup_free_ char *scheme = NULL;
  _cleanup_free_ char *host = NULL;
  long port;

  if (url_origin(url, &scheme, &host, &port) < 0)
    return false;
  return strcasecmp(scheme, r->scheme) == 0 &&
         strcasecmp(host, r->host) == 0 && port == r->port;
}

static bool host_valid(const char *s)
{
  if (!*s)
    return false;
  for (; *s; s++)
    if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') ||
          ('0' <= *s && *s <= '9') || strchr(".-:[]", *s)))
      return false;
  return true;
}

static bool repository_valid(const char *s)
{
  if (!*s || *s == '/' || dsec_str_has_suffix(s, "/") || strstr(s, "//") ||
      strlen(s) > 255)
    return false;
  for (const char *p = s; *p; p++)
    if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') ||
          ('0' <= *p && *p <= '9') || strchr("._-/", *p)))
      return false;
  /* No "." or ".." component: it would change the URL's path. */
  for (const char *c = s; c; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
    if (strncmp(c, ".", 1) == 0 &&
        (c[1] == '/' || c[1] == '\0' ||
         (c[1] == '.' && (c[2] == '/' || c[2] == '\0'))))
      return false;
  return true;
}

/* A tag ([A-Za-z0-9_][A-Za-z0-9._-]*) or a digest (algorithm:encoded). */
static bool reference_valid(const char *s)
{
  size_t n = strlen(s);

  if (n == 0 || n > 255 || *s == '.' || *s == '-' || *s == ':')
    return false;
  for (; *s; s++)
    if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') ||
          ('0' <= *s && *s <= '9') || strchr("._-:+=", *s)))
      return false;
  return true;
}

/* ---- WWW-Authenticate (RFC 7235 section 4.1) ---- */

struct challenge {
  char *realm;
  char *service;
  char *scope;
};

static void challenge_clear(struct challenge *c)
{
  free(c->realm);
  free(c->service);
  free(c->scope);
  memset(c, 0, sizeof *c);
}

static bool is_tchar(char c)
{
  return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') ||
         ('0' <= c && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void skip_ows(const char **p)
{
  while (**p == ' ' || **p == '\t')
    (*p)++;
}

static char *read_token(const char **p)
{
  const char *start = *p;

  while (is_tchar(**p))
    (*p)++;
  return *p > start ? xstrndup(start, *p - start) : NULL;
}

/* **p is '"'.  Returns NULL for an unterminated string. */
static char *read_quoted(const char **p)
{
  const char *s = *p + 1;
  char *out = xmalloc(strlen(s) + 1);
  size_t n = 0;

  for (; *s && *s != '"'; s++) {
    if (*s == '\\' && s[1])
      s++;
    out[n++] = *s;
  }
  if (*s != '"') {
    free(out);
    return NULL;
  }
  out[n] = '\0';
  *p = s + 1;
  return out;
}

/* Skips what cannot be parsed (a token68, a stray character) up to the
 * next comma outside quotes. */
static void skip_junk(const char **p)
{
  bool quoted = false;

  for (; **p; (*p)++) {
    if (quoted && **p == '\\' && (*p)[1])
      (*p)++;
    else if (**p == '"')
      quoted = !quoted;
    else if (!quoted && **p == ',')
      return;
  }
}

/* Finds the challenge with scheme `want` among the comma-separated
 * challenges of h (every WWW-Authenticate value joined with ", ") and fills
 * c with its realm, service and scope.  Returns true when found. */
static bool find_challenge(const char *h, const char *want,
                           struct challenge *c)
{
  const char *p = h;

  memset(c, 0, sizeof *c);
  while (*p) {
    _cleanup_free_ char *scheme = NULL;
    bool match;

    while (*p == ' ' || *p == '\t' || *p == ',')
      p++;
    if (!*p)
      break;
    scheme = read_token(&p);
    if (!scheme) {
      skip_junk(&p);
      if (*p)
        p++;
      continue;
    }
    match = strcasecmp(scheme, want) == 0;
    /* Its auth-params: name = token / quoted-string, separated by commas,
     * until a name without '=' starts the next challenge. */
    for (;;) {
      const char *save = p;
      _cleanup_free_ char *name = NULL;
      char *value, **slot = NULL;

      while (*p == ' ' || *p == '\t' || *p == ',')
        p++;
      if (!*p)
        break;
      name = read_token(&p);
      skip_ows(&p);
      if (name && *p != '=') {
        p = save; /* the next challenge's scheme */
        break;
      }
      if (!name) {
        skip_junk(&p);
        continue;
      }
      p++;
      skip_ows(&p);
      if (*p == '"') {
        value = read_quoted(&p);
        if (!value)
          break; /* unterminated: nothing more can be read */
      } else {
        value = read_token(&p);
        if (!value)
          value = xstrdup("");
      }
      if (match && strcasecmp(name, "realm") == 0)
        slot = &c->realm;
      else if (match && strcasecmp(name, "service") == 0)
        slot = &c->service;
      else if (match && strcasecmp(name, "scope") == 0)
        slot = &c->scope;
      /* A parameter given twice keeps its first value. */
      if (slot && !*slot)
        *slot = value;
      else
        free(value);
      skip_ows(&p);
      if (*p && *p != ',')
        skip_junk(&p);
    }
    if (match)
      return true;
  }
  challenge_clear(c);
  return false;
}

/* ---- the registry's error bodies ---- */

/* {"errors":[{"code":"...","message":"..."}]}: the first error as
 * "CODE: message" (new, sanitized), or NULL.  *code gets the code. */
static char *registry_message(struct xfer *x, char **code)
{
  json_auto_t *doc = NULL;
  json_t *errors, *first, *c, *m;
  _cleanup_free_ char *cs = NULL;
  _cleanup_free_ char *ms = NULL;

  *code = NULL;
  if (!x->buf || x->len == 0)
    return NULL;
  doc = json_loadb(x->buf, x->len, 0, NULL);
  if (!doc || !json_is_object(doc))
    return NULL;
  errors = json_object_get(doc, "errors");
  if (!json_is_array(errors) || json_array_size(errors) == 0)
    return NULL;
  first = json_array_get(errors, 0);
  c = json_object_get(first, "code");
  m = json_object_get(first, "message");
  if (json_is_string(c))
    cs = sanitize(json_string_value(c));
  if (json_is_string(m))
    ms = sanitize(json_string_value(m));
  if (!cs && !ms)
    return NULL;
  if (cs)
    *code = xstrdup(cs);
  if (cs && ms)
    return xasprintf("%s: %s", cs, ms);
  return steal_pointer(cs ? &cs : &ms);
}

/* ---- curl callbacks ---- */

static void response_reset(struct xfer *x)
{
  x->code_known = false;
  x->body_ok = false;
  x->len = 0;
  free(x->content_type);
  x->content_type = NULL;
  free(x->www_auth);
  x->www_auth = NULL;
}

static size_t on_header(char *buf, size_t size, size_t nmemb, void *data)
{
  struct xfer *x = data;
  size_t len = size * nmemb;
  const char *colon, *v, *end;
  size_t namelen;

  /* A new response (after a 1xx, or a redirect the token request
   * follows) replaces the headers of the previous one. */
  if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
    response_reset(x);
    return len;
  }
  colon = memchr(buf, ':', len);
  if (!colon)
    return len;
  namelen = colon - buf;
  end = buf + len;
  v = colon + 1;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' ||
                     end[-1] == '\t'))
    end--;
  if (namelen == 12 && strncasecmp(buf, "content-type", 12) == 0) {
    free(x->content_type);
    x->content_type = xstrndup(v, end - v);
  } else if (namelen == 16 && strncasecmp(buf, "www-authenticate", 16) == 0) {
    size_t old = x->www_auth ? strlen(x->www_auth) : 0;
    char *nv;

    if (old + (end - v) > AUTH_HEADER_MAX)
      return len;
    nv = old ? xasprintf("%s, %.*s", x->www_auth, (int) (end - v), v)
             : xstrndup(v, end - v);
    free(x->www_auth);
    x->www_auth = nv;
  }
  return len;
}

static void buf_append(struct xfer *x, const char *data, size_t len)
{
  if (x->len + len + 1 > x->cap) {
    size_t cap = x->cap ? x->cap : 4096;
    while (cap < x->len + len + 1)
      cap *= 2;
    x->buf = xrealloc(x->buf, cap);
    x->cap = cap;
  }
  memcpy(x->buf + x->len, data, len);
  x->len += len;
  x->buf[x->len] = '\0';
}

/* Returning less than len makes curl abort the transfer with
 * CURLE_WRITE_ERROR; x->err says why. */
static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
  struct xfer *x = arg;
  size_t len = size * nmemb;

  if (!x->code_known) {
    long code = 0;
    if (curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK)
      code = 0;
    x->code_known = true;
    x->body_ok = code == 200;
  }
  if (x->body_ok && x->kind == XFER_BLOB) {
    if (dsec_blob_writer_write(x->fetch->writer, data, len, &x->err) < 0)
      return 0;
    x->received += len;
    return len;
  }
  if (x->body_ok) {
    if (x->len + len > x->max) {
      dsec_bad_input(&x->err, "response is larger than %zu bytes", x->max);
      return 0;
    }
  } else if (x->len + len > ERROR_BODY_MAX) {
    len = x->len < ERROR_BODY_MAX ? ERROR_BODY_MAX - x->len : 0;
    buf_append(x, data, len);
    return size * nmemb;
  }
  buf_append(x, data, len);
  return len;
}

/* ---- setting up requests ---- */

/* Collects the first failure of a series of curl_easy_setopt() calls. */
#define SETOPT(rc, h, opt, val) \
  do { \
    if ((rc) == CURLE_OK) \
      (rc) = curl_easy_setopt((h), (opt), (val)); \
  } while (0)

static int set_common(struct dsec_registry *r, struct xfer *x,
                      struct dsec_error **err)
{
  CURLcode rc = CURLE_OK;
  CURL *h = x->curl;
  const char *ca;

  curl_easy_reset(h);
  x->errbuf[0] = '\0';
  SETOPT(rc, h, CURLOPT_URL, x->url);
  SETOPT(rc, h, CURLOPT_HTTPGET, 1L);
  SETOPT(rc, h, CURLOPT_NOSIGNAL, 1L);
  SETOPT(rc, h, CURLOPT_CONNECTTIMEOUT, 30L);
  /* A stalled transfer (under 1 byte/s for a minute) is abandoned. */
  SETOPT(rc, h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  SETOPT(rc, h, CURLOPT_LOW_SPEED_TIME, 60L);
  SETOPT(rc, h, CURLOPT_TCP_KEEPALIVE, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
  SETOPT(rc, h, CURLOPT_PROTOCOLS_STR, "http,https");
  SETOPT(rc, h, CURLOPT_REDIR_PROTOCOLS_STR, r->insecure ? "http,https" :
                                                           "https");
#else
  SETOPT(rc, h, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
  SETOPT(rc, h, CURLOPT_REDIR_PROTOCOLS,
         (long) (r->insecure ? CURLPROTO_HTTP | CURLPROTO_HTTPS
                             : CURLPROTO_HTTPS));
#endif
  SETOPT(rc, h, CURLOPT_USERAGENT, USER_AGENT);
  SETOPT(rc, h, CURLOPT_ERRORBUFFER, x->errbuf);
  SETOPT(rc, h, CURLOPT_HEADERFUNCTION, on_header);
  SETOPT(rc, h, CURLOPT_HEADERDATA, x);
  SETOPT(rc, h, CURLOPT_WRITEFUNCTION, on_body);
  SETOPT(rc, h, CURLOPT_WRITEDATA, x);
  SETOPT(rc, h, CURLOPT_PRIVATE, x);
  SETOPT(rc, h, CURLOPT_SHARE, r->share);
  /* Peers are always verified.  libcurl reads its CA bundle from a path
   * fixed at build time and ignores SSL_CERT_FILE / SSL_CERT_DIR, which
   * OpenSSL and most tools honour; pass them on, so that a private
   * registry's CA can be trusted without ever turning verification off. */
  SETOPT(rc, h, CURLOPT_SSL_VERIFYPEER, 1L);
  SETOPT(rc, h, CURLOPT_SSL_VERIFYHOST, 2L);
  ca = getenv("SSL_CERT_FILE");
  if (ca && *ca)
    SETOPT(rc, h, CURLOPT_CAINFO, ca);
  ca = getenv("SSL_CERT_DIR");
  if (ca && *ca)
    SETOPT(rc, h, CURLOPT_CAPATH, ca);
  if (rc != CURLE_OK)
    return dsec_fail(err, 0, "cannot set up a request to %s: %s", x->url,
                     curl_easy_strerror(rc));
  return 0;
}

/* Sets x up for its next attempt at a registry URL.  Redirects are followed
 * by hand (see xfer_finish), so that credentials only ever go to the
 * registry's own origin. */
static int xfer_setup(struct xfer *x, struct dsec_error **err)
{
  struct dsec_registry *r = x->r;
  CURLcode rc = CURLE_OK;
  int ret;

  response_reset(x);
  curl_slist_free_all(x->headers);
  x->headers = NULL;
  free_secret(x->sent_token);
  x->sent_token = NULL;
  x->sent_basic = false;

  ret = set_common(r, x, err);
  if (ret < 0)
    return ret;
  SETOPT(rc, x->curl, CURLOPT_FOLLOWLOCATION, 0L);
  if (x->kind == XFER_MANIFEST) {
    x->headers = curl_slist_append(NULL, manifest_accept);
    if (!x->headers)
      return dsec_fail(err, ENOMEM, "cannot set up a request to %s", x->url);
  }
  if (x->same_origin && r->token) {
    _cleanup_free_ char *h = xasprintf("Authorization: Bearer %s", r->token);
    struct curl_slist *l = curl_slist_append(x->headers, h);

    explicit_bzero(h, strlen(h));
    if (!l) {
      curl_slist_free_all(x->headers);
      x->headers = NULL;
      return dsec_fail(err, ENOMEM, "cannot set up a request to %s", x->url);
    }
    x->headers = l;
    x->sent_token = xstrdup(r->token);
  } else if (x->same_origin && r->basic && r->user) {
    SETOPT(rc, x->curl, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
    SETOPT(rc, x->curl, CURLOPT_USERNAME, r->user);
    SETOPT(rc, x->curl, CURLOPT_PASSWORD, r->password);
    x->sent_basic = true;
  }
  if (x->headers)
    SETOPT(rc, x->curl, CURLOPT_HTTPHEADER, x->headers);
  if (rc != CURLE_OK)
    return dsec_fail(err, 0, "cannot set up a request to %s: %s", x->url,
                     curl_easy_strerror(rc));
  dsec_debug("GET %s%s", x->url,
             x->sent_token ? " (bearer)" : x->sent_basic ? " (basic)" : "");
  return 0;
}

static void xfer_clear(struct xfer *x)
{
  /* Cleanup: nothing useful can be done if removal fails. */
  if (x->curl && x->in_multi)
    (void) curl_multi_remove_handle(x->r->multi, x->curl);
  x->in_multi = false;
  if (x->curl && x->own_curl)
    curl_easy_cleanup(x->curl);
  x->curl = NULL;
  curl_slist_free_all(x->headers);
  x->headers = NULL;
  free(x->url);
  x->url = NULL;
  free(x->buf);
  x->buf = NULL;
  free(x->content_type);
  x->content_type = NULL;
  free(x->www_auth);
  x->www_auth = NULL;
  free_secret(x->sent_token);
  x->sent_token = NULL;
  dsec_error_free(x->err);
  x->err = NULL;
}

/* "manifest "latest"" or "blob sha256:..." (new). */
static char *xfer_what(struct xfer *x)
{
  if (x->kind == XFER_MANIFEST)
    return xasprintf("manifest \"%s\"", x->ref);
  return xasprintf("blob %s", x->ref);
}

/* ---- authentication ---- */

static int fetch_token(struct dsec_registry *r, const struct challenge *c,
                       struct dsec_error **err)
{
  _cleanup_free_ char *default_scope = NULL;
  _cleanup_free_ char *realm = NULL;
  const char *scope = c->scope;
  char *service_e = NULL, *scope_e = NULL;
  struct xfer tx = {
    .r = r, .kind = XFER_TOKEN, .max = TOKEN_BODY_MAX, .own_curl = true,
  };
  json_auto_t *doc = NULL;
  json_t *tok, *exp;
  const char *token;
  CURLcode rc = CURLE_OK;
  long code = 0;
  int ret = -1;

  if (!c->realm || !*c->realm)
    return dsec_fail(err, 0, "registry %s asks for a bearer token without "
                             "naming a realm", r->name);
  realm = sanitize(c->realm);
  if (!dsec_str_has_prefix(c->realm, "https://") &&
      !(r->insecure && dsec_str_has_prefix(c->realm, "http://")))
    return dsec_fail(err, 0, "registry %s names token realm %s, which is "
                             "not HTTPS; refusing to use it", r->name, realm);
  if (!scope) {
    default_scope = xasprintf("repository:%s:pull", r->repository);
    scope = default_scope;
  }

  tx.curl = curl_easy_init();
  if (!tx.curl)
    return dsec_fail(err, ENOMEM, "cannot set up a request to %s", realm);
  service_e = c->service ? curl_easy_escape(tx.curl, c->service, 0) : NULL;
  scope_e = curl_easy_escape(tx.curl, scope, 0);
  if ((c->service && !service_e) || !scope_e) {
    dsec_fail(err, ENOMEM, "cannot set up a request to %s", realm);
    goto out;
  }
  tx.url = xasprintf("%s%s%s%s%sscope=%s", c->realm,
                     strchr(c->realm, '?') ? "&" : "?",
                     service_e ? "service=" : "", service_e ? service_e : "",
                     service_e ? "&" : "", scope_e);
  if (set_common(r, &tx, err) < 0)
    goto out;
  /* curl sends USERNAME/PASSWORD to the first host only while following
   * (no CURLOPT_UNRESTRICTED_AUTH). */
  SETOPT(rc, tx.curl, CURLOPT_FOLLOWLOCATION, 1L);
  SETOPT(rc, tx.curl, CURLOPT_MAXREDIRS, (long) MAX_REDIRECTS);
  if (r->user) {
    SETOPT(rc, tx.curl, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
    SETOPT(rc, tx.curl, CURLOPT_USERNAME, r->user);
    SETOPT(rc, tx.curl, CURLOPT_PASSWORD, r->password);
  }
  if (rc != CURLE_OK) {
    dsec_fail(err, 0, "cannot set up a request to %s: %s", realm,
              curl_easy_strerror(rc));
    goto out;
  }
  dsec_debug("GET %s (token%s)", tx.url, r->user ? ", basic" : "");
  rc = curl_easy_perform(tx.curl);
  if (rc != CURLE_OK) {
    if (tx.err)
      dsec_error_set(err, tx.err->status, tx.err->errnum,
                     "cannot get a token from %s: %s", realm, tx.err->msg);
    else
      dsec_fail(err, 0, "cannot get a token from %s: %s", realm,
                tx.errbuf[0] ? tx.errbuf : curl_easy_strerror(rc));
    goto out;
  }
  rc = curl_easy_getinfo(tx.curl, CURLINFO_RESPONSE_CODE, &code);
  if (rc != CURLE_OK) {
    dsec_fail(err, 0, "cannot get a token from %s: %s", realm,
              curl_easy_strerror(rc));
    goto out;
  }
  if (code != 200) {
    _cleanup_free_ char *ecode = NULL;
    _cleanup_free_ char *msg = registry_message(&tx, &ecode);

    if (code == 401 || code == 403)
      dsec_fail(err, 0, "token server %s refused %s (HTTP %ld%s%s)%s", realm,
                r->user ? "the credentials of DSEC_REGISTRY_USER" :
                          "anonymous access",
                code, msg ? ": " : "", msg ? msg : "",
                r->user ? "" : "; set DSEC_REGISTRY_USER and "
                               "DSEC_REGISTRY_PASSWORD");
    else
      dsec_fail(err, 0, "cannot get a token from %s: HTTP %ld%s%s", realm,
                code, msg ? ": " : "", msg ? msg : "");
    goto out;
  }
  doc = json_loadb(tx.buf ? tx.buf : "", tx.len, 0, NULL);
  tok = doc ? json_object_get(doc, "token") : NULL;
  if (!json_is_string(tok) || !*json_string_value(tok))
    tok = doc ? json_object_get(doc, "access_token") : NULL;
  if (!json_is_string(tok) || !*json_string_value(tok)) {
    dsec_fail(err, 0, "token server %s sent no token", realm);
    goto out;
  }
  token = json_string_value(tok);
  /* It goes into a header: printable ASCII only. */
  for (const char *p = token; *p; p++)
    if (*p <= 0x20 || *p >= 0x7f) {
      dsec_fail(err, 0, "token server %s sent a malformed token", realm);
      goto out;
    }
  free_secret(r->token);
  r->token = xstrdup(token);
  exp = json_object_get(doc, "expires_in");
  r->token_expires_ms =
    dsec_now_ms() + 1000.0 * (json_is_integer(exp) &&
                                  json_integer_value(exp) > 0
                                ? (double) json_integer_value(exp)
                                : TOKEN_DEFAULT_LIFETIME_S);
  dsec_debug("got a token for %s from %s", scope, realm);
  ret = 0;
out:
  curl_free(service_e);
  curl_free(scope_e);
  if (tx.buf)
    explicit_bzero(tx.buf, tx.len);
  xfer_clear(&tx);
  return ret;
}

/* A 401 from the registry: authenticate as its challenge asks, then retry,
 * or fail when the credentials just sent were refused. */
static enum xfer_next on_unauthorized(struct xfer *x)
{
  struct dsec_registry *r = x->r;
  _cleanup_free_ char *what = xfer_what(x);
  _cleanup_free_ char *ecode = NULL;
  _cleanup_free_ char *msg = registry_message(x, &ecode);
  struct challenge c;
  const char *sep = msg ? ": " : "";

  if (msg == NULL)
    msg = xstrdup("");
  if (++x->auth_rounds > 2) {
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: registry keeps refusing "
                          "access (HTTP 401%s%s)", what, r->name, sep, msg);
    return XFER_FAILED;
  }
  if (x->www_auth && find_challenge(x->www_auth, "bearer", &c)) {
    int ret;

    /* Another transfer got a new token meanwhile: just use it. */
    if (r->token && (!x->sent_token || strcmp(x->sent_token, r->token) != 0)) {
      challenge_clear(&c);
      return XFER_RETRY;
    }
    if (x->sent_token && dsec_now_ms() < r->token_expires_ms) {
      challenge_clear(&c);
      dsec_fail(&x->err, 0, "cannot fetch %s from %s: access denied with "
                            "the token from the registry's token server "
                            "(HTTP 401%s%s)", what, r->name, sep, msg);
      return XFER_FAILED;
    }
    ret = fetch_token(r, &c, &x->err);
    challenge_clear(&c);
    if (ret < 0) {
      dsec_error_wrap(&x->err, "cannot fetch %s from %s", what, r->name);
      return XFER_FAILED;
    }
    return XFER_RETRY;
  }
  if (x->www_auth && find_challenge(x->www_auth, "basic", &c)) {
    challenge_clear(&c);
    if (!r->user) {
      dsec_fail(&x->err, 0, "cannot fetch %s from %s: the registry requires "
                            "credentials; set DSEC_REGISTRY_USER and "
                            "DSEC_REGISTRY_PASSWORD", what, r->name);
      return XFER_FAILED;
    }
    if (x->sent_basic) {
      dsec_fail(&x->err, 0, "cannot fetch %s from %s: the registry refused "
                            "the credentials of user %s (HTTP 401%s%s)",
                what, r->name, r->user, sep, msg);
      return XFER_FAILED;
    }
    r->basic = true;
    return XFER_RETRY;
  }
  {
    _cleanup_free_ char *h = x->www_auth ? sanitize(x->www_auth) : NULL;
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: HTTP 401 with %s%s%s%s",
              what, r->name,
              h ? "an unsupported challenge: " : "no WWW-Authenticate header",
              h ? h : "", sep, msg);
  }
  return XFER_FAILED;
}

/* ---- the end of an attempt ---- */

static enum xfer_next on_redirect(struct xfer *x, long code)
{
  struct dsec_registry *r = x->r;
  _cleanup_free_ char *what = xfer_what(x);
  _cleanup_free_ char *scheme = NULL;
  _cleanup_free_ char *host = NULL;
  char *location = NULL;
  long port;
  CURLcode rc;

  if (++x->redirects > MAX_REDIRECTS) {
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: more than %d redirects",
              what, r->name, MAX_REDIRECTS);
    return XFER_FAILED;
  }
  /* curl resolves a relative Location against the request's URL. */
  rc = curl_easy_getinfo(x->curl, CURLINFO_REDIRECT_URL, &location);
  if (rc != CURLE_OK || !location) {
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: HTTP %ld without a "
                          "usable Location", what, r->name, code);
    return XFER_FAILED;
  }
  if (url_origin(location, &scheme, &host, &port) < 0 ||
      (strcasecmp(scheme, "https") != 0 && strcasecmp(scheme, "http") != 0)) {
    _cleanup_free_ char *l = sanitize(location);
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: redirected to %s, which "
                          "is not an HTTP(S) URL", what, r->name, l);
    return XFER_FAILED;
  }
  if (!r->insecure && strcasecmp(scheme, "https") != 0) {
    _cleanup_free_ char *l = sanitize(location);
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: refusing a redirect "
                          "from HTTPS to %s", what, r->name, l);
    return XFER_FAILED;
  }
  free(x->url);
  x->url = xstrdup(location); /* location belongs to the handle */
  /* Once elsewhere, the chain never carries credentials again, even if it
   * comes back: a third party chose where it goes. */
  x->same_origin = x->same_origin && same_origin(r, x->url);
  dsec_debug("HTTP %ld: redirected to %s%s", code, x->url,
             x->same_origin ? "" : " (no credentials)");
  return XFER_RETRY;
}

static enum xfer_next xfer_finish(struct xfer *x, CURLcode result)
{
  struct dsec_registry *r = x->r;
  _cleanup_free_ char *what = xfer_what(x);
  _cleanup_free_ char *ecode = NULL;
  _cleanup_free_ char *msg = NULL;
  long code = 0;
  CURLcode rc;

  if (result != CURLE_OK) {
    if (x->err) /* the write callback's */
      dsec_error_wrap(&x->err, "cannot fetch %s from %s", what, r->name);
    else
      dsec_fail(&x->err, 0, "cannot fetch %s from %s: %s", what, r->name,
                x->errbuf[0] ? x->errbuf : curl_easy_strerror(result));
    return XFER_FAILED;
  }
  rc = curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
  if (rc != CURLE_OK) {
    dsec_fail(&x->err, 0, "cannot fetch %s from %s: %s", what, r->name,
              curl_easy_strerror(rc));
    return XFER_FAILED;
  }
  dsec_debug("HTTP %ld for %s", code, x->url);
  if (code == 200) {
    if (x->kind == XFER_BLOB && x->fetch->size > 0 &&
        x->received != x->fetch->size) {
      /* Longer is refused by the writer's limit as it arrives; size 0
       * means the caller does not know it. */
      dsec_bad_input(&x->err, "%s from %s has %llu bytes, not the %llu its "
                              "descriptor declares", what, r->name,
                     (unsigned long long) x->received,
                     (unsigned long long) x->fetch->size);
      return XFER_FAILED;
    }
    return XFER_DONE;
  }
  if (code == 301 || code == 302 || code == 303 || code == 307 ||
      code == 308)
    return on_redirect(x, code);
  if (code == 401) {
    if (!x->same_origin) {
      dsec_fail(&x->err, 0, "cannot fetch %s from %s: HTTP 401 from %s, "
                            "where it was redirected", what, r->name, x->url);
      return XFER_FAILED;
    }
    return on_unauthorized(x);
  }
  msg = registry_message(x, &ecode);
  if (code == 404 ||
      (ecode && (strcmp(ecode, "MANIFEST_UNKNOWN") == 0 ||
                 strcmp(ecode, "NAME_UNKNOWN") == 0 ||
                 strcmp(ecode, "BLOB_UNKNOWN") == 0))) {
    dsec_bad_input(&x->err, "%s not found in %s%s%s%s", what, r->name,
                   msg ? " (" : "", msg ? msg : "", msg ? ")" : "");
    return XFER_FAILED;
  }
  dsec_fail(&x->err, 0, "cannot fetch %s from %s: HTTP %ld%s%s", what,
            r->name, code, msg ? ": " : "", msg ? msg : "");
  return XFER_FAILED;
}

/* ---- public ---- */

int dsec_registry_open(const struct dsec_image_ref *ref, bool insecure,
                       struct dsec_registry **out, struct dsec_error **err)
{
  struct dsec_registry *r;
  const char *host, *user;
  CURLSHcode sc = CURLSHE_OK;

  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return dsec_fail(err, 0, "cannot initialise libcurl: %s",
                     curl_easy_strerror(curl_init_rc));
  if (!ref->registry || !host_valid(ref->registry))
    return dsec_bad_input(err, "invalid registry name \"%s\"",
                          ref->registry ? ref->registry : "");
  if (!ref->repository || !repository_valid(ref->repository))
    return dsec_bad_input(err, "invalid repository name \"%s\"",
                          ref->repository ? ref->repository : "");

  r = xzalloc(sizeof *r);
  r->insecure = insecure;
  r->repository = xstrdup(ref->repository);
  r->name = xasprintf("%s/%s", ref->registry, ref->repository);
  host = ref->registry;
  /* Docker Hub's API lives on another host than its name. */
  if (strcmp(host, "docker.io") == 0 || strcmp(host, "index.docker.io") == 0)
    host = "registry-1.docker.io";
  r->base = xasprintf("%s://%s", insecure ? "http" : "https", host);
  if (url_origin(r->base, &r->scheme, &r->host, &r->port) < 0) {
    dsec_registry_free(r);
    return dsec_bad_input(err, "invalid registry name \"%s\"", ref->registry);
  }
  user = getenv("DSEC_REGISTRY_USER");
  if (user && *user) {
    const char *pw = getenv("DSEC_REGISTRY_PASSWORD");
    r->user = xstrdup(user);
    r->password = xstrdup(pw ? pw : "");
  }

  r->share = curl_share_init();
  r->easy = curl_easy_init();
  r->multi = curl_multi_init();
  if (!r->share || !r->easy || !r->multi) {
    dsec_registry_free(r);
    return dsec_fail(err, ENOMEM, "cannot initialise libcurl handles");
  }
  /* All handles are used from this thread only: no lock callbacks. */
  sc = curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  if (sc == CURLSHE_OK)
    sc = curl_share_setopt(r->share, CURLSHOPT_SHARE,
                           CURL_LOCK_DATA_SSL_SESSION);
  if (sc != CURLSHE_OK) {
    dsec_registry_free(r);
    return dsec_fail(err, 0, "cannot set up libcurl: %s",
                     curl_share_strerror(sc));
  }
  dsec_debug("registry %s at %s", r->name, r->base);
  *out = r;
  return 0;
}

void dsec_registry_free(struct dsec_registry *r)
{
  if (!r)
    return;
  /* Handles first: they refer to the share. */
  if (r->easy)
    curl_easy_cleanup(r->easy);
  if (r->multi)
    (void) curl_multi_cleanup(r->multi);
  if (r->share)
    (void) curl_share_cleanup(r->share);
  free(r->name);
  free(r->repository);
  free(r->base);
  free(r->scheme);
  free(r->host);
  free(r->user);
  free_secret(r->password);
  free_secret(r->token);
  free(r);
}

int dsec_registry_get_manifest(struct dsec_registry *r, const char *reference,
                               char **body, size_t *len, char **media_type,
                               struct dsec_error **err)
{
  struct xfer x = {
    .r = r, .kind = XFER_MANIFEST, .ref = reference, .curl = r->easy,
    .same_origin = true, .max = MANIFEST_MAX,
  };
  enum xfer_next next;
  char *type;
  size_t n;

  if (!reference_valid(reference))
    return dsec_bad_input(err, "invalid tag or digest \"%s\" for %s",
                          reference, r->name);
  x.url = xasprintf("%s/v2/%s/manifests/%s", r->base, r->repository,
                    reference);
  do {
    CURLcode rc;

    if (xfer_setup(&x, &x.err) < 0)
      goto fail;
    rc = curl_easy_perform(x.curl);
    next = xfer_finish(&x, rc);
  } while (next == XFER_RETRY);
  if (next != XFER_DONE)
    goto fail;

  /* "type/subtype; charset=..." -> "type/subtype" */
  type = x.content_type ? x.content_type : "";
  n = strcspn(type, ";");
  while (n > 0 && (type[n - 1] == ' ' || type[n - 1] == '\t'))
    n--;
  *media_type = xstrndup(type, n);
  for (char *p = *media_type; *p; p++)
    if ('A' <= *p && *p <= 'Z')
      *p += 'a' - 'A';
  *len = x.len;
  *body = x.buf ? steal_pointer(&x.buf) : xstrdup("");
  dsec_debug("manifest %s: %zu bytes, %s", reference, *len, *media_type);
  xfer_clear(&x);
  return 0;

fail:
  /* xfer_clear frees x.err; hand it over first. */
  if (err && !*err)
    *err = steal_pointer(&x.err);
  xfer_clear(&x);
  return -1;
}

/* ---- progress on a terminal ---- */

struct progress {
  bool on;
  bool drawn;
  double last_ms;
  uint64_t total;
  size_t width;
};

static void human(uint64_t n, char *buf, size_t size)
{
  if (n < 1024)
    snprintf(buf, size, "%llu B", (unsigned long long) n);
  else if (n < (1u << 20))
    snprintf(buf, size, "%.1f KiB", (double) n / 1024.0);
  else if (n < (1ull << 30))
    snprintf(buf, size, "%.1f MiB", (double) n / 1048576.0);
  else
    snprintf(buf, size, "%.2f GiB", (double) n / 1073741824.0);
}

/* The header's one exception to libcommon not printing: a progress line on
 * stderr, and only when it is a terminal. */
static void progress_draw(struct progress *p, struct xfer *xs, size_t n,
                          size_t done, bool final)
{
  char line[160], a[32], b[32];
  uint64_t bytes = 0;
  double now;
  int len;

  if (!p->on)
    return;
  now = dsec_now_ms();
  if (!final && p->drawn && now - p->last_ms < 100)
    return;
  p->last_ms = now;
  for (size_t i = 0; i < n; i++)
    bytes += xs[i].received;
  human(bytes, a, sizeof a);
  human(p->total, b, sizeof b);
  len = snprintf(line, sizeof line, "\rFetching blobs: %s / %s, %zu/%zu done",
                 a, b, done, n);
  if (len < 0)
    return;
  if ((size_t) len >= sizeof line)
    len = sizeof line - 1;
  /* Blank what a longer previous line left. */
  while ((size_t) len < p->width && (size_t) len < sizeof line - 2)
    line[len++] = ' ';
  p->width = len;
  if (final)
    line[len++] = '\n';
  if (write(STDERR_FILENO, line, len) < 0) {
    p->on = false; /* a display that cannot be written is not shown */
    return;
  }
  p->drawn = true;
}

/* ---- blobs ---- */

static int blob_start(struct dsec_registry *r, struct xfer *x)
{
  CURLMcode mc;

  if (xfer_setup(x, &x->err) < 0)
    return -1;
  mc = curl_multi_add_handle(r->multi, x->curl);
  if (mc != CURLM_OK)
    return dsec_fail(&x->err, 0, "cannot fetch blob %s from %s: %s", x->ref,
                     r->name, curl_multi_strerror(mc));
  x->in_multi = true;
  return 0;
}

static void blob_end(struct xfer *x, size_t *active, size_t *done,
                     struct dsec_error **first)
{
  x->finished = true;
  (*active)--;
  if (x->err) {
    if (!*first)
      *first = x->err;
  } else {
    (*done)++;
  }
}

int dsec_registry_fetch_blobs(struct dsec_registry *r, struct dsec_fetch *v,
                              size_t n, int parallel, struct dsec_error **err)
{
  _cleanup_free_ struct xfer *xs = NULL;
  struct dsec_error *first = NULL;
  struct progress prog = { 0 };
  size_t next = 0, active = 0, done = 0;
  CURLMcode mc = CURLM_OK;
  int ret = 0;

  if (n == 0)
    return 0;
  if (parallel < 1)
    parallel = 1;
  xs = xzalloc(n * sizeof *xs);
  for (size_t i = 0; i < n; i++) {
    struct xfer *x = &xs[i];

    dsec_error_free(v[i].err);
    v[i].err = NULL;
    x->r = r;
    x->kind = XFER_BLOB;
    x->ref = v[i].digest;
    x->fetch = &v[i];
    x->own_curl = true;
    x->same_origin = true;
    prog.total += v[i].size;
  }
  prog.on = isatty(STDERR_FILENO) == 1;

  while (next < n || active > 0) {
    CURLMsg *m;
    int running, left;

    /* Start transfers up to the limit. */
    while (next < n && active < (size_t) parallel) {
      struct xfer *x = &xs[next++];

      active++;
      if (!x->fetch->digest || !dsec_digest_valid(x->fetch->digest)) {
        dsec_bad_input(&x->err, "invalid blob digest \"%s\"",
                       x->fetch->digest ? x->fetch->digest : "");
      } else if (!x->fetch->writer) {
        dsec_fail(&x->err, EINVAL, "no writer for blob %s", x->ref);
      } else {
        x->curl = curl_easy_init();
        if (!x->curl)
          dsec_fail(&x->err, ENOMEM, "cannot set up a request for blob %s",
                    x->ref);
        else {
          x->url = xasprintf("%s/v2/%s/blobs/%s", r->base, r->repository,
                             x->ref);
          blob_start(r, x);
        }
      }
      if (x->err)
        blob_end(x, &active, &done, &first);
    }
    if (active == 0)
      continue;

    mc = curl_multi_perform(r->multi, &running);
    if (mc != CURLM_OK)
      goto multi_failed;
    while ((m = curl_multi_info_read(r->multi, &left))) {
      struct xfer *x;
      char *priv = NULL;
      enum xfer_next step;
      CURLcode result = m->data.result;
      CURL *h = m->easy_handle;

      if (m->msg != CURLMSG_DONE)
        continue;
      if (curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv) != CURLE_OK ||
          !priv) {
        /* Cannot happen: every handle carries its xfer. */
        mc = CURLM_INTERNAL_ERROR;
        goto multi_failed;
      }
      x = (struct xfer *) priv;
      /* m is invalid after the handle is removed. */
      mc = curl_multi_remove_handle(r->multi, h);
      if (mc != CURLM_OK)
        goto multi_failed;
      x->in_multi = false;
      step = xfer_finish(x, result);
      if (step == XFER_RETRY && blob_start(r, x) == 0)
        continue;
      if (step == XFER_DONE)
        dsec_debug("blob %s: %llu bytes", x->ref,
                   (unsigned long long) x->received);
      blob_end(x, &active, &done, &first);
    }
    progress_draw(&prog, xs, n, done, false);
    if (active > 0) {
      mc = curl_multi_poll(r->multi, NULL, 0, 100, NULL);
      if (mc != CURLM_OK)
        goto multi_failed;
    }
  }
  goto out;

multi_failed:
  /* The multi handle itself broke: every unfinished fetch fails. */
  for (size_t i = 0; i < n; i++) {
    struct xfer *x = &xs[i];

    if (x->finished)
      continue;
    dsec_fail(&x->err, 0, "cannot fetch blob %s from %s: %s", x->ref, r->name,
              curl_multi_strerror(mc));
    if (!first)
      first = x->err;
    x->finished = true;
  }

out:
  if (prog.drawn)
    progress_draw(&prog, xs, n, done, true);
  if (first) {
    dsec_error_set(err, first->status, first->errnum, "%s", first->msg);
    ret = -1;
  }
  for (size_t i = 0; i < n; i++) {
    v[i].err = steal_pointer(&xs[i].err);
    xfer_clear(&xs[i]);
  }
  return ret;
}
