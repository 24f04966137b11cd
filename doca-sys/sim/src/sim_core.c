/*
 * rdma-container DOCA simulator: lock, object registry, configuration from the
 * environment, fault injection, leak report, error strings and devices.
 */
#include "sim_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

struct sim_config sim_cfg;

static pthread_mutex_t sim_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_once_t sim_once = PTHREAD_ONCE_INIT;

static struct sim_obj sim_objects = { 0, SIM_KIND_COUNT, &sim_objects, &sim_objects };
static long sim_live[SIM_KIND_COUNT];

static const char *const sim_kind_names[SIM_KIND_COUNT] = {
	[SIM_DEVINFO_LIST] = "devinfo_list",
	[SIM_DEV] = "dev",
	[SIM_PE] = "pe",
	[SIM_RDMA] = "rdma",
	[SIM_MMAP] = "mmap",
	[SIM_INVENTORY] = "buf_inventory",
	[SIM_BUF] = "buf",
	[SIM_TASK] = "task",
};

/* ---------------------------------------------------------------- messages */

static void sim_vmessage(const char *what, const char *fmt, va_list ap)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "doca-sim[%d]: %s", (int)getpid(), what);
	if (n < 0)
		n = 0;
	if ((size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	fprintf(stderr, "%s\n", line);
	fflush(stderr);
}

void sim_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sim_vmessage("FATAL misuse of the DOCA API (undefined behaviour in the real SDK): ", fmt, ap);
	va_end(ap);
	abort();
}

void sim_warn(const char *fmt, ...)
{
	va_list ap;
	if (sim_cfg.quiet)
		return;
	va_start(ap, fmt);
	sim_vmessage("", fmt, ap);
	va_end(ap);
}

doca_error_t sim_trace(const char *fn, doca_error_t rc)
{
	if (sim_cfg.trace)
		sim_warn("%s -> %s", fn, doca_error_get_name(rc));
	return rc;
}

uint64_t sim_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- error strings */

/* DOCA 3.3 added code 31; our enum stops at 30 so that our headers still match 3.0's. */
#define SIM_ERROR_DEVICE_FATAL 31
#define SIM_ERROR_NAME(name, value) [value] = #name,
static const char *const sim_error_names[] = { DOCA_SYS_ERROR_LIST(SIM_ERROR_NAME)
						[SIM_ERROR_DEVICE_FATAL] = "DOCA_ERROR_DEVICE_FATAL_ERROR" };

static const char *const sim_error_descrs[] = {
	[DOCA_SUCCESS] = "Success",
	[DOCA_ERROR_UNKNOWN] = "Unknown error",
	[DOCA_ERROR_NOT_PERMITTED] = "Operation not permitted",
	[DOCA_ERROR_IN_USE] = "Resource is in use",
	[DOCA_ERROR_NOT_SUPPORTED] = "Operation not supported",
	[DOCA_ERROR_AGAIN] = "Resource temporarily unavailable, try again",
	[DOCA_ERROR_INVALID_VALUE] = "Invalid input",
	[DOCA_ERROR_NO_MEMORY] = "Out of memory or pool exhausted",
	[DOCA_ERROR_INITIALIZATION] = "Initialization failed",
	[DOCA_ERROR_TIME_OUT] = "Timed out",
	[DOCA_ERROR_SHUTDOWN] = "Shut down in progress",
	[DOCA_ERROR_CONNECTION_RESET] = "Connection reset",
	[DOCA_ERROR_CONNECTION_ABORTED] = "Connection aborted",
	[DOCA_ERROR_CONNECTION_INPROGRESS] = "Connection in progress",
	[DOCA_ERROR_NOT_CONNECTED] = "Not connected",
	[DOCA_ERROR_NO_LOCK] = "Could not take a lock",
	[DOCA_ERROR_NOT_FOUND] = "Not found",
	[DOCA_ERROR_IO_FAILED] = "Input/output operation failed",
	[DOCA_ERROR_BAD_STATE] = "Object is in the wrong state for this operation",
	[DOCA_ERROR_UNSUPPORTED_VERSION] = "Unsupported version",
	[DOCA_ERROR_OPERATING_SYSTEM] = "Operating system call failed",
	[DOCA_ERROR_DRIVER] = "Driver error",
	[DOCA_ERROR_UNEXPECTED] = "Unexpected internal state",
	[DOCA_ERROR_ALREADY_EXIST] = "Already exists",
	[DOCA_ERROR_FULL] = "No room left",
	[DOCA_ERROR_EMPTY] = "Nothing there",
	[DOCA_ERROR_IN_PROGRESS] = "Operation in progress",
	[DOCA_ERROR_TOO_BIG] = "Too big",
	[DOCA_ERROR_AUTHENTICATION] = "Authentication failed",
	[DOCA_ERROR_BAD_CONFIG] = "Bad configuration",
	[DOCA_ERROR_SKIPPED] = "Skipped",
	[SIM_ERROR_DEVICE_FATAL] = "Device experienced a fatal error",
};

