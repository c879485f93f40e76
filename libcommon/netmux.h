/* Stream connections multiplexed over one byte channel: how a VM's
 * guest reaches the supervisor's proxy without a network card.  The guest
 * side (dsec-agent) accepts TCP connections on its 127.0.0.1:3128 and
 * the host side (the VM supervisor) hands each to the proxy; between
 * them is a virtio-serial port carrying frames:
 *
 *   type (1 byte: open, data, close), id (4, little-endian),
 *   length (4, little-endian, at most 64 KiB), then length bytes
 *
 * Plain libc only: dsec-agent (static) links it too. */
#ifndef DSEC_NETMUX_H
#define DSEC_NETMUX_H

#include <stdint.h>

/* Host side: a new connection id from the guest; returns the descriptor
 * to relay it to (a socketpair end whose other end went to the proxy), or
 * -1 to refuse it. */
typedef int (*dsec_mux_open_fn)(void *ud, uint32_t id);

/* Relays until chan ends (EOF or an error); never returns early
 * otherwise.  listen_fd >= 0 (the guest): connections accepted there get
 * new ids and an open frame.  on_open (the host): called for each open
 * frame.  hup_retry: a channel that hangs up (a virtio port whose host
 * went away) is waited for instead of ending the loop. */
void dsec_mux_run(int chan, int listen_fd, dsec_mux_open_fn on_open, void *ud,
                  int hup_retry);

#endif
