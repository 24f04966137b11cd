/*
 * rdma-container DOCA simulator: memory maps, buffer inventories and buffers.
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

#define SIM_KNOWN_ACCESS_FLAGS 0x7fu

/* ---------------------------------------------------------------- mmap */

struct doca_mmap *sim_mmap_check(const struct doca_mmap *mmap, const char *fn)
{
	if (!sim_obj_is_live(mmap, SIM_MMAP))
		sim_fatal("%s: %p is not a live doca_mmap", fn, (const void *)mmap);
	return (struct doca_mmap *)mmap;
}

bool sim_mmap_has_dev(const struct doca_mmap *mmap, const struct doca_dev *dev)
{
	unsigned int i;
	for (i = 0; i < mmap->ndevs; i++)
		if (mmap->devs[i] == dev)
			return true;
	return false;
}

doca_error_t doca_mmap_create(struct doca_mmap **mmap)
{
	struct doca_mmap *m;

	SIM_ENTER();
	if (mmap == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	SIM_FAULT();
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	m->permissions = DOCA_ACCESS_FLAG_LOCAL_READ_ONLY;
	sim_obj_add(&m->obj, SIM_MMAP);
	*mmap = m;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_mmap_destroy(struct doca_mmap *mmap)
{
	struct doca_mmap *m;
	unsigned int i;

	SIM_ENTER();
	if (mmap == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	m = sim_mmap_check(mmap, __func__);
	SIM_FAULT();
	if (m->nbufs != 0) {
		sim_warn("doca_mmap_destroy: %zu doca_buf(s) still point into the mmap", m->nbufs);
		SIM_RETURN(DOCA_ERROR_NOT_PERMITTED);
	}
	for (i = 0; i < m->ndevs; i++)
		m->devs[i]->users--;
	sim_obj_remove(&m->obj);
	free(m);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_mmap_start(struct doca_mmap *mmap)
{
	struct doca_mmap *m;

	SIM_ENTER();
	if (mmap == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	m = sim_mmap_check(mmap, __func__);
	if (m->started)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (!m->range_set) {
		sim_warn("doca_mmap_start: no memory range was set");
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	}
	SIM_FAULT();
	m->started = true;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_mmap_stop(struct doca_mmap *mmap)
{
	struct doca_mmap *m;

	SIM_ENTER();
	if (mmap == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	m = sim_mmap_check(mmap, __func__);
	SIM_FAULT();
	if (m->nbufs != 0) {
		sim_warn("doca_mmap_stop: %zu doca_buf(s) still point into the mmap", m->nbufs);
		SIM_RETURN(DOCA_ERROR_NOT_PERMITTED);
	}
	m->started = false;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_mmap_add_dev(struct doca_mmap *mmap, struct doca_dev *dev)
{
	struct doca_mmap *m;
	struct doca_dev *d;

	SIM_ENTER();
	if (mmap == NULL || dev == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	m = sim_mmap_check(mmap, __func__);
	d = sim_dev_check(dev, __func__);
	if (m->started)
		SIM_RETURN(DOCA_ERROR_NOT_PERMITTED);
	if (sim_mmap_has_dev(m, d))
		SIM_RETURN(DOCA_ERROR_ALREADY_EXIST);
	if (m->ndevs == sizeof(m->devs) / sizeof(m->devs[0]))
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	SIM_FAULT();
	m->devs[m->ndevs++] = d;
	d->users++;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_mmap_set_memrange(struct doca_mmap *mmap, void *addr, size_t len)
{
	struct doca_mmap *m;

	SIM_ENTER();
	if (mmap == NULL || addr == NULL || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	m = sim_mmap_check(mmap, __func__);
	if (m->started)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (m->range_set)
		SIM_RETURN(DOCA_ERROR_NOT_PERMITTED);
	SIM_FAULT();
	m->addr = addr;
	m->len = len;
	m->range_set = true;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_mmap_set_permissions(struct doca_mmap *mmap, uint32_t access_mask)
{
	struct doca_mmap *m;

	SIM_ENTER();
	if (mmap == NULL || (access_mask & ~SIM_KNOWN_ACCESS_FLAGS) != 0)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	m = sim_mmap_check(mmap, __func__);
	if (m->started)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	SIM_FAULT();
	m->permissions = access_mask;
	SIM_RETURN(DOCA_SUCCESS);
}

/* ---------------------------------------------------------------- inventory */

static struct doca_buf_inventory *sim_inventory_check(const struct doca_buf_inventory *inv, const char *fn)
{
	if (!sim_obj_is_live(inv, SIM_INVENTORY))
		sim_fatal("%s: %p is not a live doca_buf_inventory", fn, (const void *)inv);
	return (struct doca_buf_inventory *)inv;
}

doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory **inventory)
{
	struct doca_buf_inventory *inv;

	SIM_ENTER();
	if (inventory == NULL || num_elements == 0)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	SIM_FAULT();
	inv = calloc(1, sizeof(*inv));
	if (inv == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	inv->elems = calloc(num_elements, sizeof(*inv->elems));
	if (inv->elems == NULL) {
		free(inv);
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	}
	inv->num = num_elements;
	sim_obj_add(&inv->obj, SIM_INVENTORY);
	*inventory = inv;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory *inventory)
{
	struct doca_buf_inventory *inv;

	SIM_ENTER();
	if (inventory == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	inv = sim_inventory_check(inventory, __func__);
	SIM_FAULT();
	if (inv->used != 0) {
		sim_warn("doca_buf_inventory_destroy: %zu doca_buf(s) were not returned", inv->used);
		SIM_RETURN(DOCA_ERROR_IN_USE);
	}
	sim_obj_remove(&inv->obj);
	free(inv->elems);
	free(inv);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_inventory_start(struct doca_buf_inventory *inventory)
{
	struct doca_buf_inventory *inv;

	SIM_ENTER();
	if (inventory == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	inv = sim_inventory_check(inventory, __func__);
	SIM_FAULT();
	inv->started = true;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory *inventory)
{
	struct doca_buf_inventory *inv;

	SIM_ENTER();
	if (inventory == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	inv = sim_inventory_check(inventory, __func__);
	SIM_FAULT();
	inv->started = false;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_inventory_get_num_free_elements(const struct doca_buf_inventory *inventory,
						      uint32_t *num_of_free_elements)
{
	struct doca_buf_inventory *inv;

	SIM_ENTER();
	if (inventory == NULL || num_of_free_elements == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	inv = sim_inventory_check(inventory, __func__);
	*num_of_free_elements = (uint32_t)(inv->num - inv->used);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory *inventory,
						struct doca_mmap *mmap,
						void *addr,
						size_t len,
						void *data,
						size_t data_len,
						struct doca_buf **buf)
{
	struct doca_buf_inventory *inv;
	struct doca_mmap *m;
	uint8_t *a = addr, *d = data;
	size_t i;

	SIM_ENTER();
	if (inventory == NULL || mmap == NULL || buf == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	inv = sim_inventory_check(inventory, __func__);
	m = sim_mmap_check(mmap, __func__);
	if (!inv->started) {
		sim_warn("doca_buf_inventory_buf_get_by_args: the inventory is not started");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	if (!m->started) {
		sim_warn("doca_buf_inventory_buf_get_by_args: the mmap is not started");
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	}
	if (a < m->addr || len > m->len || (size_t)(a - m->addr) > m->len - len) {
		sim_warn("doca_buf_inventory_buf_get_by_args: [%p, +%zu) is outside the mmap [%p, +%zu)",
			 addr,
			 len,
			 (void *)m->addr,
			 m->len);
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	}
	if (d < a || data_len > len || (size_t)(d - a) > len - data_len)
		sim_fatal("doca_buf_inventory_buf_get_by_args: data [%p, +%zu) is outside the buffer [%p, +%zu)",
			  data,
			  data_len,
			  addr,
			  len);
	SIM_FAULT();
	if (inv->used == inv->num)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	for (i = 0; i < inv->num; i++) {
		struct doca_buf *b = &inv->elems[i];
		if (b->refcount != 0)
			continue;
		b->inv = inv;
		b->mmap = m;
		b->head = a;
		b->len = len;
		b->data = d;
		b->data_len = data_len;
		b->refcount = 1;
		inv->used++;
		m->nbufs++;
		sim_count(SIM_BUF, 1);
		*buf = b;
		SIM_RETURN(DOCA_SUCCESS);
	}
	SIM_RETURN(DOCA_ERROR_NO_MEMORY);
}

/* ---------------------------------------------------------------- buf */

/* A pointer to an element of a live inventory (taken or free). */
static struct doca_buf *sim_buf_element(const struct doca_buf *buf, const char *fn)
{
	struct sim_obj *o;
	for (o = sim_obj_first(SIM_INVENTORY); o != NULL; o = sim_obj_next(o, SIM_INVENTORY)) {
		struct doca_buf_inventory *inv = (struct doca_buf_inventory *)o;
		if (buf >= inv->elems && buf < inv->elems + inv->num)
			return (struct doca_buf *)buf;
	}
	sim_fatal("%s: %p is not a doca_buf of any live inventory", fn, (const void *)buf);
}

struct doca_buf *sim_buf_check(const struct doca_buf *buf, const char *fn)
{
	struct doca_buf *b = sim_buf_element(buf, fn);
	if (b->refcount == 0)
		sim_fatal("%s: doca_buf %p was already returned to its inventory (refcount 0)", fn, (const void *)buf);
	return b;
}

doca_error_t doca_buf_inc_refcount(struct doca_buf *buf, uint16_t *refcount)
{
	struct doca_buf *b;

	SIM_ENTER();
	if (buf == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	b = sim_buf_element(buf, __func__);
	if (b->refcount == 0)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	if (b->refcount == UINT16_MAX)
		SIM_RETURN(DOCA_ERROR_TOO_BIG);
	if (refcount != NULL)
		*refcount = b->refcount;
	b->refcount++;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_dec_refcount(struct doca_buf *buf, uint16_t *refcount)
{
	struct doca_buf *b;

	SIM_ENTER();
	if (buf == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	b = sim_buf_element(buf, __func__);
	if (b->refcount == 0)
		SIM_RETURN(DOCA_ERROR_BAD_STATE);
	SIM_FAULT();
	if (refcount != NULL)
		*refcount = b->refcount;
	b->refcount--;
	if (b->refcount == 0) {
		b->inv->used--;
		b->mmap->nbufs--;
		sim_count(SIM_BUF, -1);
	}
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_get_len(const struct doca_buf *buf, size_t *len)
{
	struct doca_buf *b;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	if (len == NULL)
		sim_fatal("doca_buf_get_len: NULL output");
	*len = b->len;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_get_head(const struct doca_buf *buf, void **head)
{
	struct doca_buf *b;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	if (head == NULL)
		sim_fatal("doca_buf_get_head: NULL output");
	*head = b->head;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_get_data_len(const struct doca_buf *buf, size_t *data_len)
{
	struct doca_buf *b;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	if (data_len == NULL)
		sim_fatal("doca_buf_get_data_len: NULL output");
	*data_len = b->data_len;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_get_data(const struct doca_buf *buf, void **data)
{
	struct doca_buf *b;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	if (data == NULL)
		sim_fatal("doca_buf_get_data: NULL output");
	*data = b->data;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_set_data(struct doca_buf *buf, void *data, size_t data_len)
{
	struct doca_buf *b;
	uint8_t *d = data;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	if (d == NULL || d < b->head || data_len > b->len || (size_t)(d - b->head) > b->len - data_len)
		sim_fatal("doca_buf_set_data: [%p, +%zu) is outside the buffer [%p, +%zu)",
			  data,
			  data_len,
			  (void *)b->head,
			  b->len);
	b->data = d;
	b->data_len = data_len;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_set_data_len(struct doca_buf *buf, size_t data_len)
{
	struct doca_buf *b;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	if (data_len > b->len - (size_t)(b->data - b->head))
		sim_fatal("doca_buf_set_data_len: %zu bytes from the data pointer run past the buffer end", data_len);
	b->data_len = data_len;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_buf_reset_data_len(struct doca_buf *buf)
{
	struct doca_buf *b;

	SIM_ENTER();
	b = sim_buf_check(buf, __func__);
	b->data_len = 0;
	SIM_RETURN(DOCA_SUCCESS);
}
