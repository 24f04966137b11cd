/*
 * rdma-container DOCA simulator: progress engine, generic context and tasks.
 */
#include "sim_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

/* Status of tasks flushed by doca_ctx_stop (see README: the SDK does not document the code). */
#define SIM_FLUSH_STATUS DOCA_ERROR_IO_FAILED

/* ---------------------------------------------------------------- queues */

void sim_queue_push(struct sim_task_queue *q, struct doca_task *t)
{
	t->next = NULL;
	if (q->tail != NULL)
		q->tail->next = t;
	else
		q->head = t;
	q->tail = t;
	q->len++;
}

struct doca_task *sim_queue_pop(struct sim_task_queue *q)
{
	struct doca_task *t = q->head;
	if (t == NULL)
		return NULL;
	q->head = t->next;
	if (q->head == NULL)
		q->tail = NULL;
	q->len--;
	t->next = NULL;
	return t;
}

bool sim_queue_remove(struct sim_task_queue *q, struct doca_task *t)
{
	struct doca_task *prev = NULL, *cur;
	for (cur = q->head; cur != NULL; prev = cur, cur = cur->next) {
		if (cur != t)
			continue;
		if (prev != NULL)
			prev->next = cur->next;
		else
			q->head = cur->next;
		if (q->tail == cur)
			q->tail = prev;
		q->len--;
		cur->next = NULL;
		return true;
	}
	return false;
}

/* ---------------------------------------------------------------- validation */

struct doca_pe *sim_pe_check(const struct doca_pe *pe, const char *fn)
{
	if (!sim_obj_is_live(pe, SIM_PE))
		sim_fatal("%s: %p is not a live doca_pe", fn, (const void *)pe);
	return (struct doca_pe *)pe;
}

struct doca_rdma *sim_rdma_check(const struct doca_rdma *rdma, const char *fn)
{
	if (!sim_obj_is_live(rdma, SIM_RDMA))
		sim_fatal("%s: %p is not a live doca_rdma", fn, (const void *)rdma);
	return (struct doca_rdma *)rdma;
}

struct doca_ctx *sim_ctx_check(const struct doca_ctx *ctx, const char *fn)
{
	struct sim_obj *o;
	for (o = sim_obj_first(SIM_RDMA); o != NULL; o = sim_obj_next(o, SIM_RDMA))
		if (&((struct doca_rdma *)o)->ctx == ctx)
			return (struct doca_ctx *)ctx;
	sim_fatal("%s: %p is not the doca_ctx of a live context", fn, (const void *)ctx);
}

struct doca_task *sim_task_check(const struct doca_task *task, const char *fn)
{
	struct sim_obj *o;
	for (o = sim_obj_first(SIM_RDMA); o != NULL; o = sim_obj_next(o, SIM_RDMA)) {
		struct doca_rdma *r = (struct doca_rdma *)o;
		const struct sim_task_pool *pools[2] = { &r->send_pool, &r->recv_pool };
		int i;
		for (i = 0; i < 2; i++)
			if (pools[i]->tasks != NULL && task >= pools[i]->tasks &&
			    task < pools[i]->tasks + pools[i]->pool_num)
				return (struct doca_task *)task;
	}
	sim_fatal("%s: %p is not a task of any live context", fn, (const void *)task);
}

/* ---------------------------------------------------------------- notification */

static bool sim_ctx_drained(const struct doca_ctx *ctx)
{
	const struct doca_rdma *r = ctx->rdma;
	return ctx->inflight == 0 && r->send_pool.allocated == 0 && r->recv_pool.allocated == 0;
}

/* An asynchronously started context becomes RUNNING once its connection is up. */
static bool sim_ctx_may_run(const struct doca_ctx *ctx)
{
	return ctx->state == DOCA_CTX_STATE_STARTING && sim_rdma_has_connected(ctx->rdma);
}

static bool sim_pe_has_work(const struct doca_pe *pe)
{
	const struct doca_ctx *c;
	if (pe->doneq.head != NULL)
		return true;
	for (c = pe->ctxs; c != NULL; c = c->pe_next)
		if ((c->state == DOCA_CTX_STATE_STOPPING && sim_ctx_drained(c)) || sim_ctx_may_run(c))
			return true;
	return false;
}

static size_t sim_spurious_clears;

size_t sim_pe_spurious_clears(void)
{
	return sim_spurious_clears;
}

