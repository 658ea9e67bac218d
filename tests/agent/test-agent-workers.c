/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-workers.c: the worker group against real processes (tests/agent/helper-worker.c):
 * environment, exits, stop and signals, restarts, failures. The output relay is tested in
 * test-agent-relay.c, the reaper in test-agent-reaper.c. This executable is also the reaper of
 * the groups it makes (--reaper <name>, as rdzv-agent is in production). */
#include "agent-fixture.h"

#include "agent/group/agent-cmd.h"

/* ---- tests ---- */

static void env_case(unsigned nproc, bool devices, bool log_dir)
{
    static const char *const devs[] = {"3", "2", "1", "0"};
    char *argv[] = {HELPER, "env", "write-error", "fds", NULL};
    static const char outer_token[] = "0123456789abcdef0123456789abcdef";
    char logdir[512], want[PATH_MAX], num[32], token0[AGENT_TOKEN_LEN + 1] = "";
    struct fx f;

    snprintf(tap_note, sizeof(tap_note), "nproc %u devices %d log_dir %d", nproc, devices, log_dir);
    fx_init(&f, nproc, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-env-%u", tmp_root, nproc);
    /* stale or conflicting values in the agent's own environment must be replaced, not kept */
    setenv("RANK", "99", 1);
    setenv("RDZV_NCCL_UNIQUE_ID", "stale", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
    setenv("CUDA_VISIBLE_DEVICES", "5,6", 1);
    unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
    setenv("NCCL_ASYNC_ERROR_HANDLING", "0", 1);
    unsetenv("OMP_NUM_THREADS");
    setenv("RDZV_TEST_INHERITED", "yes", 1);
    setenv("RDZV_AGENT_TOKEN", outer_token, 1); /* we run under another agent */
    setenv("TMPDIR", tmp_root, 1);
    f.cfg.devices = devices ? devs : NULL;
    f.cfg.log_dir = log_dir ? logdir : NULL;
    f.on_all = hook_record_error_files;
    /* node 1 of 2 */
    f.as.node_rank = 1;
    f.as.nnodes = 2;
    f.as.rank_offset = nproc;
    f.as.world_size = 2 * nproc;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, nproc);

    for (unsigned lr = 0; lr < nproc; lr++) {
        unsigned rank = nproc + lr;
        char tok[PATH_MAX];
        struct lines l;

        snprintf(tap_note, sizeof(tap_note), "nproc %u local rank %u", nproc, lr);
        ASSERT_EQ(f.n_exit[lr], 1);
        ASSERT_EQ(f.status[lr], 0);
        ASSERT_EQ(f.sig[lr], 0);
        lines_of(&f.out, rank, &l);
#define NUM(x) (snprintf(num, sizeof(num), "%u", (unsigned)(x)), num)
        ASSERT_VALUE(&l, "RANK", NUM(rank));
        ASSERT_VALUE(&l, "LOCAL_RANK", NUM(lr));
        ASSERT_VALUE(&l, "WORLD_SIZE", NUM(2 * nproc));
        ASSERT_VALUE(&l, "LOCAL_WORLD_SIZE", NUM(nproc));
        ASSERT_VALUE(&l, "GROUP_RANK", "1");
        ASSERT_VALUE(&l, "GROUP_WORLD_SIZE", "2");
        ASSERT_VALUE(&l, "ROLE_NAME", "default");
        ASSERT_VALUE(&l, "ROLE_RANK", NUM(rank));
        ASSERT_VALUE(&l, "ROLE_WORLD_SIZE", NUM(2 * nproc));
        ASSERT_VALUE(&l, "MASTER_ADDR", "10.1.2.3");
        ASSERT_VALUE(&l, "MASTER_PORT", "29500");
        ASSERT_VALUE(&l, "TORCHELASTIC_RESTART_COUNT", "0");
        ASSERT_VALUE(&l, "TORCHELASTIC_MAX_RESTARTS", "3");
        ASSERT_VALUE(&l, "TORCHELASTIC_RUN_ID", "job42");
        ASSERT_VALUE(&l, "TORCHELASTIC_USE_AGENT_STORE", "True");
        ASSERT_VALUE(&l, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        ASSERT_VALUE(&l, "NCCL_ASYNC_ERROR_HANDLING", "0");
        ASSERT_VALUE(&l, "OMP_NUM_THREADS", "1");
        ASSERT_VALUE(&l, "RDZV_NCCL_UNIQUE_ID", nccl_hex);
        ASSERT_VALUE(&l, "RDZV_GENERATION", "7");
        ASSERT_VALUE(&l, "RDZV_ENDPOINT", "rdzv.example:29400");
        ASSERT_VALUE(&l, "CUDA_VISIBLE_DEVICES", devices ? devs[lr] : "5,6");
        ASSERT_VALUE(&l, "RDZV_TEST_INHERITED", "yes");
        ASSERT_VALUE(&l, "ENV_DUPLICATES", "0");
        ASSERT_VALUE(&l, "ERROR_FILE_WRITTEN", "1");
        /* the agent above ours, then the group's reaper token, the same for every worker */
        value_of(&l, AGENT_TOKEN_ENV, tok, sizeof(tok));
        ASSERT_EQ(strlen(tok), 2 * AGENT_TOKEN_LEN + 1);
        ASSERT_EQ(memcmp(tok, outer_token, AGENT_TOKEN_LEN), 0);
        ASSERT_EQ(tok[AGENT_TOKEN_LEN], ',');
        ASSERT_EQ(strspn(tok + AGENT_TOKEN_LEN + 1, "0123456789abcdef"), AGENT_TOKEN_LEN);
        ASSERT_TRUE(memcmp(tok + AGENT_TOKEN_LEN + 1, outer_token, AGENT_TOKEN_LEN) != 0);
        if (lr == 0)
            snprintf(token0, sizeof(token0), "%.*s", AGENT_TOKEN_LEN, tok + AGENT_TOKEN_LEN + 1);
        ASSERT_EQ(memcmp(tok + AGENT_TOKEN_LEN + 1, token0, AGENT_TOKEN_LEN), 0);
        /* nothing the agent opened leaks into a worker; what it inherited passes through */
        ASSERT_VALUE(&l, "OPEN_FDS", inherited_fds);
#undef NUM
        ASSERT_VALUE(&l, "TORCHELASTIC_ERROR_FILE", f.err_files[lr]);
        if (log_dir) {
            snprintf(want, sizeof(want), "%s/job42/attempt_0/%u/error.json", logdir, lr);
            ASSERT_BYTES_STR(f.err_files[lr], strlen(f.err_files[lr]), want);
            ASSERT_TRUE(file_exists(want));
        } else {
            /* <TMPDIR>/rdzv-job42-XXXXXX/attempt_0_<lr>.error.json, removed by free */
            snprintf(want, sizeof(want), "%s/rdzv-job42-", tmp_root);
            ASSERT_EQ(strncmp(f.err_files[lr], want, strlen(want)), 0);
            snprintf(want, sizeof(want), "/attempt_0_%u.error.json", lr);
            ASSERT_EQ(strcmp(f.err_files[lr] + strlen(f.err_files[lr]) - strlen(want), want), 0);
            ASSERT_FALSE(file_exists(f.err_files[lr]));
        }
        lines_free(&l);
    }
    ASSERT_EQ(f.err.len, 0);
    unsetenv("RANK");
    unsetenv("RDZV_NCCL_UNIQUE_ID");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("NCCL_ASYNC_ERROR_HANDLING");
    unsetenv("RDZV_TEST_INHERITED");
    unsetenv("RDZV_AGENT_TOKEN");
    unsetenv("TMPDIR");
    fx_done(&f);
    tap_note[0] = '\0';
}

static void test_env_contract(void)
{
    env_case(2, true, false);
    env_case(3, false, true);
    env_case(4, true, true);
}

/* nproc 1: OMP_NUM_THREADS is not invented; inherited values pass through. */
static void test_env_single(void)
{
    char *argv[] = {HELPER, "env", NULL};
    struct lines l;
    struct fx f;

    unsetenv("OMP_NUM_THREADS");
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", 1);
    unsetenv("NCCL_ASYNC_ERROR_HANDLING");
    fx_init(&f, 1, argv);
    f.cfg.role = "trainer";
    f.cfg.endpoint = NULL;
    f.as.nccl_id_hex = NULL;
    fx_start(&f);
    fx_run_finish(&f);
    lines_of(&f.out, 0, &l);
    ASSERT_VALUE(&l, "OMP_NUM_THREADS", "<unset>");
    ASSERT_VALUE(&l, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    ASSERT_VALUE(&l, "NCCL_ASYNC_ERROR_HANDLING", "1");
    ASSERT_VALUE(&l, "ROLE_NAME", "trainer");
    ASSERT_VALUE(&l, "RDZV_NCCL_UNIQUE_ID", "<unset>");
    ASSERT_VALUE(&l, "RDZV_ENDPOINT", "<unset>");
    ASSERT_VALUE(&l, "LOCAL_WORLD_SIZE", "1");
    lines_free(&l);
    fx_done(&f);

    setenv("OMP_NUM_THREADS", "7", 1);
    fx_init(&f, 2, argv);
    fx_start(&f);
    fx_run_finish(&f);
    lines_of(&f.out, 1, &l);
    ASSERT_VALUE(&l, "OMP_NUM_THREADS", "7");
    lines_free(&l);
    fx_done(&f);
    unsetenv("OMP_NUM_THREADS");
    unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
}

/* torch.distributed.launch's --local-rank=N: each worker its own, right after the command (built
 * by agent-cmd), from one argv that the caller's array is not changed by. */
static void test_local_rank_argument(void)
{
    const char *const cmd[] = {HELPER, "print=first", "env", NULL};
    struct agent_cmd_in in = {.cmd = cmd, .no_python = true,
                              .pass_local_rank = AGENT_LOCAL_RANK_UNDERSCORE};
    struct agent_group *g = NULL;
    struct agent_cmd c;
    struct fx f;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    fx_init(&f, 3, c.argv);
    f.cfg.local_rank_argi = c.rank_index;
    f.cfg.local_rank_flag = c.rank_flag;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    for (unsigned lr = 0; lr < 3; lr++) {
        char want[32];
        struct lines l;

        snprintf(tap_note, sizeof(tap_note), "local rank %u", lr);
        lines_of(&f.out, lr, &l);
        snprintf(want, sizeof(want), "ARG=--local_rank=%u", lr);
        ASSERT_TRUE(l.n > 2);
        ASSERT_BYTES_STR(l.v[0], strlen(l.v[0]), want);
        ASSERT_BYTES_STR(l.v[1], strlen(l.v[1]), "first");
        ASSERT_VALUE(&l, "LOCAL_RANK", want + strlen("ARG=--local_rank="));
        lines_free(&l);
        ASSERT_EQ(f.status[lr], 0);
    }
    tap_note[0] = '\0';
    ASSERT_TRUE(strcmp(c.argv[1], "--local_rank=0") == 0); /* the caller's array is untouched */
    fx_done(&f);

    /* An index outside argv, or no flag, is a bad config. */
    fx_init(&f, 1, c.argv);
    f.cfg.local_rank_argi = c.argc;
    f.cfg.local_rank_flag = c.rank_flag;
    ASSERT_EQ(agent_group_new(&f.cfg, &g), -EINVAL);
    f.cfg.local_rank_argi = 1;
    f.cfg.local_rank_flag = NULL;
    ASSERT_EQ(agent_group_new(&f.cfg, &g), -EINVAL);
    ASSERT_NULL(g);
    f.freed = true;
    uv_close((uv_handle_t *)&f.cap, NULL);
    close(f.cap_wfd);
    fx_run_finish(&f);
    fx_done(&f);
    agent_cmd_free(&c);
}

static void test_bad_config(void)
{
    char *argv[] = {HELPER, NULL};
    struct agent_group *g = NULL;
    struct fx f;

    fx_init(&f, 2, argv);
    f.cfg.nproc = 0;
    ASSERT_EQ(agent_group_new(&f.cfg, &g), -EINVAL);
    f.cfg.nproc = 2;
    f.cfg.run_id = "a/b";
    ASSERT_EQ(agent_group_new(&f.cfg, &g), -EINVAL);
    f.cfg.run_id = "job42";
    ASSERT_OK(agent_group_new(&f.cfg, &g));
    f.g = g;
    f.as.world_size = 1; /* fewer than our two workers */
    ASSERT_EQ(agent_group_start(g, &f.as), -EINVAL);
    ASSERT_NULL(agent_group_error_file(g, 0));
    agent_group_free(g, fx_free_done, &f);
    fx_cap_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 0);
    fx_done(&f);
}

static void test_exit_codes(void)
{
    char *argv[] = {HELPER, "r1:exit=3", "r2:signal=9", "r3:signal=6", "exit=0", NULL};
    struct fx f;

    fx_init(&f, 4, argv);
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 4);
    for (unsigned i = 0; i < 4; i++)
        ASSERT_EQ(f.n_exit[i], 1);
    ASSERT_EQ(f.status[0], 0);
    ASSERT_EQ(f.sig[0], 0);
    ASSERT_EQ(f.status[1], 3);
    ASSERT_EQ(f.sig[1], 0);
    ASSERT_EQ(f.sig[2], SIGKILL);
    ASSERT_EQ(f.sig[3], SIGABRT);
    fx_done(&f);
}

/* A SIGTERM-ignoring worker is SIGKILLed after the grace period, with its grandchild. */
static void test_stop_grace(void)
{
    char *argv[] = {
        HELPER, "r0:ignore-term", "child-sleep=30000", "pid", "print=READY", "sleep=30000", NULL};
    const uint64_t grace = 500;
    struct fx f;
    long dt;

    fx_init(&f, 2, argv);
    f.cfg.grace_ms = grace;
    f.on_line = line_watch;
    f.user = SIGTERM;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.ready, 2);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exit[0], 1);
    ASSERT_EQ(f.n_exit[1], 1);
    ASSERT_EQ(f.sig[0], SIGKILL);
    ASSERT_EQ(f.sig[1], SIGTERM);
    ASSERT_LE(grace, f.t_exit[0] - f.t_stop);
    ASSERT_LE(f.t_exit[1] - f.t_stop, grace - 1);
    ASSERT_LE(grace, f.t_all - f.t_stop);
    ASSERT_LE(f.t_all - f.t_stop, grace + 999);
    /* each worker leads its own session; its grandchild shared its process group and died */
    for (unsigned i = 0; i < 2; i++) {
        ASSERT_TRUE(f.worker_pid[i] > 0 && f.child_pid[i] > 0);
        dt = wait_gone(f.child_pid[i], 1000);
        kill_leftover(f.child_pid[i]);
        ASSERT_TRUE(dt >= 0);
    }
    fx_done(&f);
}

