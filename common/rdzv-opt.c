/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-opt.c: the table-driven option parser (see rdzv-opt.h). */
#include "common/rdzv-opt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"

#define HELP_OPTIONS "help-options"

static FILE *out_of(const struct rdzv_opt_prog *p)
{
    return p->out ? p->out : stdout;
}

static FILE *err_of(const struct rdzv_opt_prog *p)
{
    return p->err ? p->err : stderr;
}

static bool takes_value(const struct rdzv_opt *o)
{
    switch (o->kind) {
    case RDZV_OPT_FLAG:
    case RDZV_OPT_HELP:
    case RDZV_OPT_VERSION:
        return false;
    case RDZV_OPT_CALLBACK:
        return !(o->flags & RDZV_OPT_F_NOARG);
    default:
        return true;
    }
}

static bool is_option(const struct rdzv_opt *o)
{
    return o->kind != RDZV_OPT_SECTION && o->kind != RDZV_OPT_END;
}

static int name_match(const char *s, size_t n, const char *name);

/* Does typed ("--max_conns", "-p") name o, wholly? */
static bool names_option(const char *typed, const struct rdzv_opt *o)
{
    size_t n;

    if (typed[0] != '-')
        return false;
    if (typed[1] != '-')
        return typed[1] && typed[1] == o->short_name && !typed[2];
    n = strlen(typed + 2);
    return name_match(typed + 2, n, o->name) == 2 || name_match(typed + 2, n, o->alias) == 2;
}

int rdzv_opt_bad(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val,
                 const char *what)
{
    char dashed[RDZV_OPT_TYPED_MAX + 2];
    const char *name = dashed;

    /* As the user named it, when the name kept is this option's (a check made after the parse
     * may come after another option was read; a variable's value is named by the next line). */
    if (o->typed && o->typed[0] == '-')
        name = o->typed;
    else if (p->spelled && names_option(p->spelled, o))
        name = p->spelled;
    else
        snprintf(dashed, sizeof(dashed), "--%s", o->name);
    if (p->style == RDZV_OPT_STYLE_BAD)
        fprintf(err_of(p), "%s: bad %s '%s': %s\n", p->name, name, val ? val : "", what);
    else
        fprintf(err_of(p), "%s: invalid %s '%s': %s (see %s --help)\n", p->name, name,
                val ? val : "", what, p->name);
    return -EINVAL;
}

/* o was named by s (n bytes: "--max_conns", "-p", a variable's name): into o->typed and the
 * program's spelled, where they are kept. A long name is the option's name or alias, whole (a
 * prefix names it too), with '_' between its words when the user typed one. */
static void name_typed(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *s,
                       size_t n, bool is_long)
{
    char buf[RDZV_OPT_TYPED_MAX];

    if (is_long) {
        const char *base = o->name;
        bool under = memchr(s, '_', n) != NULL;
        size_t k;

        if (o->alias && !name_match(s, n, o->name))
            base = o->alias;
        snprintf(buf, sizeof(buf), "--%s", base);
        for (k = 2; under && buf[k]; k++)
            if (buf[k] == '-')
                buf[k] = '_';
    } else {
        snprintf(buf, sizeof(buf), "%.*s", (int)(n < sizeof(buf) ? n : sizeof(buf) - 1), s);
    }
    if (o->typed)
        memcpy(o->typed, buf, sizeof(buf));
    if (p->spelled)
        memcpy(p->spelled, buf, sizeof(buf));
}

/* "a, b or c" from a NULL-terminated list. */
static void join_choices(const char *const *c, const char *sep, const char *last, char *buf,
                         size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (size_t i = 0; c[i] && n < len; i++) {
        const char *s = i == 0 ? "" : c[i + 1] ? sep : last;

        n += (size_t)snprintf(buf + n, len - n, "%s%s", s, c[i]);
    }
}

