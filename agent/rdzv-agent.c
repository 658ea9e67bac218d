/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-agent.c: main(): rendezvous with rdzvd, run the local workers, exit status. */
#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <jansson.h>
#include <uv.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/front/rdzvd-daemon.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "agent/session/agent-client.h"
#include "agent/group/agent-cmd.h"
#include "agent/group/agent-gpu.h"
#include "agent/session/agent-nccl.h"
#include "agent/session/agent-host.h"
#include "agent/agent-drain.h"
#include "agent/agent-options.h"
#include "agent/group/agent-reaper.h"
#include "agent/group/agent-redirects.h"
#include "agent/session/agent-session.h"
#include "agent/session/agent-stall.h"
#include "agent/group/agent-workers.h"


struct agent {
    uv_loop_t *loop;
    struct agent_opts o;
    struct agent_session *session; /* the rendezvous with rdzvd (agent-session.h) */
    int64_t gpus_expected;         /* GPUs this node should have: its health check counts them */
    struct agent_group *group;
    struct rdzvd_daemon *embedded; /* --standalone, or an endpoint HOST:0 */
    const char *free_port_endpoint; /* HOST:0 as given */
    struct rdzv_token *token;      /* --token-file */
    uv_signal_t sigs[6];
    struct agent_stall stall;      /* the loop's longest stall (agent-stall.h) */
    char **devices;
    struct agent_cmd cmd;          /* the command as torchrun builds it (agent-cmd.h) */
    uint8_t *redirects, *tee;      /* -r / -t per local rank, or NULL */
    bool *console;                 /* --local-ranks-filter per local rank, or NULL */
    char self_exe[PATH_MAX];
    char train_path[PATH_MAX];
    char venv_python[PATH_MAX]; /* the venv's interpreter beside this binary, or "" */
    bool runs_python;           /* the workers' command starts with the interpreter */
    char hooks_dir[PATH_MAX];   /* the Python hooks' directory, when found beside this binary */
    char *train_argv[2];
    char endpoint_buf[300];
};

static const int forwarded_signals[6] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* No command: the trainer, from beside this binary (installed), the build tree, or PATH. */
static int default_worker(struct agent *a)
{
    static const char *const rel[] = {"rdzv-train", "../train/rdzv-train"};
    char dir[PATH_MAX], *slash;

    snprintf(dir, sizeof(dir), "%s", a->self_exe);
    slash = strrchr(dir, '/');
    for (unsigned i = 0; slash && i < RDZV_ARRAY_SIZE(rel); i++) {
        *slash = '\0';
        snprintf(a->train_path, sizeof(a->train_path), "%.*s/%s", PATH_MAX - 32, dir, rel[i]);
        if (access(a->train_path, X_OK) == 0)
            goto found;
    }
    if (rdzv_find_in_path("rdzv-train", a->train_path, sizeof(a->train_path)) == 0)
        goto found;
    fprintf(stderr, "rdzv-agent: no worker command, and the built-in trainer rdzv-train is not "
                    "installed (it needs gloo or CUDA at build time); give a command after --, "
                    "e.g. rdzv-agent ... -- python3 train.py\n");
    return -ENOENT;
found:
    a->train_argv[0] = a->train_path;
    a->train_argv[1] = NULL;
    a->o.argv = a->train_argv;
    log_info("no command given: running the trainer %s", a->train_path);
    return 0;
}

/* The interpreter that runs a Python script: $PYTHON_EXEC; else, when this binary is a
 * virtual environment's (DIR/python3 beside it, DIR/../pyvenv.cfg), that environment's, as
 * torchrun runs its own (sys.executable) whether or not the venv was activated; else python3
 * from PATH. */
static const char *python_for_workers(struct agent *a)
{
    char dir[PATH_MAX], cfg[PATH_MAX + 16], *slash;

    if (a->o.python_exec)
        return a->o.python_exec;
    snprintf(dir, sizeof(dir), "%s", a->self_exe);
    slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return NULL;
    *slash = '\0';
    snprintf(a->venv_python, sizeof(a->venv_python), "%.*s/python3", PATH_MAX - 16, dir);
    slash = strrchr(dir, '/');
    snprintf(cfg, sizeof(cfg), "%.*s/pyvenv.cfg", slash ? (int)(slash - dir) : 0, dir);
    if (access(a->venv_python, X_OK) == 0 && access(cfg, R_OK) == 0)
        return a->venv_python;
    a->venv_python[0] = '\0';
    return NULL;
}