const char *doca_error_get_name(doca_error_t error)
{
	size_t i = (size_t)error;
	if (i < sizeof(sim_error_names) / sizeof(sim_error_names[0]) && sim_error_names[i] != NULL)
		return sim_error_names[i];
	return "DOCA_ERROR_UNRECOGNIZED";
}

const char *doca_error_get_descr(doca_error_t error)
{
	size_t i = (size_t)error;
	if (i < sizeof(sim_error_descrs) / sizeof(sim_error_descrs[0]) && sim_error_descrs[i] != NULL)
		return sim_error_descrs[i];
	return "Unrecognized error code";
}

static bool sim_parse_code(const char *s, doca_error_t *out)
{
	char *end;
	unsigned long v;
	size_t i;

	if (*s == '\0')
		return false;
	v = strtoul(s, &end, 10);
	if (*end == '\0') {
		*out = (doca_error_t)v;
		return true;
	}
	for (i = 0; i < sizeof(sim_error_names) / sizeof(sim_error_names[0]); i++) {
		const char *name = sim_error_names[i];
		if (name == NULL)
			continue;
		if (strcmp(s, name) == 0 ||
		    (strncmp(name, "DOCA_ERROR_", 11) == 0 && strcmp(s, name + 11) == 0)) {
			*out = (doca_error_t)i;
			return true;
		}
	}
	return false;
}

/* ---------------------------------------------------------------- configuration */

static void sim_free_config(void)
{
	free(sim_cfg.devices);
	free(sim_cfg.faults);
	sim_cfg.devices = NULL;
	sim_cfg.ndevices = 0;
	sim_cfg.faults = NULL;
	sim_cfg.nfaults = 0;
}