/* Store val (NULL for a flag) into o's destination. Returns 0, 1 or -EINVAL (printed). */
static int apply(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val)
{
    char what[128];
    int r = 0;

    switch (o->kind) {
    case RDZV_OPT_FLAG:
        *(bool *)o->dest = true;
        break;
    case RDZV_OPT_STRING:
        *(const char **)o->dest = val;
        break;
    case RDZV_OPT_INT: {
        int64_t v;

        if (rdzv_parse_i64n((const uint8_t *)val, strlen(val), &v) < 0 || v < o->imin ||
            v > o->imax) {
            snprintf(what, sizeof(what), "expected a whole number from %" PRId64 " to %" PRId64,
                     o->imin, o->imax);
            return rdzv_opt_bad(p, o, val, o->what ? o->what : what);
        }
        *(int64_t *)o->dest = v;
        break;
    }
    case RDZV_OPT_UINT:
    case RDZV_OPT_SIZE: {
        uint64_t v, max = o->umax ? o->umax : UINT64_MAX;
        int pr = o->kind == RDZV_OPT_SIZE ? rdzv_parse_size(val, &v) : rdzv_parse_u64(val, &v);

        if (pr < 0 || v < o->umin || v > max) {
            snprintf(what, sizeof(what),
                     "expected a whole number from %" PRIu64 " to %" PRIu64 "%s", o->umin, max,
                     o->kind == RDZV_OPT_SIZE ? ", optionally with K/M/G" : "");
            return rdzv_opt_bad(p, o, val, o->what ? o->what : what);
        }
        *(uint64_t *)o->dest = v;
        break;
    }
    case RDZV_OPT_DOUBLE: {
        bool any = o->dmin == 0 && o->dmax == 0;
        char *end;
        double v;

        errno = 0;
        v = strtod(val, &end);
        if (*val == '\0' || *end != '\0' || errno == ERANGE || !(v >= o->dmin) ||
            (!any && v > o->dmax)) {
            if (any)
                snprintf(what, sizeof(what), "expected a number >= 0");
            else
                snprintf(what, sizeof(what), "expected a number from %g to %g", o->dmin, o->dmax);
            return rdzv_opt_bad(p, o, val, o->what ? o->what : what);
        }
        *(double *)o->dest = v;
        break;
    }
    case RDZV_OPT_ENUM:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(o->choices[i], val) == 0) {
                *(int *)o->dest = i;
                goto out_seen;
            }
        join_choices(o->choices, ", ", " or ", what + 9, sizeof(what) - 9);
        memcpy(what, "expected ", 9);
        return rdzv_opt_bad(p, o, val, o->what ? o->what : what);
    case RDZV_OPT_CALLBACK:
        r = o->cb(p, o, val);
        if (r < 0)
            return r;
        break;
    case RDZV_OPT_HELP:
        rdzv_opt_help(p, out_of(p));
        return 1;
    case RDZV_OPT_VERSION:
        fprintf(out_of(p), "%s %s\n", p->name, p->version ? p->version : "");
        return 1;
    default:
        return -EINVAL;
    }
out_seen:
    if (o->seen)
        *o->seen = true;
    return r;
}

/* Is the user's spelling s (n bytes, '_' or '-' between words) a prefix of name, or all of
 * it? */
static int name_match(const char *s, size_t n, const char *name)
{
    size_t i;

    if (!name)
        return 0;
    for (i = 0; i < n; i++) {
        char c = s[i] == '_' ? '-' : s[i];

        if (name[i] == '\0' || name[i] != c)
            return 0;
    }
    return name[i] == '\0' ? 2 : 1; /* 2: exact */
}

/* The entry for a long option spelled s (n bytes): an exact match, else the one entry it is a
 * prefix of. *ambiguous is set when several are. */