/* A command before any "--" runs as torchrun runs it: $PYTHON_EXEC -u SCRIPT, -m, --no-python,
 * --run-path, and torch.distributed.launch's --local-rank=N; after "--" it runs as given (with the
 * local-rank argument too when asked for). */
static int build_command(struct agent *a)
{
    struct agent_cmd_in in = {
        .python_exec = a->o.python_exec,
        .module = a->o.module,
        .no_python = a->o.no_python || a->o.raw_cmd || a->o.argv == a->train_argv,
        .run_path = a->o.run_path && !a->o.raw_cmd,
        .cmd = (const char *const *)a->o.argv,
        .pass_local_rank = a->o.pass_local_rank,
    };
    const char *msg = NULL;
    int r;

    if (a->o.raw_cmd)
        in.module = false;
    a->runs_python = !in.no_python || in.run_path;
    if (a->runs_python)
        in.python_exec = python_for_workers(a);
    r = agent_cmd_build(&a->cmd, &in, &msg);
    if (r < 0)
        fprintf(stderr, "rdzv-agent: the command: %s\n", msg ? msg : strerror(-r));
    return r;
}

/* The directory of the Python hooks (python/rdzv/hooks: a sitecustomize.py) that a Python
 * worker gets first on its PYTHONPATH, or NULL: --python-hooks off, a command that is not
 * Python, or none installed. RDZV_PYTHON_HOOKS_DIR names it (the tests: the source tree's);
 * else it is where meson installed it, relative to this binary's directory, or in a venv
 * (pip's wheel: meson's purelib is not the venv's) BIN/../lib/python3.X/site-packages. */
