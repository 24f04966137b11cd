/*
 * rdma-container: control surface of the DOCA simulator (test support only).
 *
 * Not a DOCA header: these functions exist only in the simulator linked by doca-sys
 * when it is built with the `sim` feature or DOCA_SYS_SIM=1. The environment variables
 * the simulator reads are documented in doca-sys/README.md.
 */
#ifndef DOCA_SIM_H
#define DOCA_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of simulator objects not yet destroyed (lists, devices, engines, contexts,
 * mmaps, inventories, bufs taken and tasks allocated). */
size_t doca_sim_live_objects(void);

/* Write a one-line JSON report (live objects by kind, misuse count) into buf.
 * Returns the length the full report needs, like snprintf. */
size_t doca_sim_report(char *buf, size_t len);

/* Replace the fault list (same syntax as DOCA_SIM_FAIL; NULL or "" clears it) and
 * reset the call counters. DOCA_ERROR_INVALID_VALUE if the spec does not parse. */
doca_error_t doca_sim_set_faults(const char *spec);

/* Drop every connection after n completed messages (as DOCA_SIM_DROP_AFTER); n < 0 disables. */
void doca_sim_set_drop_after(long n);

/* Replace the device list (same syntax as DOCA_SIM_DEVICES). */
doca_error_t doca_sim_set_devices(const char *spec);

/* Set the delay between receiver-not-ready retries (as DOCA_SIM_RNR_DELAY_MS). */
void doca_sim_set_rnr_delay_ms(unsigned int ms);

/* doca_ctx_start: asynchronous (nonzero: IN_PROGRESS, RUNNING once connected) or
 * synchronous (0: RUNNING at once), as DOCA_SIM_START=async|sync. */
void doca_sim_set_start_async(int async);

/* What doca_rdma_cap_get_max_message_size reports (as DOCA_SIM_MAX_MSG_SIZE). */
void doca_sim_set_max_msg_size(uint32_t max);

/* doca_ctx_stop with tasks allocated: refused with IN_USE (nonzero) or accepted (0: STOPPING,
 * IDLE once every task is freed, as the SDK), as DOCA_SIM_STOP=refuse|accept. */
void doca_sim_set_stop_refuse(int refuse);

/* doca_pe_request_notification with work already pending: raises the handle at once (0, level)
 * or only for completions that come later (nonzero, edge), as DOCA_SIM_ARM=level|edge. */
void doca_sim_set_arm_edge(int edge);

/* One CQ poll in doca_pe_progress moves up to n completions into the engine, which raise no
 * event while they wait for their callbacks (0 or 1: off), as DOCA_SIM_BATCH. */
void doca_sim_set_batch(uint32_t n);

/* What doca_rdma_cap_get_max_send_queue_size / _recv_queue_size report (0: the default,
 * 32768), as DOCA_SIM_MAX_SEND_QUEUE / DOCA_SIM_MAX_RECV_QUEUE. */
void doca_sim_set_queue_caps(uint32_t max_send, uint32_t max_recv);

/* A link flap now under every connected connection of this process: each is dead from now on
 * (sends in flight or submitted later fail with IO_FAILED and put it in error; a connection
 * with nothing to send notices nothing and its receives never complete); a stop, a start and a
 * new export/connect make a working one. Returns the number of connections flapped. */
size_t doca_sim_flap_links(void);

/* Restore every setting to what the environment said at start-up. */
void doca_sim_reset_config(void);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SIM_H */
