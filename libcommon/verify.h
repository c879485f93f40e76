/* Checking the store whole (dsec-layer verify) and repairing what can be
 * repaired safely.  A finding is one record
 *
 *   {"type":"finding","what":W,"id":ID,"problem":TEXT,"repair":ACTION}
 *
 * what is "blob", "image", "layer", "erofs", "rootfs", "ref", "source",
 * "vm-boot" (a VM's boot files, store/vm), "tmp" or "sandbox"; repair says what a repair does ("remove",
 * "complete", "none: WHY") or, with repair on, what it did ("removed",
 * "completed", "failed: WHY", "none: WHY"). */
#ifndef DSEC_VERIFY_H
#define DSEC_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

struct dsec_verify_opts {
  bool repair; /* fix what can be fixed; the caller holds the gc lock
                * exclusively */
  bool quick;  /* every check but rehashing the blobs */
  int min_age_s; /* partial objects younger than this are not findings
                  * (a collector leaves them for its next run) */
  bool no_partial; /* leave partial objects (temporary files, .tmp-* and
                    * .trash-* names) to the caller */
};

struct dsec_verify_counts {
  int64_t blobs, images, layers, refs, sources, vm_boot; /* checked */
  int64_t findings, repaired, remaining;
};

/* Called for each finding (rec is borrowed). */
typedef int (*dsec_verify_emit_fn)(json_t *rec, void *ud,
                                   struct dsec_error **err);

/* Checks every blob (against its digest), image and layer record, ref,
 * source reference, EROFS image, extracted tree and VM boot entry of the
 * store, and
 * looks for partial objects (temporary files, .tmp-* and .trash-*
 * names).  The caller holds the store's gc lock: shared to check,
 * exclusive to repair.  Returns 0 with *c filled, or -1. */
int dsec_store_verify(struct dsec_store *s, const struct dsec_verify_opts *o,
                      dsec_verify_emit_fn emit, void *ud,
                      struct dsec_verify_counts *c, struct dsec_error **err);

#endif