static const struct rdzv_opt *find_long(const struct rdzv_opt_prog *p, const char *s, size_t n,
                                        bool *ambiguous)
{
    const struct rdzv_opt *prefix = NULL, *preferred = NULL;
    bool several_preferred = false;

    *ambiguous = false;
    if (n == 0)
        return NULL;
    for (const struct rdzv_opt *o = p->opts; o->kind != RDZV_OPT_END; o++) {
        int m;

        if (!is_option(o))
            continue;
        m = name_match(s, n, o->name);
        if (m < 2 && name_match(s, n, o->alias) > m)
            m = name_match(s, n, o->alias);
        if (m == 2)
            return o;
        if (m == 1) {
            if (prefix && prefix != o)
                *ambiguous = true;
            prefix = o;
            if (o->flags & RDZV_OPT_F_PREFER) {
                several_preferred |= preferred != NULL;
                preferred = o;
            }
        }
    }
    if (*ambiguous && preferred && !several_preferred) {
        *ambiguous = false;
        return preferred;
    }
    return *ambiguous ? NULL : prefix;
}

static const struct rdzv_opt *find_short(const struct rdzv_opt_prog *p, char c)
{
    for (const struct rdzv_opt *o = p->opts; o->kind != RDZV_OPT_END; o++)
        if (is_option(o) && o->short_name && o->short_name == c)
            return o;
    return NULL;
}

static int usage_error(const struct rdzv_opt_prog *p, const char *what, const char *arg)
{
    fprintf(err_of(p), "%s: %s '%s' (see %s --help)\n", p->name, what, arg, p->name);
    return -EINVAL;
}

static char dashed_char(char c)
{
    return c == '_' ? '-' : c;
}

/* The edit distance from s (n bytes, '_' read as '-') to name: insertions, deletions,
 * substitutions and swaps of two neighbours each cost 1 (optimal string alignment). Names
 * of 64 bytes or more are far from everything. */