static void test_signal_forward(void)
{
    char *argv[] = {HELPER, "print=READY", "sleep=30000", NULL};
    struct fx f;

    fx_init(&f, 2, argv);
    f.on_line = line_watch;
    f.user = SIGUSR1;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.sig[0], SIGUSR1);
    ASSERT_EQ(f.sig[1], SIGUSR1);
    ASSERT_LE(f.t_all - f.t_stop, 2000);
    fx_done(&f);
}

static void hook_stop_on_failure(struct fx *f, unsigned lr, int64_t status, int sig)
{
    if (status != 0 || sig != 0) {
        f->t_stop = now_ms();
        agent_group_stop(f->g, SIGTERM);
        /* re-entrant stop while stopping: same deadline, signal sent again */
        agent_group_stop(f->g, SIGTERM);
    }
}

/* A worker failure stops the others from inside on_exit (how the agent fails fast). */
static void test_stop_from_on_exit(void)
{
    char *argv[] = {HELPER, "r1:exit=2", "sleep=30000", NULL};
    struct fx f;

    fx_init(&f, 3, argv);
    f.on_exit_hook = hook_stop_on_failure;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 3);
    ASSERT_EQ(f.status[1], 2);
    ASSERT_EQ(f.sig[0], SIGTERM);
    ASSERT_EQ(f.sig[2], SIGTERM);
    ASSERT_LE(f.t_all - f.t_stop, 2000);
    fx_done(&f);
}

