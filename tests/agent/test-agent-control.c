/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-control.c: recovery in place in the worker group against real processes:
 * the control channel (descriptor, RDZV_CONTROL_FD, lines to one or all workers, the errors) and
 * agent_group_start_ranks(): one failed worker started again on a new generation while the others
 * keep running (same pids, their new ranks in the relay prefix, the new generation told on the
 * channel), progress kept per worker, one on_all_exited for the whole start, and the errors.
 * This executable is also the reaper of the groups it makes. */
#include "agent-fixture.h"

#include "agent/group/agent-workers-int.h" /* g->cgroup, to make a move fail */

#define LINE(s) (s), strlen(s)

/* Every worker of f printed key=value under global rank rank_offset + local rank. */
static void check_said(struct fx *f, unsigned rank_offset, const char *key, const char *value)
{
    struct lines l;

    for (unsigned lr = 0; lr < f->cfg.nproc; lr++) {
        lines_of(&f->out, rank_offset + lr, &l);
        snprintf(tap_note, sizeof(tap_note), "local rank %u", lr);
        ASSERT_VALUE(&l, key, value);
        lines_free(&l);
    }
}

/* Lines to all and to one worker arrive in order; bad lines and ranks are refused. Each worker
 * reads every line sent to it (local rank 0 three, 1 two) before it exits: a line to a worker that
 * has stopped reading (gone, its end closed) is refused with -ENOTCONN. */
static void test_control_send(void)
{
    char *argv[] = {HELPER, "env", "r0:control=3", "r1:control=2", NULL};
    char big[AGENT_CONTROL_LINE];
    struct fx f;

    fx_init(&f, 2, argv);
    f.cfg.control = true;
    setenv("RDZV_CONTROL_FD", "9", 1); /* an agent's above ours: not passed on */
    fx_start(&f);
    unsetenv("RDZV_CONTROL_FD");
    ASSERT_EQ(agent_group_control_send(f.g, AGENT_ALL_LOCAL_RANKS,
                                       LINE("{\"op\":\"generation\",\"generation\":8}")),
              2);
    ASSERT_EQ(agent_group_control_send(f.g, 1, LINE("one")), 1);
    ASSERT_EQ(agent_group_control_send(f.g, 0, LINE("zero")), 1);
    ASSERT_EQ(agent_group_control_send(f.g, 2, LINE("x")), -EINVAL);
    ASSERT_EQ(agent_group_control_send(f.g, 0, "", 0), -EINVAL);
    ASSERT_EQ(agent_group_control_send(f.g, 0, LINE("a\nb")), -EINVAL);
    memset(big, 'x', sizeof(big));
    ASSERT_EQ(agent_group_control_send(f.g, 0, big, sizeof(big)), -EINVAL);
    ASSERT_EQ(agent_group_control_send(f.g, 0, big, sizeof(big) - 1), 1);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    check_said(&f, 0, "RDZV_CONTROL_FD", "4");
    for (unsigned lr = 0; lr < 2; lr++) {
        struct lines l;
        unsigned seen = 0;

        ASSERT_EQ(f.status[lr], 0);
        lines_of(&f.out, lr, &l);
        for (size_t i = 0; i < l.n; i++)
            if (strncmp(l.v[i], "CONTROL=", 8) == 0) {
                const char *want = seen == 0 ? "{\"op\":\"generation\",\"generation\":8}"
                                   : lr      ? "one"
                                             : "zero";

                if (seen == 2) { /* local rank 0's third line: the longest one */
                    ASSERT_EQ(strlen(l.v[i] + 8), sizeof(big) - 1);
                    ASSERT_MEMEQ(l.v[i] + 8, big, sizeof(big) - 1);
                } else
                    ASSERT_BYTES_STR(l.v[i] + 8, strlen(l.v[i] + 8), want);
                seen++;
            }
        ASSERT_EQ(seen, lr == 0 ? 3 : 2);
        lines_free(&l);
    }
    fx_done(&f);
}

/* No channel without cfg.control: no variable, no descriptor, nothing sent. */
static void test_control_off(void)
{
    char *argv[] = {HELPER, "env", "fds", NULL};
    struct fx f;

    fx_init(&f, 1, argv);
    fx_start(&f);
    ASSERT_EQ(agent_group_control_send(f.g, 0, LINE("x")), -ENOTCONN);
    ASSERT_EQ(agent_group_control_send(f.g, AGENT_ALL_LOCAL_RANKS, LINE("x")), 0);
    fx_run_finish(&f);
    check_said(&f, 0, "RDZV_CONTROL_FD", "<unset>");
    check_said(&f, 0, "OPEN_FDS", inherited_fds);
    fx_done(&f);
}

/* A worker that never reads its channel fills it: -EAGAIN, and the agent never blocks. The worker
 * runs until the test stops it (a worker gone meanwhile would make it -ENOTCONN). */
