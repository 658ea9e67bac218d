/* SPDX-License-Identifier: Apache-2.0 */
/* agent-health.c: the node's health checks (agent-health.h). */
#include "agent/session/agent-health.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"

/* ---- NVML, as much of its ABI (nvml.h, stable since the _v2 entry points) as the checks use */

typedef void *nvml_device;
typedef void *nvml_event_set;
struct nvml_event_data {
    nvml_device device;
    unsigned long long event_type, event_data;
    unsigned gpu_instance_id, compute_instance_id;
};
#define NVML_SUCCESS 0
#define NVML_ERROR_TIMEOUT 10
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
#define NVML_EVENT_XID_CRITICAL 0x8ull
#define NVML_DEVICES_MAX 64

struct nvml {
    void *lib;
    int (*init)(void);
    int (*count)(unsigned *n);
    int (*handle)(unsigned i, nvml_device *d);
    int (*ecc)(nvml_device d, int type, int counter, unsigned long long *n);
    int (*pending)(nvml_device d, int *pending);
    int (*set_create)(nvml_event_set *s);
    int (*reg)(nvml_device d, unsigned long long types, nvml_event_set s);
    int (*wait)(nvml_event_set s, struct nvml_event_data *e, unsigned timeout_ms);
    nvml_event_set events; /* every device's critical XIDs, from the first check on */
    nvml_device devs[NVML_DEVICES_MAX];
    unsigned ndevs;
};

/* XIDs that mean the GPU (or its link, memory or firmware) is broken, not the program. */
static const unsigned critical_xids[] = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120};

struct agent_health {
    struct agent_health_cfg cfg;
    agent_health_cb cb;
    void *ud;
    bool running, freed;
    unsigned handles;  /* open handles; the struct goes with the last, once freed */
    uv_timer_t defer;  /* delivers a verdict from the loop */
    uv_timer_t timeout;
    uv_process_t proc;
    uv_pipe_t out;
    bool proc_open, out_open, timed_out;
    int64_t exit_status;
    int term_signal;
    char line[AGENT_HEALTH_REASON_MAX + 1];
    size_t line_len;
    bool line_done;
    bool healthy;
    char reason[AGENT_HEALTH_REASON_MAX + 1];
    struct nvml nvml;
    bool nvml_tried, nvml_ok, said_cmd_missing;
};

static void handle_closed_cb(uv_handle_t *hd)
{
    struct agent_health *h = hd->data;

    if (--h->handles == 0 && h->freed) {
        if (h->nvml.lib)
            dlclose(h->nvml.lib);
        free(h);
    }
}

int agent_health_new(const struct agent_health_cfg *cfg, struct agent_health **ret)
{
    struct agent_health *h = calloc(1, sizeof(*h));

    if (!h)
        return -ENOMEM;
    h->cfg = *cfg;
    h->defer.data = h->timeout.data = h;
    (void)uv_timer_init(cfg->loop, &h->defer);
    (void)uv_timer_init(cfg->loop, &h->timeout);
    h->handles = 2;
    *ret = h;
    return 0;
}

/* ---- checks that answer at once ---- */

static bool fail(struct agent_health *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static bool fail(struct agent_health *h, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(h->reason, sizeof(h->reason), fmt, ap);
    va_end(ap);
    rdzv_utf8_trim(h->reason);
    return false;
}

/* dir (or, while it does not exist yet, the nearest directory above it, where the agent will
 * make it) is writable, with AGENT_HEALTH_MIN_FREE bytes free. */
static bool check_path(struct agent_health *h, const char *want)
{
    char path[4200], dir[4096];
    struct statvfs vfs;
    int fd;

    snprintf(dir, sizeof(dir), "%s", want);
    while (statvfs(dir, &vfs) < 0) {
        char *slash = strrchr(dir, '/');

        if (errno != ENOENT || !slash || slash == dir)
            return fail(h, "%s cannot be checked: %s", want, strerror(errno));
        *slash = '\0';
    }
    if ((uint64_t)vfs.f_bavail * vfs.f_frsize < AGENT_HEALTH_MIN_FREE)
        return fail(h, "%s has %llu MiB free (at least %llu needed)", dir,
                    (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20),
                    AGENT_HEALTH_MIN_FREE >> 20);
    snprintf(path, sizeof(path), "%s/.rdzv-health-%d", dir, (int)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, "ok\n", 3) != 3) {
        int e = errno;

        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        return fail(h, "cannot write in %s: %s", dir, strerror(e));
    }
    close(fd);
    unlink(path);
    return true;
}