static const char *python_hooks(struct agent *a)
{
    const char *dir = getenv("RDZV_PYTHON_HOOKS_DIR");
    char file[PATH_MAX + 32], *slash;
    glob_t g = {0};

    if (a->o.python_hooks_off ||
        !(a->runs_python || agent_cmd_is_python((const char *const *)a->cmd.argv)))
        return NULL;
    if (!dir || !*dir) {
        snprintf(a->hooks_dir, sizeof(a->hooks_dir), "%s", a->self_exe);
        slash = strrchr(a->hooks_dir, '/');
        if (!slash || !*RDZV_PYTHON_HOOKS_FROM_BIN)
            return NULL;
        snprintf(slash + 1, sizeof(a->hooks_dir) - (size_t)(slash + 1 - a->hooks_dir), "%s",
                 RDZV_PYTHON_HOOKS_FROM_BIN);
        dir = a->hooks_dir;
        snprintf(file, sizeof(file), "%s/sitecustomize.py", dir);
        if (access(file, R_OK) != 0) {
            snprintf(file, sizeof(file), "%.*s/../lib/python3*/site-packages/rdzv/hooks",
                     (int)(slash - a->hooks_dir), a->hooks_dir);
            if (glob(file, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0)
                snprintf(a->hooks_dir, sizeof(a->hooks_dir), "%s", g.gl_pathv[0]);
            if (g.gl_pathv)
                globfree(&g);
        }
    }
    snprintf(file, sizeof(file), "%s/sitecustomize.py", dir);
    if (access(file, R_OK) != 0) {
        log_info("no Python hooks in %s (%s): the workers report steps only themselves", dir,
                 strerror(errno));
        return NULL;
    }
    return dir;
}

/* The start log's word on the interpreter, once every check passed (a refused command line is
 * one line). */
static void log_python(const struct agent *a)
{
    if (a->runs_python && a->cmd.argv)
        log_info("workers run Python with %s (%s)", a->cmd.argv[0],
                 a->o.python_exec ? "$PYTHON_EXEC"
                 : a->venv_python[0] ? "this virtual environment's, beside rdzv-agent"
                                     : "python3 from PATH; set PYTHON_EXEC to choose");
}

/* --warm-workers: a standby per local rank when the workers are a Python script or module, run
 * by the agent's interpreter or given as an interpreter's command ("-- python3 train.py"). */
static void warm_workers(struct agent *a, struct agent_group_cfg *g)
{
    const char *why = NULL;

    if (!a->o.warm_workers)
        return;
    if (!a->runs_python && agent_cmd_warm_raw(&a->cmd, &why) < 0) {
        if (why)
            log_warn("--warm-workers: %s cannot wait in a warm standby: %s; the workers start "
                     "cold", a->cmd.argv[0], why);
        else
            log_warn("--warm-workers: the workers are not a Python script or module (a command "
                     "that is not python, rdzv-train): they start cold; give the script itself "
                     "(rdzv-agent [OPTIONS] train.py, -m MODULE, or -- python3 train.py)");
        return;
    }
    g->standby_argv = a->cmd.standby_argv;
    g->warm_argi = a->cmd.script_index;
    g->warm_module = a->cmd.module;
}

/* -r, -t and --local-ranks-filter, per local rank, now that nproc is known. */
static int output_routing(struct agent *a, struct agent_group_cfg *g)
{
    unsigned n = (unsigned)a->o.nproc;
    const char *msg = NULL;

    if (a->o.redirects) {
        if (!(a->redirects = calloc(n, 1)))
            return -ENOMEM;
        (void)agent_redirects_parse(a->o.redirects, n, a->redirects, &msg);
        g->redirects = a->redirects;
    }
    if (a->o.tee) {
        if (!(a->tee = calloc(n, 1)))
            return -ENOMEM;
        (void)agent_redirects_parse(a->o.tee, n, a->tee, &msg);
        g->tee = a->tee;
    }
    if (a->o.local_ranks_filter) {
        if (!(a->console = calloc(n, sizeof(bool))))
            return -ENOMEM;
        (void)agent_ranks_filter_parse(a->o.local_ranks_filter, n, a->console, &msg);
        g->console = a->console;
    }
    return 0;
}

static void signal_cb(uv_signal_t *h, int signum)
{
    agent_session_signal(h->data, signum);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}


/* --token-file: read it once (the embedded daemon of --standalone needs none: loopback only). */
static int load_token(struct agent *a)
{
    char err[512];

    if (!a->o.token_file || a->o.standalone || a->o.free_port)
        return 0;
    a->token = calloc(1, sizeof(*a->token));
    if (!a->token)
        return -ENOMEM;
    if (rdzv_token_load(a->o.token_file, a->token, err, sizeof(err)) < 0) {
        fprintf(stderr, "rdzv-agent: --token-file: %s\n", err);
        free(a->token);
        a->token = NULL;
        return -EINVAL;
    }
    return 0;
}

static int start_embedded(struct agent *a)
{
    struct rdzvd_config cfg = {
        .bind = "127.0.0.1",
        .port = 0,
        .legacy = RDZV_DIALECT_V20,
        .legacy_allowed = true,
        .lim = RDZV_LIMITS_DEFAULT,
        .embedded = true,
    };
    int r;

    r = rdzvd_daemon_new(a->loop, &cfg, &a->embedded);
    if (r == 0)
        r = rdzvd_daemon_listen(a->embedded);
    if (r < 0)
        return r;
    snprintf(a->endpoint_buf, sizeof(a->endpoint_buf), "127.0.0.1:%u",
             rdzvd_daemon_port(a->embedded));
    a->o.endpoint = a->endpoint_buf;
    if (a->o.free_port)
        log_info("endpoint %s: embedded rdzvd on %s (port 0: a free port, as torchrun)",
                 a->free_port_endpoint, a->o.endpoint);
    else
        log_info("standalone: embedded rdzvd on %s", a->o.endpoint);
    if (a->o.metrics_port >= 0) {
        const char *maddr = a->o.metrics_bind ? a->o.metrics_bind : "127.0.0.1";
        char where[RDZV_HOST_MAX + 16];
        uint16_t mport;

        r = rdzvd_daemon_serve_http(a->embedded, maddr, (uint16_t)a->o.metrics_port, &mport);
        if (r < 0)
            return log_error_errno(r, "--metrics-port %" PRId64 ": cannot serve the status page "
                                      "on %s (is the port taken? is --metrics-bind an address "
                                      "of this host?)", a->o.metrics_port, maddr);
        rdzv_format_hostport(where, sizeof(where), maddr, mport);
        log_info("status page on http://%s/ (also /metrics, /status.json)", where);
    }
    return 0;
}

/* --nproc gpu|auto|cpu|N with ngpus GPUs visible. Returns 0 or -EINVAL (printed). */
static int resolve_nproc(struct agent *a, int ngpus)
{
    if (a->o.nproc_arg && strcmp(a->o.nproc_arg, "gpu") == 0) {
        if (ngpus == 0) {
            fprintf(stderr, "rdzv-agent: --nproc gpu: no GPU is visible on this node "
                            "(CUDA_VISIBLE_DEVICES and /proc/driver/nvidia); give a number\n");
            return -EINVAL;
        }
        a->o.nproc = ngpus;
    } else if (a->o.nproc_arg && strcmp(a->o.nproc_arg, "auto") == 0) {
        a->o.nproc = ngpus > 0 ? ngpus : (int64_t)sysconf(_SC_NPROCESSORS_ONLN);
    } else if (a->o.nproc_arg && strcmp(a->o.nproc_arg, "cpu") == 0) {
        a->o.nproc = (int64_t)sysconf(_SC_NPROCESSORS_ONLN);
    } else if (a->o.nproc == 0) {
        a->o.nproc = 1;
    }
    return 0;
}

/* A number given to --nproc past what this node has: the GPUs visible (a GPU job: some are, and
 * NCCL is not off), else the CPUs this agent may run on. A warning, not an error: it may be meant
 * (workers that wait on I/O, a test of many ranks on a laptop). */
static void warn_nproc_past_node(const struct agent *a, int ngpus)
{
    const char *flag = a->o.deferred_typed[D_NPROC][0] ? a->o.deferred_typed[D_NPROC] : "--nproc";
    cpu_set_t set;
    int ncpu;

    if (!a->o.nproc_arg || !isdigit((unsigned char)a->o.nproc_arg[0]))
        return; /* gpu, cpu, auto: the node's own count */
    if (ngpus > 0 && a->o.nccl != RDZV_NCCL_OFF) {
        if (a->o.nproc > ngpus)
            log_warn("%s %" PRId64 " starts more workers than this node's %d GPU%s: they will "
                     "share them; give %s %d (one a GPU) unless that is meant",
                     flag, a->o.nproc, ngpus, ngpus == 1 ? "" : "s", flag, ngpus);
        return;
    }
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return;
    ncpu = CPU_COUNT(&set);
    if (ncpu > 0 && a->o.nproc > ncpu)
        log_warn("%s %" PRId64 " starts more workers than the %d CPU%s this agent may run on: "
                 "they will share them; give %s %d or fewer unless that is meant",
                 flag, a->o.nproc, ncpu, ncpu == 1 ? "" : "s", flag, ncpu);
}

/* The UUIDs of the GPUs this node's workers use, reported at JOIN (agent-gpu.h): 0, or -EINVAL
 * for a malformed RDZV_GPU_UUIDS (printed). */
static int report_gpus(struct agent *a, char **gpus, int ngpus, struct rdzv_gpu_set *ret)
{
    char err[256], first[RDZV_GPU_UUID_LEN + 1] = "";
    const char *override = getenv("RDZV_GPU_UUIDS");
    int r = agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.override = override,
                                                          .cvd = getenv("CUDA_VISIBLE_DEVICES"),
                                                          .visible = (const char *const *)gpus,
                                                          .nvisible = ngpus,
                                                          .nproc = a->o.nproc,
                                                          .driver_dir = AGENT_GPU_DRIVER_DIR,
                                                          .smi = "nvidia-smi"},
                            ret, err, sizeof(err));

    if (r < 0) {
        fprintf(stderr, "rdzv-agent: RDZV_GPU_UUIDS: %s\n", err);
        return r;
    }
    if (ret->n)
        rdzv_gpu_uuid_format(&ret->u[0], first);
    if (ret->n || override)
        log_info("reports %u GPU UUID(s) at JOIN%s%s%s%s", ret->n, ret->n ? ": " : "", first,
                 ret->n > 1 ? ", ..." : "", override ? " (RDZV_GPU_UUIDS)" : "");
    return 0;
}