static void test_control_full(void)
{
    char *argv[] = {HELPER, "sleep=600000", NULL};
    char line[1000];
    int r = 0, n = 0;
    struct fx f;

    fx_init(&f, 1, argv);
    f.cfg.control = true;
    fx_start(&f);
    memset(line, 'y', sizeof(line));
    while (n < 100000 && (r = agent_group_control_send(f.g, 0, line, sizeof(line))) == 1)
        n++;
    ASSERT_EQ(r, -EAGAIN);
    ASSERT_TRUE(n >= 4); /* a pipe holds at least a page */
    ASSERT_EQ(agent_group_control_send(f.g, AGENT_ALL_LOCAL_RANKS, line, sizeof(line)), 0);
    agent_group_stop(f.g, SIGTERM);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_exit[0], 1);
    ASSERT_EQ(f.sig[0], SIGTERM); /* it was running all along */
    fx_done(&f);
}

/* ---- partial starts ---- */

struct inplace {
    struct agent_assignment a2;
    bool spawn[MAXW];
    int r_start, r_busy, r_none, r_send, r_done;
    unsigned n_starts;
    int64_t first_status;
    uint64_t t_start, t_done; /* loop time */
    bool escaped_alive, other_running;
    bool had_cgroup, kept_cgroup, movable; /* test_failed_move_keeps_the_cgroup */
};

/* The first exit of local rank 1 (status 9): start it again on generation 8, where this node's
 * ranks begin at 3 (world 6), and tell the others through their channel. */
static void hook_replace(struct fx *f, unsigned lr, int64_t status, int sig)
{
    struct inplace *ip = f->ptr;
    const char *gen8 = "{\"op\":\"generation\",\"generation\":8,\"rank_offset\":3}";
    bool none[MAXW] = {false};

    if (lr != 1 || status != 9 || ip->n_starts > 0)
        return;
    ip->n_starts++;
    ip->r_busy = agent_group_start_ranks(f->g, &ip->a2, NULL); /* ranks 0 and 2 run */
    ip->r_none = agent_group_start_ranks(f->g, &ip->a2, none);
    ip->r_start = agent_group_start_ranks(f->g, &ip->a2, ip->spawn);
    ip->r_send = agent_group_control_send(f->g, AGENT_ALL_LOCAL_RANKS, gen8, strlen(gen8));
}

static void hook_steps_then_free(struct fx *f)
{
    const uint64_t want[] = {7, 21, 8};

    for (unsigned lr = 0; lr < 3; lr++) {
        uint64_t step = 0;

        snprintf(tap_note, sizeof(tap_note), "local rank %u", lr);
        ASSERT_OK(agent_group_progress(f->g, lr, &step, NULL));
        ASSERT_EQ(step, want[lr]);
    }
    tap_note[0] = '\0';
    agent_group_free(f->g, fx_free_done, f);
}

/* The pids printed under global rank rank ("PID=" lines), in order, into v; how many. */
static unsigned pids_of(struct fx *f, unsigned rank, long *v, unsigned max)
{
    struct lines l;
    unsigned n = 0;

    lines_of(&f->out, rank, &l);
    for (size_t i = 0; i < l.n; i++)
        if (strncmp(l.v[i], "PID=", 4) == 0 && n < max)
            v[n++] = atol(l.v[i] + 4);
    lines_free(&l);
    return n;
}