/* "ibdev[:iface[:ipv4[:ib|eth]]]" entries separated by commas. */
static doca_error_t sim_parse_devices(const char *spec, struct sim_device **out, size_t *nout)
{
	struct sim_device *devs = NULL;
	size_t n = 0;
	char *copy, *save = NULL, *entry;

	*out = NULL;
	*nout = 0;
	if (spec == NULL)
		return DOCA_SUCCESS;
	copy = strdup(spec);
	if (copy == NULL)
		return DOCA_ERROR_NO_MEMORY;
	for (entry = strtok_r(copy, ",", &save); entry != NULL; entry = strtok_r(NULL, ",", &save)) {
		char *fields[4] = { NULL, NULL, NULL, NULL };
		char *p = entry;
		int f;
		struct sim_device *grown, *d;

		while (*p == ' ')
			p++;
		if (*p == '\0')
			continue;
		for (f = 0; f < 4 && p != NULL; f++) {
			fields[f] = p;
			p = strchr(p, ':');
			if (p != NULL)
				*p++ = '\0';
		}
		if (p != NULL || fields[0][0] == '\0' || strlen(fields[0]) >= DOCA_DEVINFO_IBDEV_NAME_SIZE ||
		    (fields[1] != NULL && strlen(fields[1]) >= DOCA_DEVINFO_IFACE_NAME_SIZE))
			goto invalid;
		grown = realloc(devs, (n + 1) * sizeof(*devs));
		if (grown == NULL) {
			free(devs);
			free(copy);
			return DOCA_ERROR_NO_MEMORY;
		}
		devs = grown;
		d = &devs[n++];
		memset(d, 0, sizeof(*d));
		strcpy(d->ibdev, fields[0]);
		if (fields[1] != NULL)
			strcpy(d->iface, fields[1]);
		if (fields[2] != NULL && fields[2][0] != '\0') {
			struct in_addr a;
			if (inet_pton(AF_INET, fields[2], &a) != 1)
				goto invalid;
			memcpy(d->ipv4, &a, 4);
			d->has_ipv4 = true;
		}
		if (fields[3] != NULL) {
			if (strcmp(fields[3], "ib") == 0)
				d->is_ib = true;
			else if (strcmp(fields[3], "eth") != 0)
				goto invalid;
		}
	}
	free(copy);
	*out = devs;
	*nout = n;
	return DOCA_SUCCESS;
invalid:
	free(devs);
	free(copy);
	return DOCA_ERROR_INVALID_VALUE;
}

/* "function:N[+]:CODE" entries separated by commas or semicolons. */
static doca_error_t sim_parse_faults(const char *spec, struct sim_fault **out, size_t *nout)
{
	struct sim_fault *faults = NULL;
	size_t n = 0;
	char *copy, *save = NULL, *entry;

	*out = NULL;
	*nout = 0;
	if (spec == NULL)
		return DOCA_SUCCESS;
	copy = strdup(spec);
	if (copy == NULL)
		return DOCA_ERROR_NO_MEMORY;
	for (entry = strtok_r(copy, ",;", &save); entry != NULL; entry = strtok_r(NULL, ",;", &save)) {
		char *name = entry, *nth, *code, *end;
		struct sim_fault *grown, *f;

		while (*name == ' ')
			name++;
		if (*name == '\0')
			continue;
		nth = strchr(name, ':');
		if (nth == NULL)
			goto invalid;
		*nth++ = '\0';
		code = strchr(nth, ':');
		if (code == NULL)
			goto invalid;
		*code++ = '\0';
		grown = realloc(faults, (n + 1) * sizeof(*faults));
		if (grown == NULL) {
			free(faults);
			free(copy);
			return DOCA_ERROR_NO_MEMORY;
		}
		faults = grown;
		f = &faults[n++];
		memset(f, 0, sizeof(*f));
		if (strlen(name) >= sizeof(f->name))
			goto invalid;
		strcpy(f->name, name);
		f->nth = strtoul(nth, &end, 10);
		if (end == nth || f->nth == 0)
			goto invalid;
		if (*end == '+') {
			f->and_later = true;
			end++;
		}
		if (*end != '\0' || !sim_parse_code(code, &f->code) || f->code == DOCA_SUCCESS)
			goto invalid;
	}
	free(copy);
	*out = faults;
	*nout = n;
	return DOCA_SUCCESS;
invalid:
	free(faults);
	free(copy);
	return DOCA_ERROR_INVALID_VALUE;
}

static long sim_env_long(const char *name, long dflt)
{
	const char *v = getenv(name);
	char *end;
	long r;
	if (v == NULL || *v == '\0')
		return dflt;
	r = strtol(v, &end, 10);
	if (*end != '\0') {
		sim_warn("ignoring %s=%s (not a number)", name, v);
		return dflt;
	}
	return r;
}