static void hook_free_on_exit(struct fx *f, unsigned lr, int64_t status, int sig)
{
    agent_group_free(f->g, fx_free_done, f);
}

/* free() from on_exit with workers running: they are SIGKILLed and reaped, nobody is told. */
static void test_free_while_running(void)
{
    char *argv[] = {HELPER, "pid", "r1:sleep=1000", "r1:exit=1", "sleep=30000", NULL};
    struct fx f;

    fx_init(&f, 3, argv);
    f.on_line = line_watch;
    f.on_exit_hook = hook_free_on_exit;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_exits, 1);
    ASSERT_EQ(f.n_exit[1], 1);
    ASSERT_EQ(f.status[1], 1);
    ASSERT_EQ(f.n_all, 0);
    for (unsigned i = 0; i < 3; i += 2) {
        long dt;

        ASSERT_TRUE(f.worker_pid[i] > 0);
        dt = wait_gone(f.worker_pid[i], 1000);
        kill_leftover(f.worker_pid[i]);
        ASSERT_TRUE(dt >= 0);
    }
    fx_done(&f);
}

static void hook_stop_again(struct fx *f)
{
    if (f->n_all == 1) {
        agent_group_stop(f->g, SIGTERM);
        ASSERT_EQ(f->n_all, 1); /* not re-entrant */
        return;
    }
    agent_group_free(f->g, fx_free_done, f);
}