static void print_bad_endpoint(const char *endpoint, const char *flag)
{
    fprintf(stderr, "rdzv-agent: bad %s '%s': expected HOST:PORT, or up to %d of them "
                    "separated by commas (the replicas of rdzvd --peers)\n",
            flag && flag[0] ? flag : "--endpoint", endpoint, AGENT_ENDPOINTS_MAX);
}

/* --print-launch: the resolved launch on stdout (agent_opts_print_launch()), nothing run.
 * Returns the exit status. */
static int print_launch(struct agent *a)
{
    struct agent_endpoints eps = {.n = 1, .ep[0].port = RDZV_DEFAULT_PORT};
    char ep[AGENT_ENDPOINTS_MAX * 270] = "";
    size_t n = 0;
    int r = 0;

    /* One endpoint (HOST:0 as given), or the replicas of rdzvd --peers. */
    if (!a->o.standalone && strchr(a->o.endpoint, ','))
        r = agent_endpoints_parse(a->o.endpoint, &eps);
    else if (!a->o.standalone)
        r = rdzv_parse_hostport(a->o.endpoint, eps.ep[0].host, sizeof(eps.ep[0].host),
                                &eps.ep[0].port);
    for (unsigned i = 0; r == 0 && !a->o.standalone && i < eps.n; i++) {
        n += strlen(ep + n);
        if (i)
            ep[n++] = ',';
        rdzv_format_hostport(ep + n, sizeof(ep) - n, eps.ep[i].host, eps.ep[i].port);
    }
    if (r < 0)
        print_bad_endpoint(a->o.endpoint, a->o.endpoint_flag);
    else if ((r = agent_opts_print_launch(&a->o, ep, a->cmd.argv, stdout)) < 0)
        fprintf(stderr, "rdzv-agent: --print-launch: %s\n", strerror(-r));
    return r < 0 ? 2 : 0;
}

