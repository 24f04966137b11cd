/*
 * rdma-container: our declaration of the part of DOCA's doca_types.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header. Linux only.
 */
#ifndef DOCA_SYS_DECL_TYPES_H
#define DOCA_SYS_DECL_TYPES_H

#include <stdint.h>

#include "doca_sys_decl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On Linux an event handle is a file descriptor. */
typedef int doca_event_handle_t;

/* What doca_pe_get_notification_handle() hands out: an fd to poll for readability. */
typedef doca_event_handle_t doca_notification_handle_t;

/* Length of a GID in bytes. */
#define DOCA_GID_BYTE_LENGTH 16

#ifndef DOCA_SYS_CONFORMANCE_CHECK
/* Opaque 8-byte user value, passed by value to callbacks. */
union doca_data {
	void *ptr;
	uint64_t u64;
};
#endif

/* Access flags for mmaps and RDMA contexts (a bit mask), as X(name, value). */
#define DOCA_SYS_ACCESS_FLAG_LIST(X)                          \
	X(DOCA_ACCESS_FLAG_LOCAL_READ_ONLY, 0)                \
	X(DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, 1 << 0)          \
	X(DOCA_ACCESS_FLAG_RDMA_READ, 1 << 1)                 \
	X(DOCA_ACCESS_FLAG_RDMA_WRITE, 1 << 2)                \
	X(DOCA_ACCESS_FLAG_RDMA_ATOMIC, 1 << 3)               \
	X(DOCA_ACCESS_FLAG_PCI_READ_ONLY, 1 << 4)             \
	X(DOCA_ACCESS_FLAG_PCI_READ_WRITE, 1 << 5)            \
	X(DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING, 1 << 6)

#ifndef DOCA_SYS_CONFORMANCE_CHECK
enum doca_access_flag {
	DOCA_SYS_ACCESS_FLAG_LIST(DOCA_SYS_ENUMERATOR)
};
#endif

/* Path MTU of an RDMA connection, as X(name, value). */
#define DOCA_SYS_MTU_SIZE_LIST(X)              \
	X(DOCA_MTU_SIZE_256_BYTES, 0x0)        \
	X(DOCA_MTU_SIZE_512_BYTES, 0x1)        \
	X(DOCA_MTU_SIZE_1K_BYTES, 0x2)         \
	X(DOCA_MTU_SIZE_2K_BYTES, 0x3)         \
	X(DOCA_MTU_SIZE_4K_BYTES, 0x4)         \
	X(DOCA_MTU_SIZE_RAW_ETHERNET, 0x5)

#ifndef DOCA_SYS_CONFORMANCE_CHECK
enum doca_mtu_size {
	DOCA_SYS_MTU_SIZE_LIST(DOCA_SYS_ENUMERATOR)
};
#endif

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_TYPES_H */
