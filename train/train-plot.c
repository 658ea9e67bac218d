/* SPDX-License-Identifier: Apache-2.0 */
/* train-plot.c: draw the loss curve into an RGB buffer and write it with libpng. */
#include "train-plot.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 800
#define H 500
#define ML 80 /* margins: left, right, top, bottom */
#define MR 20
#define MT 20
#define MB 50

struct canvas {
    uint8_t px[H][W][3];
};

static void dot(struct canvas *c, int x, int y, uint8_t r, uint8_t g, uint8_t b)
{
    if (x < 0 || y < 0 || x >= W || y >= H)
        return;
    c->px[y][x][0] = r;
    c->px[y][x][1] = g;
    c->px[y][x][2] = b;
}

static void line(struct canvas *c, int x0, int y0, int x1, int y1, uint8_t r, uint8_t g,
                 uint8_t b)
{
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int e = dx + dy;

    for (;;) {
        dot(c, x0, y0, r, g, b);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * e;
        if (e2 >= dy) {
            e += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            e += dx;
            y0 += sy;
        }
    }
}

/* A 3x5 font for the tick labels: digits, '.', '-', 'e', '+'; rows top-down, 3 bits each. */
static const uint8_t *glyph(char ch)
{
    static const uint8_t digits[10][5] = {
        {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
        {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
    };
    static const uint8_t dotg[5] = {0, 0, 0, 0, 2}, minus[5] = {0, 0, 7, 0, 0},
                         eg[5] = {0, 7, 7, 4, 7}, plus[5] = {0, 2, 7, 2, 0};

    if (ch >= '0' && ch <= '9')
        return digits[ch - '0'];
    switch (ch) {
    case '.':
        return dotg;
    case '-':
        return minus;
    case 'e':
        return eg;
    case '+':
        return plus;
    default:
        return NULL;
    }
}

/* Text at (x, y) (top-left), each font pixel drawn as a 2x2 block. */
static void text(struct canvas *c, int x, int y, const char *s)
{
    for (; *s; s++, x += 8) {
        const uint8_t *g = glyph(*s);

        for (int row = 0; g && row < 5; row++)
            for (int col = 0; col < 3; col++)
                if (g[row] & (4 >> col))
                    for (int k = 0; k < 4; k++)
                        dot(c, x + 2 * col + (k & 1), y + 2 * row + (k >> 1), 0, 0, 0);
    }
}

static int write_png(const char *path, struct canvas *c)
{
    png_structp png = NULL;
    png_infop info = NULL;
    FILE *f = fopen(path, "wb");
    volatile int r = -EIO; /* read after a longjmp from libpng */

    if (!f)
        return -errno;
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    if (png)
        info = png_create_info_struct(png);
    if (!png || !info)
        goto out;
    if (setjmp(png_jmpbuf(png)))
        goto out;
    png_init_io(png, f);
    png_set_IHDR(png, info, W, H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < H; y++)
        png_write_row(png, c->px[y][0]);
    png_write_end(png, NULL);
    r = 0;
out:
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0 && r == 0)
        r = -errno;
    return r;
}

int train_plot_png(const char *path, const double *x, const double *y, size_t n)
{
    struct canvas *c;
    double x0, x1, y0 = 0.0, y1 = 0.0;
    char label[32];
    int r, px = 0, py = 0;

    if (n == 0)
        return -EINVAL;
    c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    memset(c, 255, sizeof(*c));
    x0 = x[0];
    x1 = x[n - 1] > x0 ? x[n - 1] : x0 + 1.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(y[i]) && y[i] > y1)
            y1 = y[i];
    if (y1 <= y0)
        y1 = 1.0;
    /* Axes from (ML, H-MB) to the right and up, ticks every tenth. */
    line(c, ML, H - MB, W - MR, H - MB, 0, 0, 0);
    line(c, ML, H - MB, ML, MT, 0, 0, 0);
    for (int i = 0; i <= 10; i++) {
        int tx = ML + i * (W - ML - MR) / 10, ty = H - MB - i * (H - MT - MB) / 10;

        line(c, tx, H - MB, tx, H - MB + 5, 0, 0, 0);
        line(c, ML - 5, ty, ML, ty, 0, 0, 0);
        for (int gx = ML + 1; i > 0 && gx < W - MR; gx += 4)
            dot(c, gx, ty, 210, 210, 210);
    }
    snprintf(label, sizeof(label), "%.0f", x0);
    text(c, ML - 4, H - MB + 12, label);
    snprintf(label, sizeof(label), "%.0f", x1);
    text(c, W - MR - 8 * (int)strlen(label), H - MB + 12, label);
    text(c, 8, H - MB - 5, "0");
    snprintf(label, sizeof(label), "%.3g", y1);
    text(c, 8, MT - 5, label);
    for (size_t i = 0; i < n; i++) {
        double fy = isfinite(y[i]) ? y[i] : y1;
        int qx = ML + (int)lround((x[i] - x0) / (x1 - x0) * (W - ML - MR));
        int qy = H - MB - (int)lround((fy - y0) / (y1 - y0) * (H - MT - MB));

        if (i > 0)
            line(c, px, py, qx, qy, 200, 30, 30);
        else
            dot(c, qx, qy, 200, 30, 30);
        px = qx;
        py = qy;
    }
    r = write_png(path, c);
    free(c);
    return r;
}
