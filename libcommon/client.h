/* The client side of a sandbox's exec socket: one JSON request per line,
 * one JSON answer per line, in order. */
#ifndef DSEC_CLIENT_H
#define DSEC_CLIENT_H

#include <stdio.h>

#include "json.h"

struct dsec_conn;

/* Connects to the supervisor of sandbox id. */
int dsec_conn_open(const char *id, struct dsec_conn **out,
                   struct dsec_error **err);
void dsec_conn_close(struct dsec_conn *c);
/* Sends one request (does not steal). */
int dsec_conn_send(struct dsec_conn *c, json_t *req, struct dsec_error **err);
/* A whole answer is read already (dsec_conn_recv returns it at once). */
bool dsec_conn_pending(const struct dsec_conn *c);
/* Its socket, to poll. */
int dsec_conn_fd(const struct dsec_conn *c);
/* The same, passing fd (a copy's pipe) with it. */
int dsec_conn_send_fd(struct dsec_conn *c, json_t *req, int fd,
                      struct dsec_error **err);
/* Reads the next answer (new ref); NULL with an error at EOF. */
json_t *dsec_conn_recv(struct dsec_conn *c, struct dsec_error **err);
/* send + recv. */
json_t *dsec_conn_call(struct dsec_conn *c, json_t *req,
                       struct dsec_error **err);

#endif
