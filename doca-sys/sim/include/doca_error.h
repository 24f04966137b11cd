/*
 * rdma-container: our declaration of the part of DOCA's doca_error.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header.
 */
#ifndef DOCA_SYS_DECL_ERROR_H
#define DOCA_SYS_DECL_ERROR_H

#include "doca_sys_decl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes returned by every DOCA call, as X(name, value). */
#define DOCA_SYS_ERROR_LIST(X)                  \
	X(DOCA_SUCCESS, 0)                      \
	X(DOCA_ERROR_UNKNOWN, 1)                \
	X(DOCA_ERROR_NOT_PERMITTED, 2)          \
	X(DOCA_ERROR_IN_USE, 3)                 \
	X(DOCA_ERROR_NOT_SUPPORTED, 4)          \
	X(DOCA_ERROR_AGAIN, 5)                  \
	X(DOCA_ERROR_INVALID_VALUE, 6)          \
	X(DOCA_ERROR_NO_MEMORY, 7)              \
	X(DOCA_ERROR_INITIALIZATION, 8)         \
	X(DOCA_ERROR_TIME_OUT, 9)               \
	X(DOCA_ERROR_SHUTDOWN, 10)              \
	X(DOCA_ERROR_CONNECTION_RESET, 11)      \
	X(DOCA_ERROR_CONNECTION_ABORTED, 12)    \
	X(DOCA_ERROR_CONNECTION_INPROGRESS, 13) \
	X(DOCA_ERROR_NOT_CONNECTED, 14)         \
	X(DOCA_ERROR_NO_LOCK, 15)               \
	X(DOCA_ERROR_NOT_FOUND, 16)             \
	X(DOCA_ERROR_IO_FAILED, 17)             \
	X(DOCA_ERROR_BAD_STATE, 18)             \
	X(DOCA_ERROR_UNSUPPORTED_VERSION, 19)   \
	X(DOCA_ERROR_OPERATING_SYSTEM, 20)      \
	X(DOCA_ERROR_DRIVER, 21)                \
	X(DOCA_ERROR_UNEXPECTED, 22)            \
	X(DOCA_ERROR_ALREADY_EXIST, 23)         \
	X(DOCA_ERROR_FULL, 24)                  \
	X(DOCA_ERROR_EMPTY, 25)                 \
	X(DOCA_ERROR_IN_PROGRESS, 26)           \
	X(DOCA_ERROR_TOO_BIG, 27)               \
	X(DOCA_ERROR_AUTHENTICATION, 28)        \
	X(DOCA_ERROR_BAD_CONFIG, 29)            \
	X(DOCA_ERROR_SKIPPED, 30)

#ifndef DOCA_SYS_CONFORMANCE_CHECK
enum doca_error {
	DOCA_SYS_ERROR_LIST(DOCA_SYS_ENUMERATOR)
};
#endif

typedef enum doca_error doca_error_t;

/* Static string naming the code (the enumerator's name). */
const char *doca_error_get_name(doca_error_t error);

/* Static human-readable description of the code. */
const char *doca_error_get_descr(doca_error_t error);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_ERROR_H */
