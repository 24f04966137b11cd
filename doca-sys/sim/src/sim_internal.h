/*
 * rdma-container DOCA simulator: shared internals.
 *
 * The simulator implements the subset of DOCA declared in ../include with DOCA's
 * documented rules. Every public entry point takes one process-wide recursive lock,
 * so callbacks (which run under it, from doca_pe_progress) may call back into the
 * API. A background "NIC" thread moves messages between connected contexts (of this
 * or another process) over Unix stream sockets named in the exported blob, the way a
 * NIC moves data without the application's CPU; completions are only reported to the
 * application from doca_pe_progress.
 */
#ifndef DOCA_SIM_INTERNAL_H
#define DOCA_SIM_INTERNAL_H

#define _GNU_SOURCE 1

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "doca_buf.h"
#include "doca_buf_inventory.h"
#include "doca_ctx.h"
#include "doca_dev.h"
#include "doca_error.h"
#include "doca_mmap.h"
#include "doca_pe.h"
#include "doca_rdma.h"
#include "doca_sim.h"
#include "doca_types.h"

/* ---------------------------------------------------------------- objects */

enum sim_kind {
	SIM_DEVINFO_LIST,
	SIM_DEV,
	SIM_PE,
	SIM_RDMA,
	SIM_MMAP,
	SIM_INVENTORY,
	SIM_BUF,
	SIM_TASK,
	SIM_KIND_COUNT
};

/* Header of every top-level object; live ones are kept on one list for validation. */
struct sim_obj {
	uint32_t magic;
	enum sim_kind kind;
	struct sim_obj *prev;
	struct sim_obj *next;
};

#define SIM_MAGIC 0x44534d31u /* "DSM1" */

struct sim_device {
	char ibdev[DOCA_DEVINFO_IBDEV_NAME_SIZE];
	char iface[DOCA_DEVINFO_IFACE_NAME_SIZE];
	uint8_t ipv4[DOCA_DEVINFO_IPV4_ADDR_SIZE];
	bool has_ipv4;
	bool is_ib; /* InfiniBand link layer (GRH optional); default Ethernet/RoCE */
};

/* A devinfo belongs either to a list or to an opened device. */
struct doca_devinfo {
	uint32_t magic;
	struct sim_device device;
	struct doca_dev *dev; /* set for the devinfo owned by an opened device */
};

struct sim_devinfo_list {
	struct sim_obj obj;
	uint32_t count;
	struct doca_devinfo *infos;   /* count entries */
	struct doca_devinfo **ptrs;   /* count + 1 entries, NULL-terminated; what the user gets */
};

struct doca_dev {
	struct sim_obj obj;
	struct doca_devinfo info;
	unsigned int open_refs; /* doca_dev_open calls not yet closed */
	unsigned int users;     /* mmaps and RDMA contexts using the device */
};

struct doca_mmap {
	struct sim_obj obj;
	bool started;
	bool range_set;
	uint8_t *addr;
	size_t len;
	uint32_t permissions;
	struct doca_dev *devs[8];
	unsigned int ndevs;
	size_t nbufs; /* bufs currently pointing into the map */
};

struct doca_buf {
	struct doca_buf_inventory *inv;
	struct doca_mmap *mmap;
	uint8_t *head;
	size_t len;
	uint8_t *data;
	size_t data_len;
	uint16_t refcount; /* 0: free element of the inventory */
};

struct doca_buf_inventory {
	struct sim_obj obj;
	bool started;
	size_t num;
	size_t used;
	struct doca_buf *elems;
};

/* ---------------------------------------------------------------- tasks */

enum sim_task_type { SIM_TASK_SEND, SIM_TASK_RECEIVE };

enum sim_task_state {
	SIM_TASK_FREE,      /* in the pool */
	SIM_TASK_ALLOCATED, /* owned by the application */
	SIM_TASK_SUBMITTED, /* owned by DOCA, not completed */
	SIM_TASK_COMPLETED, /* completed, callback not yet run (still owned by DOCA) */
};

struct doca_task {
	struct doca_rdma *rdma;
	enum sim_task_type type;
	enum sim_task_state state;
	union doca_data user_data;
	doca_error_t status;
	bool ever_completed;
	struct doca_buf *buf; /* send: source (may be NULL); receive: destination (may be NULL) */
	struct doca_rdma_connection *conn; /* send only */
	uint64_t conn_id;                  /* send only: detects a connection freed by a restart */
	uint32_t result_len;
	uint64_t seq;             /* send: sequence number on its connection */
	unsigned int rnr_retries; /* send: receiver-not-ready NAKs seen */
	struct doca_task *next;   /* link in exactly one queue while submitted/completed */
};

struct sim_task_queue {
	struct doca_task *head;
	struct doca_task *tail;
	size_t len;
};

