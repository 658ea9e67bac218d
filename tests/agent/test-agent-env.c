/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-env.c: the worker environment (agent-env.h), a pure function: no process, no loop. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/group/agent-env.h"
#include "agent/group/agent-workers.h"
#include "../tap.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

/* name's value in e: present with exactly want, or absent when want is NULL; name appears once. */
#define ASSERT_VAR(e, name, want) assert_var(__FILE__, __LINE__, (e), (name), (want))

static unsigned count_var(char *const *env, const char *name)
{
    size_t n = strlen(name);
    unsigned c = 0;

    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
            c++;
    return c;
}

static void assert_var(const char *file, int line, const struct agent_env *e, const char *name,
                       const char *want)
{
    const char *got = agent_env_get(e->v, name);
    unsigned c = count_var(e->v, name);

    if (!want && got)
        tap_fail(file, line, "%s is set (to \"%s\"), expected unset", name, got);
    if (want && !got)
        tap_fail(file, line, "%s is unset, expected \"%s\"", name, want);
    if (want && strcmp(got, want) != 0)
        tap_fail(file, line, "%s=\"%s\", expected \"%s\"", name, got, want);
    if (want && c != 1)
        tap_fail(file, line, "%s appears %u times", name, c);
}

static const struct agent_assignment assignment = {
    .generation = 7,
    .node_rank = 1,
    .nnodes = 3,
    .rank_offset = 4,
    .world_size = 12,
    .master_addr = "10.0.0.9",
    .master_port = 29517,
    .nccl_id_hex = NULL,
    .restart_count = 2,
};

static struct agent_env_in input(unsigned local_rank, unsigned nproc)
{
    struct agent_env_in in = {
        .a = &assignment,
        .local_rank = local_rank,
        .nproc = nproc,
        .max_restarts = 5,
        .role = "trainer",
        .run_id = "job42",
        .error_file = "/logs/job42/attempt_2/1/error.json",
        .token = TOKEN,
    };
    return in;
}

/* Every variable torchrun gives a worker (agent-env.h), for local rank 1 of 4 on node
 * 1 of 3 (ranks 4..7 of 12). */
