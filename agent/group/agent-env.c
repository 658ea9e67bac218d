/* SPDX-License-Identifier: Apache-2.0 */
/* agent-env.c: one worker's torchrun environment, a pure function of its inputs (agent-env.h). */
#include "agent/group/agent-env.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "proto/rdzv-worker.h"
#include "agent/group/agent-assignment.h"
#include "agent/group/agent-reaper.h"

/* Variables this module sets; inherited copies are dropped so none appears twice. */
static const char *const env_owned[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
    "RDZV_NCCL_UNIQUE_ID",
    "RDZV_GENERATION",
    "RDZV_ENDPOINT",
    "RDZV_PROGRESS_FD",
    "RDZV_PROGRESS_WAIT_MS",
    "RDZV_STACKS_FILE",
    "RDZV_STACKS_SIGNAL",
    "RDZV_CONTROL_FD",
    "PYTHONPATH", /* as inherited, after the Python hooks' directory when there is one */
    AGENT_TOKEN_ENV,
};
#define ENV_EXTRA 1 /* CUDA_VISIBLE_DEVICES */

static int env_add(struct agent_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int env_add(struct agent_env *e, const char *fmt, ...)
{
    va_list ap;
    char *s;
    int r;

    assert(e->n + 1 < e->cap);
    va_start(ap, fmt);
    r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        return -ENOMEM;
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
    return 0;
}

/* Drop the entries we added, keep the inherited ones. */
static void env_reset(struct agent_env *e)
{
    for (size_t i = e->n_borrowed; i < e->n; i++)
        free(e->v[i]);
    e->n = e->n_borrowed;
    e->v[e->n] = NULL;
}

void agent_env_free(struct agent_env *e)
{
    if (!e->v)
        return;
    env_reset(e);
    free(e->v);
    e->v = NULL;
}

static bool env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);

    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

const char *agent_env_get(char *const *env, const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; env && env[i]; i++)
        if (env_is(env[i], name))
            return env[i] + n + 1;
    return NULL;
}

int agent_env_init(struct agent_env *e, char *const *inherit, bool set_devices)
{
    size_t n = 0;

    while (inherit && inherit[n])
        n++;
    e->n = e->n_borrowed = 0;
    e->inherit = inherit;
    e->cap = n + RDZV_ARRAY_SIZE(env_owned) + ENV_EXTRA + 1;
    e->v = calloc(e->cap, sizeof(*e->v));
    if (!e->v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        bool drop = set_devices && env_is(inherit[i], "CUDA_VISIBLE_DEVICES");

        for (size_t k = 0; !drop && k < RDZV_ARRAY_SIZE(env_owned); k++)
            drop = env_is(inherit[i], env_owned[k]);
        if (!drop)
            e->v[e->n++] = inherit[i];
    }
    e->n_borrowed = e->n;
    return 0;
}