static size_t edit_distance(const char *s, size_t n, const char *name)
{
    size_t m = name ? strlen(name) : SIZE_MAX, d[64][64];

    if (n >= 64 || m >= 64)
        return SIZE_MAX;
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            char c = dashed_char(s[i - 1]);
            size_t best = d[i - 1][j - 1] + (c != name[j - 1]);

            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && c == name[j - 2] && dashed_char(s[i - 2]) == name[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* The nearest so far of the names offered to typed (n bytes): within 2 edits (1 for a name of 4
 * bytes or less), as git suggests a command; tie: another is as near. */
struct nearest {
    const char *name;
    size_t n, best;
    bool tie;
};

static void nearest_offer(struct nearest *nr, const char *name, size_t dist)
{
    if (dist > (nr->n <= 4 ? 1 : 2))
        return;
    if (!nr->name || dist < nr->best) {
        nr->name = name;
        nr->best = dist;
        nr->tie = false;
    } else if (dist == nr->best && strcmp(name, nr->name)) {
        nr->tie = true;
    }
}

const char *rdzv_opt_nearest(const char *typed, const char *const *names)
{
    struct nearest nr = {.n = typed ? strlen(typed) : 0};

    for (size_t i = 0; nr.n > 0 && names[i]; i++)
        nearest_offer(&nr, names[i], edit_distance(typed, nr.n, names[i]));
    return nr.tie ? NULL : nr.name;
}

/* "unknown option '--nprocs'; did you mean --nproc?": the one option nearest to the typed name
 * (s, n bytes), by its name or its alias; none when two are as near. */
static int unknown_long(const struct rdzv_opt_prog *p, const char *s, size_t n, const char *arg)
{
    struct nearest nr = {.n = n};

    for (const struct rdzv_opt *o = p->opts; n > 0 && o->kind != RDZV_OPT_END; o++) {
        size_t dn, da;

        if (!is_option(o))
            continue;
        dn = edit_distance(s, n, o->name);
        da = edit_distance(s, n, o->alias);
        nearest_offer(&nr, o->name, dn < da ? dn : da);
    }
    if (!nr.name || nr.tie)
        return usage_error(p, "unknown option", arg);
    fprintf(err_of(p), "%s: unknown option '%s'; did you mean --%s? (see %s --help)\n", p->name,
            arg, nr.name, p->name);
    return -EINVAL;
}

/* "ambiguous option '--n': --nnodes, --nproc or --node-rank?": every option the prefix s (n
 * bytes) names, so the user picks one without reading --help. */
static int ambiguous_error(const struct rdzv_opt_prog *p, const char *s, size_t n,
                           const char *arg)
{
    const char *names[RDZV_OPT_AMBIGUOUS_MAX + 1];
    char list[RDZV_OPT_AMBIGUOUS_MAX * 40];
    size_t k = 0, shown = 0, len = 0;

    for (const struct rdzv_opt *o = p->opts; o->kind != RDZV_OPT_END; o++) {
        if (!is_option(o) || (!name_match(s, n, o->name) && !name_match(s, n, o->alias)))
            continue;
        if (k < RDZV_OPT_AMBIGUOUS_MAX)
            names[k++] = o->name;
        shown++;
    }
    names[k] = NULL;
    list[0] = '\0';
    for (size_t i = 0; i < k && len < sizeof(list); i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s--%s",
                                i == 0 ? "" : i + 1 < k || shown > k ? ", " : " or ", names[i]);
    fprintf(err_of(p), "%s: ambiguous option '%s': %s%s? (see %s --help)\n", p->name, arg, list,
            shown > k ? ", ..." : "", p->name);
    return -EINVAL;
}

/* One "--name[=value]" at argv[*i]; may consume argv[*i + 1]. */
static int parse_long(const struct rdzv_opt_prog *p, int argc, char **argv, int *i)
{
    const char *arg = argv[*i] + 2, *eq = strchr(arg, '='), *val = NULL;
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    const struct rdzv_opt *o;
    bool ambiguous;

    if (!eq && strcmp(arg, HELP_OPTIONS) == 0) {
        rdzv_opt_list(p, out_of(p));
        return 1;
    }
    o = find_long(p, arg, n, &ambiguous);
    if (!o && ambiguous)
        return ambiguous_error(p, arg, n, argv[*i]);
    if (!o)
        return unknown_long(p, arg, n, argv[*i]);
    name_typed(p, o, arg, n, true);
    if (o->flags & RDZV_OPT_F_OPTARG)
        return apply(p, o, eq ? eq + 1 : NULL);
    if (!takes_value(o)) {
        if (eq) {
            fprintf(err_of(p), "%s: --%s takes no value (see %s --help)\n", p->name, o->name,
                    p->name);
            return -EINVAL;
        }
        return apply(p, o, NULL);
    }
    if (eq) {
        val = eq + 1;
    } else {
        if (*i + 1 >= argc)
            return usage_error(p, "missing value for", argv[*i]);
        val = argv[++*i];
    }
    return apply(p, o, val);
}

/* One "-abc" / "-pVALUE" / "-p VALUE" at argv[*i]. */
static int parse_short(const struct rdzv_opt_prog *p, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];

    for (const char *c = arg + 1; *c; c++) {
        const struct rdzv_opt *o = find_short(p, *c);
        char opt[3] = {'-', *c, '\0'};
        int r;

        if (!o)
            return usage_error(p, "unknown option", opt);
        name_typed(p, o, opt, 2, false);
        if (o->flags & RDZV_OPT_F_OPTARG)
            return apply(p, o, c[1] ? c + 1 : NULL);
        if (!takes_value(o)) {
            r = apply(p, o, NULL);
            if (r != 0)
                return r;
            continue;
        }
        if (c[1]) /* -pV; "-p=V" means V, as argparse reads it (not in a cluster) */
            return apply(p, o, c == arg + 1 && c[1] == '=' ? c + 2 : c + 1);
        if (*i + 1 >= argc)
            return usage_error(p, "missing value for", opt);
        return apply(p, o, argv[++*i]);
    }
    return 0;
}

int rdzv_opt_parse_argv(const struct rdzv_opt_prog *p, int argc, char **argv, int *ret_optind)
{
    int first_arg = -1, i, r;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (p->flags & RDZV_OPT_STOP_AT_ARG)
                break;
            if (first_arg < 0)
                first_arg = i;
            continue;
        }
        r = a[1] == '-' ? parse_long(p, argc, argv, &i) : parse_short(p, argc, argv, &i);
        if (r != 0)
            return r;
    }
    *ret_optind = first_arg >= 0 ? first_arg : i;
    return 0;
}