static void test_torchrun_variables(void)
{
    char *inherit[] = {"PATH=/usr/bin", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(1, 4);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "RANK", "5");
    ASSERT_VAR(&e, "LOCAL_RANK", "1");
    ASSERT_VAR(&e, "WORLD_SIZE", "12");
    ASSERT_VAR(&e, "LOCAL_WORLD_SIZE", "4");
    ASSERT_VAR(&e, "GROUP_RANK", "1");
    ASSERT_VAR(&e, "GROUP_WORLD_SIZE", "3");
    ASSERT_VAR(&e, "ROLE_NAME", "trainer");
    ASSERT_VAR(&e, "ROLE_RANK", "5");
    ASSERT_VAR(&e, "ROLE_WORLD_SIZE", "12");
    ASSERT_VAR(&e, "MASTER_ADDR", "10.0.0.9");
    ASSERT_VAR(&e, "MASTER_PORT", "29517");
    ASSERT_VAR(&e, "TORCHELASTIC_RESTART_COUNT", "2");
    ASSERT_VAR(&e, "TORCHELASTIC_MAX_RESTARTS", "5");
    ASSERT_VAR(&e, "TORCHELASTIC_RUN_ID", "job42");
    ASSERT_VAR(&e, "TORCHELASTIC_USE_AGENT_STORE", "True");
    ASSERT_VAR(&e, "TORCHELASTIC_ERROR_FILE", "/logs/job42/attempt_2/1/error.json");
    ASSERT_VAR(&e, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    ASSERT_VAR(&e, "NCCL_ASYNC_ERROR_HANDLING", "1");
    ASSERT_VAR(&e, "RDZV_GENERATION", "7");
    ASSERT_VAR(&e, "RDZV_AGENT_TOKEN", TOKEN);
    ASSERT_VAR(&e, "RDZV_NCCL_UNIQUE_ID", NULL);
    ASSERT_VAR(&e, "RDZV_ENDPOINT", NULL);
    ASSERT_VAR(&e, "CUDA_VISIBLE_DEVICES", NULL);
    ASSERT_VAR(&e, "TORCHELASTIC_SIGNALS_TO_HANDLE", NULL);
    ASSERT_VAR(&e, "PATH", "/usr/bin");
    ASSERT_NULL(e.v[e.n]);
    agent_env_free(&e);
    ASSERT_NULL(e.v);
}

/* Inherited variables are kept in their order; ours replace inherited ones of the same name. */
static void test_inherited_kept_owned_replaced(void)
{
    char *inherit[] = {"HOME=/home/u",
                       "RANK=99",
                       "MASTER_ADDR=elsewhere",
                       "LANG=C",
                       "TORCHELASTIC_RUN_ID=old",
                       "RDZV_GENERATION=1",
                       "A=",
                       NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_EQ(e.n, 3);
    ASSERT_TRUE(strcmp(e.v[0], "HOME=/home/u") == 0);
    ASSERT_TRUE(strcmp(e.v[1], "LANG=C") == 0);
    ASSERT_TRUE(strcmp(e.v[2], "A=") == 0);
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "HOME", "/home/u");
    ASSERT_VAR(&e, "LANG", "C");
    ASSERT_VAR(&e, "A", "");
    ASSERT_VAR(&e, "RANK", "4");
    ASSERT_VAR(&e, "MASTER_ADDR", "10.0.0.9");
    ASSERT_VAR(&e, "TORCHELASTIC_RUN_ID", "job42");
    ASSERT_VAR(&e, "RDZV_GENERATION", "7");
    /* The inherited array itself is left alone. */
    ASSERT_TRUE(strcmp(inherit[1], "RANK=99") == 0);
    agent_env_free(&e);
}

/* A second worker's variables replace the first's: nothing is left over, nothing doubled. */
static void test_set_again_replaces(void)
{
    char *inherit[] = {"PATH=/bin", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 2);
    size_t n;

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    n = e.n;
    in.local_rank = 1;
    in.endpoint = "host:29400";
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_EQ(e.n, n + 1);
    ASSERT_VAR(&e, "RANK", "5");
    ASSERT_VAR(&e, "LOCAL_RANK", "1");
    ASSERT_VAR(&e, "RDZV_ENDPOINT", "host:29400");
    in.endpoint = NULL;
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_EQ(e.n, n);
    ASSERT_VAR(&e, "RDZV_ENDPOINT", NULL);
    agent_env_free(&e);
}

/* OMP_NUM_THREADS as torchrun: kept when inherited; "1" when unset and nproc > 1; else unset. */
static void test_omp_num_threads(void)
{
    char *unset[] = {"PATH=/bin", NULL};
    char *set[] = {"OMP_NUM_THREADS=4", NULL};
    struct agent_env e = {0};
    struct agent_env_in one = input(0, 1), two = input(0, 2);

    ASSERT_OK(agent_env_init(&e, unset, false));
    ASSERT_OK(agent_env_set(&e, &one));
    ASSERT_VAR(&e, "OMP_NUM_THREADS", NULL);
    ASSERT_OK(agent_env_set(&e, &two));
    ASSERT_VAR(&e, "OMP_NUM_THREADS", "1");
    agent_env_free(&e);

    ASSERT_OK(agent_env_init(&e, set, false));
    ASSERT_OK(agent_env_set(&e, &one));
    ASSERT_VAR(&e, "OMP_NUM_THREADS", "4");
    ASSERT_OK(agent_env_set(&e, &two));
    ASSERT_VAR(&e, "OMP_NUM_THREADS", "4");
    agent_env_free(&e);
}

/* The NCCL error-handling switches keep an inherited value (even "0"); "1" otherwise. */
static void test_nccl_async_inherited(void)
{
    char *inherit[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "NCCL_ASYNC_ERROR_HANDLING=3", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    ASSERT_VAR(&e, "NCCL_ASYNC_ERROR_HANDLING", "3");
    agent_env_free(&e);
}

/* An agent under an agent: the token list grows after a comma; an empty inherited one is not a
 * list. */
static void test_agent_token_appended(void)
{
    char *nested[] = {"RDZV_AGENT_TOKEN=ffff", NULL};
    char *empty[] = {"RDZV_AGENT_TOKEN=", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, nested, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "RDZV_AGENT_TOKEN", "ffff," TOKEN);
    agent_env_free(&e);
    ASSERT_OK(agent_env_init(&e, empty, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "RDZV_AGENT_TOKEN", TOKEN);
    agent_env_free(&e);
}

/* CUDA_VISIBLE_DEVICES passes through, unless each worker is given its own device. */
static void test_devices(void)
{
    char *inherit[] = {"CUDA_VISIBLE_DEVICES=0,1,2,3", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(2, 4);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "CUDA_VISIBLE_DEVICES", "0,1,2,3");
    agent_env_free(&e);
    ASSERT_OK(agent_env_init(&e, inherit, true));
    in.device = "2";
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "CUDA_VISIBLE_DEVICES", "2");
    agent_env_free(&e);
}

/* The NCCL unique id handed out by the round, and an empty inherited environment. */
static void test_nccl_id_no_inherit(void)
{
    struct agent_assignment a = assignment;
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    a.nccl_id_hex = "00ff";
    in.a = &a;
    ASSERT_OK(agent_env_init(&e, NULL, false));
    ASSERT_EQ(e.n, 0);
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "RDZV_NCCL_UNIQUE_ID", "00ff");
    ASSERT_VAR(&e, "RANK", "4");
    ASSERT_NULL(agent_env_get(NULL, "RANK"));
    agent_env_free(&e);
    agent_env_free(&e); /* twice is fine */
}

/* torchrun's TORCHELASTIC_ERROR_FILE is "" when logs go to /dev/null: set, empty; an inherited
 * one (the launcher's own, torchrun's @record) never reaches the worker. */
static void test_error_file_empty(void)
{
    char *inherit[] = {"TORCHELASTIC_ERROR_FILE=/launcher/error.json", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "TORCHELASTIC_ERROR_FILE", "/logs/job42/attempt_2/1/error.json");
    in.error_file = NULL;
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "TORCHELASTIC_ERROR_FILE", "");
    agent_env_free(&e);
}