/* RDZV_PRINT_LAUNCH=batch: many --print-launch runs in one process, for the differential test
 * (tests/rendezvous/torchrun_diff.py): each stdin line is a JSON array of the arguments; each
 * answer is one stdout line, the launch or {"status": N, "stderr": "..."} for a refused line. */
static int print_launch_batch(void)
{
    char **gpus = NULL, *line = NULL;
    size_t cap = 0;
    int ngpus = agent_gpu_list(getenv("CUDA_VISIBLE_DEVICES"), AGENT_GPU_DRIVER_DIR, &gpus);
    FILE *tf = tmpfile();
    int err_fd = dup(2), mfd = tf ? fileno(tf) : -1;

    if (ngpus < 0 || err_fd < 0 || mfd < 0) {
        fprintf(stderr, "rdzv-agent: batch: %s\n", strerror(ngpus < 0 ? -ngpus : errno));
        return 1;
    }
    while (getline(&line, &cap, stdin) > 0) {
        json_t *in = json_loads(line, 0, NULL), *out;
        struct agent *a = calloc(1, sizeof(*a));
        size_t n = json_array_size(in);
        char **argv = calloc(n + 2, sizeof(*argv)), buf[4096];
        int st;
        ssize_t got;

        if (!json_is_array(in) || !a || !argv) {
            fprintf(stderr, "rdzv-agent: batch: expected a JSON array of strings per line\n");
            return 1;
        }
        argv[0] = (char *)"rdzv-agent";
        for (size_t i = 0; i < n; i++)
            argv[i + 1] = (char *)json_string_value(json_array_get(in, i));
        if (ftruncate(mfd, 0) < 0 || lseek(mfd, 0, SEEK_SET) < 0 || dup2(mfd, 2) < 0)
            return 1;
        st = agent_opts_parse(&a->o, (int)n + 1, argv);
        st = st > 0 ? 0 : st < 0 ? 2 : resolve_nproc(a, ngpus) < 0 ? 2 : 0;
        if (st == 0)
            snprintf(a->self_exe, sizeof(a->self_exe), "/proc/self/exe");
        if (st == 0 && ((!a->o.argv && default_worker(a) < 0) || build_command(a) < 0))
            st = 2;
        if (st == 0)
            st = print_launch(a);
        (void)dup2(err_fd, 2);
        if (st != 0) {
            got = pread(mfd, buf, sizeof(buf) - 1, 0);
            buf[got > 0 ? got : 0] = '\0';
            out = json_pack("{si ss}", "status", st, "stderr", buf);
            json_dumpf(out, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
            json_decref(out);
            fputc('\n', stdout);
        }
        fflush(stdout);
        agent_cmd_free(&a->cmd);
        free(argv);
        free(a);
        json_decref(in);
    }
    free(line);
    fclose(tf);
    close(err_fd);
    agent_gpu_list_free(gpus, ngpus);
    return 0;
}

int main(int argc, char **argv)
{
    struct agent a = {0};
    struct agent_group_cfg gcfg = {0};
    struct rdzv_join join = {0}, *jn = &join;
    char host[256], hn[200] = "localhost";
    struct agent_host_cfg hcfg;
    bool hosted;
    uint16_t port = RDZV_DEFAULT_PORT;
    struct agent_endpoints eps;
    uv_loop_t loop;
    char **gpus = NULL;
    int ngpus, r;

    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--nccl-root") == 0)
        return agent_nccl_root_main(argc, argv);
    if (getenv("RDZV_PRINT_LAUNCH") && strcmp(getenv("RDZV_PRINT_LAUNCH"), "batch") == 0)
        return print_launch_batch();

    r = agent_opts_parse(&a.o, argc, argv);
    if (r != 0)
        return r > 0 ? 0 : 2;
    if (load_token(&a) < 0)
        return 2;
    rdzv_log_setup("rdzv-agent", a.o.level);
    signal(SIGPIPE, SIG_IGN);
    (void)gethostname(hn, sizeof(hn) - 1);
    if (!a.o.host) { /* Slurm's name for this node (several may share a host name), else hn */
        const char *slurm_node = getenv("SLURMD_NODENAME");

        a.o.host = slurm_node && *slurm_node ? slurm_node : hn;
    }

    ngpus = agent_gpu_list(getenv("CUDA_VISIBLE_DEVICES"), AGENT_GPU_DRIVER_DIR, &gpus);
    if (ngpus < 0) {
        fprintf(stderr, "rdzv-agent: listing GPUs: %s\n", strerror(-ngpus));
        return 1;
    }
    if (resolve_nproc(&a, ngpus) < 0) {
        agent_gpu_list_free(gpus, ngpus);
        return 2;
    }
    /* The GPUs this node should have (its health check counts them): those it was given
     * (CUDA_VISIBLE_DEVICES), or those --nproc gpu|auto found. */
    if ((getenv("CUDA_VISIBLE_DEVICES") && *getenv("CUDA_VISIBLE_DEVICES")) ||
        (ngpus > 0 && a.o.nproc_arg &&
         (strcmp(a.o.nproc_arg, "gpu") == 0 || strcmp(a.o.nproc_arg, "auto") == 0)))
        a.gpus_expected = ngpus;
    if (a.o.isolate_gpus) {
        if (ngpus < a.o.nproc) {
            fprintf(stderr, "rdzv-agent: --isolate-gpus: %d GPU(s) visible for %" PRId64
                            " workers\n",
                    ngpus, a.o.nproc);
            return 2;
        }
        gcfg.devices = (const char *const *)gpus;
    }

    if (uv_exepath(a.self_exe, &(size_t){sizeof(a.self_exe)}) < 0)
        snprintf(a.self_exe, sizeof(a.self_exe), "/proc/self/exe");
    if ((!a.o.argv && default_worker(&a) < 0) || build_command(&a) < 0) {
        agent_gpu_list_free(gpus, ngpus);
        return 2;
    }
    if (a.o.print_launch) { /* the resolved launch, nothing run */
        r = print_launch(&a);
        agent_cmd_free(&a.cmd);
        agent_gpu_list_free(gpus, ngpus);
        return r;
    }
    warn_nproc_past_node(&a, ngpus);
    if (report_gpus(&a, gpus, ngpus, &jn->gpus) < 0) {
        agent_cmd_free(&a.cmd);
        agent_gpu_list_free(gpus, ngpus);
        return 2;
    }
    r = uv_loop_init(&loop);
    if (r < 0) {
        log_error_errno(r, "cannot start the event loop");
        return 1;
    }
    a.loop = &loop;
    if ((r = agent_stall_start(&a.stall, &loop)) < 0)
        log_debug("the event loop's stalls are not measured: %s", uv_strerror(r));
    a.free_port_endpoint = a.o.endpoint;
    if ((a.o.standalone || a.o.free_port) && (r = start_embedded(&a)) < 0) {
        log_error_errno(r, "cannot start the embedded rdzvd");
        return 1;
    }
    if (agent_endpoints_parse(a.o.endpoint, &eps) < 0) {
        print_bad_endpoint(a.o.endpoint, a.o.endpoint_flag);
        return 2;
    }
    eps.flag = a.o.endpoint_flag;
    snprintf(host, sizeof(host), "%s", eps.ep[0].host);
    port = eps.ep[0].port;
    if (a.o.may_host && eps.n > 1) {
        log_info("%s lists %u replicas: rdzvd runs there, this agent starts none", eps.flag,
                 eps.n);
        a.o.may_host = false;
    }
    hcfg = (struct agent_host_cfg){.host = host,
                                   .port = port,
                                   .self_exe = a.self_exe,
                                   .must = a.o.must_host,
                                   .rank0 = a.o.node_rank == 0,
                                   .token_file = a.o.token_file,
                                   .replica_key_file = a.o.replica_key_file,
                                   .replicas = (unsigned)a.o.replicas,
                                   .log_dir = a.o.log_dir,
                                   .metrics_port = (int)a.o.metrics_port,
                                   .metrics_bind = a.o.metrics_bind ? a.o.metrics_bind
                                                                    : "127.0.0.1",
                                   .level = a.o.level};
    hosted = a.o.may_host && agent_host_maybe_start(&hcfg) == 1;
    if (a.o.metrics_port >= 0 && !a.embedded && !hosted)
        log_warn("--metrics-port: this agent runs no rdzvd (it joins the one at %s:%u): the "
                 "status page is that rdzvd's (rdzvd --metrics-port)", host, port);

    r = agent_session_new(&(struct agent_session_cfg){.loop = &loop,
                                                      .eps = &eps,
                                                      .token = a.token,
                                                      .run_id = a.o.run_id,
                                                      .run_id_flag = a.o.run_id_flag,
                                                      .host = a.o.host,
                                                      .self_exe = a.self_exe,
                                                      .nproc = a.o.nproc,
                                                      .nccl = a.o.nccl,
                                                      .connect_timeout_s = a.o.connect_timeout_s,
                                                      .heartbeat_s = a.o.heartbeat_s,
                                                      .heartbeat_timeout_s =
                                                          a.o.heartbeat_timeout_s,
                                                      .grace_s = a.o.grace_s,
                                                      .inplace = a.o.recovery_inplace,
                                                      .embedded = a.embedded != NULL,
                                                      .token_file = a.o.token_file,
                                                      .replica_key_file = a.o.replica_key_file,
                                                      .log_dir = a.o.log_dir,
                                                      .level = a.o.level,
                                                      .health = {.cmd = a.o.health_check,
                                                                 .timeout_s = a.o.health_timeout_s,
                                                                 .paths = {a.o.health_path,
                                                                           a.o.log_dir},
                                                                 .nics = a.o.health_nic,
                                                                 .gpus = a.gpus_expected},
                                                      .health_interval_s = a.o.health_interval_s,
                                                      .rehost = a.o.may_host ? &hcfg : NULL,
                                                      .store_front = a.o.store_front,
                                                      .stall = &a.stall},
                          &a.session);
    if (r < 0) {
        log_error_errno(r, "cannot set up the rendezvous");
        return 1;
    }
    gcfg.loop = &loop;
    gcfg.argv = a.cmd.argv;
    gcfg.local_rank_argi = a.cmd.rank_index;
    gcfg.local_rank_flag = a.cmd.rank_flag;
    gcfg.signals_to_handle = a.o.signals_to_handle;
    if (output_routing(&a, &gcfg) < 0) {
        log_error("out of memory");
        return 1;
    }
    gcfg.nproc = (unsigned)a.o.nproc;
    gcfg.role = a.o.role;
    gcfg.run_id = a.o.run_id;
    gcfg.endpoint = a.o.endpoint;
    gcfg.log_dir = a.o.log_dir;
    gcfg.self_exe = a.self_exe;
    gcfg.no_cgroup = a.o.no_cgroup;
    gcfg.max_restarts = (unsigned)a.o.max_restarts;
    gcfg.grace_ms = (uint64_t)(a.o.grace_s * 1000);
    gcfg.on_exit = agent_session_group_exit;
    gcfg.on_output_closed = agent_session_group_output_closed;
    gcfg.on_all_exited = agent_session_group_all_exited;
    gcfg.progress = true; /* always: rdzvd's status shows each rank's progress */
    if (a.o.progress_timeout_s > 0) {
        gcfg.progress_timeout_ms = (uint64_t)(a.o.progress_timeout_s * 1000);
        gcfg.progress_auto = a.o.progress_auto;
        gcfg.progress_grace_ms = (uint64_t)(a.o.progress_grace_s * 1000);
        gcfg.on_hang = agent_session_group_hang;
    }
    gcfg.control = a.o.recovery_inplace;
    warm_workers(&a, &gcfg);
    gcfg.python_hooks = python_hooks(&a);
    gcfg.on_step = agent_session_group_step;
    gcfg.ud = a.session;
    r = agent_group_new(&gcfg, &a.group);
    if (r < 0) {
        log_error_errno(r, "cannot set up the workers");
        return 1;
    }

    for (unsigned i = 0; i < RDZV_ARRAY_SIZE(forwarded_signals); i++) {
        r = uv_signal_init(&loop, &a.sigs[i]);
        a.sigs[i].data = a.session;
        if (r == 0)
            r = uv_signal_start(&a.sigs[i], signal_cb, forwarded_signals[i]);
        if (r < 0) {
            log_error_errno(r, "cannot handle %s", strsignal(forwarded_signals[i]));
            return 1;
        }
    }

    snprintf(jn->run_id, sizeof(jn->run_id), "%s", a.o.run_id);
    snprintf(jn->host, sizeof(jn->host), "%s", a.o.host);
    snprintf(jn->node_id, sizeof(jn->node_id), "%.64s:%d:%08" PRIx64, hn, (int)getpid(),
             rdzv_random_u64() & 0xffffffffu);
    jn->nproc = a.o.nproc;
    jn->node_rank = a.o.node_rank;
    jn->rank_hint = a.o.rank_hint;
    jn->min = a.o.min_nodes;
    jn->max = a.o.max_nodes;
    jn->last_call_ms = (int64_t)(a.o.last_call_s * 1000);
    jn->max_restarts = a.o.max_restarts;
    jn->nccl = a.o.nccl;
    jn->nccl_ids = a.o.nccl_ids;
    jn->heartbeat_timeout_ms = (int64_t)(a.o.heartbeat_timeout_s * 1000);
    jn->join_timeout_ms = (int64_t)(a.o.join_timeout_s * 1000);
    jn->scale_up_now = a.o.scale_up_now;
    jn->bad_node_failures = a.o.bad_node_failures;
    jn->bad_node_window_s = a.o.bad_node_window_s;
    jn->restart_backoff_s = a.o.restart_backoff_s;
    jn->straggler_factor = a.o.straggler_factor;
    jn->straggler_window_ms = (int64_t)(a.o.straggler_window_s * 1000);
    jn->straggler_aside = a.o.on_straggler_aside;
    jn->preflight.on = a.o.preflight_net; /* the client opens its listener */
    jn->preflight.fraction = a.o.preflight_fraction;
    if (a.o.local_addr)
        snprintf(jn->preflight.addr, sizeof(jn->preflight.addr), "%.63s", a.o.local_addr);
    jn->inplace = a.o.recovery_inplace;
    _Static_assert(AGENT_CMD_FINGERPRINT_HEX == RDZV_COMMAND_HEX, "JOIN command's length");
    if (!a.o.any_command) /* else "": rdzvd compares nothing */
        agent_cmd_fingerprint(&a.cmd, jn->command);
    jn->host_store = true; /* a replicated rdzvd may ask node rank 0 for the generation's store */
    jn->host_replica = true; /* and (rdzvd --replicas) any agent for a replica of itself */
    if (!a.embedded)
        rdzv_log_set_context("job=%s node=%s", a.o.run_id, a.o.host);
    log_python(&a);
    log_info("joining job %s at %s as %s (%" PRId64 " worker%s, nodes %" PRId64 "..%" PRId64 ")",
             a.o.run_id, a.o.endpoint, jn->node_id, a.o.nproc, rdzv_plural((uint64_t)a.o.nproc),
             a.o.min_nodes, a.o.max_nodes);
    r = agent_session_start(a.session, a.group, jn);
    if (r < 0) {
        log_error_errno(r, "cannot start the rdzvd client");
        return 1;
    }

    uv_run(&loop, UV_RUN_DEFAULT);

    /* Tear down: no worker is left running at this point (agent_finish runs after they exit,
     * or before any started). */
    if (a.embedded)
        rdzvd_daemon_stop(a.embedded);
    agent_session_stop(a.session);
    agent_group_free(a.group, NULL, NULL);
    uv_walk(&loop, close_walk_cb, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    a.embedded = rdzvd_daemon_free(a.embedded);
    (void)uv_loop_close(&loop);
    if (a.token) {
        rdzv_token_wipe(a.token);
        free(a.token);
    }
    agent_gpu_list_free(gpus, ngpus);
    agent_cmd_free(&a.cmd);
    free(a.redirects);
    free(a.tee);
    free(a.console);
    r = agent_session_exit_code(a.session);
    /* Only on rdzvd's word that this node is put aside: a worker may exit 69 for its own
     * reasons, and the job then fails on every node alike. */
    if (agent_session_put_aside(a.session) && a.o.on_bad_node_drain)
        (void)agent_drain_node(agent_session_outcome(a.session), AGENT_DRAIN_TIMEOUT_S);
    agent_session_free(a.session);
    return r;
}
