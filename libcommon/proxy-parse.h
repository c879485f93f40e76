/* The proxy's parsers and rules over bytes: host name canonicalisation, IP
 * literals, allow/deny entries, the special-purpose address ranges, the
 * request head and the TLS ClientHello.  Pure functions: no I/O, no
 * allocation, no global state, so that the unit tests (tests/unit/
 * test-proxy.c) and the fuzz targets (tests/fuzz/) run the very code the
 * proxy (proxy.c) runs.  Internal to libcommon; links with libc only.
 *
 * Every function that can refuse returns <0 and sets *why to a static
 * sentence (never NULL then) that goes into the "network" event's
 * reason. */
#ifndef DSEC_PROXY_PARSE_H
#define DSEC_PROXY_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DSEC_HOST_NAME_MAX 253
/* A canonical host in text: a name (<= 253) or an address (<= 45). */
#define DSEC_HOST_BUF 256
/* The largest request head and ClientHello the proxy reads. */
#define DSEC_PROXY_HEAD_MAX 16384
#define DSEC_PROXY_HELLO_MAX 16384

enum dsec_host_kind { DSEC_HOST_NAME, DSEC_HOST_IPV4, DSEC_HOST_IPV6 };

struct dsec_host {
  enum dsec_host_kind kind;
  /* lowercase ASCII without a trailing dot, or an address as inet_ntop
   * writes it (IPv6 without brackets) */
  char name[DSEC_HOST_BUF];
  uint8_t addr[16]; /* a literal's 4 or 16 bytes */
};

/* Canonicalises the host s[0..len) (no port): lowercase, one trailing dot
 * stripped; empty labels, labels over 63 and names over 253 characters,
 * characters outside [a-z0-9-_.] and any non-ASCII byte are refused (no
 * IDNA: an xn-- label is compared as it is).  A name that inet_aton reads
 * (127.0.0.1, 127.1, 0x7f.1, 2130706433) is an IPv4 literal, and one whose
 * last label is a number but that inet_aton does not read is refused.
 * bracketed: s was inside [ ], and must be an IPv6 address (no zone). */
int dsec_host_canon(const char *s, size_t len, bool bracketed,
                    struct dsec_host *h, const char **why);

/* "host", "host:port", "[v6]", "[v6]:port" (the port 1..65535) into h and
 * *port (default_port when there is none). */
int dsec_authority_parse(const char *s, size_t len, int default_port,
                         struct dsec_host *h, int *port, const char **why);

/* Two canonical hosts are the same host. */
bool dsec_host_equal(const struct dsec_host *a, const struct dsec_host *b);

/* A special-purpose address (RFC 6890 and the IANA registries: private,
 * loopback, link-local, shared, documentation, benchmarking, multicast,
 * reserved, NAT64, 6to4, Teredo, ...): never reached through a name.  For
 * an IPv4-mapped IPv6 address the embedded IPv4 address decides.  family
 * is AF_INET (4 bytes) or AF_INET6 (16); any other family is special. */
bool dsec_addr_special(int family, const uint8_t *addr);

/* An allow or deny entry: "*", "host", "*.domain", "[v6]", a bare IPv6
 * address, each with an optional ":port"; ":port" alone is any host on
 * that port.  '*' matches any run of characters. */
struct dsec_proxy_entry {
  bool wildcard; /* the entry has a '*' (or no host): it never matches a literal */
  int port;      /* 0: any */
  struct dsec_host host; /* exact entries; a wildcard's pattern is in host.name */
};
int dsec_proxy_entry_parse(const char *s, struct dsec_proxy_entry *e,
                           const char **why);
/* for_deny: a wildcard also matches an IP literal's text (in allow, a
 * wildcard never matches a literal). */
bool dsec_proxy_entry_match(const struct dsec_proxy_entry *e,
                            const struct dsec_host *h, int port, bool for_deny);

/* ---- the request head */
struct dsec_http_request {
  char method[16];
  bool connect;           /* CONNECT host:port, else an absolute http:// URI */
  struct dsec_host host;  /* the target */
  int port;
  const char *path;       /* absolute form: origin form of the target, in buf */
  size_t path_len;        /* (the path is "/" when path_len is 0) */
  bool http10;            /* HTTP/1.0, else HTTP/1.1 */
  bool has_host_header;   /* a valid Host header was there */
  struct dsec_host host_header;
  int host_header_port;   /* 0: the Host header has no port */
  int64_t content_length; /* -1: none */
  bool chunked;           /* a Transfer-Encoding header was there */
  size_t head_len;        /* bytes up to and including the empty line */
};

/* Parses the request head at the start of buf[0..len): 1 when it is whole
 * and well formed (r filled), 0 when the empty line has not come yet and
 * nothing seen so far is wrong, <0 when it is malformed (*why).  Strict:
 * CRLF line ends only, no control characters, no obsolete line folding,
 * no user info in the URI, one Host header, one Content-Length. */
int dsec_http_request_parse(const char *buf, size_t len,
                            struct dsec_http_request *r, const char **why);

/* The Host header against the target: a plain request must have one naming
 * the same host and port (80 when it has none); a CONNECT's, when there is
 * one, must name the same host (and port, if it has one). */
int dsec_http_host_check(const struct dsec_http_request *r, const char **why);

/* The head to send upstream: the request line in origin form, the headers
 * without Connection, Proxy-Connection, Keep-Alive and
 * Proxy-Authorization, and "Connection: close" (one request per
 * connection: a second request on it would bypass the checks).  Writes at
 * most outsize bytes; returns the length, or 0 when outsize is too small
 * (head_len + 32 always suffices). */
size_t dsec_http_forward_head(const char *buf, const struct dsec_http_request *r,
                              char *out, size_t outsize);

/* ---- the TLS ClientHello */
struct dsec_tls_hello {
  size_t len;       /* bytes of the records that carry it */
  int records;      /* how many records */
  int names;        /* host names in the server_name extension */
  bool ech;         /* an encrypted_client_hello (or ESNI) extension */
  size_t sni_len;   /* the first name's length (may exceed sizeof sni) */
  char sni[DSEC_HOST_BUF]; /* its first bytes, NUL-terminated */
};

/* Parses the ClientHello at the start of buf[0..len), which may span
 * records: 1 when it is whole and well formed (h filled), 0 when what is
 * there is a well-formed beginning (read more), <0 when it is malformed or
 * not TLS (*why).  A hello over DSEC_PROXY_HELLO_MAX bytes is refused. */
int dsec_tls_hello_parse(const uint8_t *buf, size_t len,
                         struct dsec_tls_hello *h, const char **why);

/* The hello against the CONNECT target: exactly one server name, the
 * target's (canonicalised); none for an IP literal target; no ECH. */
int dsec_tls_hello_check(const struct dsec_tls_hello *h,
                         const struct dsec_host *target, const char **why);

/* Writes s[0..len) as printable ASCII into out (bytes outside 0x20..0x7e as
 * \xNN), truncated to fit outsize (>= 1) with "..." marking a cut. */
void dsec_printable(const char *s, size_t len, char *out, size_t outsize);

#endif
