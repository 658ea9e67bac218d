/* SPDX-License-Identifier: Apache-2.0 */
/* agent-cmd.c: a worker's command line as torchrun builds it (agent-cmd.h); a pure function. */
#include "agent/group/agent-cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sys.argv as `python SCRIPT ARGS` has it ("-c" dropped), the script's directory instead of the
 * current one first on sys.path (unless -P/PYTHONSAFEPATH left it out), __file__ absolute as
 * Python >= 3.9 makes it. */
const char agent_cmd_runpy[] = "import os,runpy,sys\n"
                               "del sys.argv[0]\n"
                               "p=os.path.abspath(sys.argv[0])\n"
                               "if sys.path[:1]==['']:sys.path[0]=os.path.dirname(p)\n"
                               "runpy.run_path(p,run_name='__main__')\n";

const char agent_cmd_standby[] = "from rdzv.standby import main\nmain()\n";

static const char *const rank_flags[] = {NULL, "--local-rank", "--local_rank"};

void agent_cmd_format_rank(char *buf, const char *flag, unsigned local_rank)
{
    (void)snprintf(buf, AGENT_CMD_RANK_ARG_MAX, "%s=%u", flag, local_rank);
}

void agent_cmd_set_local_rank(struct agent_cmd *c, unsigned local_rank)
{
    if (c->rank_index)
        agent_cmd_format_rank(c->rank_arg, c->rank_flag, local_rank);
}

static int cmd_error(const char **ret_msg, const char *msg)
{
    if (ret_msg)
        *ret_msg = msg;
    return -EINVAL;
}

int agent_cmd_build(struct agent_cmd *c, const struct agent_cmd_in *in, const char **ret_msg)
{
    const char *python = in->python_exec && *in->python_exec ? in->python_exec : "python3";
    bool run_path = in->run_path, with_python = run_path || !in->no_python;
    size_t nargs = 0, n = 0;
    char **v;

    memset(c, 0, sizeof(*c));
    if (!in->cmd || !in->cmd[0] || !*in->cmd[0])
        return cmd_error(ret_msg, "no script or command to run");
    if (in->no_python && in->module && !run_path)
        return cmd_error(ret_msg, "--no-python and -m/--module cannot be used together");
    if ((unsigned)in->pass_local_rank >= _AGENT_LOCAL_RANK_MAX)
        return cmd_error(ret_msg, "unknown local-rank argument form");
    while (in->cmd[nargs])
        nargs++;
    /* python -u -c RUNPY | -m, the local-rank argument, the NULL */
    v = calloc(nargs + 6, sizeof(*v));
    if (!v)
        return -ENOMEM;
    if (with_python) {
        v[n++] = (char *)python;
        v[n++] = (char *)"-u";
        if (run_path) {
            v[n++] = (char *)"-c";
            v[n++] = (char *)agent_cmd_runpy;
        } else if (in->module) {
            v[n++] = (char *)"-m";
        }
    }
    if (with_python) {
        c->script_index = n;
        c->module = in->module && !run_path;
        c->standby_argv[0] = (char *)python;
        c->standby_argv[1] = (char *)"-u";
        c->standby_argv[2] = (char *)"-c";
        c->standby_argv[3] = (char *)agent_cmd_standby;
    }
    v[n++] = (char *)in->cmd[0];
    if (in->pass_local_rank != AGENT_LOCAL_RANK_NONE) {
        c->rank_flag = rank_flags[in->pass_local_rank];
        c->rank_index = n;
        agent_cmd_format_rank(c->rank_arg, c->rank_flag, in->local_rank);
        v[n++] = c->rank_arg;
    }
    for (size_t i = 1; i < nargs; i++)
        v[n++] = (char *)in->cmd[i];
    v[n] = NULL;
    c->argv = v;
    c->argc = n;
    return 0;
}

void agent_cmd_fingerprint(const struct agent_cmd *c, char out[AGENT_CMD_FINGERPRINT_HEX + 1])
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */

    for (size_t i = 0; i < c->argc; i++) {
        const char *a = c->rank_index && i == c->rank_index ? "--local-rank" : c->argv[i];

        for (size_t k = 0; k <= strlen(a); k++) /* its NUL too: ["ab"] is not ["a", "b"] */
            h = (h ^ (unsigned char)a[k]) * 0x100000001b3ull;
    }
    snprintf(out, AGENT_CMD_FINGERPRINT_HEX + 1, "%016" PRIx64, h);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