static void test_start_ranks(void)
{
    char *argv[] = {HELPER,
                    "pid",
                    "g7:progress=5",
                    "g7:r1:exit=9",
                    "g7:control=1",
                    "r0:progress=7",
                    "r2:progress=8",
                    "g8:progress=21",
                    "env",
                    "pid",
                    NULL};
    struct inplace ip = {0};
    struct fx f;

    fx_init(&f, 3, argv);
    f.cfg.control = true;
    f.cfg.progress = true;
    f.cfg.progress_timeout_ms = 20000;
    f.ptr = &ip;
    f.on_exit_hook = hook_replace;
    f.on_all = hook_steps_then_free;
    ip.a2 = f.as;
    ip.a2.generation = 8;
    ip.a2.rank_offset = 3;
    ip.a2.world_size = 6;
    ip.a2.restart_count = 1;
    ip.a2.master_port = 29511;
    ip.spawn[1] = true;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(ip.n_starts, 1);
    ASSERT_EQ(ip.r_busy, -EBUSY);
    ASSERT_OK(ip.r_none); /* no rank chosen on an active group: the running ones take a2's ranks */
    ASSERT_OK(ip.r_start);
    ASSERT_EQ(ip.r_send, 2); /* the survivors; the new worker is not running yet */
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exit[0], 1);
    ASSERT_EQ(f.n_exit[1], 2);
    ASSERT_EQ(f.n_exit[2], 1);
    for (unsigned lr = 0; lr < 3; lr++)
        ASSERT_EQ(f.status[lr], 0);
    /* The survivors printed their pid before the switch (under their old rank, or their new one
     * when read after it) and after it (under the new rank): the same process. The replaced
     * worker's output is all under its old rank, its replacement's under the new one. */
    for (unsigned lr = 0; lr < 3; lr += 2) {
        long before[2] = {0}, after[2] = {0};
        unsigned nb = pids_of(&f, lr, before, 2), na = pids_of(&f, 3 + lr, after, 2);

        snprintf(tap_note, sizeof(tap_note), "survivor local rank %u", lr);
        ASSERT_EQ(nb + na, 2);
        ASSERT_TRUE(na >= 1);
        ASSERT_EQ(nb ? before[0] : after[0], after[na - 1]);
    }
    tap_note[0] = '\0';
    {
        long old_pid[2] = {0}, new_pid[3] = {0};

        ASSERT_EQ(pids_of(&f, 1, old_pid, 2), 1);
        ASSERT_EQ(pids_of(&f, 4, new_pid, 3), 2);
        ASSERT_NE(old_pid[0], new_pid[0]);
        ASSERT_EQ(new_pid[0], new_pid[1]);
    }
    {
        struct lines l;

        for (unsigned lr = 0; lr < 3; lr += 2) {
            lines_of(&f.out, 3 + lr, &l);
            ASSERT_VALUE(&l, "CONTROL",
                         "{\"op\":\"generation\",\"generation\":8,\"rank_offset\":3}");
            ASSERT_VALUE(&l, "RANK", lr == 0 ? "0" : "2"); /* their environment is unchanged */
            ASSERT_VALUE(&l, "RDZV_GENERATION", "7");
            lines_free(&l);
        }
        lines_of(&f.out, 4, &l);
        ASSERT_VALUE(&l, "RDZV_GENERATION", "8");
        ASSERT_VALUE(&l, "RANK", "4");
        ASSERT_VALUE(&l, "WORLD_SIZE", "6");
        ASSERT_VALUE(&l, "MASTER_PORT", "29511");
        ASSERT_VALUE(&l, "TORCHELASTIC_RESTART_COUNT", "1");
        lines_free(&l);
    }
    fx_done(&f);
}

/* Local rank 0's first exit (status 9): start it again on generation 8 (from loop time t_start)
 * and let local rank 1 go on. Its replacement's exit: what runs then, and let rank 1 finish. */
static void hook_replace_lr0(struct fx *f, unsigned lr, int64_t status, int sig)
{
    struct inplace *ip = f->ptr;
    const bool spawn[2] = {true, false};

    if (lr != 0)
        return;
    if (ip->n_starts++ == 0) {
        ip->first_status = status;
        /* The group's drain counts from its own uv_update_time(), which comes after this one. */
        uv_update_time(&f->loop);
        ip->t_start = uv_now(&f->loop);
        ip->r_start = agent_group_start_ranks(f->g, &ip->a2, spawn);
        ip->r_send = agent_group_control_send(f->g, 1, LINE("go on"));
        return;
    }
    ip->t_done = uv_now(&f->loop);
    ip->escaped_alive = f->child_pid[0] > 0 && !pid_gone(f->child_pid[0]);
    ip->other_running = f->n_exit[1] == 0;
    ip->r_done = agent_group_control_send(f->g, 1, LINE("done"));
}

/* A replaced worker left a process outside its group (out of it before the worker exits: the
 * helper waits for that) that holds its output pipes: the replacement is spawned once the drain
 * has closed them, AGENT_DRAIN_MS after the partial start by the loop's clock (the drain timer's
 * own), while that process still runs and while the other worker still runs (it waits on its
 * control channel for the line the replacement's exit sends: no exit of its own to close them). */
static void test_start_ranks_escaped_child(void)
{
    char *argv[] = {HELPER, "g7:r0:escape-sleep=60000", "g7:r0:exit=9", "g7:r1:control=2", "env",
                    NULL};
    struct inplace ip = {0};
    struct fx f;

    fx_init(&f, 2, argv);
    f.cfg.control = true;
    f.ptr = &ip;
    f.on_line = line_watch;
    f.on_exit_hook = hook_replace_lr0;
    ip.a2 = f.as;
    ip.a2.generation = 8;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(ip.first_status, 9);
    ASSERT_OK(ip.r_start);
    ASSERT_EQ(ip.r_send, 1);
    ASSERT_EQ(ip.n_starts, 2);
    ASSERT_EQ(f.n_exit[0], 2);
    ASSERT_EQ(f.status[0], 0);
    ASSERT_TRUE(f.child_pid[0] > 0);
    ASSERT_TRUE(ip.escaped_alive);
    ASSERT_TRUE(ip.other_running);
    ASSERT_EQ(ip.r_done, 1);
    ASSERT_TRUE(ip.t_done - ip.t_start >= AGENT_DRAIN_MS);
    ASSERT_EQ(f.n_exit[1], 1);
    ASSERT_EQ(f.status[1], 0);
    {
        struct lines l;

        lines_of(&f.out, 0, &l);
        ASSERT_VALUE(&l, "RDZV_GENERATION", "8");
        lines_free(&l);
        lines_of(&f.out, 1, &l);
        ASSERT_VALUE(&l, "RDZV_GENERATION", "7");
        lines_free(&l);
    }
    fx_done(&f);
}

