/* SPDX-License-Identifier: Apache-2.0 */
/* agent-nccl.c: NCCL unique ids from a root-holder child, libnccl loaded there at run time. */
#include "agent/session/agent-nccl.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"

typedef struct {
    char internal[RDZV_NCCL_ID_BYTES];
} nccl_unique_id;
typedef int (*nccl_get_unique_id_fn)(nccl_unique_id *id);
typedef const char *(*nccl_error_string_fn)(int result);

#define ROOT_OUT_MAX (RDZV_MAX_NCCL_IDS * (RDZV_NCCL_HEX_LEN + 8) + 1024)

struct agent_nccl_root {
    uv_process_t proc;
    uv_pipe_t in;  /* the child's stdin: closing it tells the child to exit */
    uv_pipe_t out; /* the child's stdout: ids, then nothing */
    unsigned count;
    agent_nccl_cb cb;
    void *ud;
    struct rdzv_buf buf;
    bool reported, stopped, exited;
    int open_handles;
};

int agent_nccl_root_main(int argc, char **argv)
{
    nccl_get_unique_id_fn get_id;
    nccl_error_string_fn errstr;
    uint64_t count;
    void *lib;
    char c;

    /* Die with the agent, even a SIGKILLed one. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (argc < 3 || rdzv_parse_u64(argv[2], &count) < 0 || count < 1 ||
        count > RDZV_MAX_NCCL_IDS) {
        printf("error bad id count\n");
        return 2;
    }
    lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("error cannot load libnccl.so.2 (%s); install NCCL or add its directory to "
               "LD_LIBRARY_PATH\n",
               dlerror());
        return 1;
    }
    get_id = (nccl_get_unique_id_fn)dlsym(lib, "ncclGetUniqueId");
    errstr = (nccl_error_string_fn)dlsym(lib, "ncclGetErrorString");
    if (!get_id) {
        printf("error libnccl.so.2 has no ncclGetUniqueId\n");
        return 1;
    }
    for (uint64_t i = 0; i < count; i++) {
        char hex[RDZV_NCCL_HEX_LEN + 1];
        nccl_unique_id id;
        int r = get_id(&id);

        if (r != 0) {
            printf("error ncclGetUniqueId failed: %s (NCCL error %d)\n", errstr ? errstr(r) : "?",
                   r);
            return 1;
        }
        rdzv_hex((const uint8_t *)id.internal, sizeof(id.internal), hex);
        printf("id %s\n", hex);
    }
    printf("ok\n");
    fflush(stdout);
    /* Hold the bootstrap roots until the agent lets go. */
    while (read(STDIN_FILENO, &c, 1) > 0)
        ;
    return 0;
}

static void root_handle_closed(uv_handle_t *h)
{
    struct agent_nccl_root *r = h->data;

    if (--r->open_handles == 0) {
        rdzv_buf_free(&r->buf);
        free(r);
    }
}

static void report(struct agent_nccl_root *r, int err, const char *msg)
{
    char(*ids)[RDZV_NCCL_HEX_LEN + 1] = NULL;
    unsigned n = 0;

    if (r->reported || r->stopped)
        return;
    r->reported = true;
    if (err == 0) {
        char *line = (char *)r->buf.data, *end = line + r->buf.len;

        ids = calloc(r->count, sizeof(*ids));
        if (!ids) {
            r->cb(r, -ENOMEM, 0, NULL, "out of memory", r->ud);
            return;
        }
        while (line < end && n < r->count) {
            char *nl = memchr(line, '\n', (size_t)(end - line));

            if (!nl)
                break;
            if (nl - line == 3 + RDZV_NCCL_HEX_LEN && strncmp(line, "id ", 3) == 0) {
                memcpy(ids[n], line + 3, RDZV_NCCL_HEX_LEN);
                ids[n][RDZV_NCCL_HEX_LEN] = '\0';
                if (rdzv_nccl_hex_valid(ids[n]))
                    n++;
            }
            line = nl + 1;
        }
        if (n != r->count) {
            free(ids);
            r->cb(r, -EIO, 0, NULL, "the NCCL root holder printed no ids", r->ud);
            return;
        }
    }
    r->cb(r, err, n, ids, msg, r->ud);
    free(ids);
}