/* --signals-to-handle (torchrun >= 2.5 exports it): given wins over inherited; else inherited. */
static void test_signals_to_handle(void)
{
    char *inherit[] = {"TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM");
    in.signals_to_handle = "SIGTERM,SIGINT,SIGUSR1";
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGUSR1");
    agent_env_free(&e);
    ASSERT_OK(agent_env_init(&e, NULL, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGUSR1");
    agent_env_free(&e);
}

/* PYTHON_EXEC (the interpreter override) and other torchrun variables pass through untouched;
 * an empty OMP_NUM_THREADS counts as set, as in torchrun ("not in os.environ"). */
static void test_passed_through(void)
{
    char *inherit[] = {"PYTHON_EXEC=/opt/py/bin/python", "TORCHELASTIC_TIMER_FILE=/t/timer",
                       "OMP_NUM_THREADS=", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 4);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "PYTHON_EXEC", "/opt/py/bin/python");
    ASSERT_VAR(&e, "TORCHELASTIC_TIMER_FILE", "/t/timer");
    ASSERT_VAR(&e, "OMP_NUM_THREADS", "");
    agent_env_free(&e);
}

/* RDZV_PROGRESS_FD: set when the worker has the channel; an inherited one (an agent above ours)
 * never passes through. */
/* The Python hooks' directory goes first on PYTHONPATH, before the inherited one; without it
 * PYTHONPATH is as inherited (set, empty or unset). */
static void test_python_hooks(void)
{
    char *inherit[] = {"PYTHONPATH=/a:/b", NULL}, *empty[] = {"PYTHONPATH=", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "PYTHONPATH", "/a:/b");
    in.python_hooks = "/usr/lib/python3/dist-packages/rdzv/hooks";
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "PYTHONPATH", "/usr/lib/python3/dist-packages/rdzv/hooks:/a:/b");
    agent_env_free(&e);
    ASSERT_OK(agent_env_init(&e, NULL, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "PYTHONPATH", "/usr/lib/python3/dist-packages/rdzv/hooks");
    in.python_hooks = NULL;
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "PYTHONPATH", NULL);
    agent_env_free(&e);
    ASSERT_OK(agent_env_init(&e, empty, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "PYTHONPATH", "");
    agent_env_free(&e);
}

static void test_progress_fd(void)
{
    char *inherit[] = {"RDZV_PROGRESS_FD=9", NULL};
    struct agent_env e = {0};
    struct agent_env_in in = input(0, 1);

    ASSERT_OK(agent_env_init(&e, inherit, false));
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "RDZV_PROGRESS_FD", NULL);
    in.progress_fd = 3;
    ASSERT_OK(agent_env_set(&e, &in));
    ASSERT_VAR(&e, "RDZV_PROGRESS_FD", "3");
    agent_env_free(&e);
}

