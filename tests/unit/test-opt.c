/* SPDX-License-Identifier: Apache-2.0 */
/* test-opt.c: the table-driven option parser (common/rdzv-opt.c): --a-b and --a_b, prefixes,
 * "=" and separate values, short clusters, "--", stopping at a command, the environment and
 * its precedence, kinds and ranges, one-line errors, and --help / --help-options from the
 * table. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rdzv-opt.h"
#include "../../common/rdzv-util.h"
#include "../tap.h"

struct vals {
    bool standalone, verbose, port_seen;
    const char *endpoint, *run_id, *token;
    int64_t nnodes;
    uint64_t port, size;
    double timeout;
    int mode;
    int cb_calls;
    const char *cb_last;
};

static struct vals v;
static char errbuf[1024], outbuf[8192];

static const char *const modes[] = {"auto", "required", "off", NULL};

static int pair_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val)
{
    struct vals *w = p->ud;

    if (!strchr(val, ':'))
        return rdzv_opt_bad(p, o, val, "expected N or MIN:MAX");
    w->cb_calls++;
    w->cb_last = val;
    return 0;
}

static int optarg_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val)
{
    struct vals *w = p->ud;

    w->cb_calls++;
    w->cb_last = val ? val : "(none)";
    return 0;
}

static const struct rdzv_opt table[] = {
    {.kind = RDZV_OPT_SECTION, .help = "Rendezvous:"},
    {.kind = RDZV_OPT_INT, .name = "nnodes", .dest = &v.nnodes, .imin = 1, .imax = 100,
     .metavar = "N", .help = "nodes"},
    {.kind = RDZV_OPT_STRING, .name = "endpoint", .alias = "rdzv-endpoint", .short_name = 'e',
     .dest = &v.endpoint, .metavar = "HOST:PORT", .help = "where\nsecond line"},
    {.kind = RDZV_OPT_STRING, .name = "rdzv-id", .dest = &v.run_id, .metavar = "ID",
     .help = "job id", .env = "TOPT_ID *"},
    {.kind = RDZV_OPT_STRING, .name = "token-file", .dest = &v.token, .metavar = "FILE",
     .help = "secret", .env = "* TOPT_FALLBACK_TOKEN"},
    {.kind = RDZV_OPT_FLAG, .name = "standalone", .dest = &v.standalone, .help = "one node"},
    {.kind = RDZV_OPT_FLAG, .name = "verbose", .short_name = 'v', .dest = &v.verbose,
     .help = "more"},
    {.kind = RDZV_OPT_UINT, .name = "port", .short_name = 'p', .dest = &v.port, .umin = 0,
     .umax = 65535, .seen = &v.port_seen, .metavar = "N", .what = "expected 0..65535",
     .help = "port"},
    {.kind = RDZV_OPT_SIZE, .name = "max-frame", .dest = &v.size, .umin = 1, .metavar = "N",
     .help = "bytes"},
    {.kind = RDZV_OPT_DOUBLE, .name = "connect-timeout", .dest = &v.timeout, .dmin = 0,
     .dmax = 100, .metavar = "SEC", .help = "seconds"},
    {.kind = RDZV_OPT_ENUM, .name = "nccl", .dest = &v.mode, .choices = modes, .help = "ids"},
    {.kind = RDZV_OPT_CALLBACK, .name = "pair", .cb = pair_cb, .metavar = "A:B",
     .help = "a pair"},
    {.kind = RDZV_OPT_CALLBACK, .name = "local-rank", .short_name = 'L', .cb = optarg_cb,
     .flags = RDZV_OPT_F_OPTARG, .metavar = "STYLE", .help = "optional value"},
    {.kind = RDZV_OPT_CALLBACK, .name = "secret-knob", .cb = pair_cb, .flags = RDZV_OPT_F_HIDDEN,
     .help = "hidden"},
    RDZV_OPT_HELP_ENTRY("show this help"),
    RDZV_OPT_VERSION_ENTRY('V', "show the version"),
    {0},
};

static const char *const env_names[] = {"TOPT_NNODES", "PET_NNODES", "TOPT_ID", "TOPT_RDZV_ID",
                                        "TOPT_TOKEN_FILE", "TOPT_FALLBACK_TOKEN",
                                        "TOPT_STANDALONE", "TOPT_PORT", "TOPT_HELP",
                                        "TOPT_VERSION", "TOPT_ENDPOINT", "PET_ENDPOINT",
                                        "PET_RDZV_ENDPOINT"};

/* Parse argv (NULL-terminated list after the program name) with a fresh value set. */
static int parse(unsigned flags, int *ind, ...)
{
    static char *argv[32];
    struct rdzv_opt_prog p = {
        .name = "prog",
        .env_prefix = "TOPT PET",
        .usage = "Usage: prog [OPTIONS]\n",
        .footer = "Footer.\n",
        .version = "1.0",
        .opts = table,
        .flags = flags,
        .ud = &v,
    };
    FILE *out = fmemopen(outbuf, sizeof(outbuf), "w");
    FILE *err = fmemopen(errbuf, sizeof(errbuf), "w");
    va_list ap;
    int argc = 1, r, dummy;

    ASSERT_NOT_NULL(out);
    ASSERT_NOT_NULL(err);
    memset(outbuf, 0, sizeof(outbuf));
    memset(errbuf, 0, sizeof(errbuf));
    p.out = out;
    p.err = err;
    memset(&v, 0, sizeof(v));
    v.mode = -1;
    argv[0] = "prog";
    va_start(ap, ind);
    for (char *a; (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    r = rdzv_opt_parse(&p, argc, argv, ind ? ind : &dummy);
    fclose(out);
    fclose(err);
    return r;
}

static void clear_env(void)
{
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(env_names); i++)
        unsetenv(env_names[i]);
}

static void test_spellings(void)
{
    int ind;

    ASSERT_EQ(parse(0, &ind, "--rdzv-endpoint", "h:1", "--nnodes=3", "--standalone", NULL), 0);
    ASSERT_TRUE(strcmp(v.endpoint, "h:1") == 0);
    ASSERT_EQ(v.nnodes, 3);
    ASSERT_TRUE(v.standalone);
    ASSERT_EQ(ind, 5);
    /* The underscore spelling, for every long option and alias. */
    ASSERT_EQ(parse(0, &ind, "--rdzv_endpoint=h:2", "--rdzv_id", "j", "--max_frame", "1K",
                    "--connect_timeout=2.5", NULL), 0);
    ASSERT_TRUE(strcmp(v.endpoint, "h:2") == 0);
    ASSERT_TRUE(strcmp(v.run_id, "j") == 0);
    ASSERT_EQ(v.size, 1024);
    ASSERT_TRUE(v.timeout == 2.5);
    /* Unambiguous prefixes, as getopt_long and argparse take them. */
    ASSERT_EQ(parse(0, NULL, "--stand", "--nn", "2", NULL), 0);
    ASSERT_TRUE(v.standalone);
    ASSERT_EQ(v.nnodes, 2);
    ASSERT_EQ(parse(0, NULL, "--n", "2", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "prog: ambiguous option '--n' (see prog --help)"));
}

static void test_short(void)
{
    ASSERT_EQ(parse(0, NULL, "-p80", "-e", "x:1", "-v", NULL), 0);
    ASSERT_EQ(v.port, 80);
    ASSERT_TRUE(v.port_seen);
    ASSERT_TRUE(strcmp(v.endpoint, "x:1") == 0);
    ASSERT_TRUE(v.verbose);
    ASSERT_EQ(parse(0, NULL, "-vp", "81", NULL), 0);
    ASSERT_TRUE(v.verbose);
    ASSERT_EQ(v.port, 81);
    ASSERT_EQ(parse(0, NULL, "-x", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "prog: unknown option '-x' (see prog --help)"));
}

static void test_end_of_options(void)
{
    int ind;

    /* "--" ends the options; what follows is left for the caller. */
    ASSERT_EQ(parse(0, &ind, "--standalone", "--", "--nnodes", "2", NULL), 0);
    ASSERT_EQ(ind, 3);
    ASSERT_EQ(v.nnodes, 0);
    /* Stop at the first argument (a script, a command): its own options stay its own. */
    ASSERT_EQ(parse(RDZV_OPT_STOP_AT_ARG, &ind, "--nnodes", "2", "train.py", "--nnodes", "9",
                    NULL), 0);
    ASSERT_EQ(ind, 3);
    ASSERT_EQ(v.nnodes, 2);
    /* Without it, options after an argument are still read; the argument is reported. */
    ASSERT_EQ(parse(0, &ind, "extra", "--nnodes", "5", NULL), 0);
    ASSERT_EQ(ind, 1);
    ASSERT_EQ(v.nnodes, 5);
    ASSERT_EQ(parse(0, &ind, NULL), 0);
    ASSERT_EQ(ind, 1);
    /* A lone "-" is an argument. */
    ASSERT_EQ(parse(RDZV_OPT_STOP_AT_ARG, &ind, "-", NULL), 0);
    ASSERT_EQ(ind, 1);
}

static void test_kinds_and_errors(void)
{
    ASSERT_EQ(parse(0, NULL, "--nnodes", "0", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "prog: invalid --nnodes '0': expected a whole number from 1 to "
                               "100 (see prog --help)\n") == 0);
    ASSERT_EQ(parse(0, NULL, "--port", "70000", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "prog: invalid --port '70000': expected 0..65535 (see prog "
                               "--help)\n") == 0);
    ASSERT_EQ(parse(0, NULL, "--max-frame", "0", NULL), -EINVAL);
    ASSERT_EQ(parse(0, NULL, "--max-frame", "2M", NULL), 0);
    ASSERT_EQ(v.size, 2u << 20);
    ASSERT_EQ(parse(0, NULL, "--connect-timeout", "101", NULL), -EINVAL);
    ASSERT_EQ(parse(0, NULL, "--connect-timeout", "", NULL), -EINVAL);
    ASSERT_EQ(parse(0, NULL, "--connect-timeout", "nan", NULL), -EINVAL);
    ASSERT_EQ(parse(0, NULL, "--nccl", "off", NULL), 0);
    ASSERT_EQ(v.mode, 2);
    ASSERT_EQ(parse(0, NULL, "--nccl", "on", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "expected auto, required or off"));
    ASSERT_EQ(parse(0, NULL, "--pair", "1:2", "--pair=3:4", NULL), 0);
    ASSERT_EQ(v.cb_calls, 2);
    ASSERT_TRUE(strcmp(v.cb_last, "3:4") == 0);
    ASSERT_EQ(parse(0, NULL, "--pair", "x", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "prog: invalid --pair 'x': expected N or MIN:MAX (see prog "
                               "--help)\n") == 0);
    ASSERT_EQ(parse(0, NULL, "--nnodes", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "missing value for '--nnodes'"));
    ASSERT_EQ(parse(0, NULL, "--standalone=1", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "--standalone takes no value"));
    ASSERT_EQ(parse(0, NULL, "--bogus", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "prog: unknown option '--bogus' (see prog --help)\n") == 0);
    /* Every error is one line. */
    ASSERT_EQ(parse(0, NULL, "--nnodes=x", NULL), -EINVAL);
    ASSERT_EQ(strchr(errbuf, '\n') - errbuf, (long)strlen(errbuf) - 1);
}

static void test_environment(void)
{
    clear_env();
    setenv("TOPT_NNODES", "4", 1);
    setenv("PET_ENDPOINT", "pet:1", 1);
    setenv("TOPT_STANDALONE", "1", 1);
    setenv("TOPT_HELP", "1", 1); /* never from the environment */
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_EQ(v.nnodes, 4);
    ASSERT_TRUE(strcmp(v.endpoint, "pet:1") == 0);
    ASSERT_TRUE(v.standalone);
    ASSERT_EQ(outbuf[0], '\0');
    /* The first prefix wins over the second; the command line over both. */
    setenv("TOPT_ENDPOINT", "topt:1", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.endpoint, "topt:1") == 0);
    ASSERT_EQ(parse(0, NULL, "--nnodes", "7", "-e", "cli:1", NULL), 0);
    ASSERT_EQ(v.nnodes, 7);
    ASSERT_TRUE(strcmp(v.endpoint, "cli:1") == 0);
    /* A flag set to 0/false/no stays off; an empty variable counts as unset. */
    setenv("TOPT_STANDALONE", "False", 1);
    setenv("TOPT_NNODES", "", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_FALSE(v.standalone);
    ASSERT_EQ(v.nnodes, 0);
    /* An explicit list: TOPT_ID before the derived TOPT_RDZV_ID; a fallback after "*". */
    setenv("TOPT_RDZV_ID", "derived", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.run_id, "derived") == 0);
    setenv("TOPT_ID", "short", 1);
    setenv("TOPT_FALLBACK_TOKEN", "fb", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.run_id, "short") == 0);
    ASSERT_TRUE(strcmp(v.token, "fb") == 0);
    setenv("TOPT_TOKEN_FILE", "own", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.token, "own") == 0);
    /* Aliases derive names only when the program asks for it. */
    unsetenv("TOPT_ENDPOINT");
    unsetenv("PET_ENDPOINT");
    setenv("PET_RDZV_ENDPOINT", "alias:1", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_NULL(v.endpoint);
    ASSERT_EQ(parse(RDZV_OPT_ENV_ALIASES, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.endpoint, "alias:1") == 0);
    setenv("PET_ENDPOINT", "name:1", 1);
    ASSERT_EQ(parse(RDZV_OPT_ENV_ALIASES, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.endpoint, "name:1") == 0);
    /* A bad value names the variable. */
    setenv("TOPT_PORT", "x", 1);
    ASSERT_EQ(parse(0, NULL, NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "invalid --port 'x'"));
    ASSERT_NOT_NULL(strstr(errbuf, "(from the environment variable TOPT_PORT)"));
    clear_env();
}

