/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-cmd.c: the worker command line (agent-cmd.h), a pure function; and, where python3
 * is installed, that the --run-path form gives a script the same sys.argv, sys.path[0] and
 * __name__ as `python3 script args`. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/group/agent-cmd.h"
#include "../tap.h"

/* c's argv equals the NULL-terminated want, entry by entry. */
#define ASSERT_ARGV(c, ...)                                                                        \
    assert_argv(__FILE__, __LINE__, (c), (const char *[]){__VA_ARGS__, NULL})

static void assert_argv(const char *file, int line, const struct agent_cmd *c,
                        const char *const *want)
{
    size_t i;

    for (i = 0; want[i]; i++) {
        if (i >= c->argc || !c->argv[i])
            tap_fail(file, line, "argv has %zu entries, expected more: \"%s\"", i, want[i]);
        if (strcmp(c->argv[i], want[i]) != 0)
            tap_fail(file, line, "argv[%zu]=\"%s\", expected \"%s\"", i, c->argv[i], want[i]);
    }
    if (c->argc != i || c->argv[i])
        tap_fail(file, line, "argv has %zu entries, expected %zu", c->argc, i);
}

static const char *const script[] = {"train.py", "--batch_size=6144", "--ddp", NULL};

/* torchrun's default: $PYTHON_EXEC -u script args; python3 when PYTHON_EXEC is not given. */
static void test_script(void)
{
    struct agent_cmd_in in = {.cmd = script};
    struct agent_cmd c;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "train.py", "--batch_size=6144", "--ddp");
    ASSERT_EQ(c.rank_index, 0);
    agent_cmd_free(&c);
    in.python_exec = "/opt/py/bin/python";
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "/opt/py/bin/python", "-u", "train.py", "--batch_size=6144", "--ddp");
    agent_cmd_free(&c);
    in.python_exec = ""; /* an empty PYTHON_EXEC is no interpreter */
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "train.py", "--batch_size=6144", "--ddp");
    agent_cmd_free(&c);
    agent_cmd_free(&c); /* twice is fine */
}

/* -m: python -u -m module args. */
static void test_module(void)
{
    const char *const mod[] = {"pkg.train", "--lr", "0.1", NULL};
    struct agent_cmd_in in = {.cmd = mod, .module = true};
    struct agent_cmd c;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "-m", "pkg.train", "--lr", "0.1");
    agent_cmd_free(&c);
}

/* --no-python runs the command itself; with -m it is an error that says why. */
static void test_no_python(void)
{
    const char *const cmd[] = {"./run.sh", "x", NULL};
    struct agent_cmd_in in = {.cmd = cmd, .no_python = true, .python_exec = "py"};
    struct agent_cmd c;
    const char *msg = NULL;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "./run.sh", "x");
    agent_cmd_free(&c);
    in.module = true;
    ASSERT_EQ(agent_cmd_build(&c, &in, &msg), -EINVAL);
    ASSERT_TRUE(msg && strstr(msg, "--no-python") && strstr(msg, "--module"));
    ASSERT_NULL(c.argv);
}

/* torch.distributed.launch without --use-env: the local-rank argument right after the script,
 * before its own arguments (torch's config_from_args), in both spellings; rewritten per worker. */
static void test_local_rank_argument(void)
{
    const char *const mod[] = {"pkg.train", "--lr", NULL};
    struct agent_cmd_in in = {
        .cmd = script, .pass_local_rank = AGENT_LOCAL_RANK_DASH, .local_rank = 3};
    struct agent_cmd c;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "train.py", "--local-rank=3", "--batch_size=6144", "--ddp");
    ASSERT_EQ(c.rank_index, 3);
    ASSERT_TRUE(strcmp(c.rank_flag, "--local-rank") == 0);
    agent_cmd_set_local_rank(&c, 4000000000u);
    ASSERT_ARGV(&c, "python3", "-u", "train.py", "--local-rank=4000000000", "--batch_size=6144",
                "--ddp");
    agent_cmd_free(&c);

    in.pass_local_rank = AGENT_LOCAL_RANK_UNDERSCORE;
    in.local_rank = 0;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "train.py", "--local_rank=0", "--batch_size=6144", "--ddp");
    agent_cmd_free(&c);

    in.cmd = mod;
    in.module = true;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "-m", "pkg.train", "--local_rank=0", "--lr");
    agent_cmd_free(&c);

    in.module = false;
    in.no_python = true;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "pkg.train", "--local_rank=0", "--lr");
    ASSERT_EQ(c.rank_index, 1);
    agent_cmd_free(&c);

    in.pass_local_rank = _AGENT_LOCAL_RANK_MAX;
    ASSERT_EQ(agent_cmd_build(&c, &in, NULL), -EINVAL);
}