/* hook_replace_lr0, but first every later move into the workers' cgroup fails (its cgroup.procs
 * descriptor replaced by one open read-only): the replacement, spawned once the drain has closed
 * the old pipes, starts outside it. */
static void hook_fail_move_replace_lr0(struct fx *f, unsigned lr, int64_t status, int sig)
{
    struct inplace *ip = f->ptr;
    bool first = lr == 0 && ip->n_starts == 0;
    int fd;

    if (first && agent_cgroup_on(&f->g->cgroup)) {
        ip->had_cgroup = true;
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(dup3(fd, f->g->cgroup.procs_fd, O_CLOEXEC), f->g->cgroup.procs_fd);
        close(fd);
    }
    hook_replace_lr0(f, lr, status, sig);
}

static void hook_escaped_gone(struct fx *f)
{
    struct inplace *ip = f->ptr;

    ip->kept_cgroup = agent_cgroup_on(&f->g->cgroup);
    ip->movable = agent_cgroup_movable(&f->g->cgroup);
    ip->escaped_alive = f->child_pid[0] > 0 && wait_gone(f->child_pid[0], 2000) < 0;
    agent_group_free(f->g, fx_free_done, f);
}

/* A move into the workers' cgroup that fails (here, the one for a replaced rank) keeps the cgroup:
 * what is already in it (the replaced rank's escaped process, outside its process group) is still
 * killed at the end of the start, and the group's later workers start outside it. */
static void test_failed_move_keeps_the_cgroup(void)
{
    char *argv[] = {HELPER, "g7:r0:escape-sleep=60000", "g7:r0:exit=9", "g7:r1:control=2", "env",
                    NULL};
    struct inplace ip = {0};
    struct fx f;

    fx_init(&f, 2, argv);
    f.cfg.control = true;
    f.ptr = &ip;
    f.on_line = line_watch;
    f.on_exit_hook = hook_fail_move_replace_lr0;
    f.on_all = hook_escaped_gone;
    ip.a2 = f.as;
    ip.a2.generation = 8;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(ip.n_starts, 2);
    ASSERT_OK(ip.r_start);
    ASSERT_EQ(ip.r_done, 1);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_TRUE(f.child_pid[0] > 0);
    if (!ip.had_cgroup) {
        printf("# skipped: no workers' cgroup here (not root, or no cgroup v2)\n");
        fx_done(&f);
        return;
    }
    ASSERT_FALSE(ip.escaped_alive);
    ASSERT_TRUE(ip.kept_cgroup);
    ASSERT_FALSE(ip.movable);
    fx_done(&f);
}

/* On an idle group, a partial start spawns only the chosen ranks; a stopping group refuses. */
static void test_start_ranks_idle(void)
{
    char *argv[] = {HELPER, "pid", "sleep=600000", NULL};
    struct inplace ip = {0};
    struct fx f;

    fx_init(&f, 3, argv);
    ip.spawn[2] = true;
    ASSERT_OK(agent_group_new(&f.cfg, &f.g));
    fx_cap_start(&f);
    ASSERT_OK(agent_group_start_ranks(f.g, &f.as, ip.spawn));
    ASSERT_EQ(agent_group_running(f.g), 1);
    ASSERT_EQ(agent_group_start(f.g, &f.as), -EBUSY);
    agent_group_stop(f.g, SIGTERM);
    ip.spawn[2] = false;
    ip.spawn[0] = true;
    ASSERT_EQ(agent_group_start_ranks(f.g, &f.as, ip.spawn), -EBUSY);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 1);
    ASSERT_EQ(f.n_exit[2], 1);
    ASSERT_EQ(f.sig[2], SIGTERM); /* the stop ended it, not its own end */
    ASSERT_EQ(pids_of(&f, 0, (long[1]){0}, 1), 0);
    fx_done(&f);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    proc_setup("test-agent-control");
    fx_setup_process();
    TEST(test_control_send);
    TEST(test_control_off);
    TEST(test_control_full);
    TEST(test_start_ranks);
    TEST(test_start_ranks_idle);
    TEST(test_start_ranks_escaped_child);
    TEST(test_failed_move_keeps_the_cgroup);
    rm_tree(tmp_root);
    return tap_done();
}