static void sim_load_env(void)
{
	const char *devices = getenv("DOCA_SIM_DEVICES");
	const char *faults = getenv("DOCA_SIM_FAIL");
	const char *dir = getenv("DOCA_SIM_DIR");
	const char *start, *mode;
	long v;

	sim_free_config();
	if (devices == NULL)
		devices = "mlx5_0";
	if (sim_parse_devices(devices, &sim_cfg.devices, &sim_cfg.ndevices) != DOCA_SUCCESS) {
		sim_warn("cannot parse DOCA_SIM_DEVICES=%s (expected ibdev[:iface[:ipv4[:ib|eth]]],...)", devices);
		abort();
	}
	if (sim_parse_faults(faults, &sim_cfg.faults, &sim_cfg.nfaults) != DOCA_SUCCESS) {
		sim_warn("cannot parse DOCA_SIM_FAIL=%s (expected function:N[+]:CODE,...)", faults);
		abort();
	}
	sim_cfg.drop_after = sim_env_long("DOCA_SIM_DROP_AFTER", -1);
	v = sim_env_long("DOCA_SIM_RNR_DELAY_MS", 10);
	sim_cfg.rnr_delay_ms = v < 0 ? 0 : (unsigned int)v;
	v = sim_env_long("DOCA_SIM_MAX_MSG_SIZE", 1L << 30);
	sim_cfg.max_msg_size = (v <= 0 || v > (long)UINT32_MAX) ? (1u << 30) : (uint32_t)v;
	start = getenv("DOCA_SIM_START");
	if (start == NULL || *start == '\0' || strcmp(start, "async") == 0) {
		sim_cfg.start_async = true;
	} else if (strcmp(start, "sync") == 0) {
		sim_cfg.start_async = false;
	} else {
		sim_warn("cannot parse DOCA_SIM_START=%s (expected sync or async)", start);
		abort();
	}
	mode = getenv("DOCA_SIM_STOP");
	if (mode == NULL || *mode == '\0' || strcmp(mode, "accept") == 0) {
		sim_cfg.stop_refuse = false;
	} else if (strcmp(mode, "refuse") == 0) {
		sim_cfg.stop_refuse = true;
	} else {
		sim_warn("cannot parse DOCA_SIM_STOP=%s (expected accept or refuse)", mode);
		abort();
	}
	mode = getenv("DOCA_SIM_ARM");
	if (mode == NULL || *mode == '\0' || strcmp(mode, "level") == 0) {
		sim_cfg.arm_edge = false;
	} else if (strcmp(mode, "edge") == 0) {
		sim_cfg.arm_edge = true;
	} else {
		sim_warn("cannot parse DOCA_SIM_ARM=%s (expected level or edge)", mode);
		abort();
	}
	v = sim_env_long("DOCA_SIM_BATCH", 0);
	sim_cfg.batch = v <= 1 ? 0 : (v > 4096 ? 4096u : (uint32_t)v);
	v = sim_env_long("DOCA_SIM_MAX_SEND_QUEUE", 32768);
	sim_cfg.max_send_queue = (v <= 0 || v > 32768) ? 32768u : (uint32_t)v;
	v = sim_env_long("DOCA_SIM_MAX_RECV_QUEUE", 32768);
	sim_cfg.max_recv_queue = (v <= 0 || v > (long)UINT32_MAX) ? 32768u : (uint32_t)v;
	if (dir == NULL || *dir == '\0')
		dir = getenv("TMPDIR");
	if (dir == NULL || *dir == '\0' || strlen(dir) >= sizeof(sim_cfg.sock_dir))
		dir = "/tmp";
	strcpy(sim_cfg.sock_dir, dir);
	sim_cfg.trace = sim_env_long("DOCA_SIM_TRACE", 0) != 0;
	sim_cfg.quiet = sim_env_long("DOCA_SIM_QUIET", 0) != 0;
}

static void sim_at_exit(void);

static void sim_init(void)
{
	sim_load_env();
	atexit(sim_at_exit);
}

void sim_lock(void)
{
	pthread_once(&sim_once, sim_init);
	pthread_mutex_lock(&sim_mutex);
}

void sim_unlock(void)
{
	pthread_mutex_unlock(&sim_mutex);
}