/* --run-path: runpy in the interpreter; wins over -m and --no-python, as in torchrun. */
static void test_run_path_argv(void)
{
    struct agent_cmd_in in = {
        .cmd = script, .run_path = true, .pass_local_rank = AGENT_LOCAL_RANK_DASH};
    struct agent_cmd c;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "-c", agent_cmd_runpy, "train.py", "--local-rank=0",
                "--batch_size=6144", "--ddp");
    agent_cmd_free(&c);
    in.no_python = in.module = true;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_ARGV(&c, "python3", "-u", "-c", agent_cmd_runpy, "train.py", "--local-rank=0",
                "--batch_size=6144", "--ddp");
    agent_cmd_free(&c);
}

/* An empty command is refused. */
static void test_empty_command(void)
{
    const char *const none[] = {NULL};
    const char *const empty[] = {"", NULL};
    struct agent_cmd_in in = {.cmd = NULL};
    struct agent_cmd c;
    const char *msg = NULL;

    ASSERT_EQ(agent_cmd_build(&c, &in, &msg), -EINVAL);
    ASSERT_TRUE(msg != NULL);
    in.cmd = none;
    ASSERT_EQ(agent_cmd_build(&c, &in, NULL), -EINVAL);
    in.cmd = empty;
    ASSERT_EQ(agent_cmd_build(&c, &in, NULL), -EINVAL);
}

/* Run argv, return its stdout (static buffer), NULL if it did not exit 0. */
static const char *run_capture(char **argv)
{
    static char out[4096];
    int fds[2], status;
    size_t len = 0;
    ssize_t k;
    pid_t pid;

    ASSERT_OK(pipe(fds));
    pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    while (len < sizeof(out) - 1 && (k = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)k;
    out[len] = '\0';
    close(fds[0]);
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : NULL;
}

/* The run_path program as python3 runs it: the script sees what `python3 -u script args` shows
 * it (sys.argv, __name__, sys.path[0], the local-rank argument in place). */
static void test_run_path_python(void)
{
    char dir[] = "/tmp/rdzv-cmd-XXXXXX", path[64], expect[4096];
    const char *const plain_cmd[] = {path, "--local-rank=0", "a b", "--c", NULL};
    const char *const cmd[] = {path, "a b", "--c", NULL};
    struct agent_cmd_in in = {.cmd = plain_cmd};
    struct agent_cmd c;
    const char *got;
    FILE *f;

    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("# skipped: no /usr/bin/python3\n");
        return;
    }
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/s.py", dir);
    f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("import sys\nprint(__name__, sys.argv, sys.path[0])\n", f);
    fclose(f);
    in.python_exec = "/usr/bin/python3";
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    got = run_capture(c.argv);
    ASSERT_TRUE(got != NULL);
    snprintf(expect, sizeof(expect), "%s", got);
    ASSERT_TRUE(strstr(expect, "__main__ ['") == expect);
    ASSERT_TRUE(strstr(expect, "'--local-rank=0', 'a b', '--c'] "));
    agent_cmd_free(&c);

    in.cmd = cmd;
    in.run_path = true;
    in.pass_local_rank = AGENT_LOCAL_RANK_DASH;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    got = run_capture(c.argv);
    ASSERT_TRUE(got != NULL);
    if (strcmp(got, expect) != 0)
        tap_fail(__FILE__, __LINE__, "run_path printed \"%s\", python3 script \"%s\"", got, expect);
    agent_cmd_free(&c);
    unlink(path);
    rmdir(dir);
}

/* The fingerprint JOIN sends (command): the same for every local rank of one command, another
 * for another command, and arguments' boundaries count ("a b" is not "a" "b"). */
static void test_fingerprint(void)
{
    const char *const one[] = {"a b", NULL}, *const two[] = {"a", "b", NULL};
    struct agent_cmd_in in = {
        .cmd = script, .pass_local_rank = AGENT_LOCAL_RANK_DASH, .local_rank = 0};
    char fp0[AGENT_CMD_FINGERPRINT_HEX + 1], fp[AGENT_CMD_FINGERPRINT_HEX + 1];
    struct agent_cmd c;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    agent_cmd_fingerprint(&c, fp0);
    ASSERT_EQ(strlen(fp0), AGENT_CMD_FINGERPRINT_HEX);
    agent_cmd_set_local_rank(&c, 7);
    agent_cmd_fingerprint(&c, fp);
    ASSERT_EQ(strcmp(fp, fp0), 0);
    agent_cmd_free(&c);
    in.cmd = one;
    in.no_python = true;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    agent_cmd_fingerprint(&c, fp);
    ASSERT_TRUE(strcmp(fp, fp0) != 0);
    agent_cmd_free(&c);
    in.cmd = two;
    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    agent_cmd_fingerprint(&c, fp0);
    ASSERT_TRUE(strcmp(fp, fp0) != 0);
    agent_cmd_free(&c);
}

