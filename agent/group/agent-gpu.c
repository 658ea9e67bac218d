/* SPDX-License-Identifier: Apache-2.0 */
/* agent-gpu.c: the GPUs visible to this node's workers (agent-gpu.h). */
#include "agent/group/agent-gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-log.h"

/* Append a copy of s to *list (*n entries). Returns 0 or -ENOMEM (then *list is unchanged). */
static int list_add(char ***list, int *n, const char *s)
{
    char **v = realloc(*list, sizeof(*v) * (size_t)(*n + 1));

    if (!v)
        return -ENOMEM;
    *list = v;
    v[*n] = strdup(s);
    if (!v[*n])
        return -ENOMEM;
    (*n)++;
    return 0;
}

int agent_gpu_list(const char *cvd, const char *driver_dir, char ***ret)
{
    char **list = NULL;
    int n = 0, r = 0;

    if (cvd) {
        char *copy = strdup(cvd), *save = NULL, *tok;

        if (!copy)
            return -ENOMEM;
        for (tok = strtok_r(copy, ",", &save); tok && r == 0; tok = strtok_r(NULL, ",", &save))
            if (*tok)
                r = list_add(&list, &n, tok);
        free(copy);
    } else {
        uv_dirent_t ent;
        uv_fs_t req;

        if (uv_fs_scandir(NULL, &req, driver_dir, 0, NULL) > 0) {
            while (r == 0 && uv_fs_scandir_next(&req, &ent) != UV_EOF) {
                char idx[16];

                snprintf(idx, sizeof(idx), "%d", n);
                r = list_add(&list, &n, idx);
            }
        }
        uv_fs_req_cleanup(&req);
    }
    if (r < 0) {
        agent_gpu_list_free(list, n);
        return r;
    }
    *ret = list;
    return n;
}

void agent_gpu_list_free(char **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* ---- UUIDs ---- */

/* The driver's GPUs in PCI order: their UUIDs where known. */
struct gpu_table {
    int n;
    bool ok[RDZV_GPU_UUIDS_MAX];
    struct rdzv_gpu_uuid u[RDZV_GPU_UUIDS_MAX];
};

/* s[0..len) trimmed of blanks, as a UUID into t's next slot (unknown when malformed, logged). */
static void table_add(struct gpu_table *t, const char *s, size_t len, const char *where)
{
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r'))
        len--;
    if (t->n >= RDZV_GPU_UUIDS_MAX)
        return;
    t->ok[t->n] = rdzv_gpu_uuid_parse(s, len, &t->u[t->n]) == 0;
    if (!t->ok[t->n])
        log_warn("GPU %d: '%.*s' (%s) is not a GPU UUID: not reported at JOIN", t->n,
                 (int)(len > 64 ? 64 : len), s, where);
    t->n++;
}

/* The "GPU UUID:" line of each driver_dir entry's information file into t. Whether driver_dir
 * could be read. */
static bool table_from_proc(const char *driver_dir, struct gpu_table *t)
{
    uv_dirent_t ent;
    uv_fs_t req;

    if (uv_fs_scandir(NULL, &req, driver_dir, 0, NULL) < 0) {
        uv_fs_req_cleanup(&req);
        return false;
    }
    while (uv_fs_scandir_next(&req, &ent) != UV_EOF) { /* sorted: PCI order */
        char path[512], text[4096], *line;
        int fd;
        ssize_t got = -1;

        snprintf(path, sizeof(path), "%s/%s/information", driver_dir, ent.name);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
            got = read(fd, text, sizeof(text) - 1);
            close(fd);
        }
        text[got > 0 ? got : 0] = '\0';
        line = strstr(text, "GPU UUID:");
        if (line)
            line += strlen("GPU UUID:");
        table_add(t, line ? line : "", line ? strcspn(line, "\n") : 0, path);
    }
    uv_fs_req_cleanup(&req);
    return true;
}

struct smi_run {
    uv_process_t proc;
    uv_pipe_t out;
    uv_timer_t timer;
    size_t len;
    bool exited, eof, timed_out;
    int64_t status;
    char buf[AGENT_GPU_SMI_OUT_MAX + 1];
};

static void smi_alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct smi_run *s = h->data;

    b->base = s->buf + s->len;
    b->len = AGENT_GPU_SMI_OUT_MAX - s->len;
}

/* Done when it exited and its output ended (or the time ran out): everything closes. */
static void smi_maybe_done(struct smi_run *s)
{
    if (!s->timed_out && !(s->exited && s->eof))
        return;
    if (!uv_is_closing((uv_handle_t *)&s->proc))
        uv_close((uv_handle_t *)&s->proc, NULL);
    if (!uv_is_closing((uv_handle_t *)&s->out))
        uv_close((uv_handle_t *)&s->out, NULL);
    if (!uv_is_closing((uv_handle_t *)&s->timer))
        uv_close((uv_handle_t *)&s->timer, NULL);
}

static void smi_read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct smi_run *s = st->data;

    if (n > 0)
        s->len += (size_t)n;
    if (n < 0 || s->len >= AGENT_GPU_SMI_OUT_MAX) { /* the end, or enough of it */
        uv_read_stop(st);
        s->eof = true;
        if (!s->exited)
            (void)uv_process_kill(&s->proc, SIGKILL);
        smi_maybe_done(s);
    }
}

static void smi_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct smi_run *s = p->data;

    s->exited = true;
    s->status = sig ? 128 + sig : status;
    smi_maybe_done(s);
}

