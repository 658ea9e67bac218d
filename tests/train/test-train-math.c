/* SPDX-License-Identifier: Apache-2.0 */
/* test-train-math.c: the CPU kernels and the MLP's gradients against finite differences, Adam
 * against PyTorch, and PyTorch-compatible init and shuffling. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>

#include "../tap.h"
#include "train-math.h"
#include "train-model.h"
#include "train-rng.h"

static struct train_math *M;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
}

static float *fnew(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));

    ASSERT_NOT_NULL(p);
    return p;
}

/* |a - b| <= atol + rtol |b|, with a note saying which element failed. */
static void assert_close(double a, double b, double atol, double rtol, const char *what,
                         size_t i)
{
    if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
        char ctx[96];

        snprintf(ctx, sizeof(ctx), "%.90s", tap_note);
        snprintf(tap_note, sizeof(tap_note), "%.40s[%zu]: analytic %.8g vs numeric %.8g; %.90s",
                 what, i, a, b, ctx);
        ASSERT_TRUE(fabs(a - b) <= atol + rtol * fabs(b));
    }
}

/* Plain triple loop: the reference for every transpose combination. */
static void naive_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A,
                       const float *B, float beta, float *C)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;

            for (int p = 0; p < k; p++)
                s += (double)(ta ? A[p * m + i] : A[i * k + p]) *
                     (double)(tb ? B[j * k + p] : B[p * n + j]);
            C[i * n + j] = (float)(alpha * s + beta * C[i * n + j]);
        }
}

static void test_gemm_matches_naive_for_every_transpose(void)
{
    const int m = 7, n = 5, k = 9;
    float *A = fnew(m * k), *B = fnew(k * n), *C = fnew(m * n), *R = fnew(m * n);

    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;

        fill(A, m * k);
        fill(B, k * n);
        fill(C, m * n);
        memcpy(R, C, m * n * sizeof(float));
        M->gemm(M, ta, tb, m, n, k, 0.5f, A, B, 0.25f, C);
        naive_gemm(ta, tb, m, n, k, 0.5f, A, B, 0.25f, R);
        for (int i = 0; i < m * n; i++)
            assert_close(C[i], R[i], 1e-5, 1e-5, "gemm", (size_t)i);
    }
    free(A);
    free(B);
    free(C);
    free(R);
}

/* A scalar probe S = sum(R .* Y) of the output Y: dS/dY = R. */
static double probe(const float *Y, const float *R, size_t n)
{
    double s = 0;

    for (size_t i = 0; i < n; i++)
        s += (double)Y[i] * R[i];
    return s;
}

/* A linear layer Y = X W^T (through gemm): dW = R^T X and dX = R W, against central
 * differences of the probe. */
static void test_linear_gradient(void)
{
    const int b = 3, in = 4, out = 5;
    const float h = 1e-2f;
    float *X = fnew(b * in), *W = fnew(out * in), *Y = fnew(b * out), *R = fnew(b * out);
    float *dW = fnew(out * in), *dX = fnew(b * in);

    fill(X, b * in);
    fill(W, out * in);
    fill(R, b * out);
    M->gemm(M, true, false, out, in, b, 1.0f, R, X, 0.0f, dW);
    M->gemm(M, false, false, b, in, out, 1.0f, R, W, 0.0f, dX);
    for (int i = 0; i < out * in; i++) {
        float keep = W[i];
        double up, down;

        W[i] = keep + h;
        M->gemm(M, false, true, b, out, in, 1.0f, X, W, 0.0f, Y);
        up = probe(Y, R, b * out);
        W[i] = keep - h;
        M->gemm(M, false, true, b, out, in, 1.0f, X, W, 0.0f, Y);
        down = probe(Y, R, b * out);
        W[i] = keep;
        assert_close(dW[i], (up - down) / (2 * h), 1e-4, 1e-3, "dW", (size_t)i);
    }
    for (int i = 0; i < b * in; i++) {
        float keep = X[i];
        double up, down;

        X[i] = keep + h;
        M->gemm(M, false, true, b, out, in, 1.0f, X, W, 0.0f, Y);
        up = probe(Y, R, b * out);
        X[i] = keep - h;
        M->gemm(M, false, true, b, out, in, 1.0f, X, W, 0.0f, Y);
        down = probe(Y, R, b * out);
        X[i] = keep;
        assert_close(dX[i], (up - down) / (2 * h), 1e-4, 1e-3, "dX", (size_t)i);
    }
    free(X);
    free(W);
    free(Y);
    free(R);
    free(dW);
    free(dX);
}

