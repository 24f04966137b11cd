/*
 * rdma-container: our declaration of the part of DOCA's doca_pe.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.3); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header. Linux only.
 */
#ifndef DOCA_SYS_DECL_PE_H
#define DOCA_SYS_DECL_PE_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_ctx;
struct doca_pe;
struct doca_task;

/* What doca_pe_progress() progresses once the notification is armed, as X(name, value).
 * SELECTIVE (the default): only contexts that got an event (or had work when armed), and
 * doca_pe_clear_notification() must follow a received event. PROGRESS_ALL: every context on
 * every progress call; on Linux doca_pe_request_notification() clears what was raised. */
#define DOCA_SYS_PE_EVENT_MODE_LIST(X)                 \
	X(DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE, 0)    \
	X(DOCA_PE_EVENT_MODE_PROGRESS_ALL, 1)

#ifndef DOCA_SYS_CONFORMANCE_CHECK
enum doca_pe_event_mode {
	DOCA_SYS_PE_EVENT_MODE_LIST(DOCA_SYS_ENUMERATOR)
};
#endif

/* Create a progress engine. */
doca_error_t doca_pe_create(struct doca_pe **pe);

/* Destroy a progress engine; every context connected to it must be destroyed first. */
doca_error_t doca_pe_destroy(struct doca_pe *pe);

/* Poll completions and run their callbacks; returns 1 if anything happened, else 0. */
uint8_t doca_pe_progress(struct doca_pe *pe);

/* The fd to wait on (readable once armed and progress is possible). */
doca_error_t doca_pe_get_notification_handle(const struct doca_pe *pe, doca_notification_handle_t *handle);

/* After a wake-up: clear the triggered notification before progressing. */
doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle);

/* Arm the notification handle before waiting on it. */
doca_error_t doca_pe_request_notification(struct doca_pe *pe);

/* Number of submitted, not yet completed tasks over all contexts of the engine. */
doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe *pe, size_t *num_inflight_tasks);

/* Submit a task; on failure the caller still owns it. */
doca_error_t doca_task_submit(struct doca_task *task);

/* Return a task (not submitted) to its context's pool. */
void doca_task_free(struct doca_task *task);

/* Completion status of a task (valid in its callbacks). */
doca_error_t doca_task_get_status(const struct doca_task *task);

/* Replace the task's user data. */
void doca_task_set_user_data(struct doca_task *task, union doca_data user_data);

/* The task's user data. */
union doca_data doca_task_get_user_data(const struct doca_task *task);

/* The context that allocated the task. */
struct doca_ctx *doca_task_get_ctx(const struct doca_task *task);

/* Attach a context to the engine (context must be idle; only once). */
doca_error_t doca_pe_connect_ctx(struct doca_pe *pe, struct doca_ctx *ctx);

/* Choose the event mode (experimental in the SDK; not from inside a task callback). */
doca_error_t doca_pe_set_event_mode(struct doca_pe *pe, enum doca_pe_event_mode event_mode);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_PE_H */