/* Whether the port dev/port is one --health-nic names (NULL: all are). */
static bool nic_wanted(const char *nics, const char *dev, const char *port)
{
    char one[160];
    const char *p = nics;

    if (!nics)
        return true;
    while (*p) {
        size_t n = strcspn(p, ",");
        char *colon;

        snprintf(one, sizeof(one), "%.*s", (int)(n < sizeof(one) - 1 ? n : sizeof(one) - 1), p);
        colon = strchr(one, ':');
        if (colon)
            *colon = '\0';
        if (strcmp(one, dev) == 0 && (!colon || strcmp(colon + 1, port) == 0))
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

static bool check_rdma(struct agent_health *h)
{
    const char *root = getenv("RDZV_SYSFS_ROOT");
    char dir[1024], path[1600], state[64];
    unsigned found = 0;
    struct dirent *d;
    DIR *devs;

    snprintf(dir, sizeof(dir), "%s/class/infiniband", root && *root ? root : "/sys");
    if (!(devs = opendir(dir)))
        return h->cfg.nics ? fail(h, "--health-nic %s: no RDMA device (%s)", h->cfg.nics, dir)
                           : true; /* no RDMA here: nothing required */
    while ((d = readdir(devs))) {
        struct dirent *pd;
        DIR *ports;

        if (d->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/ports", dir, d->d_name);
        if (!(ports = opendir(path)))
            continue;
        while ((pd = readdir(ports))) {
            FILE *f;
            bool active;

            if (pd->d_name[0] == '.' || !nic_wanted(h->cfg.nics, d->d_name, pd->d_name))
                continue;
            found++;
            snprintf(path, sizeof(path), "%s/%s/ports/%s/state", dir, d->d_name, pd->d_name);
            state[0] = '\0';
            if ((f = fopen(path, "re"))) {
                if (!fgets(state, sizeof(state), f))
                    state[0] = '\0';
                fclose(f);
            }
            state[strcspn(state, "\n")] = '\0';
            active = strstr(state, "ACTIVE") != NULL;
            if (!active) {
                const char *word = strchr(state, ':');

                fail(h, "RDMA port %s/%s is %s", d->d_name, pd->d_name,
                     word ? word + 1 + (word[1] == ' ') : state[0] ? state : "unreadable");
                closedir(ports);
                closedir(devs);
                return false;
            }
        }
        closedir(ports);
    }
    closedir(devs);
    if (h->cfg.nics && !found)
        return fail(h, "--health-nic %s: no such RDMA port in %s", h->cfg.nics, dir);
    return true;
}

/* Load NVML and register for critical XIDs, once. false: not available (said once). */
static bool nvml_load(struct agent_health *h)
{
    const char *name = getenv("RDZV_NVML_LIB");
    struct nvml *n = &h->nvml;
    unsigned count = 0;

    if (h->nvml_tried)
        return h->nvml_ok;
    h->nvml_tried = true;
    if (!name || !*name)
        name = "libnvidia-ml.so.1";
    if (!(n->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
        log_warn("health: NVML cannot be loaded (%s): the GPUs are not checked", dlerror());
        return false;
    }
    *(void **)&n->init = dlsym(n->lib, "nvmlInit_v2");
    *(void **)&n->count = dlsym(n->lib, "nvmlDeviceGetCount_v2");
    *(void **)&n->handle = dlsym(n->lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&n->ecc = dlsym(n->lib, "nvmlDeviceGetTotalEccErrors");
    *(void **)&n->pending = dlsym(n->lib, "nvmlDeviceGetRetiredPagesPendingStatus");
    *(void **)&n->set_create = dlsym(n->lib, "nvmlEventSetCreate");
    *(void **)&n->reg = dlsym(n->lib, "nvmlDeviceRegisterEvents");
    *(void **)&n->wait = dlsym(n->lib, "nvmlEventSetWait_v2");
    if (!n->init || !n->count || !n->handle || n->init() != NVML_SUCCESS) {
        log_warn("health: NVML (%s) does not start: the GPUs are not checked", name);
        return false;
    }
    if (n->set_create && n->reg && n->wait && n->set_create(&n->events) == NVML_SUCCESS &&
        n->count(&count) == NVML_SUCCESS)
        for (unsigned i = 0; i < count && i < NVML_DEVICES_MAX; i++)
            if (n->handle(i, &n->devs[i]) == NVML_SUCCESS) {
                (void)n->reg(n->devs[i], NVML_EVENT_XID_CRITICAL, n->events);
                n->ndevs = i + 1;
            }
    h->nvml_ok = true;
    return true;
}

static bool check_gpus(struct agent_health *h)
{
    struct nvml *n = &h->nvml;
    struct nvml_event_data ev;
    unsigned count = 0;

    if (h->cfg.gpus <= 0 || !nvml_load(h))
        return true;
    if (n->count(&count) != NVML_SUCCESS)
        return fail(h, "NVML cannot count the GPUs");
    if ((int64_t)count < h->cfg.gpus)
        return fail(h, "NVML sees %u GPU(s), the node should have %" PRId64, count, h->cfg.gpus);
    while (n->events && n->wait(n->events, &ev, 0) == NVML_SUCCESS) {
        unsigned gpu = 0;

        while (gpu < n->ndevs && n->devs[gpu] != ev.device)
            gpu++;
        for (size_t k = 0; k < RDZV_ARRAY_SIZE(critical_xids); k++)
            if (ev.event_data == critical_xids[k])
                return fail(h, "GPU %u reported XID %llu%s", gpu, ev.event_data,
                            ev.event_data == 79 ? " (fallen off the bus)" : "");
    }
    for (unsigned i = 0; i < count && i < NVML_DEVICES_MAX; i++) {
        nvml_device d;
        unsigned long long errors = 0;
        int pending = 0;

        if (n->handle(i, &d) != NVML_SUCCESS)
            return fail(h, "NVML cannot reach GPU %u", i);
        if (n->ecc &&
            n->ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors) ==
                NVML_SUCCESS &&
            errors > 0)
            return fail(h, "GPU %u has %llu uncorrectable ECC error(s)", i, errors);
        if (n->pending && n->pending(d, &pending) == NVML_SUCCESS && pending)
            return fail(h, "GPU %u has retired pages pending (it needs a reset)", i);
    }
    return true;
}

/* ---- the verdict ---- */

static void defer_cb(uv_timer_t *t)
{
    struct agent_health *h = t->data;

    h->running = false;
    h->cb(h->ud, h->healthy, h->reason);
}

static void verdict(struct agent_health *h, bool healthy)
{
    h->healthy = healthy;
    if (healthy)
        h->reason[0] = '\0';
    (void)uv_timer_start(&h->defer, defer_cb, 0, 0);
}

/* ---- the site's command ---- */

static void cmd_done(struct agent_health *h)
{
    if (h->proc_open || h->out_open)
        return;
    (void)uv_timer_stop(&h->timeout);
    if (h->timed_out) {
        fail(h, "the health check '%s' did not finish within %g s", h->cfg.cmd,
             h->cfg.timeout_s);
        verdict(h, false);
        return;
    }
    if (!h->term_signal && (h->exit_status == 126 || h->exit_status == 127)) {
        if (!h->said_cmd_missing)
            log_warn("health: --health-check '%s' cannot run (exit %" PRId64 ": %s): not checked",
                     h->cfg.cmd, h->exit_status,
                     h->exit_status == 127 ? "not found" : "not executable");
        h->said_cmd_missing = true;
        verdict(h, true);
        return;
    }
    if (h->exit_status == 0 && !h->term_signal) {
        verdict(h, true);
        return;
    }
    if (h->line[0])
        fail(h, "%s", h->line);
    else if (h->term_signal)
        fail(h, "the health check '%s' was killed by signal %d", h->cfg.cmd, h->term_signal);
    else
        fail(h, "the health check '%s' exited with code %" PRId64, h->cfg.cmd, h->exit_status);
    verdict(h, false);
}

static void proc_closed_cb(uv_handle_t *hd)
{
    struct agent_health *h = hd->data;

    h->proc_open = false;
    if (!h->freed)
        cmd_done(h);
    handle_closed_cb(hd);
}

static void out_closed_cb(uv_handle_t *hd)
{
    struct agent_health *h = hd->data;

    h->out_open = false;
    if (!h->freed)
        cmd_done(h);
    handle_closed_cb(hd);
}

static void exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct agent_health *h = p->data;

    h->exit_status = status;
    h->term_signal = sig;
    uv_close((uv_handle_t *)p, proc_closed_cb);
}

static void alloc_cb(uv_handle_t *hd, size_t hint, uv_buf_t *buf)
{
    static char scratch[4096];

    (void)hd;
    (void)hint;
    *buf = uv_buf_init(scratch, sizeof(scratch));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct agent_health *h = s->data;

    if (n < 0) {
        uv_close((uv_handle_t *)s, out_closed_cb);
        return;
    }
    for (ssize_t i = 0; i < n && !h->line_done; i++) {
        if (buf->base[i] == '\n')
            h->line_done = true;
        else if (h->line_len < sizeof(h->line) - 1)
            h->line[h->line_len++] = buf->base[i];
    }
    h->line[h->line_len] = '\0';
}

static void timeout_cb(uv_timer_t *t)
{
    struct agent_health *h = t->data;

    h->timed_out = true;
    if (h->proc_open)
        (void)kill(-h->proc.pid, SIGKILL); /* its own process group: what it started goes too */
}

static int cmd_start(struct agent_health *h)
{
    char *args[] = {"sh", "-c", (char *)h->cfg.cmd, NULL};
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&h->out},
        {.flags = UV_INHERIT_FD, .data.fd = 2},
    };
    uv_process_options_t o = {.file = "/bin/sh",
                              .args = args,
                              .exit_cb = exit_cb,
                              .stdio_count = 3,
                              .stdio = stdio,
                              .flags = UV_PROCESS_DETACHED};
    int r;

    h->line[0] = '\0';
    h->line_len = 0;
    h->line_done = h->timed_out = false;
    h->exit_status = 0;
    h->term_signal = 0;
    h->out.data = h->proc.data = h;
    r = uv_pipe_init(h->cfg.loop, &h->out, 0);
    if (r < 0)
        return r;
    h->out_open = true;
    h->handles++;
    r = uv_spawn(h->cfg.loop, &h->proc, &o);
    if (r < 0) {
        h->handles++; /* uv_spawn leaves it initialised: closed before h may go */
        uv_close((uv_handle_t *)&h->proc, handle_closed_cb);
        h->out_open = false;
        uv_close((uv_handle_t *)&h->out, handle_closed_cb);
        return r;
    }
    h->proc_open = true;
    h->handles++;
    (void)uv_read_start((uv_stream_t *)&h->out, alloc_cb, read_cb);
    (void)uv_timer_start(&h->timeout, timeout_cb, (uint64_t)(h->cfg.timeout_s * 1000), 0);
    return 0;
}

int agent_health_run(struct agent_health *h, agent_health_cb cb, void *ud)
{
    int r;

    if (h->running)
        return -EBUSY;
    h->cb = cb;
    h->ud = ud;
    h->running = true;
    for (unsigned i = 0; i < AGENT_HEALTH_PATHS_MAX && h->cfg.paths[i]; i++)
        if (!check_path(h, h->cfg.paths[i])) {
            verdict(h, false);
            return 0;
        }
    if (!check_rdma(h) || !check_gpus(h)) {
        verdict(h, false);
        return 0;
    }
    if (!h->cfg.cmd) {
        verdict(h, true);
        return 0;
    }
    r = cmd_start(h);
    if (r < 0) {
        h->running = false;
        return r;
    }
    return 0;
}

void agent_health_free(struct agent_health *h)
{
    if (!h)
        return;
    h->freed = true;
    if (h->proc_open) {
        (void)kill(-h->proc.pid, SIGKILL);
        if (!uv_is_closing((uv_handle_t *)&h->proc))
            uv_close((uv_handle_t *)&h->proc, proc_closed_cb);
    }
    if (h->out_open && !uv_is_closing((uv_handle_t *)&h->out))
        uv_close((uv_handle_t *)&h->out, out_closed_cb);
    uv_close((uv_handle_t *)&h->defer, handle_closed_cb);
    uv_close((uv_handle_t *)&h->timeout, handle_closed_cb);
}