/* Y = act(Z + b): db = colsum(R .* act'(Y)), dZ = R .* act'(Y). */
static void check_bias_act(enum train_act act)
{
    const int rows = 4, cols = 6;
    const float h = 1e-3f;
    float *Z = fnew(rows * cols), *Y = fnew(rows * cols), *b = fnew(cols), *R = fnew(rows * cols);
    float *dY = fnew(rows * cols), *db = fnew(cols);

    fill(Z, rows * cols);
    fill(b, cols);
    fill(R, rows * cols);
    memcpy(Y, Z, sizeof(float) * rows * cols);
    M->bias_act(M, Y, b, rows, cols, act);
    for (int i = 0; i < rows * cols; i++) {
        float pre = Z[i] + b[i % cols];

        ASSERT_TRUE(Y[i] == (act == TRAIN_ACT_RELU ? (pre > 0 ? pre : 0.0f) : pre));
    }
    memcpy(dY, R, sizeof(float) * rows * cols);
    M->act_backward(M, dY, Y, rows * cols, act);
    M->bias_grad(M, db, dY, rows, cols);
    for (int j = 0; j < cols; j++) {
        float keep = b[j];
        double up, down;

        b[j] = keep + h;
        memcpy(Y, Z, sizeof(float) * rows * cols);
        M->bias_act(M, Y, b, rows, cols, act);
        up = probe(Y, R, rows * cols);
        b[j] = keep - h;
        memcpy(Y, Z, sizeof(float) * rows * cols);
        M->bias_act(M, Y, b, rows, cols, act);
        down = probe(Y, R, rows * cols);
        b[j] = keep;
        assert_close(db[j], (up - down) / (2 * h), 1e-4, 1e-3, "db", (size_t)j);
    }
    for (int i = 0; i < rows * cols; i++) {
        float keep = Z[i];
        double up, down;

        Z[i] = keep + h;
        memcpy(Y, Z, sizeof(float) * rows * cols);
        M->bias_act(M, Y, b, rows, cols, act);
        up = probe(Y, R, rows * cols);
        Z[i] = keep - h;
        memcpy(Y, Z, sizeof(float) * rows * cols);
        M->bias_act(M, Y, b, rows, cols, act);
        down = probe(Y, R, rows * cols);
        Z[i] = keep;
        assert_close(dY[i], (up - down) / (2 * h), 1e-4, 1e-3, "dZ", (size_t)i);
    }
    free(Z);
    free(Y);
    free(b);
    free(R);
    free(dY);
    free(db);
}

static void test_bias_gradient(void)
{
    check_bias_act(TRAIN_ACT_NONE);
}

static void test_relu_gradient(void)
{
    check_bias_act(TRAIN_ACT_RELU);
}

static void check_loss(enum train_loss kind)
{
    const int rows = 3, cols = 5, n = rows * cols;
    const float h = 1e-3f;
    float *Y = fnew(n), *T = fnew(n), *dY = fnew(n), *scratch = fnew(n), loss, up, down;
    double sum = 0;

    fill(Y, n);
    fill(T, n);
    M->loss(M, kind, Y, T, rows, cols, dY, &loss);
    for (int i = 0; i < n; i++)
        sum += ((double)Y[i] - T[i]) * ((double)Y[i] - T[i]);
    assert_close(loss, kind == TRAIN_LOSS_MSE ? sum / n : sqrt(sum / n), 1e-7, 1e-6, "loss", 0);
    for (int i = 0; i < n; i++) {
        float keep = Y[i];

        Y[i] = keep + h;
        M->loss(M, kind, Y, T, rows, cols, scratch, &up);
        Y[i] = keep - h;
        M->loss(M, kind, Y, T, rows, cols, scratch, &down);
        Y[i] = keep;
        assert_close(dY[i], ((double)up - down) / (2 * h), 2e-4, 2e-3, "dL/dY", (size_t)i);
    }
    free(Y);
    free(T);
    free(dY);
    free(scratch);
}

