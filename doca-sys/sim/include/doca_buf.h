/*
 * rdma-container: our declaration of the part of DOCA's doca_buf.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header.
 *
 * A doca_buf describes [head, head + len) inside an mmap, and within it the valid
 * data [data, data + data_len).
 */
#ifndef DOCA_SYS_DECL_BUF_H
#define DOCA_SYS_DECL_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;

/* Take a reference; refcount (nullable) receives the count before the call. */
doca_error_t doca_buf_inc_refcount(struct doca_buf *buf, uint16_t *refcount);

/* Drop a reference; at zero the buf returns to its inventory. */
doca_error_t doca_buf_dec_refcount(struct doca_buf *buf, uint16_t *refcount);

/* Length of the whole buffer. */
doca_error_t doca_buf_get_len(const struct doca_buf *buf, size_t *len);

/* Start of the whole buffer. */
doca_error_t doca_buf_get_head(const struct doca_buf *buf, void **head);

/* Length of the valid data. */
doca_error_t doca_buf_get_data_len(const struct doca_buf *buf, size_t *data_len);

/* Start of the valid data. */
doca_error_t doca_buf_get_data(const struct doca_buf *buf, void **data);

/* Move the data window; it must stay inside [head, head + len). */
doca_error_t doca_buf_set_data(struct doca_buf *buf, void *data, size_t data_len);

/* Change the data length, keeping the data pointer. */
doca_error_t doca_buf_set_data_len(struct doca_buf *buf, size_t data_len);

/* Set the data length to zero, keeping the data pointer. */
doca_error_t doca_buf_reset_data_len(struct doca_buf *buf);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_BUF_H */