static void smi_timeout_cb(uv_timer_t *t)
{
    struct smi_run *s = t->data;

    s->timed_out = true;
    if (!s->exited)
        (void)uv_process_kill(&s->proc, SIGKILL); /* not waited for: it may hang in the driver */
    smi_maybe_done(s);
}

/* smi's lines into t. Whether it answered (exit 0 within the time). */
static bool table_from_smi(const char *smi, struct gpu_table *t)
{
    char *args[] = {(char *)smi, "--query-gpu=uuid", "--format=csv,noheader", NULL};
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE}, {.flags = UV_IGNORE},
                                     {.flags = UV_IGNORE}};
    struct smi_run *s = calloc(1, sizeof(*s));
    uv_loop_t loop;
    bool ok = false;
    int r;

    if (!s || uv_loop_init(&loop) < 0) {
        free(s);
        return false;
    }
    uv_pipe_init(&loop, &s->out, 0);
    uv_timer_init(&loop, &s->timer);
    s->out.data = s->proc.data = s->timer.data = s;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&s->out;
    r = uv_spawn(&loop, &s->proc, &(uv_process_options_t){.file = smi, .args = args,
                                                           .exit_cb = smi_exit_cb,
                                                           .stdio_count = 3, .stdio = stdio});
    if (r < 0) {
        s->timed_out = true; /* nothing to wait for */
        if (r != UV_ENOENT)
            log_warn("cannot run %s: %s: GPU UUIDs not reported at JOIN", smi, uv_strerror(r));
    } else {
        (void)uv_read_start((uv_stream_t *)&s->out, smi_alloc_cb, smi_read_cb);
        (void)uv_timer_start(&s->timer, smi_timeout_cb, AGENT_GPU_SMI_TIMEOUT_MS, 0);
    }
    if (r < 0)
        smi_maybe_done(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (r == 0 && s->len >= AGENT_GPU_SMI_OUT_MAX)
        log_warn("%s printed more than %u bytes: GPU UUIDs not reported at JOIN", smi,
                 AGENT_GPU_SMI_OUT_MAX);
    else if (r == 0 && s->timed_out && !(s->exited && s->eof))
        log_warn("%s did not answer within %d ms: GPU UUIDs not reported at JOIN", smi,
                 AGENT_GPU_SMI_TIMEOUT_MS);
    else if (r == 0 && s->status != 0)
        log_warn("%s exited with status %" PRId64 ": GPU UUIDs not reported at JOIN", smi,
                 s->status);
    else if (r == 0)
        ok = true;
    for (char *line = s->buf, *end; ok && line < s->buf + s->len; line = end + 1) {
        s->buf[s->len] = '\0';
        end = line + strcspn(line, "\n");
        if (end > line)
            table_add(t, line, (size_t)(end - line), smi);
    }
    (void)uv_loop_close(&loop);
    free(s);
    return ok;
}

/* The driver's table, read at the first need. */
static const struct gpu_table *table_get(const struct agent_gpu_uuids_cfg *cfg,
                                         struct gpu_table *t, bool *loaded)
{
    if (!*loaded && !table_from_proc(cfg->driver_dir, t) && cfg->smi)
        (void)table_from_smi(cfg->smi, t);
    *loaded = true;
    return t;
}

/* Visible GPU entry e (an index, a UUID or its prefix) as a UUID into ret. */
static void name_visible(const struct agent_gpu_uuids_cfg *cfg, const char *e,
                         struct gpu_table *t, bool *loaded, struct rdzv_gpu_set *ret)
{
    struct rdzv_gpu_uuid u;
    char text[RDZV_GPU_UUID_LEN + 1];
    int found = -1;

    if (rdzv_gpu_uuid_parse(e, strlen(e), &u) == 0) {
        (void)rdzv_gpu_set_add(ret, &u);
        return;
    }
    if (e[0] && strspn(e, "0123456789") == strlen(e) && strlen(e) < 4) {
        found = atoi(e);
        table_get(cfg, t, loaded);
        if (found >= t->n || !t->ok[found])
            found = -1;
    } else if (strncmp(e, "GPU-", 4) == 0) {
        table_get(cfg, t, loaded);
        for (int i = 0; i < t->n; i++) {
            if (!t->ok[i])
                continue;
            rdzv_gpu_uuid_format(&t->u[i], text);
            if (strncasecmp(text, e, strlen(e)) == 0)
                found = found == -1 ? i : -2; /* -2: not one GPU */
        }
    }
    if (found >= 0)
        (void)rdzv_gpu_set_add(ret, &t->u[found]);
    else
        log_warn("visible GPU '%.64s' cannot be named by its UUID (a MIG device, or not in the "
                 "driver's list): not reported at JOIN", e);
}

int agent_gpu_uuids(const struct agent_gpu_uuids_cfg *cfg, struct rdzv_gpu_set *ret, char *err,
                    size_t errlen)
{
    struct gpu_table *t;
    bool loaded = false;
    int used;

    ret->n = 0;
    if (cfg->override)
        return rdzv_gpu_set_parse_list(cfg->override, ret, err, errlen);
    if (!(t = calloc(1, sizeof(*t))))
        return 0; /* nothing reported: the host still names the node */
    used = cfg->nvisible;
    if (!cfg->cvd && used == 0) /* no driver directory: nvidia-smi's GPUs, if any */
        used = table_get(cfg, t, &loaded)->n;
    if (cfg->nproc > 0 && cfg->nproc < used)
        used = (int)cfg->nproc;
    for (int i = 0; i < used; i++) {
        char idx[16];

        snprintf(idx, sizeof(idx), "%d", i);
        name_visible(cfg, i < cfg->nvisible ? cfg->visible[i] : idx, t, &loaded, ret);
    }
    free(t);
    return 0;
}
