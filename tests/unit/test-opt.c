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

#include "common/rdzv-log.h"
#include "common/rdzv-opt.h"
#include "common/rdzv-util.h"
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
    /* The message names the options the prefix fits, so the user picks one. */
    ASSERT_NOT_NULL(strstr(errbuf, "prog: ambiguous option '--n': --nnodes or --nccl? (see "
                                   "prog --help)"));
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
    /* A name within two edits of one option (a letter more, less, changed or two swapped; '_'
     * as '-') is suggested. */
    ASSERT_EQ(parse(0, NULL, "--nndoes", "2", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "prog: unknown option '--nndoes'; did you mean --nnodes? (see "
                               "prog --help)\n") == 0);
    ASSERT_EQ(parse(0, NULL, "--nnodez=2", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "'--nnodez=2'; did you mean --nnodes?"));
    /* The same for any list of words (rdzvctl's commands): none when two are as near, or none
     * is near enough (1 edit for a word of 4 bytes or less). */
    static const char *const cmds[] = {"status", "list", "get", "set", "num-keys", NULL};
    ASSERT_TRUE(strcmp(rdzv_opt_nearest("stauts", cmds), "status") == 0);
    ASSERT_TRUE(strcmp(rdzv_opt_nearest("lsit", cmds), "list") == 0);
    ASSERT_TRUE(strcmp(rdzv_opt_nearest("num_keys", cmds), "num-keys") == 0);
    ASSERT_TRUE(rdzv_opt_nearest("jet", cmds) == NULL); /* get or set */
    ASSERT_TRUE(rdzv_opt_nearest("lose", cmds) == NULL && rdzv_opt_nearest("", cmds) == NULL);
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


/* A second table for the kinds' other wordings, the ready-made callbacks, PREFER, and --help's
 * layout choices (no usage, no footer, no metavar, no help text, a name too long for a line). */
static struct {
    int64_t level;
    double ratio, scale;
    int color, big;
    const char *plain, *rate, *logdir, *envlong;
    bool quiet, quiet_seen;
    uint16_t lport, sport;
    enum rdzv_log_level lvl;
} x;

static const char *const colors[] = {"red", "green", NULL};
#define LONGCHOICE "choice-with-a-rather-long-name-to-fill-the-buffer"
static const char *const bigs[] = {LONGCHOICE "-1", LONGCHOICE "-2", LONGCHOICE "-3", NULL};
#define LONGNAME                                                                                   \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
/* 95 characters: what a 96-byte name buffer would cut a longer variable name to. */
#define ENV95                                                                                      \
    "XOPT_LONG_ENV_NAME_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX" \
    "XXX"

static const struct rdzv_opt xtable[] = {
    {.kind = RDZV_OPT_INT, .name = "level", .dest = &x.level, .imin = 0, .imax = 9,
     .what = "a digit", .help = "level"},
    {.kind = RDZV_OPT_DOUBLE, .name = "ratio", .dest = &x.ratio, .flags = RDZV_OPT_F_PREFER,
     .help = "any number >= 0"},
    {.kind = RDZV_OPT_STRING, .name = "rate-limit", .dest = &x.rate, .flags = RDZV_OPT_F_PREFER,
     .help = "a second PREFER one"},
    {.kind = RDZV_OPT_DOUBLE, .name = "scale", .dest = &x.scale, .dmin = 1, .dmax = 2,
     .what = "a scale"},
    {.kind = RDZV_OPT_ENUM, .name = "color", .dest = &x.color, .choices = colors,
     .what = "a color"},
    {.kind = RDZV_OPT_ENUM, .name = "big", .dest = &x.big, .choices = bigs},
    {.kind = RDZV_OPT_STRING, .name = "plain", .dest = &x.plain},
    {.kind = RDZV_OPT_STRING, .name = "log-dir", .dest = &x.logdir, .flags = RDZV_OPT_F_PREFER},
    {.kind = RDZV_OPT_CALLBACK, .name = "log-level", .cb = rdzv_opt_log_level_cb, .dest = &x.lvl},
    {.kind = RDZV_OPT_CALLBACK, .name = "listen-port", .cb = rdzv_opt_port_cb, .dest = &x.lport},
    {.kind = RDZV_OPT_CALLBACK, .name = "store-port", .cb = rdzv_opt_port_cb, .dest = &x.sport,
     .what = "a port"},
    {.kind = RDZV_OPT_FLAG, .name = "quiet", .dest = &x.quiet, .seen = &x.quiet_seen,
     .flags = RDZV_OPT_F_NOENV},
    {.kind = RDZV_OPT_STRING, .name = "env-long", .dest = &x.envlong,
     .env = " " ENV95 "Y  XOPT_SHORT"},
    {.kind = RDZV_OPT_FLAG, .name = LONGNAME, .alias = "b", .dest = &x.quiet, .help = "long"},
    RDZV_OPT_VERSION_ENTRY('V', "version"),
    {0},
};

