/* SPDX-License-Identifier: Apache-2.0 */
/* agent-sched.c: asking the scheduler (agent-sched.h). */
#include "agent/session/agent-sched.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"

#define SCHED_OUT_MAX 256 /* bytes of the command's output kept */

/* Run argv (argv[0] looked up in PATH) for at most timeout_s, its output's first SCHED_OUT_MAX
 * bytes into out (NUL-terminated). The child ignores SIGTERM and SIGINT: Slurm signals every
 * process of the step as it ends it, a command the agent starts then too (seen at a time limit).
 * Not uv_spawn, which gives the child default dispositions: fork, set them, exec (an ignored
 * signal stays ignored across exec; the SIGTERM that comes before is the agent's handler's, and
 * harmless). libuv reaps only its own children: this one is waited for here. 0 when it exited 0,
 * else -ETIMEDOUT (killed), -EIO (*how says how it ended) or the errno of pipe or fork. */
static int run_bounded(char *const argv[], double timeout_s, char *out, char *how, size_t howlen)
{
    uint64_t deadline = rdzv_now_ms() + (uint64_t)(timeout_s * 1000);
    size_t len = 0;
    bool timed_out = false;
    int fd[2], status = 0;
    pid_t pid;

    out[0] = '\0';
    if (pipe2(fd, O_CLOEXEC) < 0)
        return -errno;
    pid = fork();
    if (pid < 0) {
        int e = -errno;

        close(fd[0]);
        close(fd[1]);
        return e;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);

        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        if (null < 0 || dup2(null, 0) < 0 || dup2(fd[1], 1) < 0 || dup2(null, 2) < 0)
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    for (;;) {
        uint64_t now = rdzv_now_ms();
        struct pollfd p = {.fd = fd[0], .events = POLLIN};
        char chunk[128];
        ssize_t n;
        int r;

        if (now >= deadline) {
            timed_out = true;
            break;
        }
        r = poll(&p, 1, (int)(deadline - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue; /* the deadline, next turn */
        n = read(fd[0], chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* its end of the pipe closed: it exited */
        if (len < SCHED_OUT_MAX) {
            size_t take = (size_t)n < SCHED_OUT_MAX - len ? (size_t)n : SCHED_OUT_MAX - len;

            memcpy(out + len, chunk, take);
            len += take;
        }
    }
    out[len] = '\0';
    close(fd[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return -ETIMEDOUT;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    snprintf(how, howlen, WIFSIGNALED(status) ? "killed by signal %d" : "exit code %d",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return -EIO;
}

int agent_slurm_why(const char *job_id, double timeout_s, char *why, size_t len)
{
    char *argv[] = {"squeue", "-h", "-j", (char *)job_id, "-o", "%T|%r", NULL};
    char buf[SCHED_OUT_MAX + 1], how[64] = "";
    char *state, *reason, *nl;
    int e;

    why[0] = '\0';
    e = run_bounded(argv, timeout_s, buf, how, sizeof(how));
    if (e < 0) {
        log_warn("cannot ask Slurm why job %s ends (squeue: %s); the outcome names the job only",
                 job_id, e == -ETIMEDOUT ? "no answer in time" : e == -EIO ? how : strerror(-e));
        return e;
    }
    nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    state = buf;
    reason = strchr(state, '|');
    if (!reason || !*state)
        return -EIO;
    *reason++ = '\0';
    if (strcmp(reason, "TimeLimit") == 0)
        snprintf(why, len, "its time limit");
    else if (strstr(state, "PREEMPT") || strstr(reason, "Preempt"))
        snprintf(why, len, "preemption");
    else if (strcmp(state, "RUNNING") == 0)
        snprintf(why, len, "a signal from outside Slurm: the job still runs");
    else if ((strcmp(state, "COMPLETING") == 0 || strcmp(state, "CANCELLED") == 0) &&
             strcmp(reason, "None") == 0)
        snprintf(why, len, "scancel");
    else
        snprintf(why, len, "Slurm: %.40s, reason %.60s", state, reason);
    return 0;
}

bool agent_sge_job(void)
{
    const char *id = getenv("JOB_ID");

    return id && *id &&
           (getenv("PE_HOSTFILE") || getenv("SGE_JOB_SPOOL_DIR") || getenv("SGE_O_WORKDIR"));
}

const char *agent_sched_job_id(void)
{
    static char id[128];
    const char *s, *task;

    if ((s = getenv("SLURM_JOB_ID")) || (s = getenv("PBS_JOBID")))
        return s;
    if (!agent_sge_job())
        return NULL;
    s = getenv("JOB_ID");
    task = getenv("SGE_TASK_ID");
    if (task && *task && strspn(task, "0123456789") == strlen(task))
        snprintf(id, sizeof(id), "%.100s.%.20s", s, task);
    else
        snprintf(id, sizeof(id), "%.120s", s);
    return id;
}

/* Whether a and b name one host: equal up to the first '.' of either, without case. */
static bool same_host(const char *a, const char *b)
{
    size_t la = strcspn(a, "."), lb = strcspn(b, ".");

    return la == lb && la > 0 && strncasecmp(a, b, la) == 0;
}

/* The first n names of seen (each 256 bytes) name host too. */
static bool seen_before(const char (*seen)[256], int64_t n, const char *host)
{
    for (int64_t i = 0; i < n; i++)
        if (same_host(seen[i], host))
            return true;
    return false;
}

int agent_sge_host(const char *path, const char *host, int64_t *rank, int64_t *nhosts,
                   char *queue, size_t qlen)
{
    char line[1024], name[256], q[256], (*seen)[256] = NULL;
    int64_t n = 0, found = -1;
    unsigned slots;
    FILE *f = fopen(path, "re");
    int r = 0;

    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        void *grown;

        if (strspn(line, " \t\n") == strlen(line))
            continue;
        if (sscanf(line, "%255s %u %255s", name, &slots, q) != 3 || !slots) {
            r = -EBADMSG;
            break;
        }
        if (same_host(name, host)) {
            /* Every queue instance of the host, in the file's order: a drain disables all. */
            size_t used = found < 0 ? 0 : strlen(queue);

            if (found < 0)
                found = n;
            if (snprintf(queue + used, qlen - used, "%s%s", used ? "," : "", q) >=
                (int)(qlen - used)) {
                r = -ENAMETOOLONG;
                break;
            }
        }
        /* A host appears once a queue it gives slots from: counted once, at its first line. */
        if (seen_before((const char (*)[256])seen, n, name))
            continue;
        if (!(grown = realloc(seen, (size_t)(n + 1) * sizeof(*seen)))) {
            r = -ENOMEM;
            break;
        }
        seen = grown;
        snprintf(seen[n++], sizeof(seen[0]), "%s", name);
    }
    free(seen);
    if (r == 0 && ferror(f))
        r = -EIO;
    fclose(f);
    if (r < 0)
        return r;
    if (found < 0)
        return -ENOENT;
    *rank = found;
    *nhosts = n;
    return 0;
}

int agent_sge_node_rank(const char *path, int64_t *rank)
{
    char hn[256] = "", queue[256];
    int64_t n;
    int r;

    (void)gethostname(hn, sizeof(hn) - 1);
    r = agent_sge_host(path, hn, rank, &n, queue, sizeof(queue));
    if (r < 0)
        fprintf(stderr, "rdzv-agent: Grid Engine's PE_HOSTFILE %s: %s%s: node ranks go by the "
                        "order of arrival\n",
                path, r == -ENOENT ? "no line for this host, " : "",
                r == -ENOENT ? hn : strerror(-r));
    return r;
}

bool agent_sched_cancel(struct rdzv_cancel *cn)
{
    const char *sj = getenv("SLURM_JOB_ID"), *pj = getenv("PBS_JOBID"), *id;
    char why[128] = "";
    size_t len = sizeof(cn->reason);

    cn->reason[0] = cn->sched_job[0] = '\0';
    /* Under Slurm, which it was: scancel, the time limit, a preemption (squeue, at most
     * AGENT_SLURM_WHY_TIMEOUT_S: the job's steps are being signalled anyway). */
    if (sj && *sj && agent_slurm_why(sj, AGENT_SLURM_WHY_TIMEOUT_S, why, sizeof(why)) == 0)
        snprintf(cn->reason, len, "Slurm job %s: %s", sj, why);
    else if (sj && *sj)
        snprintf(cn->reason, len, "Slurm job %s", sj);
    else if (pj && *pj)
        snprintf(cn->reason, len, "PBS job %s", pj);
    else if (agent_sge_job())
        snprintf(cn->reason, len, "Grid Engine job %s", agent_sched_job_id());
    rdzv_utf8_trim(cn->reason);
    id = agent_sched_job_id();
    if (!id || !*id || strstr(why, "the job still runs"))
        return false;
    snprintf(cn->sched_job, sizeof(cn->sched_job), "%s", id);
    rdzv_utf8_trim(cn->sched_job);
    return true;
}
