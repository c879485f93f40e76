/* The network of a sandbox in "proxy" mode: it has no route out, only an
 * HTTP/HTTPS (CONNECT) proxy on its own 127.0.0.1:3128 that the supervisor
 * serves from outside.  The proxy reads one request per connection,
 * canonicalises the host it names (and the Host header's, and a TLS
 * ClientHello's SNI) before any check, checks host and port against the
 * spec's allow and deny lists (code hosts, registries, mirrors and the
 * like are denied unless named in allow; an IP address passes only when
 * named exactly), resolves names itself and refuses a name that resolves
 * to a private or special-purpose address, and reports every attempt.
 * The parsers and rules are in proxy-parse.h. */
#ifndef DSEC_PROXY_H
#define DSEC_PROXY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "json.h"

#define DSEC_PROXY_PORT 3128

/* Called with each attempt's record (type "network"); must be callable
 * from any thread. */
typedef void (*dsec_proxy_report_fn)(void *ud, json_t *event);

struct dsec_proxy;

/* network is the spec's network object (borrowed for the proxy's life). */
struct dsec_proxy *dsec_proxy_new(json_t *network, dsec_proxy_report_fn report,
                                  void *ud);
/* Serves one accepted connection on a thread of its own (takes fd). */
void dsec_proxy_serve(struct dsec_proxy *p, int fd);

/* A reporter that appends the records to a sandbox's audit log, at
 * most 100 a second: past that they are counted and one
 * "network_suppressed" record says how many went (a flood of attempts
 * cannot hide the rest of the trail); the first refusal of each host
 * passes the limit (audit.h).  ud is a struct dsec_net_events set up
 * with dsec_net_events_init. */
struct dsec_audit;
struct dsec_net_events {
  struct dsec_audit *audit; /* the sandbox's events.jsonl (borrowed) */
  pthread_mutex_t lock;
  double window;
  int in_window;
  uint64_t suppressed;
};
void dsec_net_events_init(struct dsec_net_events *e, struct dsec_audit *audit);
void dsec_net_events_report(void *ud, json_t *event);

struct dsec_host;

/* The decision for a canonical host (proxy-parse.h) and port, without
 * network traffic: NULL when the lists allow it, else the reason
 * (static).  *wildcard tells whether only wildcards allowed it. */
const char *dsec_proxy_check(json_t *network, const struct dsec_host *host,
                             int port, bool *wildcard);

/* Hosts denied unless an allow entry names them (NULL-terminated). */
extern const char *const dsec_proxy_default_deny[];

#endif
