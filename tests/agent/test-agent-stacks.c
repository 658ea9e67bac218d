/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-stacks.c: where a hung worker is stuck (agent/group/agent-stacks.h): the culprit
 * parsers on real faulthandler and gdb output, and the collection from real processes: a sleeping
 * child (gdb when installed, else /proc), a stopped one, and a Python one that registered
 * faulthandler the way python/rdzv does. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tap.h"
#include "agent/group/agent-stacks.h"

#define ASSERT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        if (strcmp((a), (b)) != 0) {                                                               \
            tap_fail(__FILE__, __LINE__, "'%s' != '%s'", (a), (b));                               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static const char FAULTHANDLER[] =
    "Thread 0x00007f0000000700 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 622 in wait\n"
    "\n"
    "Current thread 0x00007f8c80063040 (most recent call first):\n"
    "  File \"/home/u/train.py\", line 57 in all_reduce\n"
    "  File \"/home/u/train.py\", line 80 in <module>\n";

static const char GDB[] =
    "[Thread debugging using libthread_db enabled]\n"
    "0x00007f in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "\n"
    "Thread 2 (Thread 0x7f2 (LWP 12) \"worker\"):\n"
    "#0  0x00007f in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "\n"
    "Thread 1 (Thread 0x7f1 (LWP 11) \"train\"):\n"
    "#0  0x00007f in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007e in ncclAllReduce (count=4) at src/collectives.cc:123\n";

static void test_parsers(void)
{
    char out[AGENT_STACKS_CULPRIT_MAX];

    ASSERT_OK(agent_stacks_python_culprit(FAULTHANDLER, out, sizeof(out)));
    ASSERT_STR_EQ(out, "all_reduce (train.py:57)");
    ASSERT_OK(agent_stacks_gdb_culprit(GDB, out, sizeof(out)));
    ASSERT_STR_EQ(out, "__futex_abstimed_wait_common");
    ASSERT_OK(agent_stacks_gdb_culprit("Thread 1 (Thread 0x1 (LWP 3) \"t\"):\n"
                                       "#0  step (n=1) at /src/train/trainer.c:812\n",
                                       out, sizeof(out)));
    ASSERT_STR_EQ(out, "step (trainer.c:812)");
    ASSERT_EQ(agent_stacks_python_culprit("nothing here\n", out, sizeof(out)), -ENOENT);
    ASSERT_EQ(agent_stacks_python_culprit("Current thread 0x1 (most recent call first):\n", out,
                                          sizeof(out)),
              -ENOENT);
    ASSERT_EQ(agent_stacks_gdb_culprit("ptrace: Operation not permitted.\n", out, sizeof(out)),
              -ENOENT);
}

struct got {
    bool done;
    char culprit[AGENT_STACKS_CULPRIT_MAX];
    char source[16];
    char *text;
};

static void done_cb(void *ud, const struct agent_stacks_result *r)
{
    struct got *g = ud;

    g->done = true;
    snprintf(g->culprit, sizeof(g->culprit), "%s", r->culprit);
    snprintf(g->source, sizeof(g->source), "%s", r->source);
    g->text = strdup(r->text);
}

static void collect(int pid, bool announced, const char *file, struct got *g)
{
    uv_loop_t loop;
    struct agent_stacks *s;

    memset(g, 0, sizeof(*g));
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(agent_stacks_collect(&loop, pid, announced, file, done_cb, g, &s));
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_TRUE(g->done);
    ASSERT_OK(uv_loop_close(&loop));
}

static int child(char *const argv[])
{
    int pid = fork();

    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void reap(int pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void test_native_sleeping(void)
{
    char *argv[] = {"sleep", "60", NULL};
    int pid = child(argv);
    struct got g;

    usleep(200000);
    collect(pid, false, NULL, &g);
    ASSERT_TRUE(strstr(g.text, "state S") != NULL);
    ASSERT_TRUE(strstr(g.culprit, "sleep") != NULL); /* clock_nanosleep, or hrtimer_nanosleep */
    ASSERT_TRUE(strcmp(g.source, "gdb") == 0 || strcmp(g.source, "/proc") == 0);
    printf("# %s: %s\n", g.source, g.culprit);
    free(g.text);
    reap(pid);
}

static void test_native_stopped(void)
{
    char *argv[] = {"sleep", "60", NULL};
    int pid = child(argv);
    struct got g;

    usleep(100000);
    kill(pid, SIGSTOP);
    usleep(100000);
    collect(pid, false, NULL, &g);
    ASSERT_STR_EQ(g.culprit, "stopped (SIGSTOP)");
    free(g.text);
    reap(pid);
}

/* A Python worker that registered faulthandler on the signal and said so dumps its own stacks;
 * stopped, it is continued for it (it is failed next), and its culprit says it was stopped. */
static void python_faulthandler(bool stop)
{
    char file[] = "/tmp/rdzv-stacks-test-XXXXXX", sig[16], prog[1024];
    int fd = mkstemp(file), pid;
    struct got g;

    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("# no /usr/bin/python3: nothing to run\n");
        unlink(file);
        return;
    }
    ASSERT_TRUE(fd >= 0);
    close(fd);
    snprintf(sig, sizeof(sig), "%d", agent_stacks_signal());
    snprintf(prog, sizeof(prog),
             "import faulthandler, time\n"
             "f = open('%s', 'a')\n"
             "faulthandler.register(%s, file=f, all_threads=True, chain=False)\n"
             "def stuck_here():\n"
             "    time.sleep(60)\n"
             "stuck_here()\n",
             file, sig);
    {
        char *argv[] = {"/usr/bin/python3", "-c", prog, NULL};

        pid = child(argv);
    }
    usleep(500000); /* python registers its handler */
    if (stop) {
        kill(pid, SIGSTOP);
        usleep(100000);
    }
    collect(pid, true, file, &g);
    ASSERT_STR_EQ(g.source, "faulthandler");
    ASSERT_STR_EQ(g.culprit, stop ? "stuck_here (<string>:5), stopped (SIGSTOP)"
                                  : "stuck_here (<string>:5)");
    free(g.text);
    reap(pid);
    unlink(file);
}

static void test_python_faulthandler(void)
{
    python_faulthandler(false);
}

static void test_python_stopped(void)
{
    python_faulthandler(true);
}

int main(void)
{
    TEST(test_parsers);
    TEST(test_native_sleeping);
    TEST(test_native_stopped);
    TEST(test_python_faulthandler);
    TEST(test_python_stopped);
    return tap_done();
}