static void test_help(void)
{
    clear_env();
    ASSERT_EQ(parse(0, NULL, "--help", "--bogus", NULL), 1);
    ASSERT_TRUE(strncmp(outbuf, "Usage: prog [OPTIONS]\n\nRendezvous:\n", 35) == 0);
    ASSERT_NOT_NULL(strstr(outbuf, "\n      --nnodes N            nodes\n"));
    ASSERT_NOT_NULL(strstr(outbuf, "\n  -e, --endpoint, --rdzv-endpoint HOST:PORT\n"
                                   "                            where\n"
                                   "                            second line\n"));
    ASSERT_NOT_NULL(strstr(outbuf, "--nccl auto|required|off"));
    ASSERT_NULL(strstr(outbuf, "secret-knob"));
    ASSERT_NOT_NULL(strstr(outbuf, "\nFooter.\n"));
    ASSERT_EQ(parse(0, NULL, "-h", NULL), 1);
    ASSERT_EQ(parse(0, NULL, "-V", NULL), 1);
    ASSERT_TRUE(strcmp(outbuf, "prog 1.0\n") == 0);
    /* --help-options: every visible long name and alias, nothing else. */
    ASSERT_EQ(parse(0, NULL, "--help-options", NULL), 1);
    ASSERT_TRUE(strcmp(outbuf, "--nnodes\n--endpoint\n--rdzv-endpoint\n--rdzv-id\n--token-file\n"
                               "--standalone\n--verbose\n--port\n--max-frame\n"
                               "--connect-timeout\n--nccl\n--pair\n--local-rank\n--help\n"
                               "--version\n") == 0);
}