/* The control line of recovery in place: the generation's fields for one worker, and what
 * cannot go in it. (rdzv-train's parser reads the same line: tests/train/test-train-control.c.) */
static void test_control_line(void)
{
    struct agent_assignment a = {.generation = 9, .node_rank = 1, .nnodes = 2, .rank_offset = 4,
                                 .world_size = 8, .master_addr = "10.0.0.7",
                                 .master_port = 29517, .nccl_id_hex = "abcd",
                                 .restart_count = 3};
    const char *want = "{\"op\":\"generation\",\"generation\":9,\"rank\":6,\"world_size\":8,"
                       "\"local_rank\":2,\"master_addr\":\"10.0.0.7\",\"master_port\":29517,"
                       "\"nccl_id\":\"abcd\",\"restart_count\":3}";
    char buf[AGENT_ENV_CONTROL_LINE_MAX];
    int n = agent_env_control_line(&a, 2, buf, sizeof(buf));

    ASSERT_EQ(n, (int)strlen(want));
    ASSERT_BYTES_STR(buf, (size_t)n, want);
    a.nccl_id_hex = NULL;
    n = agent_env_control_line(&a, 3, buf, sizeof(buf));
    ASSERT_TRUE(n > 0 && strstr(buf, "\"rank\":7,") && strstr(buf, "\"nccl_id\":null,"));
    ASSERT_EQ(agent_env_control_line(&a, 4, buf, sizeof(buf)), -EINVAL); /* rank 8 of 8 */
    ASSERT_EQ(agent_env_control_line(&a, 0, buf, 20), -ENOSPC);
    a.master_addr = "bad\"host";
    ASSERT_EQ(agent_env_control_line(&a, 0, buf, sizeof(buf)), -EINVAL);
    a.master_addr = "bad\nhost";
    ASSERT_EQ(agent_env_control_line(&a, 0, buf, sizeof(buf)), -EINVAL);
}

int main(void)
{
    TEST(test_torchrun_variables);
    TEST(test_inherited_kept_owned_replaced);
    TEST(test_set_again_replaces);
    TEST(test_omp_num_threads);
    TEST(test_nccl_async_inherited);
    TEST(test_agent_token_appended);
    TEST(test_devices);
    TEST(test_nccl_id_no_inherit);
    TEST(test_error_file_empty);
    TEST(test_signals_to_handle);
    TEST(test_passed_through);
    TEST(test_progress_fd);
    TEST(test_python_hooks);
    TEST(test_control_line);
    return tap_done();
}
