/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-opt.h: one table-driven command-line and environment option parser for every program
 * (rdzvd, rdzv-agent, rdzvctl, rdzv-train).
 *
 * A program describes its options once, in a table of struct rdzv_opt ending with {0}; the
 * parser reads the environment and argv from it, writes each value where the entry says, and
 * prints --help (and the hidden --help-options, one long option per line, which the man page
 * test compares with deploy/man/) from the same table.
 *
 * Spellings accepted for a long option "max-conns": --max-conns, --max_conns (torchrun's
 * spelling: '_' and '-' are the same between words, in aliases too), any unambiguous prefix
 * (as getopt_long and argparse accept; see RDZV_OPT_F_PREFER), "--max-conns=V" and
 * "--max-conns V". A short option: "-p V", "-pV", "-p=V" (V, as argparse reads it), flags
 * clustered ("-hV"). "--" ends the options. With
 * RDZV_OPT_STOP_AT_ARG the first argument that is not an option ends them too (a command and
 * its own arguments follow, as for torchrun's script); without it, options may follow
 * arguments and the caller is told where the first argument is.
 *
 * Environment: each option with a value (and each flag) is also read from environment
 * variables, before argv, so that the command line wins. The names are the entry's .env list
 * (space separated, "*" standing for the derived names), by default "*": for every prefix in
 * the program's env_prefix, PREFIX_ + the long name upper-cased with '-' as '_'
 * (RDZVD_MAX_CONNS), and with RDZV_OPT_ENV_ALIASES the alias's too. The first non-empty one
 * wins. A flag is set unless the value is 0, false
 * or no.
 *
 * Ownership: tables, names and the program description are the caller's and must outlive the
 * call; string options store pointers into argv or the environment (not copied).
 * Errors: the parse functions return 0, 1 when the program should exit successfully now
 * (--help, --version, --help-options, or a callback that returned 1), or -EINVAL after
 * printing one clear line to the program's err stream (stderr by default) naming the program
 * and the option; a bad value from the environment adds a line naming the variable.
 * Threads: no global state; call from main() (any thread) before the program's loop runs;
 * values are written through the table's pointers, so one table is parsed by one caller at once.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct rdzv_opt;
struct rdzv_opt_prog;

/* A CALLBACK option's handler: val is NULL for an RDZV_OPT_F_NOARG one. Returns 0, 1 (exit
 * successfully now) or a negative errno after printing a message (rdzv_opt_bad() does). */
typedef int (*rdzv_opt_cb)(const struct rdzv_opt_prog *p, const struct rdzv_opt *o,
                           const char *val);

enum rdzv_opt_kind {
    RDZV_OPT_END = 0,  /* ends a table ({0}) */
    RDZV_OPT_SECTION,  /* not an option: a heading in --help (.help is the title) */
    RDZV_OPT_FLAG,     /* bool *dest = true */
    RDZV_OPT_STRING,   /* const char **dest = the argument */
    RDZV_OPT_INT,      /* int64_t *dest, optional sign, imin..imax */
    RDZV_OPT_UINT,     /* uint64_t *dest, umin..umax */
    RDZV_OPT_SIZE,     /* uint64_t *dest with an optional K/M/G/KiB/MiB/GiB suffix, umin..umax */
    RDZV_OPT_DOUBLE,   /* double *dest, dmin..dmax */
    RDZV_OPT_ENUM,     /* int *dest = index of the argument in .choices */
    RDZV_OPT_CALLBACK, /* .cb(p, o, val); .dest is the callback's to use */
    RDZV_OPT_HELP,     /* prints --help from the table; the parse returns 1 */
    RDZV_OPT_VERSION,  /* prints "NAME VERSION" (the program's); the parse returns 1 */
};

enum {
    RDZV_OPT_F_NOARG = 1 << 0,  /* CALLBACK: takes no value */
    RDZV_OPT_F_NOENV = 1 << 1,  /* never read from the environment */
    RDZV_OPT_F_HIDDEN = 1 << 2, /* left out of --help and --help-options */
    RDZV_OPT_F_OPTARG = 1 << 3, /* CALLBACK: an optional value, only as --name=V (or -xV);
                                 * the callback gets NULL without one (torch.distributed.launch's
                                 * --pass-local-rank[=underscore]) */
    RDZV_OPT_F_PREFER = 1 << 4, /* a prefix that several options share means this one when it
                                 * is the only PREFER one among them (rdzv-agent: torchrun's
                                 * options, so that "--lo" is --log-dir as in torchrun) */
};

struct rdzv_opt {
    enum rdzv_opt_kind kind;
    const char *name;      /* long name, hyphen form, without "--" */
    const char *alias;     /* a second long name (same meaning; the env uses .name), or NULL */
    char short_name;       /* 'p' for -p, or 0 */
    unsigned flags;        /* RDZV_OPT_F_* */
    void *dest;            /* where the value goes (see the kind) */
    bool *seen;            /* if set: becomes true when the option is given (env or argv) */
    int64_t imin, imax;    /* INT range */
    uint64_t umin, umax;   /* UINT and SIZE range; umax 0 means no upper bound */
    double dmin, dmax;     /* DOUBLE range; both 0 means any number >= 0 */
    const char *const *choices; /* ENUM: NULL-terminated */
    rdzv_opt_cb cb;        /* CALLBACK */
    const char *metavar;   /* shown in --help after the name ("N", "FILE") */
    const char *help;      /* --help text; '\n' starts an indented continuation line */
    const char *what;      /* what a bad value should have been (the error's tail), or the
                            * parser's own wording from the range / choices */
    const char *env;       /* environment names (see above); NULL: "*"; "": none */
    char *typed; /* if set (RDZV_OPT_TYPED_MAX bytes): how the user named the option once given
                  * ("--master_addr": its name or alias as they spelled it, '_' between words
                  * if they typed one; "-p"; or the environment variable), "" until then, for
                  * the program's later messages */
};

/* The longest name an option is given by, as typed ("--" or a variable name included). */
#define RDZV_OPT_TYPED_MAX 64

/* How a bad value is reported: "PROG: invalid --OPT 'VAL': WHAT (see PROG --help)" (rdzvd,
 * rdzv-agent, rdzvctl) or "PROG: bad --OPT 'VAL': WHAT" (rdzv-train, whose tests hold it). */
enum rdzv_opt_style { RDZV_OPT_STYLE_INVALID, RDZV_OPT_STYLE_BAD };

enum {
    RDZV_OPT_STOP_AT_ARG = 1 << 0, /* the first non-option argument ends the options */
    RDZV_OPT_ENV_ALIASES = 1 << 1, /* derive env names from aliases too, after the name's
                                    * (PET_NPROC_PER_NODE for "nproc" alias "nproc-per-node") */
};

struct rdzv_opt_prog {
    const char *name;         /* "rdzvd": starts every message */
    const char *env_prefix;   /* "RDZVD", or "RDZV PET": earlier prefixes win */
    const char *usage;        /* --help's first lines, up to the options */
    const char *footer;       /* --help's last lines, or NULL */
    const char *version;      /* for RDZV_OPT_VERSION: "0.1.0" */
    const struct rdzv_opt *opts;
    enum rdzv_opt_style style;
    unsigned flags;           /* RDZV_OPT_STOP_AT_ARG */
    unsigned help_col;        /* column of the help text (default 28) */
    void *ud;                 /* for callbacks */
    char *spelled; /* if set (RDZV_OPT_TYPED_MAX bytes): the option being read, as the user named
                    * it; the parser's messages about a value (rdzv_opt_bad) say it so */
    FILE *out, *err;          /* NULL: stdout, stderr */
};

/* An ambiguous prefix's error names at most this many of the options it fits. */
#define RDZV_OPT_AMBIGUOUS_MAX 8

/* The usual -h/--help and --version entries (-V too where short is 'V'), never from the
 * environment. */
#define RDZV_OPT_HELP_ENTRY(text)                                                                  \
    {.kind = RDZV_OPT_HELP, .name = "help", .short_name = 'h', .flags = RDZV_OPT_F_NOENV,         \
     .help = text}
#define RDZV_OPT_VERSION_ENTRY(letter, text)                                                       \
    {.kind = RDZV_OPT_VERSION, .name = "version", .short_name = letter,                           \
     .flags = RDZV_OPT_F_NOENV, .help = text}

/* Apply the environment, then argv[1..argc-1]. *ret_optind is set to the index of the first
 * argument that is not an option (argc if none; after "--" when that ended the options).
 * Returns 0, 1 (exit 0 now) or -EINVAL (message printed). */
int rdzv_opt_parse(const struct rdzv_opt_prog *p, int argc, char **argv, int *ret_optind);

/* The environment pass alone, then the argv pass alone (rdzv_opt_parse runs both). */
int rdzv_opt_parse_env(const struct rdzv_opt_prog *p);
int rdzv_opt_parse_argv(const struct rdzv_opt_prog *p, int argc, char **argv, int *ret_optind);

/* Apply one value to the option called name (long name, either spelling), as if it came from
 * the command line; for defaults taken from elsewhere (a scheduler's environment). */
int rdzv_opt_set(const struct rdzv_opt_prog *p, const char *name, const char *val);

/* Print the error for a bad value in the program's style. Returns -EINVAL. */
int rdzv_opt_bad(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val,
                 const char *what);

/* The one of names (NULL-terminated) nearest to typed, as an unknown option's "did you mean"
 * picks it: within 2 edits (1 for a word of 4 bytes or less; a swap of two neighbours is one,
 * '_' reads as '-'). NULL when none is that near, or two are as near. */
const char *rdzv_opt_nearest(const char *typed, const char *const *names);

/* --help: usage, the options table, the footer. */
void rdzv_opt_help(const struct rdzv_opt_prog *p, FILE *f);

/* --help-options: "--name" for each visible long name and alias, one per line. */
void rdzv_opt_list(const struct rdzv_opt_prog *p, FILE *f);

/* Ready-made CALLBACK handlers. Both report a bad value with rdzv_opt_bad() and the entry's
 * .what (or a default wording). */
/* A TCP port 0..65535 into (uint16_t *)o->dest. */
int rdzv_opt_port_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val);
/* One of the two words of o->metavar ("A|B") into (bool *)o->dest: true for B. */
int rdzv_opt_either_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val);
/* A log level (error, warn, info, debug, trace) into (enum rdzv_log_level *)o->dest. */
int rdzv_opt_log_level_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o,
                          const char *val);
