/*
 * rdma-container doca-sys: what bindgen reads. With the real SDK the include path
 * points at its headers; with the simulator at sim/include (our declarations).
 * build.rs defines DOCA_ALLOW_EXPERIMENTAL_API (every doca_rdma_* is experimental).
 */
#include <doca_error.h>
#include <doca_types.h>
#include <doca_dev.h>
#include <doca_ctx.h>
#include <doca_pe.h>
#include <doca_mmap.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_rdma.h>
