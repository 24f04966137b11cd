/*
 * rdma-container doca-sys conformance check, C++ half: the enum parameters.
 *
 * C makes every enum type compatible with its underlying integer type (unsigned int for the
 * enums we use), so check.c accepts a prototype whose parameter is `enum doca_x` in one
 * header and `uint32_t` in the other. C++ does not: an enum is a distinct type, and two
 * extern "C" declarations of one function with different parameter types are an error
 * ("conflicting declaration of C function"). This file is check.c's include sequence compiled
 * as C++, plus a static_assert per bound function that takes or returns one of our enums, so
 * that the message names it. Compile only (nothing runs):
 *
 *   c++ -fsyntax-only -std=c++17 -Werror -DDOCA_ALLOW_EXPERIMENTAL_API \
 *       -DDOCA_SYS_CONFORMANCE_CHECK -I<SDK include dir> -iquote doca-sys/sim/include \
 *       doca-sys/conformance/check_enums.cc
 */
#include <type_traits>

#include <doca_error.h>
#include <doca_types.h>
#include <doca_dev.h>
#include <doca_ctx.h>
#include <doca_pe.h>
#include <doca_mmap.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_rdma.h>

#include "doca_error.h"
#include "doca_types.h"
#include "doca_dev.h"
#include "doca_ctx.h"
#include "doca_pe.h"
#include "doca_mmap.h"
#include "doca_buf.h"
#include "doca_buf_inventory.h"
#include "doca_rdma.h"

#define DOCA_SYS_SAME_TYPE(fn, type) \
	static_assert(std::is_same<decltype(&fn), type>::value, "SDK declares " #fn " with other parameter types")

/* Every bound function whose signature names one of our enums (doca_error_t aside, which is
 * the return type of nearly all of them and checked by every conflicting declaration). */
DOCA_SYS_SAME_TYPE(doca_rdma_set_transport_type,
		   doca_error_t (*)(struct doca_rdma *, enum doca_rdma_transport_type));
DOCA_SYS_SAME_TYPE(doca_rdma_set_mtu, doca_error_t (*)(struct doca_rdma *, enum doca_mtu_size));
DOCA_SYS_SAME_TYPE(doca_rdma_get_mtu, doca_error_t (*)(const struct doca_rdma *, enum doca_mtu_size *));
DOCA_SYS_SAME_TYPE(doca_ctx_get_state, doca_error_t (*)(const struct doca_ctx *, enum doca_ctx_states *));
DOCA_SYS_SAME_TYPE(doca_pe_set_event_mode, doca_error_t (*)(struct doca_pe *, enum doca_pe_event_mode));
DOCA_SYS_SAME_TYPE(doca_error_get_name, const char *(*)(doca_error_t));
DOCA_SYS_SAME_TYPE(doca_error_get_descr, const char *(*)(doca_error_t));
static_assert(std::is_same<doca_ctx_state_changed_callback_t,
			   void (*)(union doca_data, struct doca_ctx *, enum doca_ctx_states, enum doca_ctx_states)>::value,
	      "SDK declares doca_ctx_state_changed_callback_t with other parameter types");
/* Access flags are an enum in the SDK but passed as uint32_t masks, on both sides. */
DOCA_SYS_SAME_TYPE(doca_rdma_set_permissions, doca_error_t (*)(struct doca_rdma *, uint32_t));
DOCA_SYS_SAME_TYPE(doca_mmap_set_permissions, doca_error_t (*)(struct doca_mmap *, uint32_t));