static void test_optional_value(void)
{
    int ind;

    /* Without "=" the next argument is not taken: it is the script. */
    ASSERT_EQ(parse(RDZV_OPT_STOP_AT_ARG, &ind, "--local-rank", "train.py", NULL), 0);
    ASSERT_EQ(ind, 2);
    ASSERT_TRUE(strcmp(v.cb_last, "(none)") == 0);
    ASSERT_EQ(parse(0, NULL, "--local_rank=underscore", NULL), 0);
    ASSERT_TRUE(strcmp(v.cb_last, "underscore") == 0);
    ASSERT_EQ(parse(0, NULL, "-Lx", "-L", NULL), 0);
    ASSERT_EQ(v.cb_calls, 2);
    ASSERT_TRUE(strcmp(v.cb_last, "(none)") == 0);
    ASSERT_EQ(parse(0, NULL, "--help", NULL), 1);
    ASSERT_NOT_NULL(strstr(outbuf, "  -L, --local-rank[=STYLE]"));
}

static void test_set_by_name(void)
{
    struct rdzv_opt_prog p = {.name = "prog", .opts = table, .err = stderr, .ud = &v};

    memset(&v, 0, sizeof(v));
    ASSERT_EQ(rdzv_opt_set(&p, "nnodes", "9"), 0);
    ASSERT_EQ(v.nnodes, 9);
    ASSERT_EQ(rdzv_opt_set(&p, "rdzv_endpoint", "a:1"), -ENOENT); /* aliases: by their name */
    ASSERT_EQ(rdzv_opt_set(&p, "nn", "9"), -ENOENT);              /* no prefixes here */
    ASSERT_EQ(rdzv_opt_set(&p, "standalone", NULL), 0);
    ASSERT_TRUE(v.standalone);
}

int main(void)
{
    TEST(test_spellings);
    TEST(test_short);
    TEST(test_end_of_options);
    TEST(test_kinds_and_errors);
    TEST(test_environment);
    TEST(test_help);
    TEST(test_optional_value);
    TEST(test_set_by_name);
    return tap_done();
}