bool agent_cmd_is_python(const char *const *argv)
{
    const char *name;
    size_t n;

    if (!argv || !argv[0])
        return false;
    if (strcmp(base_name(argv[0]), "env") == 0) {
        argv++;
        while (*argv && (**argv == '-' || strchr(*argv, '=')))
            argv++;
        if (!*argv)
            return false;
    }
    name = base_name(argv[0]);
    n = strlen(name);
    return strncmp(name, "python", 6) == 0 || (n > 3 && strcmp(name + n - 3, ".py") == 0);
}

static int warm_refused(const char **why, const char *msg)
{
    *why = msg;
    return -EINVAL;
}

/* CPython's one-letter options that a standby cannot honour, and why. */
static const struct {
    char opt;
    const char *why;
} py_refused[] = {
    {'c', "-c runs a command, not a script"},
    {'i', "-i opens a prompt after the script"},
    {'x', "-x skips the script's first line, which a standby cannot"},
    {'h', "-h prints the interpreter's help"},
    {'?', "-? prints the interpreter's help"},
    {'V', "-V prints the interpreter's version"},
};

/* One option word of CPython's ("-uB", "-Wignore", "-X" and its value next): 0, 1 when its
 * value is the next word, or -EINVAL (*why). */
static int py_option(const char *a, const char **why)
{
    for (const char *p = a + 1; *p; p++) {
        if (*p == 'W' || *p == 'X')
            return p[1] ? 0 : 1;
        for (size_t k = 0; k < sizeof(py_refused) / sizeof(py_refused[0]); k++)
            if (*p == py_refused[k].opt)
                return warm_refused(why, py_refused[k].why);
        if (*p == 'm')
            return warm_refused(why, "-m is not a word of its own (write -m MODULE)");
        if (!strchr("bBdEIOPqRsSuv", *p))
            return warm_refused(why, "an interpreter option that rdzv-agent does not know");
    }
    return 0;
}

int agent_cmd_warm_raw(struct agent_cmd *c, const char **why)
{
    size_t i, n = 1;
    bool module = false;
    int r;

    *why = NULL;
    if (!c->argv || !c->argv[0] || strncmp(base_name(c->argv[0]), "python", 6) != 0)
        return -ENOENT;
    c->standby_argv[0] = c->argv[0];
    for (i = 1; c->argv[i]; i++) {
        const char *a = c->argv[i];

        if (c->rank_index == i)
            return warm_refused(why, "the local-rank argument comes before the script");
        if (a[0] != '-' || strcmp(a, "--") == 0 || strcmp(a, "-m") == 0) {
            module = strcmp(a, "-m") == 0;
            i += a[0] == '-';
            break;
        }
        if (strcmp(a, "-") == 0)
            return warm_refused(why, "- reads the script from stdin");
        r = strcmp(a, "--check-hash-based-pycs") == 0 ? 1
            : a[1] == '-' ? warm_refused(why, "a long interpreter option other than "
                                              "--check-hash-based-pycs")
                          : py_option(a, why);
        if (r < 0)
            return r;
        if (n + (size_t)r + 1 > AGENT_CMD_STANDBY_ARGS)
            return warm_refused(why, "more interpreter options than a standby takes");
        c->standby_argv[n++] = c->argv[i];
        if (r == 1 && c->argv[i + 1])
            c->standby_argv[n++] = c->argv[++i];
    }
    if (!c->argv[i] || c->rank_index == i)
        return warm_refused(why, module ? "no module after -m" : "no script after the options");
    c->standby_argv[n++] = (char *)"-c";
    c->standby_argv[n++] = (char *)agent_cmd_standby;
    c->standby_argv[n] = NULL;
    c->script_index = i;
    c->module = module;
    return 0;
}

void agent_cmd_free(struct agent_cmd *c)
{
    free(c->argv);
    memset(c, 0, sizeof(*c));
}
