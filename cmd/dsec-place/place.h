/* Placement (dsec-place): a node's inventory, and the assignment of
 * sandbox requests to nodes.
 *
 * A plan is made in memory from two JSON Lines streams, node inventories
 * (what `dsec_place_probe` prints on each node) and requests
 * ({"rid","count","spec","spread","spread_max"}), then written as one
 * line per sandbox.  The rules, in the order they apply:
 *
 *   1. fit: the node offers the spec's backend, and the sandbox fits in
 *      its class's budget (DSEC_PLACE_* factors below) given what the
 *      node has committed and what this plan has put on it so far;
 *   2. spread: at most a bounded number of one spread group's sandboxes
 *      per node;
 *   3. overflow: nodes labelled {"pool":"burst"} only take a sandbox
 *      that no other node can;
 *   4. score, highest wins: 0.6 x the share of the image's known layer
 *      bytes the node holds (layers a node is given by this plan count
 *      as held: it fetches them once) + 0.4 x the share of the class's
 *      budget left free after placing;
 *   5. ties go to the node whose name sorts first, so the same input
 *      always gives the same plan. */
#ifndef DSEC_PLACE_H
#define DSEC_PLACE_H

#include <stdbool.h>

#include "json.h"

/* How far each class may commit a node, in percent of its CPUs and
 * memory.  Latency sandboxes are packed no further than the hardware
 * (their own sum); best-effort ones, counted together with everything
 * else on the node, up to twice the CPUs and one and a half times the
 * memory.  A latency sandbox must fit under both of its limits. */
#define DSEC_PLACE_LATENCY_CPU_PCT 100
#define DSEC_PLACE_LATENCY_MEM_PCT 100
#define DSEC_PLACE_TOTAL_CPU_PCT 200
#define DSEC_PLACE_TOTAL_MEM_PCT 150

/* What a spec without resources.cpus / resources.memory_mb counts as. */
#define DSEC_PLACE_DEFAULT_CPUS 1
#define DSEC_PLACE_DEFAULT_MEMORY_MB 1024

/* Bounds on the input. */
#define DSEC_PLACE_LINE_MAX (2u << 20)
#define DSEC_PLACE_COUNT_MAX 1000000
#define DSEC_PLACE_TOTAL_MAX 100000000

/* This node's inventory, {"type":"node", ...} (new ref): its name
 * ($SLURMD_NODENAME, else the host name), CPUs and memory (node.json may
 * override both), the backends that work here, the layers materialised in
 * the store, what live sandboxes have committed per class, and the labels
 * of $DSEC_ROOT/node.json.  A malformed node.json is bad input. */
json_t *dsec_place_probe(struct dsec_error **err);

/* Reads the inventories of nodes_path and the requests of requests_path
 * ("-" for stdin, at most one of them), plans, and writes one JSON line
 * per sandbox to out_fd: {"type":"assignment","rid","index","node",
 * "score","fetch_bytes"} or {"type":"unplaced","rid","index","reason"}.
 * Image names are resolved through the local store when there is one.
 * Nothing is written unless all input is valid; an error names the file,
 * the line and the field (bad input). */
int dsec_place_plan(const char *nodes_path, const char *requests_path,
                    int out_fd, struct dsec_error **err);

#endif