/* Look at what the child printed so far: "ok" after the ids, or "error ...". */
static void parse_output(struct agent_nccl_root *r)
{
    const char *p = (const char *)r->buf.data;
    size_t n = r->buf.len;

    if (n >= 3 && memcmp(p + n - 3, "ok\n", 3) == 0 && (n == 3 || p[n - 4] == '\n')) {
        report(r, 0, NULL);
    } else if (n >= 6 && memcmp(p, "error ", 6) == 0 && p[n - 1] == '\n') {
        char msg[512];

        snprintf(msg, sizeof(msg), "%.*s", (int)(n - 7), p + 6);
        report(r, strstr(msg, "cannot load") ? -ENOENT : -EIO, msg);
    }
}

static void out_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct agent_nccl_root *r = h->data;

    (void)suggested;
    if (r->buf.len >= ROOT_OUT_MAX || rdzv_buf_reserve(&r->buf, 4096) < 0) {
        *b = uv_buf_init(NULL, 0);
        return;
    }
    *b = uv_buf_init((char *)r->buf.data + r->buf.len, (unsigned)(r->buf.cap - r->buf.len));
}

static void out_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct agent_nccl_root *r = s->data;

    (void)b;
    if (nread > 0) {
        r->buf.len += (size_t)nread;
        parse_output(r);
        return;
    }
    if (nread < 0) {
        uv_read_stop(s);
        report(r, -EIO, "the NCCL root holder exited without printing ids");
    }
}

static void exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct agent_nccl_root *r = p->data;
    char msg[96];

    if (r->exited)
        return; /* already closed by a stop(now) */
    r->exited = true;
    snprintf(msg, sizeof(msg), "the NCCL root holder exited (status %lld, signal %d)",
             (long long)status, sig);
    report(r, -EIO, msg);
    uv_close((uv_handle_t *)p, root_handle_closed);
}

int agent_nccl_root_start(uv_loop_t *loop, const char *self_exe, unsigned count, agent_nccl_cb cb,
                          void *ud, struct agent_nccl_root **ret)
{
    struct agent_nccl_root *r = calloc(1, sizeof(*r));
    uv_process_options_t opt = {0};
    uv_stdio_container_t stdio[3];
    char countstr[16];
    char *args[4];
    int e;

    if (!r)
        return -ENOMEM;
    r->count = count;
    r->cb = cb;
    r->ud = ud;
    e = uv_pipe_init(loop, &r->in, 0);
    if (e < 0) {
        free(r);
        return e;
    }
    r->in.data = r->proc.data = r;
    r->open_handles = 1;
    e = uv_pipe_init(loop, &r->out, 0);
    if (e < 0) {
        /* Nothing has been reported: its close callback frees r. */
        r->stopped = true;
        uv_close((uv_handle_t *)&r->in, root_handle_closed);
        return e;
    }
    r->out.data = r;
    r->open_handles++;
    snprintf(countstr, sizeof(countstr), "%u", count);
    args[0] = (char *)self_exe;
    args[1] = "--nccl-root";
    args[2] = countstr;
    args[3] = NULL;
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&r->in;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&r->out;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = STDERR_FILENO;
    opt.file = self_exe;
    opt.args = args;
    opt.stdio = stdio;
    opt.stdio_count = 3;
    opt.exit_cb = exit_cb;
    e = uv_spawn(loop, &r->proc, &opt);
    if (e < 0) {
        r->stopped = true;
        r->open_handles++;
        uv_close((uv_handle_t *)&r->proc, root_handle_closed);
        uv_close((uv_handle_t *)&r->in, root_handle_closed);
        uv_close((uv_handle_t *)&r->out, root_handle_closed);
        return e;
    }
    r->open_handles++;
    e = uv_read_start((uv_stream_t *)&r->out, out_alloc_cb, out_read_cb);
    if (e < 0) {
        agent_nccl_root_stop(r, false);
        return e;
    }
    *ret = r;
    return 0;
}

void agent_nccl_root_stop(struct agent_nccl_root *r, bool now)
{
    if (!r || r->stopped)
        return;
    r->stopped = true;
    /* Closing its stdin ends the holder; the kill covers one stuck inside NCCL. */
    uv_close((uv_handle_t *)&r->in, root_handle_closed);
    uv_close((uv_handle_t *)&r->out, root_handle_closed);
    if (!r->exited) {
        (void)uv_process_kill(&r->proc, SIGKILL);
        if (now) {
            r->exited = true;
            uv_close((uv_handle_t *)&r->proc, root_handle_closed);
        }
    }
}
