/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-oom.c: the agent's worker group, NCCL root holder and GPU discovery when a libuv
 * handle cannot be initialised or memory runs out. Linked with -Wl,--wrap= for uv_timer_init,
 * uv_pipe_init, realloc and strdup: every call the agent library makes goes through the wrappers
 * below, which fail the n-th call from the moment they are armed. Each failure must come back as
 * a negative errno, with nothing left on the loop (uv_loop_close() == 0) and no callback fired. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agent/group/agent-gpu.h"
#include "agent/session/agent-nccl.h"
#include "agent/group/agent-reaper.h"
#include "agent/group/agent-workers.h"
#include "../tap.h"

enum { FAIL_TIMER_INIT, FAIL_PIPE_INIT, FAIL_REALLOC, FAIL_STRDUP, _FAIL_MAX };

static unsigned fail_at[_FAIL_MAX]; /* 0: never; n: the n-th call from now fails */
static unsigned failed[_FAIL_MAX];  /* injected failures so far */

static bool fail_now(unsigned which)
{
    if (fail_at[which] == 0 || --fail_at[which] > 0)
        return false;
    failed[which]++;
    return true;
}

static void arm(unsigned which, unsigned n)
{
    memset(fail_at, 0, sizeof(fail_at));
    memset(failed, 0, sizeof(failed));
    fail_at[which] = n;
}

int __real_uv_timer_init(uv_loop_t *loop, uv_timer_t *t);
int __wrap_uv_timer_init(uv_loop_t *loop, uv_timer_t *t);
int __wrap_uv_timer_init(uv_loop_t *loop, uv_timer_t *t)
{
    return fail_now(FAIL_TIMER_INIT) ? UV_ENOMEM : __real_uv_timer_init(loop, t);
}

int __real_uv_pipe_init(uv_loop_t *loop, uv_pipe_t *p, int ipc);
int __wrap_uv_pipe_init(uv_loop_t *loop, uv_pipe_t *p, int ipc);
int __wrap_uv_pipe_init(uv_loop_t *loop, uv_pipe_t *p, int ipc)
{
    return fail_now(FAIL_PIPE_INIT) ? UV_ENOMEM : __real_uv_pipe_init(loop, p, ipc);
}

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n)
{
    return fail_now(FAIL_REALLOC) ? NULL : __real_realloc(p, n);
}

char *__real_strdup(const char *s);
char *__wrap_strdup(const char *s);
char *__wrap_strdup(const char *s)
{
    return fail_now(FAIL_STRDUP) ? NULL : __real_strdup(s);
}

static char self_exe[PATH_MAX];
static char reaper_name[64];
static unsigned callbacks;

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Run the loop dry; every handle must have been closed by the code under test. */
static void loop_finish(uv_loop_t *loop)
{
    unsigned left = 0;

    ASSERT_OK(uv_run(loop, UV_RUN_DEFAULT));
    uv_walk(loop, close_walk_cb, &left);
    ASSERT_EQ(uv_loop_alive(loop), 0);
    ASSERT_EQ(uv_loop_close(loop), 0);
}

/* Every allocation of the list failing in turn: -ENOMEM, *ret untouched; then the whole list. */
static void test_gpu_list_oom(void)
{
    static const unsigned kinds[] = {FAIL_REALLOC, FAIL_STRDUP};
    char **sentinel = (char **)&sentinel;

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        for (unsigned n = 1;; n++) {
            char **list = sentinel;
            int r;

            arm(kinds[k], n);
            r = agent_gpu_list("0,GPU-1,,3", "/nonexistent", &list);
            if (failed[kinds[k]] == 0) {
                ASSERT_EQ(r, 3);
                ASSERT_TRUE(strcmp(list[0], "0") == 0 && strcmp(list[1], "GPU-1") == 0 &&
                            strcmp(list[2], "3") == 0);
                agent_gpu_list_free(list, r);
                ASSERT_LE(4, n); /* three entries were each allocated at least once */
                break;
            }
            ASSERT_EQ(r, -ENOMEM);
            ASSERT_TRUE(list == sentinel);
        }
    }
    arm(FAIL_REALLOC, 0);
}

static void exit_cb(struct agent_group *g, unsigned local_rank, int64_t exit_status,
                    int term_signal, void *ud)
{
    callbacks++;
}

static void all_exited_cb(struct agent_group *g, void *ud)
{
    callbacks++;
}

static struct agent_group_cfg group_cfg(uv_loop_t *loop)
{
    static char *argv[] = {"true", NULL};
    struct agent_group_cfg cfg = {
        .loop = loop,
        .argv = argv,
        .nproc = 2,
        .run_id = "oom",
        .self_exe = self_exe,
        .reaper_name = reaper_name,
        .grace_ms = 1000,
        .on_exit = exit_cb,
        .on_all_exited = all_exited_cb,
    };
    return cfg;
}

/* agent_group_new() with the n-th call of `which` failing: it says so, closes what it made (the
 * loop runs dry) and fires no callback. */
static void check_group_new_fails(unsigned which, unsigned n)
{
    struct agent_group *g = NULL;
    struct agent_group_cfg cfg;
    uv_loop_t loop;

    ASSERT_OK(uv_loop_init(&loop));
    cfg = group_cfg(&loop);
    callbacks = 0;
    arm(which, n);
    ASSERT_EQ(agent_group_new(&cfg, &g), UV_ENOMEM);
    ASSERT_EQ(failed[which], 1);
    ASSERT_NULL(g);
    loop_finish(&loop);
    ASSERT_EQ(callbacks, 0);
    arm(which, 0);
}

/* Each of the group's five timers failing to initialise. */
static void test_group_timer_init_fails(void)
{
    for (unsigned n = 1; n <= 5; n++)
        check_group_new_fails(FAIL_TIMER_INIT, n);
}

/* The pipe to the host's reaper failing to initialise (the group's first uv_pipe_init). */
static void test_group_reaper_pipe_init_fails(void)
{
    check_group_new_fails(FAIL_PIPE_INIT, 1);
}

static void nccl_cb(struct agent_nccl_root *r, int err, unsigned n,
                    char (*ids)[RDZV_NCCL_HEX_LEN + 1], const char *msg, void *ud)
{
    callbacks++;
}

/* Either of the NCCL root holder's two pipes failing to initialise: an error, no callback. */
static void test_nccl_pipe_init_fails(void)
{
    for (unsigned n = 1; n <= 2; n++) {
        struct agent_nccl_root *r = NULL;
        uv_loop_t loop;

        ASSERT_OK(uv_loop_init(&loop));
        callbacks = 0;
        arm(FAIL_PIPE_INIT, n);
        ASSERT_EQ(agent_nccl_root_start(&loop, "/nonexistent/rdzv-agent", 1, nccl_cb, NULL, &r),
                  UV_ENOMEM);
        ASSERT_EQ(failed[FAIL_PIPE_INIT], 1);
        ASSERT_NULL(r);
        loop_finish(&loop);
        ASSERT_EQ(callbacks, 0);
    }
    arm(FAIL_PIPE_INIT, 0);
}

int main(int argc, char **argv)
{
    ssize_t n;

    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    ASSERT_TRUE(n > 0);
    self_exe[n] = '\0';
    snprintf(reaper_name, sizeof(reaper_name), "rdzv-test-oom-reaper.%d", (int)getpid());
    TEST(test_gpu_list_oom);
    TEST(test_group_timer_init_fails);
    TEST(test_group_reaper_pipe_init_fails);
    TEST(test_nccl_pipe_init_fails);
    return tap_done();
}