/* Parse with xtable: no env prefix, no usage/footer/version, the given style. */
static int xparse(enum rdzv_opt_style style, ...)
{
    static char *argv[32];
    struct rdzv_opt_prog p = {.name = "xp", .opts = xtable, .style = style, .help_col = 12};
    FILE *out = fmemopen(outbuf, sizeof(outbuf), "w");
    FILE *err = fmemopen(errbuf, sizeof(errbuf), "w");
    va_list ap;
    int argc = 1, r, ind;

    ASSERT_NOT_NULL(out);
    ASSERT_NOT_NULL(err);
    memset(outbuf, 0, sizeof(outbuf));
    memset(errbuf, 0, sizeof(errbuf));
    p.out = out;
    p.err = err;
    memset(&x, 0, sizeof(x));
    x.color = x.big = -1;
    argv[0] = "xp";
    va_start(ap, style);
    for (char *a; (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    r = rdzv_opt_parse(&p, argc, argv, &ind);
    fclose(out);
    fclose(err);
    return r;
}

static void test_other_wordings(void)
{
    /* An INT's own .what, and the top of its range. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--level", "9", NULL), 0);
    ASSERT_EQ(x.level, 9);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--level", "10", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "xp: invalid --level '10': a digit (see xp --help)\n") == 0);
    /* rdzv-train's style. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_BAD, "--level=-1", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "xp: bad --level '-1': a digit\n") == 0);
    /* A DOUBLE without a range: any number >= 0, however large. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--ratio", "1e300", NULL), 0);
    ASSERT_TRUE(x.ratio == 1e300);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--ratio", "-0.5", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "'-0.5': expected a number >= 0 "));
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--ratio", "1e999", NULL), -EINVAL); /* ERANGE */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--ratio", "2x", NULL), -EINVAL);
    ASSERT_EQ(x.ratio, 0);
    /* A DOUBLE's range ends, and its .what. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--scale", "2", NULL), 0);
    ASSERT_TRUE(x.scale == 2);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--scale", "0.99", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "'0.99': a scale "));
    /* An ENUM's .what; a list of choices too long for the message is cut, not overrun. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--color", "green", NULL), 0);
    ASSERT_EQ(x.color, 1);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--color", "blue", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "'blue': a color "));
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_BAD, "--big", "x", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "xp: bad --big 'x': expected " LONGCHOICE "-1, "));
    ASSERT_NULL(strstr(errbuf, LONGCHOICE "-3"));
    ASSERT_EQ(strlen(errbuf), strlen("xp: bad --big 'x': \n") + 127);
    ASSERT_EQ(x.big, -1);
    /* rdzv_opt_bad() with no value at all (an OPTARG callback given none). */
    {
        struct rdzv_opt_prog p = {.name = "xp", .opts = xtable};
        FILE *err = fmemopen(errbuf, sizeof(errbuf), "w");

        ASSERT_NOT_NULL(err);
        memset(errbuf, 0, sizeof(errbuf));
        p.err = err;
        ASSERT_EQ(rdzv_opt_bad(&p, &xtable[0], NULL, "needs one"), -EINVAL);
        p.style = RDZV_OPT_STYLE_BAD;
        ASSERT_EQ(rdzv_opt_bad(&p, &xtable[0], NULL, "needs one"), -EINVAL);
        fclose(err);
        ASSERT_TRUE(strcmp(errbuf, "xp: invalid --level '': needs one (see xp --help)\n"
                                   "xp: bad --level '': needs one\n") == 0);
    }
}

static void test_ready_callbacks(void)
{
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--listen-port", "65535", "--store-port=0",
                     "--log-level", "debug", NULL), 0);
    ASSERT_EQ(x.lport, 65535);
    ASSERT_EQ(x.sport, 0);
    ASSERT_EQ(x.lvl, RDZV_LOG_DEBUG);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--listen-port", "65536", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "xp: invalid --listen-port '65536': expected 0..65535 (see xp "
                               "--help)\n") == 0);
    ASSERT_EQ(x.lport, 0);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--store-port", "-1", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "'-1': a port "));
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--log-level", "loud", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "'loud': expected error, warn, info, debug or trace "));
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--log-level", "trace", NULL), 0);
    ASSERT_EQ(x.lvl, RDZV_LOG_TRACE);
}

