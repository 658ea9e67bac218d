/* SPDX-License-Identifier: Apache-2.0 */
/* agent-cmd.h: a worker's command line, built the way torchrun (torch.distributed.run
 * config_from_args) and torch.distributed.launch build it:
 *   default       $PYTHON_EXEC -u SCRIPT [LR] ARGS...
 *   module        $PYTHON_EXEC -u -m MODULE [LR] ARGS...
 *   no_python     COMMAND [LR] ARGS...                (an error together with module)
 *   run_path      $PYTHON_EXEC -u -c RUNPY SCRIPT [LR] ARGS...   (wins over module and no_python,
 *                 as in torchrun; RUNPY runs SCRIPT with runpy.run_path as __main__, with
 *                 sys.argv = [SCRIPT, [LR,] ARGS...] and the script's directory first on sys.path,
 *                 exactly what `python SCRIPT ARGS` gives the script)
 * where $PYTHON_EXEC is python_exec, or "python3" (looked up in PATH by the spawner) when NULL,
 * and LR is the local-rank argument of torch.distributed.launch without --use-env: "--local-rank=N"
 * (torch >= 2.0) or "--local_rank=N" (torch 1.x). As in torch, LR comes right after the script
 * (or module, or command), BEFORE the script's own arguments. torch's launch refuses LR with
 * --no-python; here the command gets it too.
 *
 * A pure function: no I/O, no globals, no logging; the caller prints the message of an error.
 *
 * Ownership: a struct agent_cmd owns its argv array and the local-rank argument (a buffer inside
 * the struct: do not copy the struct, argv points into it); every other string is borrowed from
 * the agent_cmd_in given to agent_cmd_build(), which must outlive it. Errors: negative errno.
 * Threads: any; one agent_cmd per thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* How a worker is told its local rank on the command line (besides LOCAL_RANK). */
enum agent_local_rank_arg {
    AGENT_LOCAL_RANK_NONE,       /* torchrun, launch --use-env: the environment only */
    AGENT_LOCAL_RANK_DASH,       /* --local-rank=N, torch >= 2.0's launch */
    AGENT_LOCAL_RANK_UNDERSCORE, /* --local_rank=N, torch 1.x's launch */
    _AGENT_LOCAL_RANK_MAX,
};

struct agent_cmd_in {
    const char *python_exec; /* PYTHON_EXEC; NULL: "python3" */
    bool module;             /* -m: cmd[0] is a module */
    bool no_python;          /* cmd[0] is executed directly */
    bool run_path;           /* runpy.run_path(cmd[0]) in the interpreter */
    const char *const *cmd;  /* script (module, command) then its arguments; NULL-terminated */
    enum agent_local_rank_arg pass_local_rank;
    unsigned local_rank; /* for the local-rank argument */
};

#define AGENT_CMD_RANK_ARG_MAX 32 /* "--local-rank=4294967295" and its NUL fit */
#define AGENT_CMD_STANDBY_ARGS 16 /* a command's interpreter options a warm standby takes */

struct agent_cmd {
    char **argv;           /* NULL-terminated, for uv_spawn()/execvp() */
    size_t argc;           /* entries before the NULL */
    size_t rank_index;     /* index of the local-rank argument in argv, 0 when there is none */
    const char *rank_flag; /* "--local-rank" or "--local_rank", or NULL */
    char rank_arg[AGENT_CMD_RANK_ARG_MAX]; /* argv[rank_index] points here */
    size_t script_index;   /* with the interpreter: index of the script (module) in argv, else 0 */
    bool module;           /* ... and it is a module (-m) */
    /* With the interpreter: the command of a warm standby (python/rdzv/standby.py), the same
     * interpreter and options: $PYTHON_EXEC -u -c PROGRAM (a command that is itself an
     * interpreter, agent_cmd_warm_raw: PYTHON [OPTIONS] -c PROGRAM); else NULL. */
    char *standby_argv[AGENT_CMD_STANDBY_ARGS + 4];
};

/* The python -c program of a warm standby (exposed for tests). */
extern const char agent_cmd_standby[];

/* The python -c program of run_path (exposed for tests). */
extern const char agent_cmd_runpy[];

/* Build c from in. Returns 0, -EINVAL (then *ret_msg, if not NULL, says why, a static string: an
 * empty command, module with no_python, a pass_local_rank out of range) or -ENOMEM. c must be
 * zeroed or freed before; on error it is left zeroed. */
int agent_cmd_build(struct agent_cmd *c, const struct agent_cmd_in *in, const char **ret_msg);

/* Rewrite the local-rank argument for local_rank (no-op when there is none): how one argv serves
 * every worker of a group with no allocation per worker. */
void agent_cmd_set_local_rank(struct agent_cmd *c, unsigned local_rank);

/* Format flag=local_rank into buf (AGENT_CMD_RANK_ARG_MAX bytes). */
void agent_cmd_format_rank(char *buf, const char *flag, unsigned local_rank);

/* The fingerprint of c's command, AGENT_CMD_FINGERPRINT_HEX lowercase hex characters (FNV-1a
 * over its arguments, the local-rank argument's value left out): the same for every worker and
 * every agent that runs the same command, as JOIN's command tells rdzvd. */
#define AGENT_CMD_FINGERPRINT_HEX 16
void agent_cmd_fingerprint(const struct agent_cmd *c, char out[AGENT_CMD_FINGERPRINT_HEX + 1]);

/* Whether argv (NULL-terminated) runs Python: its program's name begins with "python"
 * (python3, python3.11) or ends in ".py" (a script with its #! line), after an `env` and its
 * options and NAME=VALUE words. rdzv-agent's Python hooks go only into such a worker (and
 * into one the agent runs with $PYTHON_EXEC itself: a script, -m, --run-path). */
bool agent_cmd_is_python(const char *const *argv);

/* A command run as given (after --, --no-python) that is a Python interpreter with a script or
 * -m MODULE: "python3 train.py", "/usr/bin/python3 -u -W ignore train.py", "venv/bin/python -m
 * pkg.train". Sets c's standby_argv (the interpreter and its options, -c PROGRAM), script_index
 * and module, as agent_cmd_build does for the interpreter it runs itself. Returns 0; -ENOENT: the
 * command is not an interpreter with a script (*why: NULL); -EINVAL: one that a standby cannot
 * run as given, *why saying which option and why (a static string: "-c runs a command, not a
 * script"). */
int agent_cmd_warm_raw(struct agent_cmd *c, const char **why);

/* Free what c owns; c may be zeroed or already freed. */
void agent_cmd_free(struct agent_cmd *c);
