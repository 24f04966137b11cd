/*
 * rdma-container DOCA simulator: the RDMA context, its tasks, export/connect, and the
 * "NIC" thread that carries messages between connected contexts.
 *
 * Wire model (one connection = two Unix stream sockets):
 *   out_fd: we connected it to the peer's listener (named in the peer's blob); our
 *           DATA frames go out on it and the peer's ACK / RNR_NAK / NAK_ERR come back.
 *   in_fd:  accepted on our listener; the peer's DATA arrives on it and we answer.
 * Sends carry a sequence number. The receiver accepts only the next expected one
 * (go-back-N, as RC does): with no receive posted it answers RNR_NAK and the sender
 * retransmits from that message after a back-off, up to rnr_retry_count times
 * (7 = forever). A send completes when its ACK arrives. Any error completion moves the
 * connection to an error state in which every task on it fails, as a QP in error does.
 */
#include "sim_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>

#define SIM_RDMA_ACCESS_FLAGS                                                                             \
	(DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |   \
	 DOCA_ACCESS_FLAG_RDMA_ATOMIC)
#define SIM_RNR_INFINITE 7
#define SIM_DEFAULT_RNR_RETRY 1
#define SIM_BLOB_VERSION 1
#define SIM_MAX_SEND_QUEUE 32768u

enum sim_frame_type {
	SIM_FRAME_HELLO = 1,   /* payload: target nonce, sender nonce */
	SIM_FRAME_DATA = 2,    /* payload: the message */
	SIM_FRAME_ACK = 3,     /* seq delivered */
	SIM_FRAME_RNR_NAK = 4, /* seq found no receive posted */
	SIM_FRAME_NAK_ERR = 5, /* seq failed at the receiver; code says why */
	SIM_FRAME_DROP = 6,    /* the connection is dropped (fault injection); code for the tasks */
};

struct sim_frame {
	uint32_t type;
	uint32_t code;
	uint64_t seq;
	uint64_t len;
};

enum sim_fd_role { SIM_ROLE_WAKE = 0, SIM_ROLE_LISTEN = 1, SIM_ROLE_IN = 2, SIM_ROLE_OUT = 3 };

static bool nic_started;
static int nic_epfd = -1;
static int nic_wakefd = -1;
static uint64_t nic_next_conn_id = 1;

static void conn_fail(struct doca_rdma_connection *conn, doca_error_t code);
static void conn_peer_gone(struct doca_rdma_connection *conn);
static void conn_pump(struct doca_rdma_connection *conn);
static void conn_process_out(struct doca_rdma_connection *conn);
static void conn_process_in(struct doca_rdma_connection *conn);
static bool conn_read(int fd, struct sim_bytes *r);

/* ---------------------------------------------------------------- byte buffers */

static bool bytes_reserve(struct sim_bytes *b, size_t more)
{
	size_t need;
	if (b->off > 0 && b->off == b->len) {
		b->off = 0;
		b->len = 0;
	}
	need = b->len + more;
	if (need <= b->cap)
		return true;
	if (b->off > 0) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		need = b->len + more;
		if (need <= b->cap)
			return true;
	}
	{
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *p;
		while (cap < need)
			cap *= 2;
		p = realloc(b->p, cap);
		if (p == NULL)
			return false;
		b->p = p;
		b->cap = cap;
	}
	return true;
}

static void bytes_append(struct sim_bytes *b, const void *data, size_t len)
{
	if (!bytes_reserve(b, len))
		sim_fatal("out of memory buffering %zu bytes", len);
	if (len > 0)
		memcpy(b->p + b->len, data, len);
	b->len += len;
}

