/*
 * rdma-container: our declaration of the part of DOCA's doca_rdma.h that we use
 * (RC send/receive over an out-of-band export/connect). Written from the documented
 * API (DOCA 2.9 - 3.1); checked against the SDK by conformance/check.c. Not NVIDIA's
 * header. Every doca_rdma function is experimental in the SDK; build with
 * DOCA_ALLOW_EXPERIMENTAL_API.
 */
#ifndef DOCA_SYS_DECL_RDMA_H
#define DOCA_SYS_DECL_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;
struct doca_ctx;
struct doca_dev;
struct doca_devinfo;
struct doca_task;

struct doca_rdma;            /* the RDMA context */
struct doca_rdma_connection; /* one peer of an RDMA context */

/* RDMA transport, as X(name, value). */
#define DOCA_SYS_RDMA_TRANSPORT_TYPE_LIST(X)  \
	X(DOCA_RDMA_TRANSPORT_TYPE_RC, 0)     \
	X(DOCA_RDMA_TRANSPORT_TYPE_DC, 1)

#ifndef DOCA_SYS_CONFORMANCE_CHECK
enum doca_rdma_transport_type {
	DOCA_SYS_RDMA_TRANSPORT_TYPE_LIST(DOCA_SYS_ENUMERATOR)
};
#endif

/* ---- context ---- */

/* Create an RDMA context on an opened device. */
doca_error_t doca_rdma_create(struct doca_dev *dev, struct doca_rdma **rdma);

/* Destroy; the context must be idle. */
doca_error_t doca_rdma_destroy(struct doca_rdma *rdma);

/* The generic context of the RDMA context. */
struct doca_ctx *doca_rdma_as_ctx(struct doca_rdma *rdma);

/* Create a connection and describe it in a blob (owned by DOCA) for the peer. Only after
 * doca_ctx_start(): the context is STARTING (asynchronous start) or RUNNING (synchronous). */
doca_error_t doca_rdma_export(struct doca_rdma *rdma,
			      const void **local_rdma_conn_details,
			      size_t *local_rdma_conn_details_size,
			      struct doca_rdma_connection **rdma_connection);

/* Connect an exported connection to the peer's blob. Only after doca_ctx_start(); with an
 * asynchronous start the context is STARTING and doca_pe_progress() moves it to RUNNING once
 * connected. Tasks may be allocated and submitted only after that. */
doca_error_t doca_rdma_connect(struct doca_rdma *rdma,
			       const void *remote_rdma_conn_details,
			       size_t remote_rdma_conn_details_size,
			       struct doca_rdma_connection *rdma_connection);

/* ---- capabilities ---- */

/* Largest message the device can send or receive. */
doca_error_t doca_rdma_cap_get_max_message_size(const struct doca_devinfo *devinfo, uint32_t *max_message_size);

/* Largest send queue (outstanding send tasks) a context on the device can have. */
doca_error_t doca_rdma_cap_get_max_send_queue_size(const struct doca_devinfo *devinfo, uint32_t *max_send_queue_size);

/* Largest receive queue (posted receive tasks) a context on the device can have. */
doca_error_t doca_rdma_cap_get_max_recv_queue_size(const struct doca_devinfo *devinfo, uint32_t *max_recv_queue_size);

/* DOCA_SUCCESS if the device supports receive tasks. */
doca_error_t doca_rdma_cap_task_receive_is_supported(const struct doca_devinfo *devinfo);

/* DOCA_SUCCESS if the device supports send tasks. */
doca_error_t doca_rdma_cap_task_send_is_supported(const struct doca_devinfo *devinfo);

/* ---- properties (all only while the context is idle) ---- */

/* Send queue depth (rounded up to a power of 2): outstanding sends beyond it are refused. */
doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma *rdma, uint32_t send_queue_size);

/* Affects only GPU/DPA data paths; the CPU data path answers DOCA_ERROR_NOT_SUPPORTED. */
doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma *rdma, uint32_t recv_queue_size);

doca_error_t doca_rdma_set_transport_type(struct doca_rdma *rdma, enum doca_rdma_transport_type transport_type);

doca_error_t doca_rdma_set_mtu(struct doca_rdma *rdma, enum doca_mtu_size mtu);

