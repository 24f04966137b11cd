/*
 * rdma-container: our declaration of the part of DOCA's doca_dev.h that we use.
 * Written from the documented API (DOCA 2.9 - 3.1); checked against the SDK by
 * conformance/check.c. Not NVIDIA's header.
 */
#ifndef DOCA_SYS_DECL_DEV_H
#define DOCA_SYS_DECL_DEV_H

#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_devinfo; /* entry of the device list; queryable before opening */
struct doca_dev;     /* an opened device */

/* Output buffer sizes for the devinfo queries (each includes room for a NUL where textual). */
#define DOCA_DEVINFO_IPV4_ADDR_SIZE 4
#define DOCA_DEVINFO_IFACE_NAME_SIZE 256
#define DOCA_DEVINFO_IBDEV_NAME_SIZE 64

/* List every local device. Free the list with doca_devinfo_destroy_list(). */
doca_error_t doca_devinfo_create_list(struct doca_devinfo ***dev_list, uint32_t *nb_devs);

/* Free a list from doca_devinfo_create_list(); its entries become invalid. */
doca_error_t doca_devinfo_destroy_list(struct doca_devinfo **dev_list);

/* Open (or take another reference on) the device behind a list entry. */
doca_error_t doca_dev_open(struct doca_devinfo *devinfo, struct doca_dev **dev);

/* Drop one reference taken by doca_dev_open(). */
doca_error_t doca_dev_close(struct doca_dev *dev);

/* The devinfo of an opened device (valid while the device is open). */
struct doca_devinfo *doca_dev_as_devinfo(const struct doca_dev *dev);

/* The IPv4 address of the device's netdev; size >= DOCA_DEVINFO_IPV4_ADDR_SIZE. */
doca_error_t doca_devinfo_get_ipv4_addr(const struct doca_devinfo *devinfo, uint8_t *ipv4_addr, uint32_t size);

/* The netdev name; size >= DOCA_DEVINFO_IFACE_NAME_SIZE. */
doca_error_t doca_devinfo_get_iface_name(const struct doca_devinfo *devinfo, char *iface_name, uint32_t size);

/* The IB device name (e.g. "mlx5_0"); size >= DOCA_DEVINFO_IBDEV_NAME_SIZE. */
doca_error_t doca_devinfo_get_ibdev_name(const struct doca_devinfo *devinfo, char *ibdev_name, uint32_t size);

#ifdef __cplusplus
}
#endif

#endif /* DOCA_SYS_DECL_DEV_H */
