/*
 * rdma-container: our declaration of the part of DOCA's doca_buf_inventory.h that
 * we use. Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK
 * by conformance/check.c. Not NVIDIA's header.
 *
 * The SDK's doca_buf_inventory_buf_get_by_addr() and _by_data() are static inline
 * wrappers around doca_buf_inventory_buf_get_by_args(); the doca-sys crate provides
 * them in Rust, so they are not declared here.
 */
#ifndef DOCA_SYS_DECL_BUF_INVENTORY_H
#define DOCA_SYS_DECL_BUF_INVENTORY_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;
struct doca_mmap;
struct doca_buf_inventory;

/* Create an inventory holding num_elements buf descriptors. */
doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory **inventory);

/* Destroy (stops it implicitly); every buf must have been returned. */
doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory *inventory);

/* Allow taking bufs from the inventory. */
doca_error_t doca_buf_inventory_start(struct doca_buf_inventory *inventory);

/* Refuse further bufs. */
doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory *inventory);

/* Take a buf for [addr, addr + len) of a started mmap, data window [data, data + data_len). */
doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory *inventory,
						struct doca_mmap *mmap,
						void *addr,
						size_t len,
						void *data,
						size_t data_len,
						struct doca_buf **buf);

/* Number of bufs still available. */
doca_error_t doca_buf_inventory_get_num_free_elements(const struct doca_buf_inventory *inventory,
						      uint32_t *num_of_free_elements);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_BUF_INVENTORY_H */