static void test_mse_gradient(void)
{
    check_loss(TRAIN_LOSS_MSE);
}

static void test_rmse_gradient(void)
{
    check_loss(TRAIN_LOSS_RMSE);
}

/* The loss of the whole model at its current parameters (forward + loss only). */
static double model_loss(struct train_model *md, enum train_loss kind)
{
    const struct train_layout *L = md->L;

    train_model_forward(md);
    M->loss(M, kind, md->acts[L->nlayers], md->acts[0], md->batch, (int)L->width[L->nlayers],
            md->dbuf[0], md->grads + L->nparams);
    return md->grads[L->nparams];
}

struct ready_log {
    size_t next_end; /* ranges must arrive from the end towards 0, without gaps */
    unsigned calls;
};

static int ready_cb(void *ud, size_t first, size_t count)
{
    struct ready_log *rl = ud;

    ASSERT_EQ(first + count, rl->next_end);
    rl->next_end = first;
    rl->calls++;
    return 0;
}

static void check_mlp(const char *layers, enum train_act act, enum train_loss kind)
{
    struct train_layout L;
    struct train_model *md;
    struct ready_log rl;
    const int batch = 3;
    const float h = 1e-3f;
    float *grads;

    snprintf(tap_note, sizeof(tap_note), "layers %s %s %s", layers, train_act_name(act),
             train_loss_name(kind));
    ASSERT_OK(train_layout_parse(layers, &L));
    ASSERT_OK(train_model_new(M, &L, act, batch, &md));
    train_layout_init_params(&L, 7, md->params);
    fill(md->acts[0], (size_t)batch * L.width[0]);
    train_model_forward(md);
    rl = (struct ready_log){.next_end = L.nparams + 1};
    ASSERT_OK(train_model_backward(md, kind, 1, ready_cb, &rl));
    ASSERT_EQ(rl.next_end, 0);
    ASSERT_EQ(rl.calls, L.nlayers); /* a 1-float bucket: one call per layer */
    grads = fnew(L.nparams + 1);
    memcpy(grads, md->grads, (L.nparams + 1) * sizeof(float));
    ASSERT_TRUE(grads[L.nparams] > 0); /* the loss rides at the end */
    for (size_t i = 0; i < L.nparams; i++) {
        float keep = md->params[i];
        double up, down;

        md->params[i] = keep + h;
        up = model_loss(md, kind);
        md->params[i] = keep - h;
        down = model_loss(md, kind);
        md->params[i] = keep;
        assert_close(grads[i], (up - down) / (2 * h), 2e-4, 2e-2, "dparam", i);
    }
    free(grads);
    train_model_free(md);
    tap_note[0] = '\0';
}

static void test_mlp_gradient(void)
{
    check_mlp("6,5,4,6", TRAIN_ACT_RELU, TRAIN_LOSS_MSE);
    check_mlp("6,5,4,6", TRAIN_ACT_RELU, TRAIN_LOSS_RMSE);
    check_mlp("5,3,5", TRAIN_ACT_NONE, TRAIN_LOSS_MSE);
    check_mlp("4,4", TRAIN_ACT_NONE, TRAIN_LOSS_RMSE);
}

static void test_bucket_zero_is_one_call(void)
{
    struct train_layout L;
    struct train_model *md;
    struct ready_log rl;

    ASSERT_OK(train_layout_parse("6,5,4,6", &L));
    ASSERT_OK(train_model_new(M, &L, TRAIN_ACT_RELU, 2, &md));
    train_model_forward(md);
    rl = (struct ready_log){.next_end = L.nparams + 1};
    ASSERT_OK(train_model_backward(md, TRAIN_LOSS_MSE, 0, ready_cb, &rl));
    ASSERT_EQ(rl.calls, 1);
    ASSERT_EQ(rl.next_end, 0);
    train_model_free(md);
}

/* torch.optim.Adam(lr=0.1, betas=(0.9, 0.999), eps=1e-8), two steps, values printed by
 * PyTorch 1.13; the first step by hand: m = 0.05, v = 0.00025, p = 1 - 0.1/(1-0.9) * 0.05 /
 * (sqrt(0.00025)/sqrt(1-0.999)) = 0.9. */