/* stop with nothing running reports on_all_exited from the loop, not from inside the call. */
static void test_stop_idle(void)
{
    char *argv[] = {HELPER, "exit=0", NULL};
    struct fx f;

    fx_init(&f, 2, argv);
    ASSERT_OK(agent_group_new(&f.cfg, &f.g));
    fx_cap_start(&f);
    agent_group_stop(f.g, SIGTERM);
    agent_group_signal(f.g, SIGTERM); /* no-op */
    ASSERT_EQ(f.n_all, 0);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 0);
    fx_done(&f);

    /* after a start: all exit, then a stop on the idle group reports once more */
    fx_init(&f, 2, argv);
    f.on_all = hook_stop_again;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 2);
    ASSERT_EQ(f.n_exits, 2);
    fx_done(&f);
}

static void hook_restart(struct fx *f)
{
    if (f->n_all == 1) {
        f->as.restart_count = 1;
        f->as.generation = 8;
        ASSERT_OK(agent_group_start(f->g, &f->as));
        ASSERT_EQ(agent_group_start(f->g, &f->as), -EBUSY);
        return;
    }
    agent_group_free(f->g, fx_free_done, f);
}

/* Start again from on_all_exited: new attempt directory and restart count. */
static void test_restart(void)
{
    char *argv[] = {HELPER, "env", "exit=1", NULL};
    char logdir[512], path[PATH_MAX];
    struct fx f;

    fx_init(&f, 2, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-restart", tmp_root);
    f.cfg.log_dir = logdir;
    f.on_all = hook_restart;
    fx_start(&f);
    ASSERT_EQ(agent_group_start(f.g, &f.as), -EBUSY);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 2);
    ASSERT_EQ(f.n_exits, 4);
    for (unsigned lr = 0; lr < 2; lr++) {
        struct lines l;
        unsigned seen = 0;

        ASSERT_EQ(f.n_exit[lr], 2);
        ASSERT_EQ(f.status[lr], 1);
        lines_of(&f.out, lr, &l);
        for (size_t i = 0; i < l.n; i++) {
            if (strncmp(l.v[i], "TORCHELASTIC_RESTART_COUNT=", 27) == 0)
                ASSERT_EQ(atoi(l.v[i] + 27), seen++);
            if (strncmp(l.v[i], "RDZV_GENERATION=", 16) == 0)
                ASSERT_EQ(atoi(l.v[i] + 16), 7 + seen - 1);
        }
        ASSERT_EQ(seen, 2);
        lines_free(&l);
        for (unsigned k = 0; k < 2; k++) {
            struct rdzv_buf got = {0};
            char want[64];

            snprintf(path, sizeof(path), "%s/job42/attempt_%u/%u/stdout.log", logdir, k, lr);
            read_file(path, &got);
            ASSERT_OK(rdzv_buf_put_u8(&got, '\0'));
            snprintf(want, sizeof(want), "TORCHELASTIC_RESTART_COUNT=%u\n", k);
            ASSERT_NOT_NULL(strstr((const char *)got.data, want));
            rdzv_buf_free(&got);
        }
    }
    fx_done(&f);
}

