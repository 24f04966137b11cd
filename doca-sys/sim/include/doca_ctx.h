/*
 * rdma-container: our declaration of the part of DOCA's doca_ctx.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header.
 */
#ifndef DOCA_SYS_DECL_CTX_H
#define DOCA_SYS_DECL_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_ctx;

/* Context life cycle, as X(name, value). */
#define DOCA_SYS_CTX_STATE_LIST(X)         \
	X(DOCA_CTX_STATE_IDLE, 0)          \
	X(DOCA_CTX_STATE_STARTING, 1)      \
	X(DOCA_CTX_STATE_RUNNING, 2)       \
	X(DOCA_CTX_STATE_STOPPING, 3)

#ifndef DOCA_SYS_CONFORMANCE_CHECK
enum doca_ctx_states {
	DOCA_SYS_CTX_STATE_LIST(DOCA_SYS_ENUMERATOR)
};
#endif

/* Called on every state change; the context is already in next_state. */
typedef void (*doca_ctx_state_changed_callback_t)(const union doca_data user_data,
						  struct doca_ctx *ctx,
						  enum doca_ctx_states prev_state,
						  enum doca_ctx_states next_state);

/* Finish configuration and start the context: DOCA_SUCCESS and RUNNING (synchronous start),
 * or DOCA_ERROR_IN_PROGRESS and STARTING (asynchronous: RUNNING once connected, during
 * doca_pe_progress()). */
doca_error_t doca_ctx_start(struct doca_ctx *ctx);

/* Stop the context; every task not in flight must be freed first. DOCA_ERROR_IN_PROGRESS
 * means it is STOPPING until progress drains it (flushed tasks are freed as they return). */
doca_error_t doca_ctx_stop(struct doca_ctx *ctx);

/* Number of submitted tasks that have not completed yet. */
doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx *ctx, size_t *num_inflight_tasks);

/* User data handed to the state callback and to every task callback (as ctx_user_data). */
doca_error_t doca_ctx_set_user_data(struct doca_ctx *ctx, union doca_data user_data);

/* Read back the value given to doca_ctx_set_user_data(). */
doca_error_t doca_ctx_get_user_data(const struct doca_ctx *ctx, union doca_data *user_data);

/* Register the state change callback. */
doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx *ctx, doca_ctx_state_changed_callback_t cb);

/* Current state. */
doca_error_t doca_ctx_get_state(const struct doca_ctx *ctx, enum doca_ctx_states *state);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_CTX_H */
