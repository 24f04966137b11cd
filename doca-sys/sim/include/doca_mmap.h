/*
 * rdma-container: our declaration of the part of DOCA's doca_mmap.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header.
 */
#ifndef DOCA_SYS_DECL_MMAP_H
#define DOCA_SYS_DECL_MMAP_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_dev;
struct doca_mmap;

/* Create an empty, unstarted memory map. */
doca_error_t doca_mmap_create(struct doca_mmap **mmap);

/* Destroy (stops it implicitly); no doca_buf may point into it any more. */
doca_error_t doca_mmap_destroy(struct doca_mmap *mmap);

/* Register the memory on the added devices; setters are refused afterwards. */
doca_error_t doca_mmap_start(struct doca_mmap *mmap);

/* Stop; refused while doca_bufs point into the map. */
doca_error_t doca_mmap_stop(struct doca_mmap *mmap);

/* Add a device the memory is registered on (before start). */
doca_error_t doca_mmap_add_dev(struct doca_mmap *mmap, struct doca_dev *dev);

/* The one memory range of the map (before start; only once). */
doca_error_t doca_mmap_set_memrange(struct doca_mmap *mmap, void *addr, size_t len);

/* Access mask, a combination of enum doca_access_flag (before start). */
doca_error_t doca_mmap_set_permissions(struct doca_mmap *mmap, uint32_t access_mask);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_MMAP_H */