/* PREFIX_OPTNAME's value if set and not empty (its name left in name), else NULL. */
static const char *getenv_derived(const char *prefix, size_t plen, const char *opt, char *name,
                                  size_t len)
{
    char pre[32];
    const char *v;

    snprintf(pre, sizeof(pre), "%.*s", (int)plen, prefix);
    rdzv_env_name(pre, opt, name, len);
    v = getenv(name);
    return v && *v ? v : NULL;
}

/* The value for o from the first non-empty environment variable of its list, or NULL. */
static const char *env_value(const struct rdzv_opt_prog *p, const struct rdzv_opt *o,
                             char *name, size_t len)
{
    const char *list = o->env ? o->env : "*", *v;

    while (*list) {
        size_t n = strcspn(list, " ");

        if (n == 1 && list[0] == '*') {
            const char *pre = p->env_prefix ? p->env_prefix : "";

            while (*pre) {
                size_t m = strcspn(pre, " ");

                if ((v = getenv_derived(pre, m, o->name, name, len)))
                    return v;
                if (o->alias && (p->flags & RDZV_OPT_ENV_ALIASES) &&
                    (v = getenv_derived(pre, m, o->alias, name, len)))
                    return v;
                pre += m;
                pre += strspn(pre, " ");
            }
        } else if (n > 0 && n < len) {
            snprintf(name, len, "%.*s", (int)n, list);
            v = getenv(name);
            if (v && *v)
                return v;
        }
        list += n;
        list += strspn(list, " ");
    }
    return NULL;
}

int rdzv_opt_parse_env(const struct rdzv_opt_prog *p)
{
    for (const struct rdzv_opt *o = p->opts; o->kind != RDZV_OPT_END; o++) {
        char name[96];
        const char *val;
        int r;

        if (!is_option(o) || o->kind == RDZV_OPT_HELP || o->kind == RDZV_OPT_VERSION ||
            (o->flags & RDZV_OPT_F_NOENV))
            continue;
        val = env_value(p, o, name, sizeof(name));
        if (!val)
            continue;
        name_typed(p, o, name, strlen(name), false);
        if (!takes_value(o)) {
            if (strcmp(val, "0") == 0 || strcasecmp(val, "false") == 0 ||
                strcasecmp(val, "no") == 0)
                continue;
            val = NULL;
        }
        r = apply(p, o, val);
        if (r < 0) {
            fprintf(err_of(p), "%s: (from the environment variable %s)\n", p->name, name);
            return r;
        }
    }
    return 0;
}

int rdzv_opt_parse(const struct rdzv_opt_prog *p, int argc, char **argv, int *ret_optind)
{
    int r = rdzv_opt_parse_env(p);

    if (r != 0)
        return r;
    return rdzv_opt_parse_argv(p, argc, argv, ret_optind);
}

int rdzv_opt_set(const struct rdzv_opt_prog *p, const char *name, const char *val)
{
    bool ambiguous;
    const struct rdzv_opt *o = find_long(p, name, strlen(name), &ambiguous);

    if (!o || name_match(name, strlen(name), o->name) != 2)
        return -ENOENT;
    return apply(p, o, takes_value(o) ? val : NULL);
}

