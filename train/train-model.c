/* SPDX-License-Identifier: Apache-2.0 */
/* train-model.c: the MLP's layout, PyTorch-compatible init, forward and backward. */
#include "train-model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train-rng.h"

static const char *const act_names[_TRAIN_ACT_MAX] = {[TRAIN_ACT_RELU] = "relu",
                                                      [TRAIN_ACT_NONE] = "none"};
static const char *const loss_names[_TRAIN_LOSS_MAX] = {[TRAIN_LOSS_MSE] = "mse",
                                                        [TRAIN_LOSS_RMSE] = "rmse"};
static const char *const precision_names[_TRAIN_PRECISION_MAX] = {
    [TRAIN_FP32] = "fp32", [TRAIN_BF16] = "bf16", [TRAIN_FP16] = "fp16"};

const char *train_act_name(enum train_act a)
{
    return a < _TRAIN_ACT_MAX ? act_names[a] : "?";
}

const char *train_loss_name(enum train_loss l)
{
    return l < _TRAIN_LOSS_MAX ? loss_names[l] : "?";
}

const char *train_precision_name(enum train_precision p)
{
    return p < _TRAIN_PRECISION_MAX ? precision_names[p] : "?";
}

static int parse_name(const char *s, const char *const *names, int n)
{
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -EINVAL;
}

int train_act_parse(const char *s, enum train_act *ret)
{
    int r = parse_name(s, act_names, _TRAIN_ACT_MAX);

    if (r < 0)
        return r;
    *ret = (enum train_act)r;
    return 0;
}

int train_loss_parse(const char *s, enum train_loss *ret)
{
    int r = parse_name(s, loss_names, _TRAIN_LOSS_MAX);

    if (r < 0)
        return r;
    *ret = (enum train_loss)r;
    return 0;
}

int train_precision_parse(const char *s, enum train_precision *ret)
{
    int r = parse_name(s, precision_names, _TRAIN_PRECISION_MAX);

    if (r < 0)
        return r;
    *ret = (enum train_precision)r;
    return 0;
}

int train_layout_init(struct train_layout *L)
{
    size_t off = 0;

    if (L->nlayers < 1 || L->nlayers > TRAIN_MAX_LAYERS)
        return -EINVAL;
    L->max_width = 0;
    for (unsigned l = 0; l <= L->nlayers; l++) {
        if (L->width[l] < 1 || L->width[l] > TRAIN_MAX_WIDTH)
            return -EINVAL;
        if (L->width[l] > L->max_width)
            L->max_width = L->width[l];
    }
    for (unsigned l = 0; l < L->nlayers; l++) {
        L->w_off[l] = off;
        off += (size_t)L->width[l + 1] * L->width[l];
        L->b_off[l] = off;
        off += L->width[l + 1];
        if (off > TRAIN_MAX_PARAMS)
            return -E2BIG;
    }
    L->nparams = off;
    return 0;
}

int train_layout_parse(const char *s, struct train_layout *ret)
{
    struct train_layout L = {0};
    unsigned n = 0;
    const char *p = s;
    int r;

    if (!s || !*s)
        return -EINVAL;
    for (;;) {
        unsigned long v = 0;
        const char *start = p;

        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (unsigned long)(*p - '0');
            if (v > TRAIN_MAX_WIDTH)
                return -EINVAL;
            p++;
        }
        if (p == start || n > TRAIN_MAX_LAYERS)
            return -EINVAL;
        L.width[n++] = (unsigned)v;
        if (*p == '\0')
            break;
        if (*p != ',')
            return -EINVAL;
        p++;
    }
    if (n < 2)
        return -EINVAL;
    L.nlayers = n - 1;
    r = train_layout_init(&L);
    if (r < 0)
        return r;
    *ret = L;
    return 0;
}

void train_layout_format(const struct train_layout *L, char *buf, size_t len)
{
    size_t pos = 0;

    if (len)
        buf[0] = '\0';
    for (unsigned l = 0; l <= L->nlayers && pos < len; l++) {
        int w = snprintf(buf + pos, len - pos, "%s%u", l ? "," : "", L->width[l]);

        if (w < 0)
            return;
        pos += (size_t)w;
    }
}

void train_layout_init_params(const struct train_layout *L, uint64_t seed, float *params)
{
    struct train_mt mt;

    train_mt_seed(&mt, seed);
    for (unsigned l = 0; l < L->nlayers; l++) {
        /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/6), bound sqrt(3) gain / sqrt(fan_in). */
        float bound = (float)(1.0 / sqrt((double)L->width[l]));
        size_t nw = (size_t)L->width[l + 1] * L->width[l];

        for (size_t i = 0; i < nw; i++)
            params[L->w_off[l] + i] = train_mt_uniform(&mt, -bound, bound);
        for (size_t i = 0; i < L->width[l + 1]; i++)
            params[L->b_off[l] + i] = train_mt_uniform(&mt, -bound, bound);
    }
}