static void test_adam_matches_pytorch(void)
{
    struct train_adam hp = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0}, v[3] = {0};
    float g1[3] = {0.5f, 0.1f, -3.0f}, g2[3] = {-0.25f, 0.1f, 2.0f};
    const double want1[3] = {0.900000036, -2.0999999, 0.600000024};
    const double want2[3] = {0.873366356, -2.19999981, 0.614452064};

    M->adam(M, p, g1, m, v, 3, &hp, 1);
    for (int i = 0; i < 3; i++)
        assert_close(p[i], want1[i], 1e-6, 0, "step 1", (size_t)i);
    assert_close(m[0], 0.05, 1e-7, 0, "m", 0);
    assert_close(v[0], 0.00025, 1e-9, 0, "v", 0);
    M->adam(M, p, g2, m, v, 3, &hp, 2);
    for (int i = 0; i < 3; i++)
        assert_close(p[i], want2[i], 1e-6, 0, "step 2", (size_t)i);
}

static void test_init_and_randperm_match_pytorch(void)
{
    /* torch.manual_seed(0); torch.nn.Linear(784, 128): weight[0, :3] and bias[:3]. */
    const float w[3] = {-0.00026738643646240234f, 0.019158700481057167f,
                        -0.029394470155239105f};
    const float b[3] = {-0.03205270692706108f, -0.0052896952256560326f, 0.004499686881899834f};
    /* g = torch.Generator(); g.manual_seed(3); torch.randperm(100, generator=g)[:10] */
    const uint32_t perm3[10] = {86, 42, 89, 92, 3, 20, 22, 48, 25, 93};
    struct train_layout L;
    uint32_t perm[100];
    float *params;

    ASSERT_OK(train_layout_parse("784,128", &L));
    params = fnew(L.nparams);
    train_layout_init_params(&L, 0, params);
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(params[L.w_off[0] + i] == w[i]);
        ASSERT_TRUE(params[L.b_off[0] + i] == b[i]);
    }
    free(params);
    train_randperm(3, perm, 100);
    ASSERT_MEMEQ(perm, perm3, sizeof(perm3));
}

static void test_layout_parse(void)
{
    struct train_layout L;
    char buf[64];

    ASSERT_OK(train_layout_parse("784,128,128,128,784", &L));
    ASSERT_EQ(L.nlayers, 4);
    ASSERT_EQ(L.nparams, 784 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 784 + 784);
    ASSERT_EQ(L.w_off[1], 784 * 128 + 128);
    ASSERT_EQ(L.b_off[0], 784 * 128);
    train_layout_format(&L, buf, sizeof(buf));
    ASSERT_BYTES_STR(buf, strlen(buf), "784,128,128,128,784");
    ASSERT_EQ(train_layout_parse("784", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("784,,784", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("784,0,784", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("784,x", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("784,128,", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("784,99999999999", &L), -EINVAL);
    ASSERT_EQ(train_layout_parse("-1,5", &L), -EINVAL);
}

static void test_cpu_rejects_half_precision(void)
{
    struct train_math *m = NULL;

    ASSERT_EQ(train_math_cpu_new(TRAIN_BF16, &m), -ENOTSUP);
    ASSERT_EQ(train_math_cpu_new(TRAIN_FP16, &m), -ENOTSUP);
    ASSERT_NULL(m);
}

int main(void)
{
    ASSERT_OK(train_math_cpu_new(TRAIN_FP32, &M));
    TEST(test_gemm_matches_naive_for_every_transpose);
    TEST(test_linear_gradient);
    TEST(test_bias_gradient);
    TEST(test_relu_gradient);
    TEST(test_mse_gradient);
    TEST(test_rmse_gradient);
    TEST(test_mlp_gradient);
    TEST(test_bucket_zero_is_one_call);
    TEST(test_adam_matches_pytorch);
    TEST(test_init_and_randperm_match_pytorch);
    TEST(test_layout_parse);
    TEST(test_cpu_rejects_half_precision);
    train_math_free(M);
    return tap_done();
}