/* "  -p, --port N" / "      --nproc, --nproc-per-node N|gpu|auto" into buf. */
static void label(const struct rdzv_opt *o, char *buf, size_t len)
{
    char mv[96] = "";
    size_t n;

    if (o->metavar && (o->flags & RDZV_OPT_F_OPTARG))
        snprintf(mv, sizeof(mv), "[=%s]", o->metavar);
    else if (o->metavar)
        snprintf(mv, sizeof(mv), " %s", o->metavar);
    else if (o->kind == RDZV_OPT_ENUM) {
        mv[0] = ' ';
        join_choices(o->choices, "|", "|", mv + 1, sizeof(mv) - 1);
    } else if (takes_value(o))
        snprintf(mv, sizeof(mv), " VALUE");
    if (o->short_name)
        n = (size_t)snprintf(buf, len, "  -%c, --%s", o->short_name, o->name);
    else
        n = (size_t)snprintf(buf, len, "      --%s", o->name);
    if (o->alias && n < len)
        n += (size_t)snprintf(buf + n, len - n, ", --%s", o->alias);
    if (n < len)
        snprintf(buf + n, len - n, "%s", mv);
}

void rdzv_opt_help(const struct rdzv_opt_prog *p, FILE *f)
{
    unsigned col = p->help_col ? p->help_col : 28;

    if (p->usage)
        fputs(p->usage, f);
    for (const struct rdzv_opt *o = p->opts; o->kind != RDZV_OPT_END; o++) {
        const char *h = o->help ? o->help : "";
        char lab[160];
        size_t n;

        if (o->flags & RDZV_OPT_F_HIDDEN)
            continue;
        if (o->kind == RDZV_OPT_SECTION) {
            fprintf(f, "\n%s\n", h);
            continue;
        }
        label(o, lab, sizeof(lab));
        n = strlen(lab);
        fputs(lab, f);
        if (n + 2 > col) {
            fputc('\n', f);
            n = 0;
        }
        for (;;) {
            size_t line = strcspn(h, "\n");

            fprintf(f, "%*s%.*s\n", (int)(col - n), "", (int)line, h);
            n = 0;
            if (!h[line])
                break;
            h += line + 1;
        }
    }
    if (p->footer)
        fprintf(f, "\n%s", p->footer);
}

void rdzv_opt_list(const struct rdzv_opt_prog *p, FILE *f)
{
    for (const struct rdzv_opt *o = p->opts; o->kind != RDZV_OPT_END; o++) {
        if (!is_option(o) || (o->flags & RDZV_OPT_F_HIDDEN))
            continue;
        fprintf(f, "--%s\n", o->name);
        if (o->alias)
            fprintf(f, "--%s\n", o->alias);
    }
}

int rdzv_opt_port_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val)
{
    if (rdzv_parse_port(val, o->dest) < 0)
        return rdzv_opt_bad(p, o, val, o->what ? o->what : "expected 0..65535");
    return 0;
}

int rdzv_opt_either_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o, const char *val)
{
    const char *bar = o->metavar ? strchr(o->metavar, '|') : NULL;
    char what[96];

    if (!bar)
        return rdzv_opt_bad(p, o, val, "this option's choices are not known");
    if (strlen(val) == (size_t)(bar - o->metavar) && strncmp(val, o->metavar, strlen(val)) == 0) {
        *(bool *)o->dest = false;
        return 0;
    }
    if (strcmp(val, bar + 1) == 0) {
        *(bool *)o->dest = true;
        return 0;
    }
    snprintf(what, sizeof(what), "expected %.*s or %s", (int)(bar - o->metavar), o->metavar,
             bar + 1);
    return rdzv_opt_bad(p, o, val, o->what ? o->what : what);
}

int rdzv_opt_log_level_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *o,
                          const char *val)
{
    if (rdzv_log_parse_level(val, o->dest) < 0)
        return rdzv_opt_bad(p, o, val,
                            o->what ? o->what : "expected error, warn, info, debug or trace");
    return 0;
}