doca_error_t sim_fault(const char *fn)
{
	doca_error_t rc = DOCA_SUCCESS;
	size_t i;

	for (i = 0; i < sim_cfg.nfaults; i++) {
		struct sim_fault *f = &sim_cfg.faults[i];
		if (strcmp(f->name, fn) != 0)
			continue;
		f->calls++;
		if (rc == DOCA_SUCCESS && (f->calls == f->nth || (f->and_later && f->calls > f->nth))) {
			rc = f->code;
			sim_warn("injecting %s into call %lu of %s", doca_error_get_name(rc), f->calls, fn);
		}
	}
	return rc;
}

/* ---------------------------------------------------------------- registry */

void sim_obj_add(struct sim_obj *obj, enum sim_kind kind)
{
	obj->magic = SIM_MAGIC;
	obj->kind = kind;
	obj->next = &sim_objects;
	obj->prev = sim_objects.prev;
	sim_objects.prev->next = obj;
	sim_objects.prev = obj;
	sim_live[kind]++;
}

void sim_obj_remove(struct sim_obj *obj)
{
	obj->prev->next = obj->next;
	obj->next->prev = obj->prev;
	obj->magic = 0;
	sim_live[obj->kind]--;
}

bool sim_obj_is_live(const void *ptr, enum sim_kind kind)
{
	struct sim_obj *o;
	if (ptr == NULL)
		return false;
	for (o = sim_objects.next; o != &sim_objects; o = o->next)
		if ((const void *)o == ptr && o->kind == kind)
			return true;
	return false;
}

struct sim_obj *sim_obj_first(enum sim_kind kind)
{
	return sim_obj_next(&sim_objects, kind);
}

struct sim_obj *sim_obj_next(struct sim_obj *obj, enum sim_kind kind)
{
	for (obj = obj->next; obj != &sim_objects; obj = obj->next)
		if (obj->kind == kind)
			return obj;
	return NULL;
}

void sim_count(enum sim_kind kind, long delta)
{
	sim_live[kind] += delta;
}

/* ---------------------------------------------------------------- report */

size_t doca_sim_live_objects(void)
{
	size_t total = 0;
	int k;
	sim_lock();
	for (k = 0; k < SIM_KIND_COUNT; k++)
		total += (size_t)sim_live[k];
	sim_unlock();
	return total;
}

size_t doca_sim_report(char *buf, size_t len)
{
	char tmp[1024];
	size_t total = 0, used;
	int k, n;

	sim_lock();
	for (k = 0; k < SIM_KIND_COUNT; k++)
		total += (size_t)sim_live[k];
	n = snprintf(tmp, sizeof(tmp), "{\"pid\":%d,\"live\":%zu,\"objects\":{", (int)getpid(), total);
	used = n > 0 ? (size_t)n : 0;
	for (k = 0; k < SIM_KIND_COUNT && used < sizeof(tmp); k++) {
		n = snprintf(tmp + used, sizeof(tmp) - used, "%s\"%s\":%ld", k ? "," : "", sim_kind_names[k], sim_live[k]);
		used += n > 0 ? (size_t)n : 0;
	}
	if (used < sizeof(tmp)) {
		n = snprintf(tmp + used, sizeof(tmp) - used, "},\"spurious_clears\":%zu}", sim_pe_spurious_clears());
		used += n > 0 ? (size_t)n : 0;
	}
	sim_unlock();
	if (used >= sizeof(tmp))
		used = sizeof(tmp) - 1;
	if (buf != NULL && len > 0) {
		size_t c = used < len - 1 ? used : len - 1;
		memcpy(buf, tmp, c);
		buf[c] = '\0';
	}
	return used;
}