/* A command that cannot be run exits 127 and says why, through the worker's stderr. */
static void missing_case(const char *cmd)
{
    char *argv[] = {(char *)cmd, "arg", NULL};
    char want[PATH_MAX];
    struct fx f;

    fx_init(&f, 1, argv);
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exit[0], 1);
    ASSERT_EQ(f.status[0], 127);
    ASSERT_EQ(f.sig[0], 0);
    snprintf(want, sizeof(want), "[rank0]: rdzv-agent: cannot run '%s': %s\n", cmd,
             strerror(ENOENT));
    ASSERT_BYTES_STR(f.err.data, f.err.len, want);
    ASSERT_EQ(f.out.len, 0);
    fx_done(&f);
}

static void test_missing_command(void)
{
    missing_case("/nonexistent/rdzv-no-such-command");
    missing_case("rdzv-no-such-command-in-path");
}

/* No reaper to reach, none can be started: no group (workers would not be protected). */
static void test_no_reaper(void)
{
    char *argv[] = {HELPER, NULL};

    char name[sizeof(reaper_name) + 8];
    struct fx f;

    /* a name nobody serves (ours may still be served by the last test's reaper, exiting) */
    snprintf(name, sizeof(name), "%s.none", reaper_name);
    fx_init(&f, 2, argv);
    f.cfg.self_exe = "/nonexistent/rdzv-agent";
    f.cfg.reaper_name = name;
    ASSERT_EQ(agent_group_new(&f.cfg, &f.g), UV_ENOENT);
    fx_free_done(&f);
    fx_cap_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 0);
    fx_done(&f);
}