static void bytes_free(struct sim_bytes *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static void frame_append(struct sim_bytes *b, uint32_t type, uint32_t code, uint64_t seq, const void *payload,
			 uint64_t len)
{
	struct sim_frame f = { type, code, seq, len };
	bytes_append(b, &f, sizeof(f));
	bytes_append(b, payload, (size_t)len);
}

/* ---------------------------------------------------------------- NIC thread */

static uint64_t fd_tag(const struct doca_rdma_connection *conn, enum sim_fd_role role)
{
	return (conn->id << 2) | (uint64_t)role;
}

static void nic_wake(void)
{
	uint64_t one = 1;
	if (nic_wakefd >= 0 && write(nic_wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		sim_warn("wake-up write failed: %s", strerror(errno));
}

static void nic_watch(struct doca_rdma_connection *conn, int fd, enum sim_fd_role role, bool want_out)
{
	struct epoll_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0);
	ev.data.u64 = fd_tag(conn, role);
	if (epoll_ctl(nic_epfd, EPOLL_CTL_MOD, fd, &ev) != 0) {
		if (errno != ENOENT || epoll_ctl(nic_epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
			sim_warn("epoll_ctl(fd %d) failed: %s", fd, strerror(errno));
	}
}

static void nic_close(int *fd)
{
	if (*fd < 0)
		return;
	epoll_ctl(nic_epfd, EPOLL_CTL_DEL, *fd, NULL);
	close(*fd);
	*fd = -1;
}

static struct doca_rdma_connection *conn_by_id(uint64_t id)
{
	struct sim_obj *o;
	for (o = sim_obj_first(SIM_RDMA); o != NULL; o = sim_obj_next(o, SIM_RDMA)) {
		struct doca_rdma_connection *c;
		for (c = ((struct doca_rdma *)o)->conns; c != NULL; c = c->next)
			if (c->id == id)
				return c;
	}
	return NULL;
}

static int nic_timeout_ms(void)
{
	struct sim_obj *o;
	uint64_t now = sim_now_ns(), best = UINT64_MAX;

	for (o = sim_obj_first(SIM_RDMA); o != NULL; o = sim_obj_next(o, SIM_RDMA)) {
		struct doca_rdma_connection *c;
		for (c = ((struct doca_rdma *)o)->conns; c != NULL; c = c->next)
			if (c->paused_until_ns != 0 && c->paused_until_ns < best)
				best = c->paused_until_ns;
	}
	if (best == UINT64_MAX)
		return -1;
	if (best <= now)
		return 0;
	return (int)((best - now + 999999) / 1000000);
}

static void nic_timers(void)
{
	struct sim_obj *o;
	uint64_t now = sim_now_ns();

	for (o = sim_obj_first(SIM_RDMA); o != NULL; o = sim_obj_next(o, SIM_RDMA)) {
		struct doca_rdma_connection *c;
		for (c = ((struct doca_rdma *)o)->conns; c != NULL; c = c->next) {
			if (c->paused_until_ns != 0 && c->paused_until_ns <= now) {
				c->paused_until_ns = 0;
				conn_pump(c);
			}
		}
	}
}

static void conn_handle_event(struct doca_rdma_connection *conn, enum sim_fd_role role, uint32_t events);

static void *nic_main(void *arg)
{
	struct epoll_event evs[64];
	(void)arg;
	for (;;) {
		int timeout, n, i;

		sim_lock();
		timeout = nic_timeout_ms();
		sim_unlock();
		n = epoll_wait(nic_epfd, evs, 64, timeout);
		sim_lock();
		for (i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			enum sim_fd_role role = (enum sim_fd_role)(tag & 3);
			struct doca_rdma_connection *conn;
			if (role == SIM_ROLE_WAKE) {
				uint64_t v;
				while (read(nic_wakefd, &v, sizeof(v)) == (ssize_t)sizeof(v))
					;
				continue;
			}
			conn = conn_by_id(tag >> 2);
			if (conn != NULL)
				conn_handle_event(conn, role, evs[i].events);
		}
		nic_timers();
		sim_unlock();
	}
	return NULL;
}

static bool nic_ensure_started(void)
{
	pthread_t th;
	pthread_attr_t attr;
	sigset_t all, old;
	struct epoll_event ev;
	int rc;

	if (nic_started)
		return true;
	nic_epfd = epoll_create1(EPOLL_CLOEXEC);
	nic_wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (nic_epfd < 0 || nic_wakefd < 0)
		return false;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.u64 = SIM_ROLE_WAKE;
	if (epoll_ctl(nic_epfd, EPOLL_CTL_ADD, nic_wakefd, &ev) != 0)
		return false;
	/* The thread must never take the application's signals (Ctrl-C handlers and such). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&th, &attr, nic_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return false;
	nic_started = true;
	return true;
}

/* ---------------------------------------------------------------- socket I/O */

static void conn_flush(struct doca_rdma_connection *conn, enum sim_fd_role role)
{
	int *fd = role == SIM_ROLE_IN ? &conn->in_fd : &conn->out_fd;
	struct sim_bytes *w = role == SIM_ROLE_IN ? &conn->in_w : &conn->out_w;

	if (*fd < 0)
		return;
	while (w->off < w->len) {
		ssize_t n = send(*fd, w->p + w->off, w->len - w->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			w->off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		conn_peer_gone(conn);
		return;
	}
	nic_watch(conn, *fd, role, w->off < w->len);
}

/* Read what is available; returns false on end of stream or error. */
static bool conn_read(int fd, struct sim_bytes *r)
{
	for (;;) {
		ssize_t n;
		if (!bytes_reserve(r, 65536))
			sim_fatal("out of memory reading a socket");
		n = recv(fd, r->p + r->len, r->cap - r->len, MSG_DONTWAIT);
		if (n > 0) {
			r->len += (size_t)n;
			continue;
		}
		if (n == 0)
			return false;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK;
	}
}

/* The next complete frame of r, or NULL. */
static const struct sim_frame *frame_peek(const struct sim_bytes *r, const uint8_t **payload)
{
	struct sim_frame f;
	if (r->len - r->off < sizeof(f))
		return NULL;
	memcpy(&f, r->p + r->off, sizeof(f));
	if (r->len - r->off - sizeof(f) < f.len)
		return NULL;
	*payload = r->p + r->off + sizeof(f);
	return (const struct sim_frame *)(const void *)(r->p + r->off);
}

static void frame_consume(struct sim_bytes *r, const struct sim_frame *f)
{
	r->off += sizeof(*f) + (size_t)f->len;
}

/* ---------------------------------------------------------------- connection state */

static void conn_close_listener(struct doca_rdma_connection *conn)
{
	if (conn->lfd >= 0) {
		nic_close(&conn->lfd);
		unlink(conn->blob.path);
	}
}

static void conn_close_sockets(struct doca_rdma_connection *conn)
{
	conn_close_listener(conn);
	nic_close(&conn->in_fd);
	nic_close(&conn->out_fd);
}

/* Every send of the connection and every posted receive of the context fail with code. */
static void conn_fail(struct doca_rdma_connection *conn, doca_error_t code)
{
	struct doca_rdma *r = conn->rdma;
	struct doca_task *t;

	if (conn->state == SIM_CONN_ERROR)
		return;
	conn->state = SIM_CONN_ERROR;
	conn->err = code;
	conn->tx_next = NULL;
	conn->paused_until_ns = 0;
	while ((t = sim_queue_pop(&conn->sendq)) != NULL)
		sim_task_complete(t, code);
	while ((t = sim_queue_pop(&r->recvq)) != NULL)
		sim_task_complete(t, code);
	/* Best effort: let what is already queued (answers, a drop notice) reach the peer
	 * before the QP goes away. Answers first: the peer accounts for them before a drop. */
	conn_flush(conn, SIM_ROLE_IN);
	conn_flush(conn, SIM_ROLE_OUT);
	conn_close_sockets(conn);
}

/* The peer closed or died. Sends can no longer complete; posted receives are not told. */
static void conn_peer_gone(struct doca_rdma_connection *conn)
{
	if (conn->peer_gone)
		return;
	conn->peer_gone = true;
	/* What the peer sent before it went away still counts: answers first, then its data. */
	if (conn->out_fd >= 0 && conn->state == SIM_CONN_CONNECTED) {
		(void)conn_read(conn->out_fd, &conn->out_r);
		conn_process_out(conn);
	}
	if (conn->in_fd >= 0 && conn->state == SIM_CONN_CONNECTED) {
		(void)conn_read(conn->in_fd, &conn->in_r);
		conn_process_in(conn);
	}
	nic_close(&conn->in_fd);
	nic_close(&conn->out_fd);
	if (conn->state == SIM_CONN_CONNECTED && conn->sendq.head != NULL && !conn->dropping) {
		sim_warn("RDMA peer is gone: failing %zu send(s) (transport retries exhausted)", conn->sendq.len);
		conn_fail(conn, DOCA_ERROR_IO_FAILED);
	}
}

/* DOCA_SIM_DROP_AFTER: tell the peer, then fail everything here. */
static void conn_drop(struct doca_rdma_connection *conn)
{
	sim_warn("dropping the RDMA connection after %llu messages (DOCA_SIM_DROP_AFTER)",
		 (unsigned long long)conn->messages);
	/* conn_fail sends the answers (drop last) before the drop on the data stream, so the
	 * peer accounts for every acknowledged message before it fails the rest. */
	conn->dropping = true;
	frame_append(&conn->in_w, SIM_FRAME_DROP, DOCA_ERROR_CONNECTION_RESET, 0, NULL, 0);
	frame_append(&conn->out_w, SIM_FRAME_DROP, DOCA_ERROR_CONNECTION_RESET, 0, NULL, 0);
	conn_fail(conn, DOCA_ERROR_CONNECTION_RESET);
}

/* doca_sim_flap_links: the link under every connected connection of this process goes down
 * for longer than RC's retries, then comes back. What was already on the wire counts (as when
 * the peer goes away); then each connection is dead: a send in flight or submitted later fails
 * with IO_FAILED (retries exhausted) and moves the connection to error, flushing its posted
 * receives; a connection with nothing to send notices nothing (an RC responder does not), its
 * posted receives stay posted and never complete. Only a new connection (after a stop and a
 * start: export and connect again) carries data again. */
size_t doca_sim_flap_links(void)
{
	struct sim_obj *o;
	size_t n = 0;

	sim_lock();
	for (o = sim_obj_first(SIM_RDMA); o != NULL; o = sim_obj_next(o, SIM_RDMA)) {
		struct doca_rdma_connection *c;
		for (c = ((struct doca_rdma *)o)->conns; c != NULL; c = c->next) {
			if (c->state != SIM_CONN_CONNECTED || c->peer_gone)
				continue;
			sim_warn("link flap under RDMA connection %llu (doca_sim_flap_links)", (unsigned long long)c->id);
			conn_peer_gone(c);
			n++;
		}
	}
	sim_unlock();
	return n;
}

static void conn_count_message(struct doca_rdma_connection *conn)
{
	conn->messages++;
	if (sim_cfg.drop_after >= 0 && conn->messages >= (uint64_t)sim_cfg.drop_after &&
	    conn->state == SIM_CONN_CONNECTED)
		conn_drop(conn);
}

/* Transmit every submitted, not yet transmitted send (unless backing off after an RNR NAK). */
static void conn_pump(struct doca_rdma_connection *conn)
{
	struct doca_rdma *r = conn->rdma;

	if (conn->state != SIM_CONN_CONNECTED || conn->tx_next == NULL || conn->paused_until_ns != 0)
		return;
	if (conn->peer_gone || conn->out_fd < 0) {
		conn_peer_gone(conn);
		if (conn->state == SIM_CONN_CONNECTED)
			conn_fail(conn, DOCA_ERROR_IO_FAILED);
		return;
	}
	while (conn->tx_next != NULL && conn->state == SIM_CONN_CONNECTED) {
		struct doca_task *t = conn->tx_next;
		const struct doca_buf *b = t->buf;
		size_t len = 0;

		if (b != NULL) {
			if (b->refcount == 0)
				sim_fatal("send task %p: its source doca_buf was returned to the inventory while "
					  "the task was in flight",
					  (void *)t);
			if (!sim_mmap_has_dev(b->mmap, r->dev)) {
				sim_warn("send task %p: the source buffer's mmap is not registered on the RDMA "
					 "context's device (local protection error)",
					 (void *)t);
				conn_fail(conn, DOCA_ERROR_IO_FAILED);
				return;
			}
			len = b->data_len;
		}
		if (len > sim_cfg.max_msg_size) {
			sim_warn("send task %p: %zu bytes exceed the device's maximum message size %u",
				 (void *)t,
				 len,
				 sim_cfg.max_msg_size);
			conn_fail(conn, DOCA_ERROR_IO_FAILED);
			return;
		}
		frame_append(&conn->out_w, SIM_FRAME_DATA, 0, t->seq, b != NULL ? b->data : NULL, len);
		conn->tx_next = t->next;
	}
	conn_flush(conn, SIM_ROLE_OUT);
}

/* ---------------------------------------------------------------- frames */

static void conn_answer(struct doca_rdma_connection *conn, uint32_t type, uint32_t code, uint64_t seq)
{
	frame_append(&conn->in_w, type, code, seq, NULL, 0);
}

/* A receive fails at this end; the sender learns it from a NAK; the QP goes to error. */
static void conn_receive_error(struct doca_rdma_connection *conn, struct doca_task *t, doca_error_t local,
			       uint64_t seq)
{
	sim_queue_remove(&conn->rdma->recvq, t);
	sim_task_complete(t, local);
	conn_answer(conn, SIM_FRAME_NAK_ERR, DOCA_ERROR_IO_FAILED, seq);
	conn_fail(conn, DOCA_ERROR_IO_FAILED);
}

static void conn_on_data(struct doca_rdma_connection *conn, uint64_t seq, const uint8_t *payload, size_t len)
{
	struct doca_rdma *r = conn->rdma;
	struct doca_task *t;
	struct doca_buf *b;
	size_t room;
	doca_error_t injected;

	if (seq != conn->rx_expected)
		return; /* follows a message we refused: the sender goes back and resends it */
	t = r->recvq.head;
	if (t == NULL) {
		conn_answer(conn, SIM_FRAME_RNR_NAK, 0, seq);
		return;
	}
	b = t->buf;
	if (b != NULL && b->refcount == 0)
		sim_fatal("receive task %p: its destination doca_buf was returned to the inventory while the task "
			  "was in flight",
			  (void *)t);
	if (b != NULL && (!sim_mmap_has_dev(b->mmap, r->dev) ||
			  (b->mmap->permissions & DOCA_ACCESS_FLAG_LOCAL_READ_WRITE) == 0)) {
		sim_warn("receive task %p: the destination mmap is not registered on the context's device with "
			 "DOCA_ACCESS_FLAG_LOCAL_READ_WRITE (local protection error)",
			 (void *)t);
		conn_receive_error(conn, t, DOCA_ERROR_IO_FAILED, seq);
		return;
	}
	room = b == NULL ? 0 : (size_t)((b->head + b->len) - (b->data + b->data_len));
	if (len > room) {
		sim_warn("receive task %p: a %zu-byte message does not fit the %zu bytes left in the buffer", (void *)t,
			 len, room);
		conn_receive_error(conn, t, DOCA_ERROR_TOO_BIG, seq);
		return;
	}
	injected = sim_fault("doca_rdma_task_receive_completion");
	if (injected != DOCA_SUCCESS) {
		conn_receive_error(conn, t, injected, seq);
		return;
	}
	/* Receives append after the data already in the buffer, as DOCA does. */
	if (len > 0) {
		memcpy(b->data + b->data_len, payload, len);
		b->data_len += len;
	}
	sim_queue_remove(&r->recvq, t);
	t->result_len = (uint32_t)len;
	sim_task_complete(t, DOCA_SUCCESS);
	conn->rx_expected++;
	conn_answer(conn, SIM_FRAME_ACK, 0, seq);
	conn_count_message(conn);
}

static void conn_on_ack(struct doca_rdma_connection *conn, uint64_t seq)
{
	struct doca_task *t = conn->sendq.head;
	doca_error_t injected;

	if (t == NULL || t == conn->tx_next || t->seq != seq) {
		sim_warn("protocol: unexpected ACK %llu", (unsigned long long)seq);
		return;
	}
	injected = sim_fault("doca_rdma_task_send_completion");
	if (injected != DOCA_SUCCESS) {
		conn_fail(conn, injected);
		return;
	}
	sim_queue_pop(&conn->sendq);
	sim_task_complete(t, DOCA_SUCCESS);
	conn_count_message(conn);
}

static void conn_on_rnr(struct doca_rdma_connection *conn, uint64_t seq)
{
	struct doca_task *t = conn->sendq.head;
	uint8_t limit = conn->rdma->rnr_retry_count;

	if (t == NULL || t == conn->tx_next || t->seq != seq) {
		sim_warn("protocol: unexpected RNR NAK %llu", (unsigned long long)seq);
		return;
	}
	t->rnr_retries++;
	if (limit != SIM_RNR_INFINITE && t->rnr_retries > limit) {
		sim_warn("send: receiver not ready, %u RNR retries exhausted", limit);
		conn_fail(conn, DOCA_ERROR_IO_FAILED);
		return;
	}
	conn->tx_next = t; /* go back: resend this one and everything after it */
	conn->paused_until_ns = sim_now_ns() + (uint64_t)sim_cfg.rnr_delay_ms * 1000000ull;
	nic_wake();
}

static void conn_on_nak(struct doca_rdma_connection *conn, uint64_t seq, doca_error_t code)
{
	(void)seq;
	sim_warn("send: the receiver failed message %llu (%s)", (unsigned long long)seq, doca_error_get_name(code));
	conn_fail(conn, code);
}

static bool nonce_eq(const uint8_t *a, const uint8_t *b)
{
	return memcmp(a, b, SIM_NONCE_LEN) == 0;
}

static void conn_check_hello_match(struct doca_rdma_connection *conn)
{
	if (conn->state != SIM_CONN_CONNECTED || !conn->in_hello_ok)
		return;
	if (!nonce_eq(conn->in_from, conn->peer.nonce)) {
		sim_warn("a connection from an unexpected peer reached our listener; closing it");
		conn->in_hello_ok = false;
		nic_close(&conn->in_fd);
		bytes_free(&conn->in_r);
		bytes_free(&conn->in_w);
		return;
	}
	conn_close_listener(conn);
}

/* Frames arriving on in_fd: the peer's hello, data and drop. */
static void conn_process_in(struct doca_rdma_connection *conn)
{
	const struct sim_frame *f;
	const uint8_t *payload;

	while (conn->in_fd >= 0 && (f = frame_peek(&conn->in_r, &payload)) != NULL) {
		if (!conn->in_hello_ok) {
			if (f->type != SIM_FRAME_HELLO || f->len != 2 * SIM_NONCE_LEN ||
			    !nonce_eq(payload, conn->blob.nonce)) {
				sim_warn("rejecting a connection that did not present our blob");
				nic_close(&conn->in_fd);
				bytes_free(&conn->in_r);
				bytes_free(&conn->in_w);
				return;
			}
			memcpy(conn->in_from, payload + SIM_NONCE_LEN, SIM_NONCE_LEN);
			conn->in_hello_ok = true;
			frame_consume(&conn->in_r, f);
			conn_check_hello_match(conn);
			continue;
		}
		if (f->type == SIM_FRAME_DROP) {
			doca_error_t code = (doca_error_t)f->code;
			frame_consume(&conn->in_r, f);
			/* Take the answers the peer sent before dropping into account first. */
			if (conn->out_fd >= 0 && conn->state == SIM_CONN_CONNECTED) {
				(void)conn_read(conn->out_fd, &conn->out_r);
				conn_process_out(conn);
			}
			conn_fail(conn, code);
			return;
		}
		/* Before doca_rdma_connect the QP is not ready to receive: leave data queued. */
		if (conn->state != SIM_CONN_CONNECTED)
			return;
		if (f->type == SIM_FRAME_DATA)
			conn_on_data(conn, f->seq, payload, (size_t)f->len);
		else
			sim_warn("protocol: unexpected frame %u on the receive side", f->type);
		if (conn->state != SIM_CONN_CONNECTED)
			return;
		frame_consume(&conn->in_r, f);
	}
	conn_flush(conn, SIM_ROLE_IN);
}

/* Frames arriving on out_fd: answers to our data, and drop. */
static void conn_process_out(struct doca_rdma_connection *conn)
{
	const struct sim_frame *f;
	const uint8_t *payload;

	while (conn->out_fd >= 0 && conn->state == SIM_CONN_CONNECTED &&
	       (f = frame_peek(&conn->out_r, &payload)) != NULL) {
		struct sim_frame copy = *f;
		frame_consume(&conn->out_r, f);
		switch (copy.type) {
		case SIM_FRAME_ACK:
			conn_on_ack(conn, copy.seq);
			break;
		case SIM_FRAME_RNR_NAK:
			conn_on_rnr(conn, copy.seq);
			break;
		case SIM_FRAME_NAK_ERR:
			conn_on_nak(conn, copy.seq, (doca_error_t)copy.code);
			break;
		case SIM_FRAME_DROP:
			conn_fail(conn, (doca_error_t)copy.code);
			break;
		default:
			sim_warn("protocol: unexpected frame %u on the send side", copy.type);
			break;
		}
	}
}

static void conn_accept(struct doca_rdma_connection *conn)
{
	for (;;) {
		int fd = accept4(conn->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (conn->in_fd >= 0) {
			close(fd); /* only one peer per connection */
			continue;
		}
		conn->in_fd = fd;
		conn->in_hello_ok = false;
		nic_watch(conn, fd, SIM_ROLE_IN, false);
	}
}

static void conn_handle_event(struct doca_rdma_connection *conn, enum sim_fd_role role, uint32_t events)
{
	bool alive;

	switch (role) {
	case SIM_ROLE_LISTEN:
		if (conn->lfd >= 0)
			conn_accept(conn);
		break;
	case SIM_ROLE_IN:
		if (conn->in_fd < 0)
			break;
		if (events & EPOLLOUT)
			conn_flush(conn, SIM_ROLE_IN);
		if (conn->in_fd < 0)
			break;
		alive = conn_read(conn->in_fd, &conn->in_r);
		conn_process_in(conn);
		if (!alive && conn->in_fd >= 0) {
			if (!conn->in_hello_ok && conn->state != SIM_CONN_CONNECTED)
				nic_close(&conn->in_fd); /* a stray connection went away */
			else
				conn_peer_gone(conn);
		}
		break;
	case SIM_ROLE_OUT:
		if (conn->out_fd < 0)
			break;
		if (events & EPOLLOUT)
			conn_flush(conn, SIM_ROLE_OUT);
		if (conn->out_fd < 0)
			break;
		alive = conn_read(conn->out_fd, &conn->out_r);
		conn_process_out(conn);
		if (!alive && conn->out_fd >= 0)
			conn_peer_gone(conn);
		break;
	default:
		break;
	}
}

/* ---------------------------------------------------------------- engine hooks */

bool sim_rdma_has_connected(const struct doca_rdma *rdma)
{
	const struct doca_rdma_connection *c;
	for (c = rdma->conns; c != NULL; c = c->next)
		if (c->state != SIM_CONN_EXPORTED)
			return true;
	return false;
}

uint32_t sim_rdma_owned_tasks(const struct doca_rdma *rdma)
{
	const struct sim_task_pool *pools[2] = { &rdma->send_pool, &rdma->recv_pool };
	uint32_t n = 0, i;
	int k;
	for (k = 0; k < 2; k++)
		for (i = 0; pools[k]->tasks != NULL && i < pools[k]->pool_num; i++)
			if (pools[k]->tasks[i].state == SIM_TASK_ALLOCATED)
				n++;
	return n;
}

bool sim_conn_is_live(const struct doca_rdma *rdma, const struct doca_rdma_connection *conn)
{
	const struct doca_rdma_connection *c;
	for (c = rdma->conns; c != NULL; c = c->next)
		if (c == conn)
			return true;
	return false;
}

void sim_conn_submit_send(struct doca_rdma_connection *conn, struct doca_task *t)
{
	t->seq = conn->next_seq++;
	sim_queue_push(&conn->sendq, t);
	if (conn->tx_next == NULL)
		conn->tx_next = t;
	if (conn->state == SIM_CONN_ERROR) {
		sim_queue_remove(&conn->sendq, t);
		conn->tx_next = NULL;
		sim_task_complete(t, conn->err);
		return;
	}
	conn_pump(conn);
}

void sim_rdma_post_receive(struct doca_rdma *rdma, struct doca_task *t)
{
	struct doca_rdma_connection *c;

	for (c = rdma->conns; c != NULL; c = c->next) {
		if (c->state == SIM_CONN_ERROR) {
			sim_task_complete(t, c->err);
			return;
		}
	}
	sim_queue_push(&rdma->recvq, t);
}

/* doca_ctx_stop: flush the sends of every connection, close and forget the connections. */
void sim_rdma_close_conns(struct doca_rdma *rdma)
{
	struct doca_rdma_connection *c;

	while ((c = rdma->conns) != NULL) {
		struct doca_task *t;
		rdma->conns = c->next;
		while ((t = sim_queue_pop(&c->sendq)) != NULL)
			sim_task_complete(t, DOCA_ERROR_IO_FAILED);
		conn_close_sockets(c);
		bytes_free(&c->in_r);
		bytes_free(&c->in_w);
		bytes_free(&c->out_r);
		bytes_free(&c->out_w);
		c->magic = 0;
		free(c);
	}
	rdma->nconns = 0;
}

/* ---------------------------------------------------------------- context */

doca_error_t doca_rdma_create(struct doca_dev *dev, struct doca_rdma **rdma)
{
	struct doca_dev *d;
	struct doca_rdma *r;

	SIM_ENTER();
	if (dev == NULL || rdma == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	d = sim_dev_check(dev, __func__);
	SIM_FAULT();
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	r->ctx.magic = SIM_MAGIC;
	r->ctx.state = DOCA_CTX_STATE_IDLE;
	r->ctx.rdma = r;
	r->dev = d;
	r->permissions = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
	r->transport = DOCA_RDMA_TRANSPORT_TYPE_RC;
	r->mtu = DOCA_MTU_SIZE_1K_BYTES;
	r->max_num_connections = 1;
	r->rnr_retry_count = SIM_DEFAULT_RNR_RETRY;
	r->send_queue_size = 64;
	d->users++;
	sim_obj_add(&r->obj, SIM_RDMA);
	*rdma = r;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_destroy(struct doca_rdma *rdma)
{
	struct doca_rdma *r;

	SIM_ENTER();
	if (rdma == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (r->ctx.state != DOCA_CTX_STATE_IDLE) {
		sim_warn("doca_rdma_destroy: the context is not idle (stop it and progress until IDLE first)");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	SIM_FAULT();
	sim_rdma_close_conns(r);
	sim_pe_disconnect_ctx(&r->ctx);
	r->dev->users--;
	free(r->send_pool.tasks);
	free(r->recv_pool.tasks);
	r->ctx.magic = 0;
	sim_obj_remove(&r->obj);
	free(r);
	SIM_RETURN(DOCA_SUCCESS);
}

struct doca_ctx *doca_rdma_as_ctx(struct doca_rdma *rdma)
{
	struct doca_rdma *r;
	if (rdma == NULL)
		return NULL;
	sim_lock();
	r = sim_rdma_check(rdma, __func__);
	sim_unlock();
	return &r->ctx;
}

/* Remove socket files left behind by simulator processes that died without cleaning up. */
static void sim_remove_stale_sockets(void)
{
	static bool done;
	DIR *d;
	struct dirent *e;

	if (done)
		return;
	done = true;
	d = opendir(sim_cfg.sock_dir);
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		int pid;
		char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 256];
		if (sscanf(e->d_name, "doca-sim-%d-", &pid) != 1 || pid <= 0 || pid == (int)getpid())
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", sim_cfg.sock_dir, e->d_name);
		unlink(path);
	}
	closedir(d);
}

static void sim_random(void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			sim_fatal("getrandom failed");
		}
		p += n;
		len -= (size_t)n;
	}
}

doca_error_t doca_rdma_export(struct doca_rdma *rdma,
			      const void **local_rdma_conn_details,
			      size_t *local_rdma_conn_details_size,
			      struct doca_rdma_connection **rdma_connection)
{
	struct doca_rdma *r;
	struct doca_rdma_connection *c;
	struct sockaddr_un sa;
	uint32_t rnd;
	int n;

	SIM_ENTER();
	if (rdma == NULL || local_rdma_conn_details == NULL || local_rdma_conn_details_size == NULL ||
	    rdma_connection == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (r->ctx.state != DOCA_CTX_STATE_STARTING && r->ctx.state != DOCA_CTX_STATE_RUNNING) {
		sim_warn("doca_rdma_export: the context is not started (call doca_ctx_start first)");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	if (r->nconns >= r->max_num_connections)
		SIM_RETURN(DOCA_ERROR_FULL);
	SIM_FAULT();
	if (!nic_ensure_started())
		SIM_RETURN(DOCA_ERROR_OPERATING_SYSTEM);
	sim_remove_stale_sockets();
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	c->magic = SIM_MAGIC;
	c->id = nic_next_conn_id++;
	c->rdma = r;
	c->state = SIM_CONN_EXPORTED;
	c->in_fd = -1;
	c->out_fd = -1;
	memcpy(c->blob.magic, "DOCASIM1", 8);
	c->blob.version = SIM_BLOB_VERSION;
	c->blob.pid = (uint32_t)getpid();
	sim_random(c->blob.nonce, sizeof(c->blob.nonce));
	sim_random(&rnd, sizeof(rnd));
	n = snprintf(c->blob.path,
		     sizeof(c->blob.path),
		     "%s/doca-sim-%d-%llu-%08x.sock",
		     sim_cfg.sock_dir,
		     (int)getpid(),
		     (unsigned long long)c->id,
		     rnd);
	if (n < 0 || (size_t)n >= sizeof(c->blob.path)) {
		free(c);
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, c->blob.path, strlen(c->blob.path) + 1);
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->lfd < 0 || bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(c->lfd, 8) != 0) {
		sim_warn("doca_rdma_export: cannot listen on %s: %s (set DOCA_SIM_DIR to a writable directory)",
			 c->blob.path,
			 strerror(errno));
		if (c->lfd >= 0)
			close(c->lfd);
		free(c);
		SIM_RETURN(DOCA_ERROR_OPERATING_SYSTEM);
	}
	nic_watch(c, c->lfd, SIM_ROLE_LISTEN, false);
	c->next = r->conns;
	r->conns = c;
	r->nconns++;
	*local_rdma_conn_details = &c->blob;
	*local_rdma_conn_details_size = sizeof(c->blob);
	*rdma_connection = c;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_connect(struct doca_rdma *rdma,
			       const void *remote_rdma_conn_details,
			       size_t remote_rdma_conn_details_size,
			       struct doca_rdma_connection *rdma_connection)
{
	struct doca_rdma *r;
	struct doca_rdma_connection *c = rdma_connection;
	struct sockaddr_un sa;
	uint8_t hello[2 * SIM_NONCE_LEN];

	SIM_ENTER();
	if (rdma == NULL || remote_rdma_conn_details == NULL || rdma_connection == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (!sim_conn_is_live(r, c))
		sim_fatal("doca_rdma_connect: %p is not a connection exported by this context", (void *)c);
	if (r->ctx.state != DOCA_CTX_STATE_STARTING && r->ctx.state != DOCA_CTX_STATE_RUNNING) {
		sim_warn("doca_rdma_connect: the context is not started (call doca_ctx_start first)");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	if (c->state != SIM_CONN_EXPORTED) {
		sim_warn("doca_rdma_connect: the connection is already connected");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	if (remote_rdma_conn_details_size != sizeof(struct sim_blob)) {
		sim_warn("doca_rdma_connect: connection details of %zu bytes (expected %zu): corrupted blob",
			 remote_rdma_conn_details_size,
			 sizeof(struct sim_blob));
		SIM_RETURN(DOCA_ERROR_CONNECTION_ABORTED);
	}
	memcpy(&c->peer, remote_rdma_conn_details, sizeof(c->peer));
	if (memcmp(c->peer.magic, "DOCASIM1", 8) != 0 || c->peer.version != SIM_BLOB_VERSION ||
	    memchr(c->peer.path, '\0', sizeof(c->peer.path)) == NULL) {
		sim_warn("doca_rdma_connect: corrupted connection details");
		SIM_RETURN(DOCA_ERROR_CONNECTION_ABORTED);
	}
	if (!r->dev->info.device.is_ib && !r->grh_enabled) {
		sim_warn("doca_rdma_connect: %s is an Ethernet (RoCE) device and GRH is disabled "
			 "(call doca_rdma_set_grh_enabled(rdma, 1) before start)",
			 r->dev->info.device.ibdev);
		SIM_RETURN(DOCA_ERROR_CONNECTION_ABORTED);
	}
	SIM_FAULT();
	c->state = SIM_CONN_CONNECTED;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, c->peer.path, strlen(c->peer.path) + 1);
	c->out_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->out_fd < 0 || connect(c->out_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		/* Like modifying a QP towards a peer that no longer exists: it "works", sends will fail. */
		if (c->out_fd >= 0)
			close(c->out_fd);
		c->out_fd = -1;
		c->peer_gone = true;
	} else {
		memcpy(hello, c->peer.nonce, SIM_NONCE_LEN);
		memcpy(hello + SIM_NONCE_LEN, c->blob.nonce, SIM_NONCE_LEN);
		frame_append(&c->out_w, SIM_FRAME_HELLO, 0, 0, hello, sizeof(hello));
		conn_flush(c, SIM_ROLE_OUT);
	}
	/* Data the peer sent before we were ready is processed now. */
	conn_check_hello_match(c);
	conn_process_in(c);
	conn_pump(c);
	SIM_RETURN(DOCA_SUCCESS);
}

/* ---------------------------------------------------------------- properties */

#define SIM_RDMA_SETTER(fn, type, check, field)                           \
	doca_error_t fn(struct doca_rdma *rdma, type value)               \
	{                                                                 \
		struct doca_rdma *r;                                      \
		SIM_ENTER();                                              \
		if (rdma == NULL)                                         \
			SIM_RETURN(DOCA_ERROR_INVALID_VALUE);             \
		r = sim_rdma_check(rdma, __func__);                       \
		if (r->ctx.state != DOCA_CTX_STATE_IDLE)                  \
			SIM_RETURN(DOCA_ERROR_BAD_STATE);                 \
		if (!(check))                                             \
			SIM_RETURN(DOCA_ERROR_INVALID_VALUE);             \
		SIM_FAULT();                                              \
		r->field = value;                                         \
		SIM_RETURN(DOCA_SUCCESS);                                 \
	}

/* The SDK rounds the send queue size up to the next power of 2. */
static uint32_t sim_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v && p < (1u << 31))
		p <<= 1;
	return p;
}

doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma *rdma, uint32_t send_queue_size)
{
	struct doca_rdma *r;
	SIM_ENTER();
	if (rdma == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (r->ctx.state != DOCA_CTX_STATE_IDLE)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (send_queue_size == 0 || send_queue_size > SIM_MAX_SEND_QUEUE ||
	    send_queue_size > sim_cfg.max_send_queue)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	SIM_FAULT();
	r->send_queue_size = sim_pow2(send_queue_size);
	SIM_RETURN(DOCA_SUCCESS);
}
SIM_RDMA_SETTER(doca_rdma_set_transport_type,
		enum doca_rdma_transport_type,
		value == DOCA_RDMA_TRANSPORT_TYPE_RC || value == DOCA_RDMA_TRANSPORT_TYPE_DC,
		transport)
SIM_RDMA_SETTER(doca_rdma_set_mtu, enum doca_mtu_size, value <= DOCA_MTU_SIZE_4K_BYTES, mtu)
SIM_RDMA_SETTER(doca_rdma_set_permissions, uint32_t, (value & ~(uint32_t)SIM_RDMA_ACCESS_FLAGS) == 0, permissions)
SIM_RDMA_SETTER(doca_rdma_set_grh_enabled, uint8_t, value <= 1, grh_enabled)
SIM_RDMA_SETTER(doca_rdma_set_gid_index, uint32_t, value < 65536, gid_index)
SIM_RDMA_SETTER(doca_rdma_set_max_num_connections, uint16_t, value > 0, max_num_connections)
SIM_RDMA_SETTER(doca_rdma_set_rnr_retry_count, uint8_t, value <= SIM_RNR_INFINITE, rnr_retry_count)
/* An IB service level is 4 bits. */
SIM_RDMA_SETTER(doca_rdma_set_sl, uint32_t, value <= 15, sl)

doca_error_t doca_rdma_get_sl(const struct doca_rdma *rdma, uint32_t *sl)
{
	struct doca_rdma *r;

	SIM_ENTER();
	if (rdma == NULL || sl == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	SIM_FAULT();
	*sl = r->sl;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_get_mtu(const struct doca_rdma *rdma, enum doca_mtu_size *mtu)
{
	struct doca_rdma *r;

	SIM_ENTER();
	if (rdma == NULL || mtu == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	SIM_FAULT();
	*mtu = r->mtu;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma *rdma, uint32_t recv_queue_size)
{
	struct doca_rdma *r;

	(void)recv_queue_size;
	SIM_ENTER();
	if (rdma == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (r->ctx.state != DOCA_CTX_STATE_IDLE)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	/* Only GPU/DPA data paths have a configurable receive queue. */
	SIM_RETURN(DOCA_ERROR_NOT_SUPPORTED);
}

/* ---------------------------------------------------------------- tasks */

static doca_error_t sim_set_conf(struct doca_rdma *rdma, struct sim_task_pool *pool, union sim_task_cb ok,
				 union sim_task_cb err, bool have_cbs, uint32_t num)
{
	if (rdma->ctx.state != DOCA_CTX_STATE_IDLE)
		return DOCA_ERROR_BAD_STATE;
	if (!have_cbs || num == 0)
		return DOCA_ERROR_INVALID_VALUE;
	pool->configured = true;
	pool->ok_cb = ok;
	pool->err_cb = err;
	pool->num = num;
	return DOCA_SUCCESS;
}

doca_error_t doca_rdma_task_receive_set_conf(struct doca_rdma *rdma,
					     doca_rdma_task_receive_completion_cb_t successful_task_completion_cb,
					     doca_rdma_task_receive_completion_cb_t error_task_completion_cb,
					     uint32_t num_tasks)
{
	struct doca_rdma *r;
	union sim_task_cb ok, err;
	doca_error_t rc;

	SIM_ENTER();
	if (rdma == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	SIM_FAULT();
	ok.receive = successful_task_completion_cb;
	err.receive = error_task_completion_cb;
	rc = sim_set_conf(r,
			  &r->recv_pool,
			  ok,
			  err,
			  successful_task_completion_cb != NULL && error_task_completion_cb != NULL,
			  num_tasks);
	SIM_RETURN(rc);
}

doca_error_t doca_rdma_task_send_set_conf(struct doca_rdma *rdma,
					  doca_rdma_task_send_completion_cb_t successful_task_completion_cb,
					  doca_rdma_task_send_completion_cb_t error_task_completion_cb,
					  uint32_t num_tasks)
{
	struct doca_rdma *r;
	union sim_task_cb ok, err;
	doca_error_t rc;

	SIM_ENTER();
	if (rdma == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	SIM_FAULT();
	ok.send = successful_task_completion_cb;
	err.send = error_task_completion_cb;
	rc = sim_set_conf(r,
			  &r->send_pool,
			  ok,
			  err,
			  successful_task_completion_cb != NULL && error_task_completion_cb != NULL,
			  num_tasks);
	SIM_RETURN(rc);
}

static doca_error_t sim_task_alloc(struct doca_rdma *r, struct sim_task_pool *pool, struct doca_task **out)
{
	uint32_t i;
	/* doca_rdma.h: tasks may be allocated only once the context is RUNNING after
	 * doca_rdma_connect (with a synchronous start it is RUNNING before the connection). */
	if (r->ctx.state != DOCA_CTX_STATE_RUNNING || !sim_rdma_has_connected(r)) {
		sim_warn("task allocation: the context is not running and connected (allocate tasks after "
			 "doca_rdma_connect and progress until RUNNING)");
		return DOCA_ERROR_BAD_STATE;
	}
	if (!pool->configured) {
		sim_warn("task allocation: this task type was not configured (call its _set_conf before start)");
		return DOCA_ERROR_NO_MEMORY;
	}
	if (pool->allocated >= pool->pool_num)
		return DOCA_ERROR_NO_MEMORY;
	for (i = 0; i < pool->pool_num; i++) {
		struct doca_task *t = &pool->tasks[i];
		if (t->state != SIM_TASK_FREE)
			continue;
		t->state = SIM_TASK_ALLOCATED;
		t->status = DOCA_SUCCESS;
		t->ever_completed = false;
		t->result_len = 0;
		t->next = NULL;
		pool->allocated++;
		sim_count(SIM_TASK, 1);
		*out = t;
		return DOCA_SUCCESS;
	}
	return DOCA_ERROR_NO_MEMORY;
}

doca_error_t doca_rdma_task_receive_allocate_init(struct doca_rdma *rdma,
						  struct doca_buf *dst_buf,
						  union doca_data user_data,
						  struct doca_rdma_task_receive **task)
{
	struct doca_rdma *r;
	struct doca_task *t;
	doca_error_t rc;

	SIM_ENTER();
	if (rdma == NULL || task == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (dst_buf != NULL)
		(void)sim_buf_check(dst_buf, __func__);
	SIM_FAULT();
	rc = sim_task_alloc(r, &r->recv_pool, &t);
	if (rc != DOCA_SUCCESS)
		SIM_RETURN(rc);
	t->buf = dst_buf;
	t->conn = NULL;
	t->user_data = user_data;
	*task = (struct doca_rdma_task_receive *)t;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_task_send_allocate_init(struct doca_rdma *rdma,
					       struct doca_rdma_connection *rdma_connection,
					       const struct doca_buf *src_buf,
					       union doca_data user_data,
					       struct doca_rdma_task_send **task)
{
	struct doca_rdma *r;
	struct doca_task *t;
	doca_error_t rc;

	SIM_ENTER();
	if (rdma == NULL || task == NULL || rdma_connection == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	r = sim_rdma_check(rdma, __func__);
	if (!sim_conn_is_live(r, rdma_connection)) {
		sim_warn("doca_rdma_task_send_allocate_init: %p is not a connection of this context",
			 (void *)rdma_connection);
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	}
	if (src_buf != NULL)
		(void)sim_buf_check(src_buf, __func__);
	SIM_FAULT();
	rc = sim_task_alloc(r, &r->send_pool, &t);
	if (rc != DOCA_SUCCESS)
		SIM_RETURN(rc);
	t->buf = (struct doca_buf *)src_buf;
	t->conn = rdma_connection;
	t->conn_id = rdma_connection->id;
	t->user_data = user_data;
	*task = (struct doca_rdma_task_send *)t;
	SIM_RETURN(DOCA_SUCCESS);
}

struct doca_task *doca_rdma_task_receive_as_task(struct doca_rdma_task_receive *task)
{
	return (struct doca_task *)task;
}

struct doca_task *doca_rdma_task_send_as_task(struct doca_rdma_task_send *task)
{
	return (struct doca_task *)task;
}

static struct doca_task *sim_owned_task(const void *task, enum sim_task_type type, const char *fn)
{
	struct doca_task *t = sim_task_check(task, fn);
	if (t->type != type)
		sim_fatal("%s: task %p is a %s task", fn, task, t->type == SIM_TASK_SEND ? "send" : "receive");
	if (t->state == SIM_TASK_FREE)
		sim_fatal("%s: task %p was freed", fn, task);
	return t;
}

void doca_rdma_task_receive_set_dst_buf(struct doca_rdma_task_receive *task, struct doca_buf *dst_buf)
{
	struct doca_task *t;
	sim_lock();
	t = sim_owned_task(task, SIM_TASK_RECEIVE, __func__);
	if (t->state != SIM_TASK_ALLOCATED)
		sim_fatal("doca_rdma_task_receive_set_dst_buf: task %p is submitted", (void *)task);
	if (dst_buf != NULL)
		(void)sim_buf_check(dst_buf, __func__);
	t->buf = dst_buf;
	sim_unlock();
}

struct doca_buf *doca_rdma_task_receive_get_dst_buf(const struct doca_rdma_task_receive *task)
{
	struct doca_task *t;
	struct doca_buf *b;
	sim_lock();
	t = sim_owned_task(task, SIM_TASK_RECEIVE, __func__);
	b = t->buf;
	sim_unlock();
	return b;
}

uint32_t doca_rdma_task_receive_get_result_len(const struct doca_rdma_task_receive *task)
{
	struct doca_task *t;
	uint32_t len;
	sim_lock();
	t = sim_owned_task(task, SIM_TASK_RECEIVE, __func__);
	if (t->state != SIM_TASK_ALLOCATED || !t->ever_completed || t->status != DOCA_SUCCESS)
		sim_fatal("doca_rdma_task_receive_get_result_len: only valid after a successful completion "
			  "(task %p status %s)",
			  (const void *)task,
			  doca_error_get_name(t->status));
	len = t->result_len;
	sim_unlock();
	return len;
}

void doca_rdma_task_send_set_src_buf(struct doca_rdma_task_send *task, const struct doca_buf *src_buf)
{
	struct doca_task *t;
	sim_lock();
	t = sim_owned_task(task, SIM_TASK_SEND, __func__);
	if (t->state != SIM_TASK_ALLOCATED)
		sim_fatal("doca_rdma_task_send_set_src_buf: task %p is submitted", (void *)task);
	if (src_buf != NULL)
		(void)sim_buf_check(src_buf, __func__);
	t->buf = (struct doca_buf *)src_buf;
	sim_unlock();
}

const struct doca_buf *doca_rdma_task_send_get_src_buf(const struct doca_rdma_task_send *task)
{
	struct doca_task *t;
	const struct doca_buf *b;
	sim_lock();
	t = sim_owned_task(task, SIM_TASK_SEND, __func__);
	b = t->buf;
	sim_unlock();
	return b;
}