static void test_prefer_and_spellings(void)
{
    /* "--lo" is log-dir, log-level and long names' prefix: the one PREFER entry wins. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--lo", "/tmp/l", NULL), 0);
    ASSERT_TRUE(x.logdir && strcmp(x.logdir, "/tmp/l") == 0);
    ASSERT_EQ(x.lvl, 0);
    /* Two PREFER entries share "--ra": still ambiguous. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--ra", "1", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "xp: ambiguous option '--ra': --ratio or --rate-limit? (see xp "
                               "--help)\n") == 0);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--rati", "1", NULL), 0);
    ASSERT_TRUE(x.ratio == 1);
    /* A name with more after it is no prefix; an empty name is no option. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--levels", "1", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "xp: unknown option '--levels'; did you mean --level? (see xp "
                               "--help)\n") == 0);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--=1", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "xp: unknown option '--=1' (see xp --help)\n") == 0);
}

static void test_short_values(void)
{
    int ind;

    /* "-p=V" means V; in a cluster the '=' is part of the value. */
    ASSERT_EQ(parse(0, NULL, "-p=81", NULL), 0);
    ASSERT_EQ(v.port, 81);
    ASSERT_EQ(parse(0, NULL, "-vp=81", NULL), -EINVAL);
    ASSERT_NOT_NULL(strstr(errbuf, "invalid --port '=81'"));
    ASSERT_EQ(parse(0, NULL, "-v", "-p", NULL), -EINVAL);
    ASSERT_TRUE(strcmp(errbuf, "prog: missing value for '-p' (see prog --help)\n") == 0);
    ASSERT_TRUE(v.verbose);
    /* A flag's exit (-V) ends a cluster. */
    ASSERT_EQ(parse(0, NULL, "-Vv", NULL), 1);
    ASSERT_FALSE(v.verbose);
    /* Several arguments: the first one is reported, the options between them read. */
    ASSERT_EQ(parse(0, &ind, "a", "-v", "b", "--nnodes", "3", NULL), 0);
    ASSERT_EQ(ind, 1);
    ASSERT_TRUE(v.verbose);
    ASSERT_EQ(v.nnodes, 3);
}