int train_model_new(struct train_math *m, const struct train_layout *L, enum train_act act,
                    int batch, struct train_model **ret)
{
    struct train_model *md;
    size_t np = L->nparams;
    int r = -ENOMEM;

    md = calloc(1, sizeof(*md));
    if (!md)
        return -ENOMEM;
    md->L = L;
    md->m = m;
    md->act = act;
    md->batch = batch;
    if (m->alloc(m, np * sizeof(float), (void **)&md->params) < 0 ||
        m->alloc(m, (np + 1) * sizeof(float), (void **)&md->grads) < 0 ||
        m->alloc(m, np * sizeof(float), (void **)&md->mom) < 0 ||
        m->alloc(m, np * sizeof(float), (void **)&md->var) < 0)
        goto out_free;
    for (unsigned l = 0; l <= L->nlayers; l++)
        if (m->alloc(m, (size_t)batch * L->width[l] * sizeof(float), (void **)&md->acts[l]) < 0)
            goto out_free;
    for (unsigned i = 0; i < 2; i++)
        if (m->alloc(m, (size_t)batch * L->max_width * sizeof(float), (void **)&md->dbuf[i]) < 0)
            goto out_free;
    *ret = md;
    return 0;

out_free:
    train_model_free(md);
    return r;
}

struct train_model *train_model_free(struct train_model *md)
{
    struct train_math *m;

    if (!md)
        return NULL;
    m = md->m;
    m->free(m, md->params);
    m->free(m, md->grads);
    m->free(m, md->mom);
    m->free(m, md->var);
    for (unsigned l = 0; l <= md->L->nlayers; l++)
        m->free(m, md->acts[l]);
    m->free(m, md->dbuf[0]);
    m->free(m, md->dbuf[1]);
    free(md);
    return NULL;
}

void train_model_forward(struct train_model *md)
{
    const struct train_layout *L = md->L;
    struct train_math *m = md->m;

    for (unsigned l = 0; l < L->nlayers; l++) {
        int in = (int)L->width[l], out = (int)L->width[l + 1];
        enum train_act act = l + 1 < L->nlayers ? md->act : TRAIN_ACT_NONE;

        /* Y[B,out] = X[B,in] W[out,in]^T, then + b and the activation. */
        m->gemm(m, false, true, md->batch, out, in, 1.0f, md->acts[l], md->params + L->w_off[l],
                0.0f, md->acts[l + 1]);
        m->bias_act(m, md->acts[l + 1], md->params + L->b_off[l], md->batch, out, act);
    }
}

int train_model_backward(struct train_model *md, enum train_loss loss, size_t bucket_floats,
                         train_grads_ready_fn ready, void *ud)
{
    const struct train_layout *L = md->L;
    struct train_math *m = md->m;
    unsigned last = L->nlayers - 1, cur = 0;
    size_t pending_end = L->nparams + 1; /* grads[first .. pending_end) are final, not sent */
    int r;

    m->loss(m, loss, md->acts[L->nlayers], md->acts[0], md->batch, (int)L->width[L->nlayers],
            md->dbuf[cur], md->grads + L->nparams);
    for (unsigned l = last + 1; l-- > 0;) {
        int in = (int)L->width[l], out = (int)L->width[l + 1];
        float *dY = md->dbuf[cur];

        if (l < last)
            m->act_backward(m, dY, md->acts[l + 1], (size_t)md->batch * out, md->act);
        /* dW[out,in] = dY[B,out]^T X[B,in]; db = column sums of dY. */
        m->gemm(m, true, false, out, in, md->batch, 1.0f, dY, md->acts[l], 0.0f,
                md->grads + L->w_off[l]);
        m->bias_grad(m, md->grads + L->b_off[l], dY, md->batch, out);
        if (l > 0) {
            /* dX[B,in] = dY[B,out] W[out,in]. */
            m->gemm(m, false, false, md->batch, in, out, 1.0f, dY, md->params + L->w_off[l],
                    0.0f, md->dbuf[cur ^ 1]);
            cur ^= 1;
        }
        if (ready && (l == 0 || (bucket_floats && pending_end - L->w_off[l] >= bucket_floats))) {
            r = ready(ud, L->w_off[l], pending_end - L->w_off[l]);
            if (r < 0)
                return r;
            pending_end = L->w_off[l];
        }
    }
    return 0;
}