union sim_task_cb {
	doca_rdma_task_send_completion_cb_t send;
	doca_rdma_task_receive_completion_cb_t receive;
};

struct sim_task_pool {
	bool configured;
	union sim_task_cb ok_cb;
	union sim_task_cb err_cb;
	uint32_t num;         /* configured size */
	uint32_t pool_num;    /* size of tasks[] */
	uint32_t allocated;   /* tasks not FREE */
	struct doca_task *tasks;
};

/* ---------------------------------------------------------------- wire */

struct sim_bytes {
	uint8_t *p;
	size_t off; /* consumed prefix */
	size_t len; /* bytes held, including the consumed prefix */
	size_t cap;
};

#define SIM_NONCE_LEN 16

/* The exported blob: names the listening socket of one connection. */
struct sim_blob {
	char magic[8];
	uint32_t version;
	uint32_t pid;
	uint8_t nonce[SIM_NONCE_LEN];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

enum sim_conn_state {
	SIM_CONN_EXPORTED,  /* doca_rdma_export done, doca_rdma_connect not yet */
	SIM_CONN_CONNECTED, /* connect done; data flows */
	SIM_CONN_ERROR,     /* the QP is in error: every task fails with conn->err */
};

struct doca_rdma_connection {
	uint32_t magic;
	uint64_t id;
	struct doca_rdma *rdma;
	struct doca_rdma_connection *next; /* in rdma->conns */
	enum sim_conn_state state;
	doca_error_t err;
	struct sim_blob blob;         /* ours, handed out by export */
	struct sim_blob peer;         /* from connect */
	int lfd;                      /* our listener (until the peer connected to it) */
	int in_fd;                    /* accepted: the peer's data arrives here, we answer on it */
	int out_fd;                   /* connected to the peer's listener: our data goes here */
	bool in_hello_ok;             /* in_fd carried a valid hello */
	uint8_t in_from[SIM_NONCE_LEN];/* sender nonce of that hello */
	bool peer_gone;               /* the peer closed or died */
	bool dropping;                /* DOCA_SIM_DROP_AFTER in progress: the peer going away is expected */
	struct sim_bytes in_r, in_w;  /* in_fd buffers */
	struct sim_bytes out_r, out_w;/* out_fd buffers */
	struct sim_task_queue sendq;  /* submitted sends, in order (transmitted ones first) */
	struct doca_task *tx_next;    /* first send of sendq not yet transmitted */
	uint64_t next_seq;            /* given to the next submitted send */
	uint64_t rx_expected;         /* next sequence number we accept */
	uint64_t paused_until_ns;     /* receiver-not-ready back-off: no transmission before */
	uint64_t messages;            /* messages completed on this connection (drop-after) */
};

/* ---------------------------------------------------------------- ctx, rdma, pe */

struct doca_ctx {
	uint32_t magic;
	enum doca_ctx_states state;
	union doca_data user_data;
	doca_ctx_state_changed_callback_t state_cb;
	struct doca_pe *pe;
	struct doca_rdma *rdma;
	struct doca_ctx *pe_next; /* in pe->ctxs */
	size_t inflight;          /* submitted tasks whose callback has not run */
};

struct doca_rdma {
	struct sim_obj obj;
	struct doca_ctx ctx;
	struct doca_dev *dev;
	uint32_t permissions;
	uint32_t gid_index;
	uint8_t grh_enabled;
	enum doca_rdma_transport_type transport;
	enum doca_mtu_size mtu;
	uint16_t max_num_connections;
	uint8_t rnr_retry_count;
	uint32_t sl; /* service level (doca_rdma_set_sl): recorded, not enforced */
	uint32_t send_queue_size;
	struct sim_task_pool send_pool;
	struct sim_task_pool recv_pool;
	struct sim_task_queue recvq; /* posted receives, in order */
	struct doca_rdma_connection *conns;
	unsigned int nconns;
};

struct doca_pe {
	struct sim_obj obj;
	int evfd;          /* the notification handle */
	bool armed;        /* doca_pe_request_notification called, not yet fired */
	bool raised;       /* the handle fired and doca_pe_clear_notification was not called yet */
	enum doca_pe_event_mode event_mode;
	bool in_progress;  /* inside doca_pe_progress (callbacks running) */
	struct doca_ctx *ctxs;
	struct sim_task_queue doneq; /* completed tasks waiting for their callback (the "CQ") */
	/* DOCA_SIM_BATCH: completions one CQ poll moved into the engine; they raise no event. */
	struct sim_task_queue batchq;
};

/* ---------------------------------------------------------------- config */

struct sim_fault {
	char name[96];
	unsigned long nth;
	bool and_later;
	doca_error_t code;
	unsigned long calls;
};

struct sim_config {
	struct sim_device *devices;
	size_t ndevices;
	struct sim_fault *faults;
	size_t nfaults;
	long drop_after;
	unsigned int rnr_delay_ms;
	uint32_t max_msg_size;
	bool start_async; /* DOCA_SIM_START: doca_ctx_start answers IN_PROGRESS (STARTING) */
	bool stop_refuse; /* DOCA_SIM_STOP=refuse: doca_ctx_stop answers IN_USE while tasks are allocated */
	bool arm_edge;    /* DOCA_SIM_ARM=edge: arming raises nothing for work already pending */
	uint32_t batch;   /* DOCA_SIM_BATCH: completions one CQ poll moves into the engine (0, 1: off) */
	uint32_t max_send_queue; /* DOCA_SIM_MAX_SEND_QUEUE: doca_rdma_cap_get_max_send_queue_size */
	uint32_t max_recv_queue; /* DOCA_SIM_MAX_RECV_QUEUE: doca_rdma_cap_get_max_recv_queue_size */
	char sock_dir[80];
	bool trace;
	bool quiet; /* DOCA_SIM_QUIET: no diagnostics (fatal misuse and leaks still print) */
};

extern struct sim_config sim_cfg;

/* ---------------------------------------------------------------- core helpers */

void sim_lock(void);
void sim_unlock(void);

void sim_obj_add(struct sim_obj *obj, enum sim_kind kind);
void sim_obj_remove(struct sim_obj *obj);
bool sim_obj_is_live(const void *ptr, enum sim_kind kind);
void sim_count(enum sim_kind kind, long delta);
struct sim_obj *sim_obj_first(enum sim_kind kind);
struct sim_obj *sim_obj_next(struct sim_obj *obj, enum sim_kind kind);

/* DOCA_SUCCESS, or the injected code if a DOCA_SIM_FAIL entry matches this call. */
doca_error_t sim_fault(const char *fn);

_Noreturn void sim_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sim_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
doca_error_t sim_trace(const char *fn, doca_error_t rc);

uint64_t sim_now_ns(void);

/* Entry and exit of every public function that returns doca_error_t. */
#define SIM_ENTER() sim_lock()
#define SIM_RETURN(rc)                                              \
	do {                                                        \
		doca_error_t sim_rc_ = sim_trace(__func__, (rc));   \
		sim_unlock();                                       \
		return sim_rc_;                                     \
	} while (0)
#define SIM_FAULT()                                                 \
	do {                                                        \
		doca_error_t sim_f_ = sim_fault(__func__);          \
		if (sim_f_ != DOCA_SUCCESS)                         \
			SIM_RETURN(sim_f_);                         \
	} while (0)

/* Validating casts: abort on a pointer that is not a live object of the kind. */
struct doca_dev *sim_dev_check(const struct doca_dev *dev, const char *fn);
struct doca_devinfo *sim_devinfo_check(const struct doca_devinfo *info, const char *fn);
struct doca_mmap *sim_mmap_check(const struct doca_mmap *mmap, const char *fn);
struct doca_buf *sim_buf_check(const struct doca_buf *buf, const char *fn);
struct doca_rdma *sim_rdma_check(const struct doca_rdma *rdma, const char *fn);
struct doca_ctx *sim_ctx_check(const struct doca_ctx *ctx, const char *fn);
struct doca_pe *sim_pe_check(const struct doca_pe *pe, const char *fn);
struct doca_task *sim_task_check(const struct doca_task *task, const char *fn);

bool sim_mmap_has_dev(const struct doca_mmap *mmap, const struct doca_dev *dev);

/* ---------------------------------------------------------------- engine helpers */

void sim_queue_push(struct sim_task_queue *q, struct doca_task *t);
struct doca_task *sim_queue_pop(struct sim_task_queue *q);
bool sim_queue_remove(struct sim_task_queue *q, struct doca_task *t);

/* Mark a submitted task completed with status and hand it to its PE. */
void sim_task_complete(struct doca_task *t, doca_error_t status);
/* Wake a waiter on the PE's notification handle if it is armed and work is pending. */
void sim_pe_kick(struct doca_pe *pe);
/* doca_pe_clear_notification calls made while nothing was raised. */
size_t sim_pe_spurious_clears(void);

/* rdma.c */
void sim_rdma_close_conns(struct doca_rdma *rdma);
void sim_conn_submit_send(struct doca_rdma_connection *conn, struct doca_task *t);
void sim_rdma_post_receive(struct doca_rdma *rdma, struct doca_task *t);
bool sim_conn_is_live(const struct doca_rdma *rdma, const struct doca_rdma_connection *conn);
/* Whether a connection of the context completed doca_rdma_connect. */
bool sim_rdma_has_connected(const struct doca_rdma *rdma);
/* Application-owned (allocated, not submitted) tasks of the context. */
uint32_t sim_rdma_owned_tasks(const struct doca_rdma *rdma);
void sim_pe_disconnect_ctx(struct doca_ctx *ctx);

#endif /* DOCA_SIM_INTERNAL_H */