/* A start that fails half-way (worker 1's log file cannot be opened): the start returns the error,
 * worker 0 is stopped, on_all_exited still fires, later. */
static void test_start_failure(void)
{
    char *argv[] = {HELPER, "sleep=30000", NULL};
    char logdir[512], path[PATH_MAX + 64];
    struct fx f;

    fx_init(&f, 2, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-fail", tmp_root);
    snprintf(path, sizeof(path), "%s/job42/attempt_0/1/stdout.log", logdir);
    for (char *p = path + strlen(tmp_root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            ASSERT_TRUE(mkdir(path, 0755) == 0 || errno == EEXIST);
            *p = '/';
        }
    ASSERT_OK(mkdir(path, 0755)); /* a directory where the log file should go */
    f.cfg.log_dir = logdir;
    ASSERT_OK(agent_group_new(&f.cfg, &f.g));
    fx_cap_start(&f);
    ASSERT_EQ(agent_group_start(f.g, &f.as), -EISDIR);
    ASSERT_EQ(agent_group_running(f.g), 1);
    ASSERT_EQ(f.n_all, 0);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 1);
    ASSERT_EQ(f.sig[0], SIGTERM);
    fx_done(&f);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    proc_setup("test-agent-workers");
    fx_setup_process();
    TEST(test_env_contract);
    TEST(test_env_single);
    TEST(test_local_rank_argument);
    TEST(test_bad_config);
    TEST(test_exit_codes);
    TEST(test_stop_grace);
    TEST(test_signal_forward);
    TEST(test_stop_from_on_exit);
    TEST(test_stop_idle);
    TEST(test_free_while_running);
    TEST(test_restart);
    TEST(test_missing_command);
    TEST(test_no_reaper);
    TEST(test_start_failure);
    rm_tree(tmp_root);
    return tap_done();
}
