/* SPDX-License-Identifier: Apache-2.0 */
/* agent-options-conf.c: torchrun's --rdzv-conf KEY=VALUE,... onto rdzv-agent's options
 * (agent-options.h, agent_rdzv_conf_cb). */
#include "agent/agent-options.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/rdzv-opt.h"
#include "common/rdzv-util.h"

int agent_conf_bool(const char *v)
{
    static const char *const yes[] = {"1", "true", "t", "yes", "y"}, *const no[] = {"0", "false",
                                                                                  "f", "no", "n"};

    for (unsigned i = 0; i < RDZV_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return 1;
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    }
    return -1;
}

int agent_off_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    int on = strcmp(val, "on") == 0 ? 1 : strcmp(val, "off") == 0 ? 0 : agent_conf_bool(val);

    if (on < 0)
        return rdzv_opt_bad(p, opt, val, "expected on or off");
    *(bool *)opt->dest = !on;
    return 0;
}

/* One key=value of --rdzv-conf onto rdzv's settings; unknown keys are warned about. */
static int conf_apply(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *k,
                      const char *v, double *keep_alive, double *keep_alive_n)
{
    static const struct {
        const char *key;
        size_t off; /* in struct agent_opts; 0: accepted, no meaning here */
    } secs[] = {
        {"join_timeout", offsetof(struct agent_opts, join_timeout_s)},
        {"timeout", offsetof(struct agent_opts, join_timeout_s)},
        {"last_call_timeout", offsetof(struct agent_opts, last_call_s)},
        {"read_timeout", offsetof(struct agent_opts, connect_timeout_s)},
        {"close_timeout", 0},
        {"heartbeat_timeout", 0},
    };
    struct agent_opts *o = p->ud;
    char *end;
    double d;

    if (strcmp(k, "is_host") == 0) {
        if ((o->is_host = agent_conf_bool(v)) < 0)
            return rdzv_opt_bad(p, opt, v, "is_host: expected true or false");
        return 0;
    }
    if (strcmp(k, "replicas") == 0) {
        if (strcmp(v, "1") && strcmp(v, "3") && strcmp(v, "5"))
            return rdzv_opt_bad(p, opt, v, "replicas: expected 1, 3 or 5 (a majority must live)");
        o->replicas = v[0] - '0';
        return 0;
    }
    if (strcmp(k, "store_type") == 0 || strcmp(k, "use_libuv") == 0) {
        if (strcmp(v, "file") == 0)
            fprintf(stderr, "rdzv-agent: warning: --rdzv-conf store_type=file: rdzvd is a TCP "
                            "store; ignored\n");
        return 0;
    }
    d = strtod(v, &end);
    for (unsigned i = 0; i < RDZV_ARRAY_SIZE(secs); i++) {
        if (strcmp(k, secs[i].key))
            continue;
        if (!*v || *end || !(d >= 0) || d > 1e7)
            return rdzv_opt_bad(p, opt, v, "expected a number of seconds");
        if (secs[i].off)
            *(double *)((char *)o + secs[i].off) = d;
        return 0;
    }
    if (strcmp(k, "keep_alive_interval") == 0 || strcmp(k, "keep_alive_max_attempt") == 0) {
        if (!*v || *end || !(d > 0) || d > 3600)
            return rdzv_opt_bad(p, opt, v, "expected a positive number");
        *(k[11] == 'i' ? keep_alive : keep_alive_n) = d;
        return 0;
    }
    fprintf(stderr, "rdzv-agent: warning: --rdzv-conf: unknown key '%s' ignored\n", k);
    return 0;
}

/* k1=v1,k2=v2 (torchrun's --rdzv-conf). A node is lost after keep_alive_interval times
 * keep_alive_max_attempt seconds of silence (torchrun's 5 x 3): rdzv's --heartbeat-timeout. */
int agent_rdzv_conf_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val)
{
    struct agent_opts *o = p->ud;
    double keep_alive = 0, keep_alive_n = 0;
    const char *s = val;
    char buf[256];

    while (*s) {
        size_t n = strcspn(s, ",");
        char *eq;

        if (n >= sizeof(buf))
            return rdzv_opt_bad(p, opt, val, "an entry is too long");
        memcpy(buf, s, n);
        buf[n] = '\0';
        s += n + (s[n] == ',');
        if (n == 0)
            continue;
        eq = strchr(buf, '=');
        if (!eq || eq == buf || !eq[1]) /* torchrun: "must have a value specified" */
            return rdzv_opt_bad(p, opt, val, "expected KEY=VALUE,KEY=VALUE...");
        *eq = '\0';
        if (conf_apply(p, opt, buf, eq + 1, &keep_alive, &keep_alive_n) < 0)
            return -EINVAL;
    }
    if (keep_alive || keep_alive_n) {
        double t = (keep_alive ? keep_alive : 5) * (keep_alive_n ? keep_alive_n : 3);

        o->heartbeat_timeout_s = t < 0.1 ? 0.1 : t > 3600 ? 3600 : t;
    }
    return 0;
}
