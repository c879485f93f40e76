/* Fuzz target: the guest protocol, both ways: the agent's messages as the
 * VM supervisor reads them (dsec_vm_agent_next in libcommon/vm.c: a JSON
 * header line and a payload, written by a guest whose root may have
 * replaced the agent), and the host's as the agent reads them
 * (dsec_guest_next in libcommon/guest.c), with the exec message taken
 * apart (dsec_guest_exec_from).  The input's first byte sets the size of
 * the pieces the rest arrives in.  Beyond memory errors and undefined
 * behaviour it checks: a message's payload lies within what was
 * received, right after its header, no longer than the lengths the header
 * gives; a violation ends the stream (host side); the input fed in pieces
 * gives the same messages and the same end as fed whole. */
#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest.h"
#include "vm.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c))                                                                 \
      abort();                                                                \
  } while (0)

struct seen {
  uint64_t h; /* the messages, hashed (FNV-1a) */
  size_t messages;
  bool bad;
};

static void mix(struct seen *w, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    w->h = (w->h ^ b[i]) * 1099511628211u;
}

static void message(struct seen *w, json_t *m, const char *payload,
                    size_t plen)
{
  _cleanup_free_ char *text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
  struct dsec_guest_exec x = { 0 };

  CHECK(text);
  mix(w, text, strlen(text));
  mix(w, payload, plen);
  w->messages++;
  /* the same header as an exec message, as the guest reads one */
  dsec_guest_exec_from(&x, m);
  for (size_t i = 0; x.argv && x.argv[i]; i++)
    mix(w, x.argv[i], strlen(x.argv[i]));
  for (size_t i = 0; x.envp && x.envp[i]; i++)
    mix(w, x.envp[i], strlen(x.envp[i]));
  free((void *) x.argv);
  free((void *) x.envp);
}

/* Feeds data in pieces of step bytes (0: whole), as the supervisor's
 * reads deliver it, consuming each whole message. */
static void feed(struct seen *w, const char *data, size_t size, size_t step)
{
  char *buf = malloc(size + 1);
  size_t len = 0, off = 0;

  CHECK(buf);
  w->h = 14695981039346656037u;
  while (off < size && !w->bad) {
    size_t n = step && step < size - off ? step : size - off;
    const char *payload;
    size_t plen, used;
    json_t *m;

    memcpy(buf + len, data + off, n);
    len += n;
    off += n;
    while ((m = dsec_vm_agent_next(buf, len, &payload, &plen, &used,
                                   &w->bad))) {
      CHECK(used <= len && used > plen);
      CHECK(payload == buf + used - plen && payload[-1] == '\n');
      {
        /* the lengths the header gives */
        json_int_t ol = json_integer_value(json_object_get(m, "stdout_len"));
        json_int_t el = json_integer_value(json_object_get(m, "stderr_len"));
        json_int_t dl = json_integer_value(json_object_get(m, "data_len"));
        CHECK(ol >= 0 && el >= 0 && dl >= 0);
        CHECK((size_t) ol + (size_t) el + (size_t) dl == plen);
      }
      message(w, m, payload, plen);
      json_decref(m);
      memmove(buf, buf + used, len - used);
      len -= used;
    }
  }
  mix(w, &w->bad, sizeof w->bad);
  free(buf);
}

/* The agent's side: the host's messages, fed the same way. */
static void feed_agent(struct seen *w, const char *data, size_t size,
                       size_t step)
{
  char *buf = malloc(size + 1);
  size_t len = 0, off = 0;

  CHECK(buf);
  w->h = 14695981039346656037u;
  while (off < size) {
    size_t n = step && step < size - off ? step : size - off;
    size_t used, plen;
    json_t *req;
    bool bad;

    memcpy(buf + len, data + off, n);
    len += n;
    off += n;
    while ((used = dsec_guest_next(buf, len, &req, &plen, &bad)) > 0) {
      CHECK(used <= len && used > plen);
      CHECK(buf[used - plen - 1] == '\n');
      CHECK(!bad || plen == 0);
      CHECK(req || plen == 0);
      mix(w, &bad, sizeof bad);
      if (req) {
        json_int_t sl = json_integer_value(json_object_get(req, "stdin_len"));
        CHECK(bad || (size_t) sl == plen);
        message(w, req, buf + used - plen, bad ? 0 : plen);
      }
      json_decref(req);
      memmove(buf, buf + used, len - used);
      len -= used;
    }
  }
  mix(w, &len, sizeof len);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct seen whole = { 0 }, pieces = { 0 };

  /* below DSEC_GUEST_HEADER_MAX: a header's end never depends on pieces */
  if (size < 1 || size > (1u << 20))
    return 0;
  feed(&whole, (const char *) data + 1, size - 1, 0);
  feed(&pieces, (const char *) data + 1, size - 1, data[0] % 64 + 1);
  CHECK(whole.bad == pieces.bad);
  CHECK(whole.h == pieces.h && whole.messages == pieces.messages);

  memset(&whole, 0, sizeof whole);
  memset(&pieces, 0, sizeof pieces);
  feed_agent(&whole, (const char *) data + 1, size - 1, 0);
  feed_agent(&pieces, (const char *) data + 1, size - 1, data[0] % 64 + 1);
  CHECK(whole.h == pieces.h && whole.messages == pieces.messages);
  return 0;
}