static void sim_at_exit(void)
{
	char report[1024];
	const char *dir = getenv("DOCA_SIM_REPORT_DIR");
	size_t live = doca_sim_live_objects();

	doca_sim_report(report, sizeof(report));
	if (live != 0 && sim_env_long("DOCA_SIM_LEAK_REPORT", 1) != 0) {
		fprintf(stderr, "doca-sim[%d]: LEAK: %zu DOCA objects were not destroyed at exit: %s\n", (int)getpid(),
			live, report);
		fflush(stderr);
	}
	if (dir != NULL && *dir != '\0') {
		char path[PATH_MAX];
		FILE *f;
		snprintf(path, sizeof(path), "%s/doca-sim-%d.json", dir, (int)getpid());
		f = fopen(path, "w");
		if (f != NULL) {
			fprintf(f, "%s\n", report);
			fclose(f);
		}
	}
}

/* ---------------------------------------------------------------- control */

doca_error_t doca_sim_set_faults(const char *spec)
{
	struct sim_fault *faults;
	size_t n;
	doca_error_t rc;

	sim_lock();
	rc = sim_parse_faults(spec, &faults, &n);
	if (rc == DOCA_SUCCESS) {
		free(sim_cfg.faults);
		sim_cfg.faults = faults;
		sim_cfg.nfaults = n;
	}
	sim_unlock();
	return rc;
}

void doca_sim_set_drop_after(long n)
{
	sim_lock();
	sim_cfg.drop_after = n;
	sim_unlock();
}

doca_error_t doca_sim_set_devices(const char *spec)
{
	struct sim_device *devs;
	size_t n;
	doca_error_t rc;

	sim_lock();
	rc = sim_parse_devices(spec, &devs, &n);
	if (rc == DOCA_SUCCESS) {
		free(sim_cfg.devices);
		sim_cfg.devices = devs;
		sim_cfg.ndevices = n;
	}
	sim_unlock();
	return rc;
}

void doca_sim_set_rnr_delay_ms(unsigned int ms)
{
	sim_lock();
	sim_cfg.rnr_delay_ms = ms;
	sim_unlock();
}

void doca_sim_set_start_async(int async)
{
	sim_lock();
	sim_cfg.start_async = async != 0;
	sim_unlock();
}

void doca_sim_set_max_msg_size(uint32_t max)
{
	sim_lock();
	sim_cfg.max_msg_size = max;
	sim_unlock();
}

void doca_sim_set_stop_refuse(int refuse)
{
	sim_lock();
	sim_cfg.stop_refuse = refuse != 0;
	sim_unlock();
}

void doca_sim_set_arm_edge(int edge)
{
	sim_lock();
	sim_cfg.arm_edge = edge != 0;
	sim_unlock();
}

void doca_sim_set_batch(uint32_t n)
{
	sim_lock();
	sim_cfg.batch = n <= 1 ? 0 : (n > 4096 ? 4096u : n);
	sim_unlock();
}

void doca_sim_set_queue_caps(uint32_t max_send, uint32_t max_recv)
{
	sim_lock();
	sim_cfg.max_send_queue = max_send == 0 || max_send > 32768 ? 32768u : max_send;
	sim_cfg.max_recv_queue = max_recv == 0 ? 32768u : max_recv;
	sim_unlock();
}

void doca_sim_reset_config(void)
{
	sim_lock();
	sim_load_env();
	sim_unlock();
}

/* ---------------------------------------------------------------- devices */

static void sim_devinfo_init(struct doca_devinfo *info, const struct sim_device *d, struct doca_dev *dev)
{
	info->magic = SIM_MAGIC;
	info->device = *d;
	info->dev = dev;
}

struct doca_devinfo *sim_devinfo_check(const struct doca_devinfo *info, const char *fn)
{
	struct sim_obj *o;

