/* SPDX-License-Identifier: Apache-2.0 */
/* fake-nvml.c: stands in for libnvidia-ml.so.1 in the agent's health-check tests (CI has no GPU:
 * the only fake of the suite; tests/gpu/ runs the same checks against the real library). Only
 * the entry points agent-health.c loads, with NVML's ABI. Driven by the environment, read at
 * each call:
 *   FAKE_NVML_COUNT  devices present (default 1);
 *   FAKE_NVML_XID    a critical XID event of device 0, given once, at the first wait;
 *   FAKE_NVML_ECC    uncorrectable ECC errors on device 0 (default 0). */
#include <stdlib.h>

#define DEVICES 64

struct event {
    void *device;
    unsigned long long type, data;
    unsigned gpu_instance, compute_instance;
};

int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d);
int nvmlDeviceGetTotalEccErrors(void *d, int type, int counter, unsigned long long *n);
int nvmlDeviceGetRetiredPagesPendingStatus(void *d, int *pending);
int nvmlEventSetCreate(void **set);
int nvmlDeviceRegisterEvents(void *d, unsigned long long types, void *set);
int nvmlEventSetWait_v2(void *set, struct event *e, unsigned timeout_ms);

static char devices[DEVICES];
static char the_set;
static int xid_given;

static unsigned env_num(const char *name, unsigned dflt)
{
    const char *v = getenv(name);

    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
    *n = env_num("FAKE_NVML_COUNT", 1);
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d)
{
    if (i >= env_num("FAKE_NVML_COUNT", 1) || i >= DEVICES)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &devices[i];
    return 0;
}

int nvmlDeviceGetTotalEccErrors(void *d, int type, int counter, unsigned long long *n)
{
    (void)type;
    (void)counter;
    *n = d == &devices[0] ? env_num("FAKE_NVML_ECC", 0) : 0;
    return 0;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void *d, int *pending)
{
    (void)d;
    *pending = 0;
    return 0;
}

int nvmlEventSetCreate(void **set)
{
    *set = &the_set;
    return 0;
}

int nvmlDeviceRegisterEvents(void *d, unsigned long long types, void *set)
{
    (void)d;
    (void)types;
    (void)set;
    return 0;
}

int nvmlEventSetWait_v2(void *set, struct event *e, unsigned timeout_ms)
{
    unsigned xid = env_num("FAKE_NVML_XID", 0);

    (void)set;
    (void)timeout_ms;
    if (!xid || xid_given)
        return 10; /* NVML_ERROR_TIMEOUT */
    xid_given = 1;
    e->device = &devices[0];
    e->type = 0x8; /* nvmlEventTypeXidCriticalError */
    e->data = xid;
    return 0;
}