/* Which commands run Python (rdzv-agent's Python hooks go into those only). */
static void test_is_python(void)
{
    static const char *const yes[][4] = {
        {"python3", "train.py"},          {"/usr/bin/python3.11", "-m", "x"},
        {"python", "-c", "pass"},          {"./train.py", "--lr=1"},
        {"/usr/bin/env", "X=1", "python3"},
    };
    static const char *const no[][4] = {
        {"bash", "-c", "python3 t.py"}, {"./rdzv-train"}, {"env", "X=1"},
        {"py"},                         {".py"},          {"/opt/mypython/bin/torchrun"},
        {"env", "-i", "bash"},
    };

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        ASSERT_TRUE(agent_cmd_is_python(yes[i]));
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        ASSERT_TRUE(!agent_cmd_is_python(no[i]));
    ASSERT_TRUE(!agent_cmd_is_python(NULL));
}

/* A command after -- that is an interpreter with a script or -m MODULE: its standby runs the same
 * interpreter with the same options; an option a standby cannot honour is named. */
static void warm_raw(const char *const *cmd, int want, const char *const *standby, size_t argi,
                     bool module, const char *why_has)
{
    struct agent_cmd_in in = {.cmd = cmd, .no_python = true};
    struct agent_cmd c;
    const char *why = NULL;
    size_t i;

    ASSERT_OK(agent_cmd_build(&c, &in, NULL));
    ASSERT_EQ(agent_cmd_warm_raw(&c, &why), want);
    if (want == 0) {
        for (i = 0; standby[i]; i++)
            ASSERT_TRUE(c.standby_argv[i] && strcmp(c.standby_argv[i], standby[i]) == 0);
        ASSERT_TRUE(c.standby_argv[i] && strcmp(c.standby_argv[i], "-c") == 0);
        ASSERT_TRUE(c.standby_argv[i + 1] == agent_cmd_standby);
        ASSERT_TRUE(c.standby_argv[i + 2] == NULL);
        ASSERT_EQ(c.script_index, argi);
        ASSERT_EQ(c.module, module);
    } else if (why_has) {
        ASSERT_TRUE(why && strstr(why, why_has));
    } else {
        ASSERT_TRUE(why == NULL);
    }
    agent_cmd_free(&c);
}

static void test_warm_raw(void)
{
#define V(...) ((const char *const[]){__VA_ARGS__, NULL})
    warm_raw(V("python3", "train.py", "x"), 0, V("python3"), 1, false, NULL);
    warm_raw(V("/usr/bin/python3", "-u", "train.py"), 0, V("/usr/bin/python3", "-u"), 2, false,
             NULL);
    warm_raw(V("python", "-m", "pkg.train", "--lr", "1"), 0, V("python"), 2, true, NULL);
    warm_raw(V("/v/bin/python3", "-uB", "-W", "ignore", "-X", "dev", "--", "t.py"), 0,
             V("/v/bin/python3", "-uB", "-W", "ignore", "-X", "dev"), 7, false, NULL);
    warm_raw(V("python3", "-Wignore", "-O", "-m", "m"), 0, V("python3", "-Wignore", "-O"), 4,
             true, NULL);
    warm_raw(V("python3", "-c", "pass"), -EINVAL, NULL, 0, false, "-c runs a command");
    warm_raw(V("python3", "-ic", "pass"), -EINVAL, NULL, 0, false, "-i opens a prompt");
    warm_raw(V("python3", "-x", "t.py"), -EINVAL, NULL, 0, false, "-x skips");
    warm_raw(V("python3", "-", "a"), -EINVAL, NULL, 0, false, "from stdin");
    warm_raw(V("python3", "-Z", "t.py"), -EINVAL, NULL, 0, false, "does not know");
    warm_raw(V("python3", "-um", "m"), -EINVAL, NULL, 0, false, "-m is not a word");
    warm_raw(V("python3", "--version"), -EINVAL, NULL, 0, false, "a long interpreter option");
    warm_raw(V("python3", "-u"), -EINVAL, NULL, 0, false, "no script");
    warm_raw(V("python3", "-m"), -EINVAL, NULL, 0, false, "no module");
    warm_raw(V("./train.sh", "x"), -ENOENT, NULL, 0, false, NULL);
    warm_raw(V("bash", "-c", "python3 t.py"), -ENOENT, NULL, 0, false, NULL);
#undef V
}

int main(void)
{
    TEST(test_script);
    TEST(test_module);
    TEST(test_no_python);
    TEST(test_local_rank_argument);
    TEST(test_run_path_argv);
    TEST(test_empty_command);
    TEST(test_run_path_python);
    TEST(test_fingerprint);
    TEST(test_is_python);
    TEST(test_warm_raw);
    return tap_done();
}