	if (info != NULL) {
		for (o = sim_obj_first(SIM_DEVINFO_LIST); o != NULL; o = sim_obj_next(o, SIM_DEVINFO_LIST)) {
			struct sim_devinfo_list *l = (struct sim_devinfo_list *)o;
			if (info >= l->infos && info < l->infos + l->count)
				return (struct doca_devinfo *)info;
		}
		for (o = sim_obj_first(SIM_DEV); o != NULL; o = sim_obj_next(o, SIM_DEV))
			if (info == &((struct doca_dev *)o)->info)
				return (struct doca_devinfo *)info;
	}
	sim_fatal("%s: %p is not a valid doca_devinfo (NULL, or its list was destroyed / its device closed)",
		  fn,
		  (const void *)info);
}

struct doca_dev *sim_dev_check(const struct doca_dev *dev, const char *fn)
{
	if (!sim_obj_is_live(dev, SIM_DEV))
		sim_fatal("%s: %p is not an open doca_dev", fn, (const void *)dev);
	return (struct doca_dev *)dev;
}

doca_error_t doca_devinfo_create_list(struct doca_devinfo ***dev_list, uint32_t *nb_devs)
{
	struct sim_devinfo_list *l;
	size_t i;

	SIM_ENTER();
	if (dev_list == NULL || nb_devs == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	SIM_FAULT();
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	l->count = (uint32_t)sim_cfg.ndevices;
	l->infos = calloc(sim_cfg.ndevices + 1, sizeof(*l->infos));
	l->ptrs = calloc(sim_cfg.ndevices + 1, sizeof(*l->ptrs));
	if (l->infos == NULL || l->ptrs == NULL) {
		free(l->infos);
		free(l->ptrs);
		free(l);
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	}
	for (i = 0; i < sim_cfg.ndevices; i++) {
		sim_devinfo_init(&l->infos[i], &sim_cfg.devices[i], NULL);
		l->ptrs[i] = &l->infos[i];
	}
	sim_obj_add(&l->obj, SIM_DEVINFO_LIST);
	*dev_list = l->ptrs;
	*nb_devs = l->count;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_devinfo_destroy_list(struct doca_devinfo **dev_list)
{
	struct sim_obj *o;

	SIM_ENTER();
	if (dev_list == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	for (o = sim_obj_first(SIM_DEVINFO_LIST); o != NULL; o = sim_obj_next(o, SIM_DEVINFO_LIST)) {
		struct sim_devinfo_list *l = (struct sim_devinfo_list *)o;
		if (l->ptrs == dev_list) {
			SIM_FAULT();
			sim_obj_remove(&l->obj);
			free(l->infos);
			free(l->ptrs);
			free(l);
			SIM_RETURN(DOCA_SUCCESS);
		}
	}
	sim_fatal("doca_devinfo_destroy_list: %p is not a live device list (already destroyed?)", (void *)dev_list);
}

doca_error_t doca_dev_open(struct doca_devinfo *devinfo, struct doca_dev **dev)
{
	struct doca_devinfo *info;
	struct doca_dev *d;
	struct sim_obj *o;

	SIM_ENTER();
	if (devinfo == NULL || dev == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	info = sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	/* Opening the same device again takes another reference on the same object. */
	for (o = sim_obj_first(SIM_DEV); o != NULL; o = sim_obj_next(o, SIM_DEV)) {
		d = (struct doca_dev *)o;
		if (strcmp(d->info.device.ibdev, info->device.ibdev) == 0) {
			d->open_refs++;
			sim_count(SIM_DEV, 1);
			*dev = d;
			SIM_RETURN(DOCA_SUCCESS);
		}
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		SIM_RETURN(DOCA_ERROR_NO_MEMORY);
	sim_devinfo_init(&d->info, &info->device, d);
	d->open_refs = 1;
	sim_obj_add(&d->obj, SIM_DEV);
	*dev = d;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_dev_close(struct doca_dev *dev)
{
	struct doca_dev *d;

	SIM_ENTER();
	if (dev == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	d = sim_dev_check(dev, __func__);
	SIM_FAULT();
	if (d->open_refs > 1) {
		d->open_refs--;
		sim_count(SIM_DEV, -1);
		SIM_RETURN(DOCA_SUCCESS);
	}
	if (d->users != 0) {
		sim_warn("doca_dev_close(%s): still used by %u mmap(s)/RDMA context(s)", d->info.device.ibdev, d->users);
		SIM_RETURN(DOCA_ERROR_IN_USE);
	}
	sim_obj_remove(&d->obj);
	free(d);
	SIM_RETURN(DOCA_SUCCESS);
}

struct doca_devinfo *doca_dev_as_devinfo(const struct doca_dev *dev)
{
	struct doca_dev *d;
	sim_lock();
	d = sim_dev_check(dev, __func__);
	sim_unlock();
	return &d->info;
}

static doca_error_t sim_copy_name(const char *name, char *out, uint32_t size, uint32_t min_size)
{
	if (out == NULL || size < min_size)
		return DOCA_ERROR_INVALID_VALUE;
	memset(out, 0, size);
	strncpy(out, name, size - 1);
	return DOCA_SUCCESS;
}

doca_error_t doca_devinfo_get_ipv4_addr(const struct doca_devinfo *devinfo, uint8_t *ipv4_addr, uint32_t size)
{
	struct doca_devinfo *info;

	SIM_ENTER();
	if (devinfo == NULL || ipv4_addr == NULL || size < DOCA_DEVINFO_IPV4_ADDR_SIZE)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	info = sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	if (!info->device.has_ipv4)
		SIM_RETURN(DOCA_ERROR_NOT_FOUND);
	memcpy(ipv4_addr, info->device.ipv4, DOCA_DEVINFO_IPV4_ADDR_SIZE);
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_devinfo_get_iface_name(const struct doca_devinfo *devinfo, char *iface_name, uint32_t size)
{
	struct doca_devinfo *info;

	SIM_ENTER();
	if (devinfo == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	info = sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	if (info->device.iface[0] == '\0')
		SIM_RETURN(DOCA_ERROR_NOT_FOUND);
	SIM_RETURN(sim_copy_name(info->device.iface, iface_name, size, DOCA_DEVINFO_IFACE_NAME_SIZE));
}

doca_error_t doca_devinfo_get_ibdev_name(const struct doca_devinfo *devinfo, char *ibdev_name, uint32_t size)
{
	struct doca_devinfo *info;

	SIM_ENTER();
	if (devinfo == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	info = sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	SIM_RETURN(sim_copy_name(info->device.ibdev, ibdev_name, size, DOCA_DEVINFO_IBDEV_NAME_SIZE));
}

doca_error_t doca_rdma_cap_get_max_message_size(const struct doca_devinfo *devinfo, uint32_t *max_message_size)
{
	SIM_ENTER();
	if (devinfo == NULL || max_message_size == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	(void)sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	*max_message_size = sim_cfg.max_msg_size;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_cap_get_max_send_queue_size(const struct doca_devinfo *devinfo, uint32_t *max_send_queue_size)
{
	SIM_ENTER();
	if (devinfo == NULL || max_send_queue_size == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	(void)sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	*max_send_queue_size = sim_cfg.max_send_queue;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_cap_get_max_recv_queue_size(const struct doca_devinfo *devinfo, uint32_t *max_recv_queue_size)
{
	SIM_ENTER();
	if (devinfo == NULL || max_recv_queue_size == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	(void)sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	*max_recv_queue_size = sim_cfg.max_recv_queue;
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_cap_task_receive_is_supported(const struct doca_devinfo *devinfo)
{
	SIM_ENTER();
	if (devinfo == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	(void)sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	SIM_RETURN(DOCA_SUCCESS);
}

doca_error_t doca_rdma_cap_task_send_is_supported(const struct doca_devinfo *devinfo)
{
	SIM_ENTER();
	if (devinfo == NULL)
		SIM_RETURN(DOCA_ERROR_INVALID_VALUE);
	(void)sim_devinfo_check(devinfo, __func__);
	SIM_FAULT();
	SIM_RETURN(DOCA_SUCCESS);
}