/* torchrun's per-worker variables (agent-env.h) plus rdzv's own. */
int agent_env_set(struct agent_env *e, const struct agent_env_in *in)
{
    const struct agent_assignment *a = in->a;
    unsigned rank = a->rank_offset + in->local_rank;
    const char *v;
    int r = 0;

    env_reset(e);
    r |= env_add(e, "RANK=%u", rank);
    r |= env_add(e, "LOCAL_RANK=%u", in->local_rank);
    r |= env_add(e, "WORLD_SIZE=%u", a->world_size);
    r |= env_add(e, "LOCAL_WORLD_SIZE=%u", in->nproc);
    r |= env_add(e, "GROUP_RANK=%u", a->node_rank);
    r |= env_add(e, "GROUP_WORLD_SIZE=%u", a->nnodes);
    r |= env_add(e, "ROLE_NAME=%s", in->role);
    r |= env_add(e, "ROLE_RANK=%u", rank);
    r |= env_add(e, "ROLE_WORLD_SIZE=%u", a->world_size);
    r |= env_add(e, "MASTER_ADDR=%s", a->master_addr);
    r |= env_add(e, "MASTER_PORT=%u", a->master_port);
    r |= env_add(e, "TORCHELASTIC_RESTART_COUNT=%u", a->restart_count);
    r |= env_add(e, "TORCHELASTIC_MAX_RESTARTS=%u", in->max_restarts);
    r |= env_add(e, "TORCHELASTIC_RUN_ID=%s", in->run_id);
    r |= env_add(e, "TORCHELASTIC_USE_AGENT_STORE=True");
    r |= env_add(e, "TORCHELASTIC_ERROR_FILE=%s", in->error_file ? in->error_file : "");
    v = in->signals_to_handle ? in->signals_to_handle
                              : agent_env_get(e->inherit, "TORCHELASTIC_SIGNALS_TO_HANDLE");
    if (v)
        r |= env_add(e, "TORCHELASTIC_SIGNALS_TO_HANDLE=%s", v);
    v = agent_env_get(e->inherit, "TORCH_NCCL_ASYNC_ERROR_HANDLING");
    r |= env_add(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING=%s", v ? v : "1");
    v = agent_env_get(e->inherit, "NCCL_ASYNC_ERROR_HANDLING");
    r |= env_add(e, "NCCL_ASYNC_ERROR_HANDLING=%s", v ? v : "1");
    v = agent_env_get(e->inherit, "OMP_NUM_THREADS");
    if (v || in->nproc > 1)
        r |= env_add(e, "OMP_NUM_THREADS=%s", v ? v : "1");
    if (a->nccl_id_hex)
        r |= env_add(e, "RDZV_NCCL_UNIQUE_ID=%s", a->nccl_id_hex);
    r |= env_add(e, "RDZV_GENERATION=%" PRIu64, a->generation);
    /* Appended to the list of the agents above ours (agent-reaper.h). */
    v = agent_env_get(e->inherit, AGENT_TOKEN_ENV);
    r |= env_add(e, AGENT_TOKEN_ENV "=%s%s%s", v && *v ? v : "", v && *v ? "," : "", in->token);
    if (in->endpoint)
        r |= env_add(e, "RDZV_ENDPOINT=%s", in->endpoint);
    if (in->device)
        r |= env_add(e, "CUDA_VISIBLE_DEVICES=%s", in->device);
    if (in->progress_fd > 0)
        r |= env_add(e, "RDZV_PROGRESS_FD=%d", in->progress_fd);
    if (in->progress_fd > 0 && in->progress_wait_ms)
        r |= env_add(e, "RDZV_PROGRESS_WAIT_MS=%" PRIu64, in->progress_wait_ms);
    if (in->progress_fd > 0 && in->error_file && *in->error_file) {
        char stacks[4096];

        if (agent_env_stacks_file(in->error_file, stacks, sizeof(stacks)) == 0)
            r |= env_add(e, "RDZV_STACKS_FILE=%s", stacks);
        r |= env_add(e, "RDZV_STACKS_SIGNAL=%d", in->stacks_signal);
    }
    if (in->control_fd > 0)
        r |= env_add(e, "RDZV_CONTROL_FD=%d", in->control_fd);
    v = agent_env_get(e->inherit, "PYTHONPATH");
    if (in->python_hooks)
        r |= env_add(e, "PYTHONPATH=%s%s%s", in->python_hooks, v && *v ? ":" : "", v ? v : "");
    else if (v)
        r |= env_add(e, "PYTHONPATH=%s", v);
    if (r < 0) {
        env_reset(e);
        return -ENOMEM;
    }
    return 0;
}

int agent_env_stacks_file(const char *error_file, char *buf, size_t len)
{
    size_t n = strlen(error_file), k = strlen("error.json");
    int w;

    if (n >= k && strcmp(error_file + n - k, "error.json") == 0)
        w = snprintf(buf, len, "%.*sstacks.txt", (int)(n - k), error_file);
    else
        w = snprintf(buf, len, "%s.stacks.txt", error_file);
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

int agent_env_control_line(const struct agent_assignment *a, unsigned local_rank, char *buf,
                           size_t len)
{
    uint64_t rank = (uint64_t)a->rank_offset + local_rank;
    struct rdzv_worker_gen g = {.generation = a->generation, .rank = (unsigned)rank,
                                .world = a->world_size, .local_rank = local_rank,
                                .master_port = a->master_port,
                                .restart_count = a->restart_count};

    if (!a->master_addr || rank >= a->world_size ||
        snprintf(g.master_addr, sizeof(g.master_addr), "%s", a->master_addr) >=
            (int)sizeof(g.master_addr) ||
        snprintf(g.nccl_id, sizeof(g.nccl_id), "%s", a->nccl_id_hex ? a->nccl_id_hex : "") >=
            (int)sizeof(g.nccl_id))
        return -EINVAL;
    return rdzv_worker_gen_format(&g, buf, len);
}
