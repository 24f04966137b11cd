/*
 * rdma-container doca-sys conformance check: our declaration headers (sim/include)
 * against the real DOCA SDK. Compile only (nothing runs):
 *
 *   cc -fsyntax-only -std=gnu11 -Werror -DDOCA_ALLOW_EXPERIMENTAL_API \
 *      -DDOCA_SYS_CONFORMANCE_CHECK -I<SDK include dir> -iquote doca-sys/sim/include \
 *      doca-sys/conformance/check.c
 *
 * (`cargo test -p doca-sys` does this whenever it was built against a real SDK.)
 *
 * 1. The SDK's headers come first, through the -I path (<...> includes).
 * 2. Every function we bind must already be declared by them (subset.inc), so a name
 *    the SDK does not have is an "undeclared identifier" error.
 * 3. Our headers come next, through -iquote ("..." includes). Their include guards differ
 *    from the SDK's, so the compiler sees both: a prototype or typedef of ours that differs
 *    from the SDK's is a "conflicting types" error; a #define with a different value is a
 *    "redefined" warning, an error under -Werror.
 * 4. C forbids defining an enum or union twice, so with DOCA_SYS_CONFORMANCE_CHECK our
 *    headers skip those bodies; the X-macro lists they are made of are checked here value
 *    by value, and doca_data's layout by size and offsets.
 * 5. One blind spot: C makes an enum type compatible with its underlying integer type
 *    (unsigned int for ours), so a parameter declared `enum doca_x` on one side and
 *    `uint32_t` on the other passes here. conformance/check_enums.cc closes it: the same
 *    headers compiled as C++, where an enum is a distinct type.
 */
#include <stddef.h>

#include <doca_error.h>
#include <doca_types.h>
#include <doca_dev.h>
#include <doca_ctx.h>
#include <doca_pe.h>
#include <doca_mmap.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_rdma.h>

#define DOCA_SYS_FN(name) (void)&name;
__attribute__((unused)) static void doca_sys_sdk_declares_every_bound_function(void)
{
#include "../subset.inc"
}
#undef DOCA_SYS_FN

#include "doca_error.h"
#include "doca_types.h"
#include "doca_dev.h"
#include "doca_ctx.h"
#include "doca_pe.h"
#include "doca_mmap.h"
#include "doca_buf.h"
#include "doca_buf_inventory.h"
#include "doca_rdma.h"

#define DOCA_SYS_CHECK_VALUE(name, value) _Static_assert((name) == (value), "SDK value of " #name " differs");

DOCA_SYS_ERROR_LIST(DOCA_SYS_CHECK_VALUE)
DOCA_SYS_ACCESS_FLAG_LIST(DOCA_SYS_CHECK_VALUE)
DOCA_SYS_MTU_SIZE_LIST(DOCA_SYS_CHECK_VALUE)
DOCA_SYS_CTX_STATE_LIST(DOCA_SYS_CHECK_VALUE)
DOCA_SYS_PE_EVENT_MODE_LIST(DOCA_SYS_CHECK_VALUE)
DOCA_SYS_RDMA_TRANSPORT_TYPE_LIST(DOCA_SYS_CHECK_VALUE)

_Static_assert(sizeof(union doca_data) == 8, "union doca_data is not 8 bytes");
_Static_assert(offsetof(union doca_data, ptr) == 0, "doca_data.ptr offset");
_Static_assert(offsetof(union doca_data, u64) == 0, "doca_data.u64 offset");
_Static_assert(sizeof(((union doca_data *)0)->u64) == 8, "doca_data.u64 size");
_Static_assert(sizeof(enum doca_error) == sizeof(int), "doca_error_t size");
_Static_assert(sizeof(enum doca_ctx_states) == sizeof(int), "enum doca_ctx_states size");
_Static_assert(sizeof(enum doca_pe_event_mode) == sizeof(int), "enum doca_pe_event_mode size");
_Static_assert(sizeof(enum doca_access_flag) == sizeof(int), "enum doca_access_flag size");
_Static_assert(sizeof(enum doca_rdma_transport_type) == sizeof(int), "enum doca_rdma_transport_type size");
_Static_assert(sizeof(enum doca_mtu_size) == sizeof(int), "enum doca_mtu_size size");
_Static_assert(sizeof(doca_notification_handle_t) == sizeof(int), "doca_notification_handle_t is not an fd");