static void test_environment_edges(void)
{
    clear_env();
    unsetenv("XOPT_SHORT");
    unsetenv("QUIET");
    unsetenv(ENV95);
    /* No env prefix: "*" derives nothing; NOENV is never read. */
    setenv("LEVEL", "3", 1);
    setenv("QUIET", "1", 1);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, NULL), 0);
    ASSERT_EQ(x.level, 0);
    ASSERT_FALSE(x.quiet);
    ASSERT_FALSE(x.quiet_seen);
    unsetenv("LEVEL");
    unsetenv("QUIET");
    /* A listed name longer than the name buffer is skipped, never cut to another name; leading
     * and doubled spaces separate nothing. */
    setenv(ENV95, "cut", 1);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, NULL), 0);
    ASSERT_NULL(x.envlong);
    setenv("XOPT_SHORT", "", 1); /* empty: as if unset */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, NULL), 0);
    ASSERT_NULL(x.envlong);
    setenv("XOPT_SHORT", "listed", 1);
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, NULL), 0);
    ASSERT_TRUE(x.envlong && strcmp(x.envlong, "listed") == 0);
    unsetenv(ENV95);
    unsetenv("XOPT_SHORT");
    /* A flag from the environment: "0" and "no" leave it off, anything else sets it. */
    setenv("TOPT_STANDALONE", "0", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_FALSE(v.standalone);
    setenv("TOPT_STANDALONE", "NO", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_FALSE(v.standalone);
    setenv("TOPT_STANDALONE", "yes", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_TRUE(v.standalone);
    /* An explicitly listed variable that is empty falls through to the next name. */
    setenv("TOPT_ID", "", 1);
    setenv("TOPT_RDZV_ID", "derived", 1);
    ASSERT_EQ(parse(0, NULL, NULL), 0);
    ASSERT_TRUE(strcmp(v.run_id, "derived") == 0);
    clear_env();
}

static void test_help_layout(void)
{
    const char *line;

    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "--help-options", NULL), 1);
    ASSERT_NOT_NULL(strstr(outbuf, "--" LONGNAME "\n--b\n--version\n"));
    /* No version string: the name and an empty version. */
    ASSERT_EQ(xparse(RDZV_OPT_STYLE_INVALID, "-V", NULL), 1);
    ASSERT_TRUE(strcmp(outbuf, "xp \n") == 0);
    {
        struct rdzv_opt_prog p = {.name = "xp", .opts = xtable, .help_col = 12};
        FILE *out = fmemopen(outbuf, sizeof(outbuf), "w");

        ASSERT_NOT_NULL(out);
        memset(outbuf, 0, sizeof(outbuf));
        rdzv_opt_help(&p, out);
        fclose(out);
    }
    /* No usage: the table comes first; help_col 12: text after a short label, or on the next
     * line after a long one. */
    ASSERT_TRUE(strncmp(outbuf, "      --level VALUE\n            level\n", 38) == 0);
    ASSERT_NOT_NULL(strstr(outbuf, "\n      --big " LONGCHOICE "-1|"));
    /* A value and no metavar: VALUE; no help text: an empty line. */
    ASSERT_NOT_NULL(strstr(outbuf, "\n      --plain VALUE\n            \n"));
    /* A label too long for its buffer is cut (alias and all), not overrun. */
    line = strstr(outbuf, "\n      --aaaa");
    ASSERT_NOT_NULL(line);
    ASSERT_EQ(strcspn(line + 1, "\n"), 159);
    ASSERT_NULL(strstr(outbuf, ", --b"));
    /* No footer: the last option ends it. */
    {
        static const char tail[] = "\n  -V, --version\n            version\n";

        ASSERT_TRUE(strlen(outbuf) > sizeof(tail));
        ASSERT_TRUE(strcmp(outbuf + strlen(outbuf) - (sizeof(tail) - 1), tail) == 0);
    }
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
    TEST(test_other_wordings);
    TEST(test_ready_callbacks);
    TEST(test_prefer_and_spellings);
    TEST(test_short_values);
    TEST(test_environment_edges);
    TEST(test_help_layout);
    return tap_done();
}