/* RDMA access flags (enum doca_access_flag) granted to the peer. */
doca_error_t doca_rdma_set_permissions(struct doca_rdma *rdma, uint32_t permissions);

/* 1 to use a GRH (required on RoCE), 0 otherwise. */
doca_error_t doca_rdma_set_grh_enabled(struct doca_rdma *rdma, uint8_t grh_enabled);

/* Index into the port's GID table. */
doca_error_t doca_rdma_set_gid_index(struct doca_rdma *rdma, uint32_t gid_index);

doca_error_t doca_rdma_set_max_num_connections(struct doca_rdma *rdma, uint16_t max_num_connections);

/* Receiver-not-ready retries of a send (IB semantics: 7 = retry forever). */
doca_error_t doca_rdma_set_rnr_retry_count(struct doca_rdma *rdma, uint8_t rnr_retry_count);

/* Service level of the context's packets (IB SL; on RoCE the priority of VLAN-tagged frames). */
doca_error_t doca_rdma_set_sl(struct doca_rdma *rdma, uint32_t sl);

/* The service level in use. */
doca_error_t doca_rdma_get_sl(const struct doca_rdma *rdma, uint32_t *sl);

/* The MTU in use (one the user did not set may change when the connection is made). */
doca_error_t doca_rdma_get_mtu(const struct doca_rdma *rdma, enum doca_mtu_size *mtu);

/* ---- receive task ---- */

struct doca_rdma_task_receive;

/* Success and error callbacks of receive tasks share this type. */
typedef void (*doca_rdma_task_receive_completion_cb_t)(struct doca_rdma_task_receive *task,
						       union doca_data task_user_data,
						       union doca_data ctx_user_data);

/* Enable receive tasks: callbacks and pool size (idle only). */
doca_error_t doca_rdma_task_receive_set_conf(struct doca_rdma *rdma,
					     doca_rdma_task_receive_completion_cb_t successful_task_completion_cb,
					     doca_rdma_task_receive_completion_cb_t error_task_completion_cb,
					     uint32_t num_tasks);

/* Take a receive task from the pool; dst_buf may be NULL for empty messages only. */
doca_error_t doca_rdma_task_receive_allocate_init(struct doca_rdma *rdma,
						  struct doca_buf *dst_buf,
						  union doca_data user_data,
						  struct doca_rdma_task_receive **task);

struct doca_task *doca_rdma_task_receive_as_task(struct doca_rdma_task_receive *task);

void doca_rdma_task_receive_set_dst_buf(struct doca_rdma_task_receive *task, struct doca_buf *dst_buf);

struct doca_buf *doca_rdma_task_receive_get_dst_buf(const struct doca_rdma_task_receive *task);

/* Bytes received; valid only in the success callback. */
uint32_t doca_rdma_task_receive_get_result_len(const struct doca_rdma_task_receive *task);

/* ---- send task ---- */

struct doca_rdma_task_send;

/* Success and error callbacks of send tasks share this type. */
typedef void (*doca_rdma_task_send_completion_cb_t)(struct doca_rdma_task_send *task,
						    union doca_data task_user_data,
						    union doca_data ctx_user_data);

/* Enable send tasks: callbacks and pool size (idle only). */
doca_error_t doca_rdma_task_send_set_conf(struct doca_rdma *rdma,
					  doca_rdma_task_send_completion_cb_t successful_task_completion_cb,
					  doca_rdma_task_send_completion_cb_t error_task_completion_cb,
					  uint32_t num_tasks);

/* Take a send task from the pool; src_buf NULL sends an empty message. */
doca_error_t doca_rdma_task_send_allocate_init(struct doca_rdma *rdma,
					       struct doca_rdma_connection *rdma_connection,
					       const struct doca_buf *src_buf,
					       union doca_data user_data,
					       struct doca_rdma_task_send **task);

struct doca_task *doca_rdma_task_send_as_task(struct doca_rdma_task_send *task);

void doca_rdma_task_send_set_src_buf(struct doca_rdma_task_send *task, const struct doca_buf *src_buf);

const struct doca_buf *doca_rdma_task_send_get_src_buf(const struct doca_rdma_task_send *task);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_RDMA_H */