/* Empty the eventfd: the handle is no longer readable. */
static void sim_pe_drain(struct doca_pe *pe)
{
	uint64_t v;
	while (read(pe->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
	pe->raised = false;
}

void sim_pe_kick(struct doca_pe *pe)
{
	uint64_t one = 1;
	if (pe == NULL || !pe->armed || !sim_pe_has_work(pe))
		return;
	pe->armed = false;
	pe->raised = true;
	if (write(pe->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		sim_warn("eventfd write failed: %s", strerror(errno));
}

void sim_task_complete(struct doca_task *t, doca_error_t status)
{
	struct doca_pe *pe = t->rdma->ctx.pe;
	t->state = SIM_TASK_COMPLETED;
	t->status = status;
	t->ever_completed = true;
	sim_queue_push(&pe->doneq, t);
	sim_pe_kick(pe);
}

/* ---------------------------------------------------------------- pe */

doca_error_t doca_pe_create(struct doca_pe **pe)
{
	struct doca_pe *p;

	SIM_ENTER();
	if (pe == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	SIM_FAULT();
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	p->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->evfd < 0) {
		free(p);
		SIM_RETURN(DOCA_ERROR_OPERATING_SYSTEM);
	}
	p->event_mode = DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE;
	sim_obj_add(&p->obj, SIM_PE);
	*pe = p;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_pe_destroy(struct doca_pe *pe)
{
	struct doca_pe *p;

	SIM_ENTER();
	if (pe == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	p = sim_pe_check(pe, __func__);
	if (p->in_progress)
		sim_fatal("doca_pe_destroy called from inside a callback of the same progress engine");
	SIM_FAULT();
	if (p->ctxs != NULL) {
		sim_warn("doca_pe_destroy: a context is still connected (destroy the context first)");
		SIM_RETURN(DOCA_ERROR_IN_USE);
	}
	close(p->evfd);
	sim_obj_remove(&p->obj);
	free(p);
	SIM_RETURN(DOCA_SUCCESS);
}

static void sim_ctx_set_state(struct doca_ctx *ctx, enum doca_ctx_states next)
{
	enum doca_ctx_states prev = ctx->state;
	ctx->state = next;
	if (ctx->state_cb != NULL)
		ctx->state_cb(ctx->user_data, ctx, prev, next);
}

uint8_t doca_pe_progress(struct doca_pe *pe)
{
	struct doca_pe *p;
	struct doca_task *t;
	struct doca_ctx *c;
	uint8_t made = 0;

	sim_lock();
	p = sim_pe_check(pe, __func__);
	if (p->in_progress)
		sim_fatal("doca_pe_progress called from inside a completion or state callback");
	if (p->event_mode == DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE && p->raised) {
		/* Selective mode: a raised notification must be cleared (doca_pe_clear_notification)
		 * before the engine delivers anything new. */
		sim_unlock();
		return 0;
	}
	p->in_progress = true;
	if (sim_cfg.batch > 1 && p->batchq.head == NULL) {
		/* DOCA_SIM_BATCH: one CQ poll takes several completions at once; the ones it took
		 * wait in the engine and raise no event (only the CQ does). */
		while (p->batchq.len < sim_cfg.batch && (t = sim_queue_pop(&p->doneq)) != NULL)
			sim_queue_push(&p->batchq, t);
	}
	t = sim_queue_pop(&p->batchq);
	if (t == NULL)
		t = sim_queue_pop(&p->doneq);
	if (t != NULL) {
		struct doca_rdma *r = t->rdma;
		struct sim_task_pool *pool = t->type == SIM_TASK_SEND ? &r->send_pool : &r->recv_pool;
		union sim_task_cb cb = t->status == DOCA_SUCCESS ? pool->ok_cb : pool->err_cb;
		union doca_data ctx_ud = r->ctx.user_data;

		r->ctx.inflight--;
		t->state = SIM_TASK_ALLOCATED;
		if (t->type == SIM_TASK_SEND)
			cb.send((struct doca_rdma_task_send *)t, t->user_data, ctx_ud);
		else
			cb.receive((struct doca_rdma_task_receive *)t, t->user_data, ctx_ud);
		made = 1;
	} else {
		for (c = p->ctxs; c != NULL; c = c->pe_next) {
			if (sim_ctx_may_run(c)) {
				/* Asynchronous start: the connection completed, STARTING -> RUNNING. */
				sim_ctx_set_state(c, DOCA_CTX_STATE_RUNNING);
				made = 1;
				break;
			}
			if (c->state == DOCA_CTX_STATE_STOPPING && sim_ctx_drained(c)) {
				/* The callback may destroy the context: do not touch it afterwards. */
				sim_ctx_set_state(c, DOCA_CTX_STATE_IDLE);
				made = 1;
				break;
			}
		}
	}
	p->in_progress = false;
	sim_unlock();
	return made;
}

doca_error_t doca_pe_get_notification_handle(const struct doca_pe *pe, doca_notification_handle_t *handle)
{
	struct doca_pe *p;

	SIM_ENTER();
	if (pe == NULL || handle == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	p = sim_pe_check(pe, __func__);
	SIM_FAULT();
	*handle = p->evfd;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle)
{
	struct doca_pe *p;

	(void)handle; /* unused on Linux, as in the SDK */
	SIM_ENTER();
	p = sim_pe_check(pe, __func__);
	SIM_FAULT();
	if (!p->raised) {
		/* doca_pe.h: call it after an event was received through the handle. */
		sim_spurious_clears++;
	}
	sim_pe_drain(p);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_pe_set_event_mode(struct doca_pe *pe, enum doca_pe_event_mode event_mode)
{
	struct doca_pe *p;

	SIM_ENTER();
	if (pe == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	p = sim_pe_check(pe, __func__);
	if (p->in_progress)
		sim_fatal("doca_pe_set_event_mode called from inside a callback of the same progress engine");
	if (event_mode != DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE && event_mode != DOCA_PE_EVENT_MODE_PROGRESS_ALL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	SIM_FAULT();
	p->event_mode = event_mode;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_pe_request_notification(struct doca_pe *pe)
{
	struct doca_pe *p;

	SIM_ENTER();
	p = sim_pe_check(pe, __func__);
	SIM_FAULT();
	/* Linux, PROGRESS_ALL: arming clears what was raised before. */
	if (p->event_mode == DOCA_PE_EVENT_MODE_PROGRESS_ALL)
		sim_pe_drain(p);
	p->armed = true;
	/* DOCA_SIM_ARM=edge: only completions that come after the arm raise the handle; what is
	 * already pending must be progressed (progress until 0 after arming). */
	if (!sim_cfg.arm_edge)
		sim_pe_kick(p);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe *pe, size_t *num_inflight_tasks)
{
	struct doca_pe *p;
	const struct doca_ctx *c;
	size_t n = 0;

	SIM_ENTER();
	if (pe == NULL || num_inflight_tasks == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	p = sim_pe_check(pe, __func__);
	for (c = p->ctxs; c != NULL; c = c->pe_next)
		n += c->inflight;
	*num_inflight_tasks = n;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_pe_connect_ctx(struct doca_pe *pe, struct doca_ctx *ctx)
{
	struct doca_pe *p;
	struct doca_ctx *c;

	SIM_ENTER();
	if (pe == NULL || ctx == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	p = sim_pe_check(pe, __func__);
	c = sim_ctx_check(ctx, __func__);
	if (c->state != DOCA_CTX_STATE_IDLE)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (c->pe != NULL)
		SIM_RETURN(DOCA_ERROR_NOT_PERMITTED);
	SIM_FAULT();
	c->pe = p;
	c->pe_next = p->ctxs;
	p->ctxs = c;
	SIM_RETURN(DOCA_SUCCESS);
}

/* Called by doca_rdma_destroy: the only way a context leaves its engine. */
void sim_pe_disconnect_ctx(struct doca_ctx *ctx)
{
	struct doca_ctx **pp;
	if (ctx->pe == NULL)
		return;
	for (pp = &ctx->pe->ctxs; *pp != NULL; pp = &(*pp)->pe_next) {
		if (*pp == ctx) {
			*pp = ctx->pe_next;
			break;
		}
	}
	ctx->pe = NULL;
	ctx->pe_next = NULL;
}

/* ---------------------------------------------------------------- ctx */

static void sim_pool_prepare(struct sim_task_pool *pool, struct doca_rdma *r, enum sim_task_type type)
{
	uint32_t i;
	if (!pool->configured || pool->pool_num == pool->num)
		return;
	/* Idle with nothing allocated: the pool can be resized. */
	free(pool->tasks);
	pool->tasks = calloc(pool->num, sizeof(*pool->tasks));
	if (pool->tasks == NULL) {
		pool->pool_num = 0;
		return;
	}
	pool->pool_num = pool->num;
	for (i = 0; i < pool->num; i++) {
		pool->tasks[i].rdma = r;
		pool->tasks[i].type = type;
		pool->tasks[i].state = SIM_TASK_FREE;
	}
}

doca_error_t doca_ctx_start(struct doca_ctx *ctx)
{
	struct doca_ctx *c;
	struct doca_rdma *r;

	SIM_ENTER();
	if (ctx == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	r = c->rdma;
	if (c->state != DOCA_CTX_STATE_IDLE)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (c->pe == NULL) {
		sim_warn("doca_ctx_start: the context is not connected to a progress engine");
		SIM_RETURN(DOCA_ERROR_NOT_CONNECTED);
	}
	if (r->transport != DOCA_RDMA_TRANSPORT_TYPE_RC) {
		sim_warn("doca_ctx_start: the simulator implements the RC transport only");
		SIM_RETURN(DOCA_ERROR_NOT_SUPPORTED);
	}
	SIM_FAULT();
	sim_pool_prepare(&r->send_pool, r, SIM_TASK_SEND);
	sim_pool_prepare(&r->recv_pool, r, SIM_TASK_RECEIVE);
	if ((r->send_pool.configured && r->send_pool.tasks == NULL) ||
	    (r->recv_pool.configured && r->recv_pool.tasks == NULL))
		SIM_RETURN(DOCA_ERROR_INITIALIZATION);
	if (sim_cfg.start_async) {
		/* Asynchronous start: STARTING until the connection completes (doca_rdma_connect,
		 * then doca_pe_progress moves the context to RUNNING). */
		sim_ctx_set_state(c, DOCA_CTX_STATE_STARTING);
		SIM_RETURN(DOCA_ERROR_IN_PROGRESS);
	}
	/* Synchronous start: straight to RUNNING, callback from inside this call. */
	sim_ctx_set_state(c, DOCA_CTX_STATE_RUNNING);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_ctx_stop(struct doca_ctx *ctx)
{
	struct doca_ctx *c;
	struct doca_rdma *r;
	struct doca_task *t;

	SIM_ENTER();
	if (ctx == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	r = c->rdma;
	if (c->pe == NULL)
		SIM_RETURN(DOCA_ERROR_NOT_CONNECTED);
	if (c->state != DOCA_CTX_STATE_RUNNING && c->state != DOCA_CTX_STATE_STARTING)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (sim_cfg.stop_refuse && sim_rdma_owned_tasks(r) != 0) {
		/* doca_pe.h: every task must be freed before the context is stopped (tasks flushed
		 * by the stop are freed as their callbacks hand them back). */
		sim_warn("doca_ctx_stop: %u task(s) still allocated (free every task not in flight first)",
			 sim_rdma_owned_tasks(r));
		SIM_RETURN(DOCA_ERROR_IN_USE);
	}
	SIM_FAULT();
	/* DOCA_SIM_STOP=accept (the SDK's way): tasks still allocated are the application's to free;
	 * the context stays STOPPING until they are, then progress moves it to IDLE. */
	/* Tear the QPs down (the peer sees the connection go away) and flush what is in flight. */
	sim_rdma_close_conns(r);
	while ((t = sim_queue_pop(&r->recvq)) != NULL)
		sim_task_complete(t, SIM_FLUSH_STATUS);
	if (sim_ctx_drained(c)) {
		sim_ctx_set_state(c, DOCA_CTX_STATE_IDLE);
		SIM_RETURN(DOCA_SUCCESS);
	}
	sim_ctx_set_state(c, DOCA_CTX_STATE_STOPPING);
	sim_pe_kick(c->pe);
	SIM_RETURN(DOCA_ERROR_IN_PROGRESS);
}

doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx *ctx, size_t *num_inflight_tasks)
{
	struct doca_ctx *c;

	SIM_ENTER();
	if (ctx == NULL || num_inflight_tasks == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	*num_inflight_tasks = c->inflight;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_ctx_set_user_data(struct doca_ctx *ctx, union doca_data user_data)
{
	struct doca_ctx *c;

	SIM_ENTER();
	if (ctx == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	SIM_FAULT();
	c->user_data = user_data;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_ctx_get_user_data(const struct doca_ctx *ctx, union doca_data *user_data)
{
	struct doca_ctx *c;

	SIM_ENTER();
	if (ctx == NULL || user_data == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	*user_data = c->user_data;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx *ctx, doca_ctx_state_changed_callback_t cb)
{
	struct doca_ctx *c;

	SIM_ENTER();
	if (ctx == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	SIM_FAULT();
	c->state_cb = cb;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_ctx_get_state(const struct doca_ctx *ctx, enum doca_ctx_states *state)
{
	struct doca_ctx *c;

	SIM_ENTER();
	if (ctx == NULL || state == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	c = sim_ctx_check(ctx, __func__);
	*state = c->state;
	SIM_RETURN(DOCA_SUCCESS);
}

/* ---------------------------------------------------------------- tasks */

doca_error_t doca_task_submit(struct doca_task *task)
{
	struct doca_task *t;
	struct doca_rdma *r;

	SIM_ENTER();
	if (task == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	t = sim_task_check(task, __func__);
	if (t->state == SIM_TASK_FREE)
		sim_fatal("doca_task_submit: task %p was freed", (void *)task);
	if (t->state != SIM_TASK_ALLOCATED)
		sim_fatal("doca_task_submit: task %p is already submitted (DOCA owns it until its callback)",
			  (void *)task);
	r = t->rdma;
	SIM_FAULT();
	if (r->ctx.state != DOCA_CTX_STATE_RUNNING) {
		sim_warn("doca_task_submit: the context is not running");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	if (t->buf != NULL)
		(void)sim_buf_check(t->buf, __func__);
	if (t->type == SIM_TASK_SEND) {
		if (!sim_conn_is_live(r, t->conn) || t->conn->id != t->conn_id)
			sim_fatal("doca_task_submit: the send task's connection %p no longer exists "
				  "(export/connect again after a restart and set it on the task)",
				  (void *)t->conn);
		if (t->conn->state == SIM_CONN_EXPORTED) {
			sim_warn("doca_task_submit: send on a connection that doca_rdma_connect was not called on");
			SIM_RETURN(DOCA_ERROR_NOT_CONNECTED);
		}
		if (t->conn->sendq.len >= r->send_queue_size) {
			sim_warn("doca_task_submit: %zu sends outstanding fill the send queue of %u "
				 "(doca_rdma_set_send_queue_size)",
				 t->conn->sendq.len,
				 r->send_queue_size);
			SIM_RETURN(DOCA_ERROR_FULL);
		}
	}
	t->state = SIM_TASK_SUBMITTED;
	t->status = DOCA_SUCCESS;
	t->rnr_retries = 0;
	t->result_len = 0;
	r->ctx.inflight++;
	if (t->type == SIM_TASK_SEND)
		sim_conn_submit_send(t->conn, t);
	else
		sim_rdma_post_receive(r, t);
	SIM_RETURN(DOCA_SUCCESS);
}

void doca_task_free(struct doca_task *task)
{
	struct doca_task *t;
	struct sim_task_pool *pool;
	struct doca_rdma *r;

	sim_lock();
	t = sim_task_check(task, __func__);
	if (t->state == SIM_TASK_FREE)
		sim_fatal("doca_task_free: task %p freed twice", (void *)task);
	if (t->state != SIM_TASK_ALLOCATED)
		sim_fatal("doca_task_free: task %p is submitted (only free it from its callback or before submit)",
			  (void *)task);
	r = t->rdma;
	pool = t->type == SIM_TASK_SEND ? &r->send_pool : &r->recv_pool;
	t->state = SIM_TASK_FREE;
	t->buf = NULL;
	t->conn = NULL;
	pool->allocated--;
	sim_count(SIM_TASK, -1);
	if (r->ctx.state == DOCA_CTX_STATE_STOPPING)
		sim_pe_kick(r->ctx.pe);
	sim_unlock();
}

doca_error_t doca_task_get_status(const struct doca_task *task)
{
	struct doca_task *t;
	doca_error_t rc;

	sim_lock();
	t = sim_task_check(task, __func__);
	if (t->state == SIM_TASK_FREE)
		sim_fatal("doca_task_get_status: task %p was freed", (const void *)task);
	rc = t->status;
	sim_unlock();
	return rc;
}

void doca_task_set_user_data(struct doca_task *task, union doca_data user_data)
{
	struct doca_task *t;

	sim_lock();
	t = sim_task_check(task, __func__);
	if (t->state != SIM_TASK_ALLOCATED)
		sim_fatal("doca_task_set_user_data: task %p is not owned by the application", (void *)task);
	t->user_data = user_data;
	sim_unlock();
}

union doca_data doca_task_get_user_data(const struct doca_task *task)
{
	struct doca_task *t;
	union doca_data ud;

	sim_lock();
	t = sim_task_check(task, __func__);
	if (t->state == SIM_TASK_FREE)
		sim_fatal("doca_task_get_user_data: task %p was freed", (const void *)task);
	ud = t->user_data;
	sim_unlock();
	return ud;
}

struct doca_ctx *doca_task_get_ctx(const struct doca_task *task)
{
	struct doca_task *t;
	struct doca_ctx *c;

	sim_lock();
	t = sim_task_check(task, __func__);
	c = &t->rdma->ctx;
	sim_unlock();
	return c;
}
